#pragma once
// Llama 3's ops as StarPU tasks: one codelet per forward and per backward of the kernels in
// tasks/nn_llama_kernels.hpp (RMSNorm, RoPE, SwiGLU, grouped-query attention), plus a token
// embedding without position table. Each is declared once in nn_llama.cpp (runtime/codelet.hpp),
// with a CPU and a CUDA implementation, a history-based performance model and FLOP and byte
// counts, and submitted with runtime/codelet.hpp's generic submit() (no wrapper per op). The bias-free
// matmuls, the residual adds and the loss are tasks/nn.hpp's ops.
//
// Storage type (fp32 or bf16) is LlamaDims::dtype, that of the activations and the parameter
// group; rstd, att and the RoPE table are fp32. Backward tasks accumulate (+=) into gradients.
#include <starpu.h>

#include <cstddef>
#include <string>

#include "runtime/codelet.hpp"
#include "runtime/dtype.hpp"

namespace starzero::tasks {

// Shapes of one model's Llama ops: B sequences of T tokens, C channels, NH query heads and NKV
// key/value heads of hs = C / NH channels, an FFN hidden size H, the RMSNorm epsilon.
struct LlamaDims {
  DType dtype = DType::f32;
  int B = 0, T = 0, C = 0, NH = 0, NKV = 0, H = 0;
  float eps = 1e-5f;
  int N() const { return B * T; }
  int hs() const { return C / NH; }
  // Channels of one row of the qkv buffer [q | k | v]: (NH + 2·NKV)·hs.
  int qkv_channels() const { return (NH + 2 * NKV) * hs(); }
};

// ---- the ops: one codelet each, submitted with runtime/codelet.hpp's submit() ------------------
// submit(llama::<op>, {handles in the order below}, LlamaArgs{.d = d, .weight = offset}, name).

struct LlamaArgs {
  LlamaDims d{};
  std::size_t weight = 0;  // offset of the weight (the embedding: of wte) in its parameter group
};

namespace llama {
// Token embedding (no position table). forward {out, tokens, embedding_group, zeros}: out[N, C] =
// wte[token], wte at .weight of the embedding group; `zeros` a scratch handle of T·C elements of
// the storage type (StarPU-allocated per task, set to zero by the task). backward
// {embedding_grad, dout, tokens, scratch}: dwte[token] += dout at .weight; `scratch` as `zeros`.
extern Codelet<LlamaArgs> embedding_forward, embedding_backward;
// RMSNorm over rows of C channels, the weight at .weight of its parameter group. forward
// {out, rstd, inp, group}: out[N, C] = inp · rstd · weight, rstd[N] fp32. backward_input
// {dinp, dout, inp, group, rstd}: dinp += .... backward_params {grad_group, dout, inp, rstd}:
// dweight += Σ_rows dout · inp · rstd, into grad_group at .weight.
extern Codelet<LlamaArgs> rmsnorm_forward, rmsnorm_backward_input, rmsnorm_backward_params;
// RoPE on the q and k heads of a qkv buffer [N, (NH + 2·NKV)·hs]; freqs: rope_frequencies' fp32
// table [>= T, hs/2, 2]. forward {qkv, freqs}: in place, rotates the first NH + NKV heads of every
// row (v passes). backward {dqkv, dqkv_rotated, freqs}: dqkv += rotationᵀ · dqkv_rotated (v's
// gradient passes through); dqkv must not be dqkv_rotated.
extern Codelet<LlamaArgs> rope_forward, rope_backward;
// SwiGLU over rows of H channels. forward {out, gate, up}: out[N, H] = silu(gate) · up. backward
// {dgate, dup, dout, gate, up}: dgate += ..., dup += ... (one task).
extern Codelet<LlamaArgs> swiglu_forward, swiglu_backward;
// Grouped-query causal attention, memory-efficient (tasks/nn_kernels.hpp), no [T, T] buffer.
// forward {out, lse, qkv}: out[N, C] from the rotated qkv, and lse [B, NH, T] fp32, each query
// row's log-sum-exp, kept for the backward. backward {dqkv, dout, qkv, lse}:
// dqkv [N, (NH + 2·NKV)·hs] += the gradients of the rotated q, k and v.
extern Codelet<LlamaArgs> attention_gqa_forward, attention_gqa_backward;
}  // namespace llama

}  // namespace starzero::tasks
