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
// - mean/rstd (layernorm), lse (attention's per-row log-sum-exp) and losses are float whatever T.
// - `nullptr` bias means no bias. The backward kernels of layernorm and matmul compute only the
//   gradients they are given (null dinp, or null dweight and dbias: not computed), so that the
//   input gradient and the parameter gradients can run as separate tasks, bit-identical to one
//   task computing both.
// Plain C++17: the CUDA implementations (nn_kernels.cu) include this header too.
#include <cstddef>

#include "runtime/dtype.hpp"
#include "tasks/loss_mask.hpp"

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

// Causal self-attention, memory-efficient ("flash" style): no [T, T] matrix is kept. The forward
// keeps per query row only the log-sum-exp of its scaled scores, lse = m + log Σ_t2<=t exp(s_t2 − m)
// (m the row's largest score); the backward forms each row's probabilities again as
// exp(s − lse). Scale 1/sqrt(hs); keys t2 > t are masked. One kernel for every model family
// (docs/architecture.md, "Attention"):
// - qkv[B, T, (NH + 2·NKV)·hs] holds at each position the NH query heads, then the NKV key heads,
//   then the NKV value heads; query head h reads key/value head h / (NH / NKV). GPT-2's q|k|v of
//   C each is NKV = NH; Llama's grouped-query attention NKV < NH. dout [B, T, NH·hs] is read whole.
// - The call computes the query heads [h0, h0 + nh) (whole key/value groups: h0 and nh multiples
//   of NH / NKV). Each head's math is independent of the other groups' and the same whatever cut
//   it is computed in, so any cut gives the bits of the whole op.
// - out: the group's columns [h0·hs, (h0+nh)·hs) of [B·T, NH·hs], row r at out + r·ld_out.
// - lse (float): per sequence b the group's [nh, T] at lse + b·ld_lse (whole: ld_lse = NH·T).
// - dq, dk, dv (backward, accumulated): the group's columns in the q part of dinp [B·T, (NH +
//   2·NKV)·hs] and its key/value heads' columns in the k and v parts, rows ld_dinp apart. The
//   query heads of a key/value group add into its dk and dv in increasing head order.
// CPU: per (sequence, head), blocks of kAttentionQueryBlock query rows; a block's scores against
// keys [0, block end) are single-threaded sgemms into a [block, T] row scratch of the call.
constexpr int kAttentionQueryBlock = 64;
template <class T>
void attention_forward_gqa(T* out, int ld_out, float* lse, int ld_lse, const T* qkv, int B, int Tn, int NH, int NKV,
                           int hs, int h0, int nh);
template <class T>
void attention_backward_gqa(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* qkv, const float* lse,
                            int ld_lse, int B, int Tn, int NH, int NKV, int hs, int h0, int nh);
// GPT-2's multi-head attention (NKV = NH, hs = C / NH) of the heads [h0, h0 + nh): inp [B,T,3C].
template <class T>
void attention_forward_heads(T* out, int ld_out, float* lse, int ld_lse, const T* inp, int B, int Tn, int C, int NH,
                             int h0, int nh) {
  attention_forward_gqa(out, ld_out, lse, ld_lse, inp, B, Tn, NH, NH, C / NH, h0, nh);
}
template <class T>
void attention_backward_heads(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* inp, const float* lse,
                              int ld_lse, int B, int Tn, int C, int NH, int h0, int nh) {
  attention_backward_gqa(dq, dk, dv, ld_dinp, dout, inp, lse, ld_lse, B, Tn, NH, NH, C / NH, h0, nh);
}
// The whole op over contiguous tensors: out[B,T,C], lse [B,NH,T], dinp[B,T,3C].
template <class T>
void attention_forward(T* out, float* lse, const T* inp, int B, int Tn, int C, int NH) {
  attention_forward_heads(out, C, lse, NH * Tn, inp, B, Tn, C, NH, 0, NH);
}
template <class T>
void attention_backward(T* dinp, const T* dout, const T* inp, const float* lse, int B, int Tn, int C, int NH) {
  T* const dk = dinp != nullptr ? dinp + C : nullptr;
  T* const dv = dinp != nullptr ? dinp + 2 * C : nullptr;
  attention_backward_heads(dinp, dk, dv, 3 * C, dout, inp, lse, NH * Tn, B, Tn, C, NH, 0, NH);
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
// cross-entropy loss of the target token: losses[B*T] = -log probs[target]. A masked target
// (negative: kMaskedTarget, tasks/loss_mask.hpp) has loss 0; its row's probs are computed all the same.
template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp);
// dlogits[N,Vp] += (probs - onehot(target)) * dloss; padding columns get no gradient, nor do the
// rows of masked targets (left untouched). dloss is the gradient of the mean loss per counted
// row: 1/N, or 1/(all rows) when the N rows are one tile of them, and with masks the share the
// model computes (models/token_model.hpp).
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
void attention_forward_gqa(T* out, int ld_out, float* lse, int ld_lse, const T* qkv, int B, int Tn, int NH, int NKV,
                           int hs, int h0, int nh, void* stream);
template <class T>
void attention_backward_gqa(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* qkv, const float* lse,
                            int ld_lse, int B, int Tn, int NH, int NKV, int hs, int h0, int nh, void* stream);
template <class T>
void attention_forward_heads(T* out, int ld_out, float* lse, int ld_lse, const T* inp, int B, int Tn, int C, int NH,
                             int h0, int nh, void* stream) {
  attention_forward_gqa(out, ld_out, lse, ld_lse, inp, B, Tn, NH, NH, C / NH, h0, nh, stream);
}
template <class T>
void attention_backward_heads(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* inp, const float* lse,
                              int ld_lse, int B, int Tn, int C, int NH, int h0, int nh, void* stream) {
  attention_backward_gqa(dq, dk, dv, ld_dinp, dout, inp, lse, ld_lse, B, Tn, NH, NH, C / NH, h0, nh, stream);
}
template <class T>
void attention_forward(T* out, float* lse, const T* inp, int B, int Tn, int C, int NH, void* stream) {
  attention_forward_heads(out, C, lse, NH * Tn, inp, B, Tn, C, NH, 0, NH, stream);
}
template <class T>
void attention_backward(T* dinp, const T* dout, const T* inp, const float* lse, int B, int Tn, int C, int NH,
                        void* stream) {
  T* const dk = dinp != nullptr ? dinp + C : nullptr;
  T* const dv = dinp != nullptr ? dinp + 2 * C : nullptr;
  attention_backward_heads(dinp, dk, dv, 3 * C, dout, inp, lse, NH * Tn, B, Tn, C, NH, 0, NH, stream);
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
