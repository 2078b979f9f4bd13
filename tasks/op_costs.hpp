#pragma once
// The FLOP and byte counts of the op codelets of tasks/nn.cpp and tasks/nn_llama.cpp, from one
// formula per op: what a task of it does per row of its N = B·T rows, plus what it touches once
// (weights, tables). Every Args with `d.N()` and `d.dtype` (NnArgs, LlamaArgs) is costed the same
// way. Private to tasks/ (no model, no other folder includes it).
#include "runtime/codelet.hpp"
#include "runtime/dtype.hpp"

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

}  // namespace starzero::tasks::op_costs
