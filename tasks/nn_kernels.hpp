#pragma once
// Neural-network kernels (the GPT-2 set, used by every model), llm.c style: plain functions with
// explicit shapes, one per forward and one per backward, no hidden state. Storage type T is float
// (exact mode) or bf16 (mixed precision); every kernel computes and accumulates in float (double
// where noted) and rounds once on store.
//
// Conventions (as llm.c's train_gpt2.c):
// - Row-major. N = B*T rows. Weights of a linear layer are [OC, C] (out = inp · weightᵀ + bias).
// - Backward kernels ACCUMULATE (+=) into every gradient they write (dinp, dweight, dbias), so
//   the caller zeroes gradients once per step and several contributions (the residual stream,
//   the tied embedding, micro-batches) add up. Scratch buffers are overwritten.
// - mean/rstd (layernorm), preatt/att (attention probabilities) and losses are float whatever T.
// - `nullptr` bias means no bias. The backward kernels of layernorm and matmul compute only the
//   gradients they are given (null dinp, or null dweight and dbias: not computed), so that the
//   input gradient and the parameter gradients can run as separate tasks, bit-identical to one
//   task computing both.
// Plain C++17: the CUDA implementations (nn_kernels.cu) include this header too.
#include <cstddef>

#include "runtime/dtype.hpp"

namespace starzero::kernels {

// ---- CPU ------------------------------------------------------------------------------------
// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]
template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C);
// dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C);

// out[N,C] = (inp - mean) * rstd * weight + bias, eps = 1e-5, biased variance.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int N, int C);

// out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]. CPU: BLAS sgemm (float; bf16 goes through
// float scratch), single-threaded BLAS (StarPU workers provide the parallelism).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp[N,C] += dout · weight; dweight[OC,C] += doutᵀ · inp; dbias[OC] += Σ_rows dout.
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC);
// The weight gradient of output channels [first, first + rows): dweight[rows,C] += dout[:, first..]ᵀ · inp,
// with dout [N,OC]. The same products as matmul_backward's dweight for those rows.
template <class T>
void matmul_backward_weight_rows(T* dweight, const T* dout, const T* inp, int N, int C, int OC, int first, int rows);

// Causal multi-head self-attention, of the heads [h0, h0 + nh) of NH (the whole op: h0 = 0,
// nh = NH). Each head's math is independent of the others and the same whatever group it is
// computed in, so any cut of the heads into groups gives the bits of the whole op. Scale
// 1/sqrt(hs), hs = C/NH; att[t2 > t] = 0.
// - inp[B,T,3C] holds q, k, v (each C = NH heads × hs), read whole; in the backward dout[B,T,C]
//   too.
// - out: the group's columns [h0·hs, (h0+nh)·hs) of [B·T, C], row r at out + r·ld_out (the whole
//   op: out itself, ld_out = C).
// - preatt, att (float): per sequence b the group's [nh, T, T] at + b·ld_att (whole: ld_att =
//   NH·T·T).
template <class T>
void attention_forward_heads(T* out, int ld_out, float* preatt, float* att, int ld_att, const T* inp, int B, int Tn,
                             int C, int NH, int h0, int nh);
// dq, dk, dv: the group's columns in the q, k and v parts of dinp[B·T, 3C], row r at + r·ld_dinp,
// accumulated (the whole op: dinp, dinp + C, dinp + 2C, ld_dinp = 3C). att as in the forward;
// dpreatt, datt: [B, nh, T, T] float scratch, contiguous (overwritten).
template <class T>
void attention_backward_heads(T* dq, T* dk, T* dv, int ld_dinp, float* dpreatt, float* datt, const T* dout,
                              const T* inp, const float* att, int ld_att, int B, int Tn, int C, int NH, int h0, int nh);
