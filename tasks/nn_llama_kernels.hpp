#pragma once
// Neural-network kernels of Llama 3 (RMSNorm, RoPE, SwiGLU, grouped-query causal attention), in
// the style of tasks/nn_kernels.hpp (llm.c's train_llama3.py / Meta's reference model.py): plain
// functions with explicit shapes, one per forward and one per backward, no hidden state. The
// embedding, the bias-free matmuls, the residual adds and the loss are the GPT-2 kernels of
// tasks/nn_kernels.hpp (pass a null bias). Storage type T is float (exact mode) or bf16 (mixed
// precision); every kernel computes and accumulates in float (double where noted) and rounds once
// on store.
//
// Conventions (as tasks/nn_kernels.hpp):
// - Row-major. N = B*T rows; positions t = 0 .. T-1 of each of the B sequences.
// - Backward kernels ACCUMULATE (+=) into every gradient they write; scratch buffers are
//   overwritten. A gradient buffer must not alias any input of the same call.
// - rstd (rmsnorm), lse (the attention's per-row log-sum-exp) and the RoPE table are float whatever T.
// - No biases anywhere in Llama.
// - rmsnorm_backward and swiglu_backward compute only the gradients they are given (a null
//   pointer: not computed), so that the input gradient and the parameter gradient can run as
//   separate tasks, bit-identical to one task computing both.
//
// Layout of the attention input (llm.c's Llama): one c_attn weight [(NH + 2·NKV)·hs, C] produces
// per token qkv = [q (NH heads × hs) | k (NKV heads × hs) | v (NKV heads × hs)], i.e. qkv is
// [B, T, (NH + 2·NKV)·hs]. RoPE rotates its first NH + NKV heads (q and k: rope_forward with
// n_head = NH + NKV, C = (NH + 2·NKV)·hs, in place or into a copy) and leaves v as it is; the
// attention kernels then read that rotated qkv and write dqkv in the same layout (the gradient with
// respect to the rotated q and k; rope_backward takes it back to the unrotated ones). A training
// step, for instance: qkv = matmul(x, c_attn); rope_forward(qkv, qkv, ...) in place;
// attention_gqa_forward(out, lse, qkv, ...); backward: attention_gqa_backward into a zeroed scratch
// dqkv_rot, then rope_backward(dqkv, dqkv_rot, ...) adds the gradient of the unrotated q and k and
// (passed through) that of v into dqkv, the input gradient of the c_attn matmul.
// Plain C++17: the CUDA implementations (nn_llama_kernels.cu) include this header too.
#include <cstddef>

#include "runtime/dtype.hpp"
#include "tasks/nn_kernels.hpp"

namespace starzero::kernels {

// ---- helpers (host) ---------------------------------------------------------------------------
// Hidden size of the SwiGLU feed-forward network of Llama (Meta's FeedForward, llm.c's MLP):
// hidden = 4·C; hidden = int(2·hidden / 3); if ffn_dim_multiplier > 0: hidden =
// int(ffn_dim_multiplier · hidden); rounded up to a multiple of multiple_of. 8192 for C = 2048
// (1.5, 256: Llama 3.2 1B); 14336 for C = 4096 (1.3, 1024: Llama 3 8B). Throws
// std::invalid_argument unless C >= 0 and multiple_of > 0.
int llama_ffn_hidden(int C, float ffn_dim_multiplier, int multiple_of);

// The RoPE table freqs_cis[T, hs/2, 2] = (cos, sin) of t · freq_i, freq_i = theta^(-2i/hs), for
// t < T and i < hs/2; hs even. With use_scaled_rope, freq_i is first rescaled by Llama 3.1's rule
// (Meta's apply_scaling: scale_factor 8, low_freq_factor 1, high_freq_factor 4, old_context_len
// 8192): wavelengths 2π/freq under 8192/4 keep their frequency, those over 8192/1 are divided by 8,
// and in between (1 - s)·freq/8 + s·freq with s = (8192/wavelength - 1) / (4 - 1). Computed in
// double, stored as float. Host only: a CUDA caller computes it once and copies it to the device.
// Throws std::invalid_argument unless hs is even and > 0 and T >= 0.
void rope_frequencies(float* freqs_cis, int Tn, int hs, float theta, bool use_scaled_rope);

// ---- CPU ------------------------------------------------------------------------------------
// out[N,C] = inp · rstd · weight, rstd[N] = 1 / sqrt(mean(inp²) + eps) (Llama 3: eps = 1e-5).
// rstd may be null (not stored).
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps);
// With norm = inp · rstd and g = weight · dout:
// dinp[N,C] += rstd · (g - norm · mean(g · norm)); dweight[C] += Σ_rows dout · norm.
// Either gradient may be null (not computed); a call for dweight alone does not read weight.
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C);

