#pragma once
// Llama 3's ops as StarPU tasks: one submit function per forward and per backward of the kernels
// in tasks/nn_llama_kernels.hpp (RMSNorm, RoPE, SwiGLU, grouped-query attention), plus a token
// embedding without position table. Like tasks/nn.hpp: each submit function is one submission of
// a codelet declared once in llama.cpp (runtime/codelet.hpp), with a CPU and a CUDA
// implementation, a history-based performance model and FLOP and byte counts. The bias-free
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

// ---- token embedding (no position table) ----------------------------------------------------
// out[N, C] = wte[token] (wte at `wte_offset` of the embedding group). `zeros`: a scratch handle
// of T·C elements of the storage type (StarPU-allocated per task, set to zero by the task).
void submit_embedding_forward(const LlamaDims& d, starpu_data_handle_t out, starpu_data_handle_t tokens,
                              starpu_data_handle_t embedding_group, std::size_t wte_offset, starpu_data_handle_t zeros,
                              const std::string& name);
// dwte[token] += dout (into the embedding gradient at wte_offset); `scratch`: as `zeros` above.
void submit_embedding_backward(const LlamaDims& d, starpu_data_handle_t embedding_grad, std::size_t wte_offset,
                               starpu_data_handle_t dout, starpu_data_handle_t tokens, starpu_data_handle_t scratch,
                               const std::string& name);

// ---- RMSNorm over rows of C channels -----------------------------------------------------------
// out[N, C] = inp · rstd · weight; rstd[N] fp32; the weight at `weight_offset` of `group`.
void submit_rmsnorm_forward(const LlamaDims& d, starpu_data_handle_t out, starpu_data_handle_t rstd,
                            starpu_data_handle_t inp, starpu_data_handle_t group, std::size_t weight_offset,
                            const std::string& name);
// dinp += ... (reads the weight from its parameter group).
void submit_rmsnorm_backward_input(const LlamaDims& d, starpu_data_handle_t dinp, starpu_data_handle_t dout,
                                   starpu_data_handle_t inp, starpu_data_handle_t group, std::size_t weight_offset,
                                   starpu_data_handle_t rstd, const std::string& name);
// dweight += Σ_rows dout · inp · rstd, into grad_group at weight_offset.
void submit_rmsnorm_backward_params(const LlamaDims& d, starpu_data_handle_t grad_group, std::size_t weight_offset,
                                    starpu_data_handle_t dout, starpu_data_handle_t inp, starpu_data_handle_t rstd,
                                    const std::string& name);

// ---- RoPE on the q and k heads of a qkv buffer [N, (NH + 2·NKV)·hs] ----------------------------
// In place: rotates the first NH + NKV heads of every row (v passes); freqs: rope_frequencies'
// fp32 table [>= T, hs/2, 2].
void submit_rope_forward(const LlamaDims& d, starpu_data_handle_t qkv, starpu_data_handle_t freqs,
                         const std::string& name);
// dqkv += rotationᵀ · dqkv_rotated (v's gradient passes through). dqkv must not be dqkv_rotated.
void submit_rope_backward(const LlamaDims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dqkv_rotated,
                          starpu_data_handle_t freqs, const std::string& name);

// ---- SwiGLU over rows of H channels ------------------------------------------------------------
// out[N, H] = silu(gate) · up.
void submit_swiglu_forward(const LlamaDims& d, starpu_data_handle_t out, starpu_data_handle_t gate,
                           starpu_data_handle_t up, const std::string& name);
// dgate += ..., dup += ... (one task).
void submit_swiglu_backward(const LlamaDims& d, starpu_data_handle_t dgate, starpu_data_handle_t dup,
                            starpu_data_handle_t dout, starpu_data_handle_t gate, starpu_data_handle_t up,
                            const std::string& name);

// ---- grouped-query causal attention --------------------------------------------------------------
// Memory-efficient (tasks/nn_kernels.hpp): out[N, C] from the rotated qkv, and lse [B, NH, T] fp32,
// each query row's log-sum-exp, kept for the backward. No [T, T] buffer.
void submit_attention_gqa_forward(const LlamaDims& d, starpu_data_handle_t out, starpu_data_handle_t lse,
                                  starpu_data_handle_t qkv, const std::string& name);
// dqkv [N, (NH + 2·NKV)·hs] += the gradients of the rotated q, k and v.
void submit_attention_gqa_backward(const LlamaDims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dout,
                                   starpu_data_handle_t qkv, starpu_data_handle_t lse, const std::string& name);

// ---- the declarations, for scheduling, simulation and tests --------------------------------------

struct LlamaArgs {
  LlamaDims d{};
  std::size_t weight = 0;  // offset of the weight (the embedding: of wte) in its parameter group
};

// Codelet "llama_<op>" for each op above.
namespace llama {
extern Codelet<LlamaArgs> embedding_forward, embedding_backward;
extern Codelet<LlamaArgs> rmsnorm_forward, rmsnorm_backward_input, rmsnorm_backward_params;
extern Codelet<LlamaArgs> rope_forward, rope_backward;
extern Codelet<LlamaArgs> swiglu_forward, swiglu_backward;
extern Codelet<LlamaArgs> attention_gqa_forward, attention_gqa_backward;
}  // namespace llama

}  // namespace starzero::tasks
