#pragma once
// The FLOP and byte counts of the op codelets of tasks/nn.cpp and tasks/nn_llama.cpp, from one
// formula per op: what a task of it does per row of its N = B·T rows, plus what it touches once
// (weights, tables). Every Args with `d.N()` and `d.dtype` (NnArgs, LlamaArgs) is costed the same
// way. Private to tasks/ (no model, no other folder includes it).
#include "runtime/codelet.hpp"
#include "runtime/dtype.hpp"
#include "runtime/gpu_cost.hpp"
#include "tasks/attention_kernel.hpp"

namespace starzero::tasks::op_costs {

// Bytes count what a task reads plus what it writes: an accumulated buffer twice.
struct RowCost {
  double flops = 0;        // FLOPs per row
  double stored = 0;       // elements of the storage type (fp32 or bf16) read or written per row
  double stored_once = 0;  // and once per task
  double words = 0;        // 4-byte elements per row (fp32 statistics, int32 tokens, fp32 probs)
  double words_once = 0;   // and once per task (the RoPE table)
};

// Rows of the task (products in double: no int overflow for large shapes).
template <class Args>
double rows(const Args& a) {
  return double(a.d.N());
}
// Bytes per element of the storage type.
template <class Args>
double storage_size(const Args& a) {
  return double(dtype_size(a.d.dtype));
}

// The declaration's cost functions (runtime/codelet.hpp) for `cost`, a RowCost of the arguments.
template <auto cost, class Args>
double row_flops(const Args& a, Handles) {
  return rows(a) * cost(a).flops;
}
template <auto cost, class Args>
double row_bytes(const Args& a, Handles) {
  const RowCost c = cost(a);
  return storage_size(a) * (rows(a) * c.stored + c.stored_once) + 4.0 * (rows(a) * c.words + c.words_once);
}

// The GPU cost of a row op (runtime/gpu_cost.hpp): our own kernel, one launch, bound by the bytes
// it moves.
template <auto cost, class Args>
sim::GpuWork row_streaming(const Args& a, Handles h) {
  return {.kind = sim::GpuCostClass::streaming, .flops = row_flops<cost, Args>(a, h), .bytes = row_bytes<cost, Args>(a, h)};
}

// A cuBLAS GEMM of an M×K by K×N product (`flops` for all of the task's products, `kernels`
// launches) whose task also runs `pass_bytes` of our own element-wise passes (the bias).
inline sim::GpuWork gemm(DType dtype, double m, double n, double k, double flops, double bytes, double pass_bytes = 0,
                         int kernels = 1) {
  return {.kind = sim::GpuCostClass::gemm, .m = m, .n = n, .k = k, .flops = flops, .bytes = bytes,
          .pass_bytes = pass_bytes, .bf16 = dtype == DType::bf16, .kernels = kernels};
}

// An attention task on the GPU as the session runs it (tasks/attention_kernel.hpp): cuDNN's flash
// attention (bf16 only; the backward runs the forward graph again, its own graph and the kernel
// that adds its gradients) or our scalar kernels (one forward kernel; the backward's query and key
// kernels). FLOPs: the causal ones, as the published rates count them; bytes: the task's.
inline sim::GpuWork attention(DType dtype, const sim::AttentionWork& w, double bytes) {
  const bool cudnn = dtype == DType::bf16 && session_attention() == AttentionKernel::cudnn;
  return {.kind = cudnn ? sim::GpuCostClass::cudnn_attention : sim::GpuCostClass::own_attention,
          .flops = sim::causal_attention_flops(w),
          .bytes = bytes,
          .attention = w,
          .bf16 = dtype == DType::bf16,
          .kernels = !w.backward ? 1 : cudnn ? 3 : 2};
}

}  // namespace starzero::tasks::op_costs