// The whole op over contiguous tensors: out[B,T,C], preatt and att [B,NH,T,T], dinp[B,T,3C]
// (dpreatt, datt [B,NH,T,T] scratch).
template <class T>
void attention_forward(T* out, float* preatt, float* att, const T* inp, int B, int Tn, int C, int NH) {
  attention_forward_heads(out, C, preatt, att, NH * Tn * Tn, inp, B, Tn, C, NH, 0, NH);
}
template <class T>
void attention_backward(T* dinp, float* dpreatt, float* datt, const T* dout, const T* inp, const float* att, int B,
                        int Tn, int C, int NH) {
  T* const dk = dinp != nullptr ? dinp + C : nullptr;
  T* const dv = dinp != nullptr ? dinp + 2 * C : nullptr;
  attention_backward_heads(dinp, dk, dv, 3 * C, dpreatt, datt, dout, inp, att, NH * Tn * Tn, B, Tn, C, NH, 0, NH);
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);

// out = inp1 + inp2; backward: dinp1 += dout, dinp2 += dout.
template <class T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n);
template <class T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n);

// Softmax over the first V of Vp logits per row (padding columns get probability 0), and the
// cross-entropy loss of the target token: losses[B*T] = -log probs[target].
template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp);
// dlogits[N,Vp] += (probs - onehot(target)) * dloss; padding columns get no gradient. dloss is
// the gradient of the mean loss per row: 1/N, or 1/(all rows) when the N rows are one tile of them.
template <class T>
void softmax_crossentropy_backward(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp,
                                   float dloss);

// ---- CUDA (nn_kernels.cu; compiled whenever CUDA is on) -------------------------------------
// Same math and conventions as the CPU kernels; asynchronous on `stream` (the StarPU worker's
// cudaStream_t, passed as void*). Matmuls take the worker's cublasHandle_t (as void*) already
// bound to that stream, and compute in fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F).
// Declared in every build, so that a codelet's `if constexpr` CUDA branch compiles without CUDA;
// defined (and only ever called) when CUDA is on.
namespace cuda {
template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C, void* stream);
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C, void* stream);
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       void* stream);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int N, int C, void* stream);
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC, void* cublas,
                    void* stream);
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC,
                     void* cublas, void* stream);
template <class T>
void matmul_backward_weight_rows(T* dweight, const T* dout, const T* inp, int N, int C, int OC, int first, int rows,
                                 void* cublas, void* stream);
template <class T>
void attention_forward_heads(T* out, int ld_out, float* preatt, float* att, int ld_att, const T* inp, int B, int Tn,
                             int C, int NH, int h0, int nh, void* stream);
template <class T>
void attention_backward_heads(T* dq, T* dk, T* dv, int ld_dinp, float* dpreatt, float* datt, const T* dout,
                              const T* inp, const float* att, int ld_att, int B, int Tn, int C, int NH, int h0, int nh,
                              void* stream);
template <class T>
void attention_forward(T* out, float* preatt, float* att, const T* inp, int B, int Tn, int C, int NH, void* stream) {
  attention_forward_heads(out, C, preatt, att, NH * Tn * Tn, inp, B, Tn, C, NH, 0, NH, stream);
}
template <class T>
void attention_backward(T* dinp, float* dpreatt, float* datt, const T* dout, const T* inp, const float* att, int B,
                        int Tn, int C, int NH, void* stream) {
  T* const dk = dinp != nullptr ? dinp + C : nullptr;
  T* const dv = dinp != nullptr ? dinp + 2 * C : nullptr;
  attention_backward_heads(dinp, dk, dv, 3 * C, dpreatt, datt, dout, inp, att, NH * Tn * Tn, B, Tn, C, NH, 0, NH,
                           stream);
}
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n, void* stream);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n, void* stream);
template <class T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n, void* stream);
template <class T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n, void* stream);
template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp, void* stream);
template <class T>
void softmax_crossentropy_backward(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp,
                                   float dloss, void* stream);
}  // namespace cuda

}  // namespace starzero::kernels
