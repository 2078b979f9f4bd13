#pragma once
// cuDNN's fused flash attention (causal, bf16) through its C backend graph API (cudnn_graph.h):
// the same op as our own attention kernels (tasks/nn_kernels.hpp, "Causal self-attention"), same
// buffers and strides, for the CUDA workers when the run chose it (--attention; docs/manual.md,
// "Attention on the GPU"). Defined in attention_cudnn.cpp, compiled only when CMake found cuDNN
// (STARZERO_WITH_CUDNN); the shape, the key and the workspace estimate are here for every build
// (`starzero plan` sums the estimate without cuDNN or a GPU).
//
// The graph is the runtime-fusion "flash attention" pattern that cuDNN's C++ frontend builds
// (cuDNN 9.19's dedicated SDPA_FWD/BWD operations have no causal mask before 9.21's subgraphs):
//   forward:  S = scale·Q·Kᵀ, masked causally (GEN_INDEX rows >= columns, else −inf),
//             Stats = max + log Σ exp(S − max), P = exp(S − max) / Σ, O = P·V;
//   backward: D = Σ_d dO⊙O, P = exp(scale·Q·Kᵀ − Stats) masked, dV = Pᵀ·dO, dP = dO·Vᵀ,
//             dS = scale·P⊙(dP − D), dK = dSᵀ·Q, dQ = dS·K.
// Stats is exactly our `lse`: the natural-log log-sum-exp of the scaled, masked scores of each
// query row (fp32), so cuDNN's forward and the own backward (or the reverse) can be mixed.
//
// Layout: Q, K, V are strided views of qkv [B, T, (NH + 2·NKV)·hs] (dims [B, H, T, hs], strides
// [T·C3, hs, C3, 1]), no copies; out, lse, dq, dk, dv are the own kernels' blocks (group-local
// pointers, leading dimensions ld_out, ld_lse, ld_dinp); dout is read whole ([B, T, NH·hs]).
//
// Semantics kept from the own kernels: the forward overwrites out and lse; the backward ADDS
// into dq, dk and dv (the codelets' buffers are STARPU_RW and several contributions add up), so
// cuDNN writes its gradients into workspace and a small kernel adds them (fp32 sum, one bf16
// rounding; a zero buffer gets cuDNN's values bit for bit). The backward codelets carry no O, so
// the backward first runs the forward graph again into workspace (cuDNN's backward needs
// D = Σ dO⊙O): about 1/3.5 more attention FLOPs than cuDNN's backward alone.
//
// Workspace: one stream-ordered allocation per call (cudaMallocAsync from the device's memory
// pool, freed on the stream after the call, as the own backward kernel's delta), not a StarPU
// scratch buffer: its size depends on the execution plan cuDNN picks on the device, which the
// codelets (whose buffers and costs are shared with the CPU functions) cannot know at submission.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/dtype.hpp"

namespace starzero::tasks::cudnn_attention {

// One call's shape: the own kernels' arguments (attention_forward_gqa / attention_backward_gqa).
struct CudnnAttentionShape {
  int B = 0, T = 0, NH = 0, NKV = 0, hs = 0;
  int h0 = 0, nh = 0;  // the query heads [h0, h0 + nh), whole key/value groups
  int ld_out = 0;      // forward: elements between rows of out
  int ld_lse = 0;      // elements between one sequence's [nh, T] log-sum-exps and the next
  int ld_dinp = 0;     // backward: elements between rows of dq, dk, dv
  bool backward = false;
  // A cached graph serves every call of the same key: h0 only moves the pointers.
  bool same_graph(const CudnnAttentionShape& o) const {
    return B == o.B && T == o.T && NH == o.NH && NKV == o.NKV && hs == o.hs && nh == o.nh && ld_out == o.ld_out &&
           ld_lse == o.ld_lse && ld_dinp == o.ld_dinp && backward == o.backward;
  }
  std::string describe() const;
};

// An ESTIMATE of the device bytes one call takes beyond its buffers, without a GPU: what this
// file places in the workspace (backward: the recomputed O and Stats, dQ's fp32 accumulator, D,
// and the bf16 dq/dk/dv before they are added) exactly, plus an allowance for the engine's own
// workspace, which only the execution plan on a device reports (kEngineWorkspaceAllowance, an
// assumption: cuDNN 9's flash engines ask for none or a few MiB; tests/kernels/test_attention_cudnn
// prints the real figure on a GPU).
// The backward's workspace, in this order, each region 256-byte aligned: the engines' own (forward
// that recomputes O, backward), O (bf16 [B, T, nh·hs]), its Stats (fp32 [B, nh, T]), D (fp32
// [B, nh, T]), dQ's fp32 accumulator (when the plan uses one), then cuDNN's dq, dk, dv (bf16,
// contiguous [B, T, heads·hs]) before they are added into the codelet's buffers.
struct BackwardLayout {
  std::size_t engine_fwd, engine_bwd, o, stats, softmax_sum, dq_accum, dq, dk, dv;
  std::size_t total() const { return engine_fwd + engine_bwd + o + stats + softmax_sum + dq_accum + dq + dk + dv; }
};
BackwardLayout backward_layout(const CudnnAttentionShape& shape, std::size_t engine_fwd, std::size_t engine_bwd,
                               bool accumulate_dq);

inline constexpr std::size_t kEngineWorkspaceAllowance = std::size_t(8) << 20;
std::size_t estimated_workspace_bytes(const CudnnAttentionShape& shape);

// The calls. `false`: cuDNN refused the shape (graph, plan or alignment), once reported on
// stderr; the caller runs the own kernel, which computes the same thing. Asynchronous on `stream`
// (cudaStream_t as void*), with the calling thread's cuDNN handle (one per CUDA worker thread,
// created on its first call and bound to the stream on each).
bool forward(const CudnnAttentionShape& shape, bf16* out, float* lse, const bf16* qkv, void* stream);
bool backward(const CudnnAttentionShape& shape, bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* qkv,
              const float* lse, void* stream);

// What the engine chosen for `shape` on this thread's device promises (e.g. "engine 8,
// deterministic", "engine 8, non-deterministic: no deterministic engine for this graph"),
// and its workspace bytes; "" and 0 before the first call of that shape. For the GPU test.
struct ChosenEngine {
  std::string description;
  std::int64_t workspace_bytes = 0;
};
ChosenEngine chosen_engine(const CudnnAttentionShape& shape);

// dst[r·ld_dst + c] += src[r·cols + c] for r < rows, c < cols, in fp32 with one bf16 rounding
// (attention_cudnn_accumulate.cu).
void add_rows(bf16* dst, int ld_dst, const bf16* src, int rows, int cols, void* stream);

}  // namespace starzero::tasks::cudnn_attention