// RoPE over rows of C channels (positions [B, T]): the first n_head heads of hs channels of each
// row are rotated pair by pair (Meta's / llm.c's interleaved complex pairs):
//   (x[2i], x[2i+1]) -> (x[2i]·cos - x[2i+1]·sin, x[2i]·sin + x[2i+1]·cos), angle of position t, pair i;
// channels [n_head·hs, C) pass through unchanged (copied when out != inp). C = n_head·hs for a
// packed [B, T, n_head, hs] buffer; C = (NH + 2·NKV)·hs with n_head = NH + NKV to rotate the q
// and k of a qkv buffer. freqs_cis is rope_frequencies' table for at least T positions; row t of
// the table rotates position t (pass freqs_cis + start·hs for positions that start at `start`).
// May run in place (out == inp).
template <class T>
void rope_forward(T* out, const T* inp, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C);
// The transpose: dinp += rotationᵀ · dout on the rotated heads, dinp += dout on the channels that
// pass through. dinp must not alias dout.
template <class T>
void rope_backward(T* dinp, const T* dout, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C);

// SwiGLU: out[N,H] = silu(gate) · up, silu(x) = x · sigmoid(x). Meta: gate = w1(x), up = w3(x).
// In llm.c's train_llama3.py the silu'd projection is c_fc2 (Meta's w1) and c_fc is Meta's w3:
// gate = x · c_fc2ᵀ, up = x · c_fcᵀ.
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int N, int H);
// dgate += dout · up · silu'(gate), silu'(x) = sigmoid(x) · (1 + x · (1 - sigmoid(x)));
// dup += dout · silu(gate). Either gradient may be null (not computed); a call for dup alone does
// not read up.
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int N, int H);

// Grouped-query causal self-attention: nn_kernels.hpp's memory-efficient attention over the whole
// op. qkv[B, T, (NH + 2·NKV)·hs] as described at the top (q and k already rotated); query head h
// reads key/value head h / (NH / NKV) (NH a multiple of NKV; NKV = NH is multi-head attention,
// nn_kernels' attention_forward). out[B, T, NH·hs]; lse [B, NH, T] (float), each query row's
// log-sum-exp, all the backward needs besides qkv.
template <class T>
void attention_gqa_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, int hs) {
  attention_forward_gqa(out, NH * hs, lse, NH * Tn, qkv, B, Tn, NH, NKV, hs, 0, NH);
}
// dqkv[B, T, (NH + 2·NKV)·hs] += the gradients of q, k and v. The NH/NKV query heads of a group
// add into their key/value head in increasing head order (deterministic).
template <class T>
void attention_gqa_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, int B, int Tn, int NH, int NKV,
                            int hs) {
  T* const dk = dqkv != nullptr ? dqkv + NH * hs : nullptr;
  T* const dv = dqkv != nullptr ? dqkv + (NH + NKV) * hs : nullptr;
  attention_backward_gqa(dqkv, dk, dv, (NH + 2 * NKV) * hs, dout, qkv, lse, NH * Tn, B, Tn, NH, NKV, hs, 0, NH);
}

// ---- CUDA (nn_llama_kernels.cu; compiled whenever CUDA is on) ----------------------------------
// Same math and conventions as the CPU kernels; asynchronous on `stream` (the StarPU worker's
// cudaStream_t, passed as void*); every pointer is device memory (freqs_cis too). Deterministic:
// no atomics, every gradient element written once per call. Declared in every build, so that a
// codelet's `if constexpr` CUDA branch compiles without CUDA; defined (and only ever called) when
// CUDA is on.
namespace cuda {
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps, void* stream);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C, void* stream);
template <class T>
void rope_forward(T* out, const T* inp, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C, void* stream);
template <class T>
void rope_backward(T* dinp, const T* dout, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C,
                   void* stream);
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int N, int H, void* stream);
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int N, int H, void* stream);
template <class T>
void attention_gqa_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, int hs, void* stream) {
  attention_forward_gqa(out, NH * hs, lse, NH * Tn, qkv, B, Tn, NH, NKV, hs, 0, NH, stream);
}
template <class T>
void attention_gqa_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, int B, int Tn, int NH, int NKV,
                            int hs, void* stream) {
  T* const dk = dqkv != nullptr ? dqkv + NH * hs : nullptr;
  T* const dv = dqkv != nullptr ? dqkv + (NH + NKV) * hs : nullptr;
  attention_backward_gqa(dqkv, dk, dv, (NH + 2 * NKV) * hs, dout, qkv, lse, NH * Tn, B, Tn, NH, NKV, hs, 0, NH, stream);
}
}  // namespace cuda

}  // namespace starzero::kernels
