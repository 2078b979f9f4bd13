#pragma once
// What the planner needs to know of a model beyond its parameter count Ψ, in numbers only: the
// layers' parameters, which ZeRO-3 gathers one layer at a time, and the activation tensors of one micro-batch.
// A model derives its footprint from its own layout (e.g. models/gpt_layout.hpp's
// gpt_footprint); the planner (offload/planner.hpp) never knows which model it is.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gpu_cost.hpp"

namespace starzero {

// What a model keeps of a micro-batch's activations for the backward (docs/activation-memory.md):
//   none       every block's activations, from its forward to its backward;
//   selective  a block's matmul outputs and its output; the cheap ops (layernorms, attention,
//              GELU) run again right before the block's backward;
//   full       a block's output only; the whole block's forward runs again before its backward.
// The recomputed activations live in `window` + 1 shared slots: the recomputation of block l−1
// may run beside the backward of block l, with at most window + 1 blocks' activations alive.
// Offload (cpu): what the blocks keep lives in pinned host memory; after a block's forward StarPU
// writes it back there and may evict the device copy, and it comes back `window` blocks ahead
// of the backward. The last window + 1 blocks, needed first, are not offloaded.
enum class Recompute { none, selective, full };
enum class ActivationOffload { none, cpu };
struct ActivationPolicy {
  Recompute recompute = Recompute::none;
  int window = 1;
  ActivationOffload offload = ActivationOffload::none;
};
inline const char* offload_name(ActivationOffload o) { return o == ActivationOffload::cpu ? "cpu" : "none"; }
// Blocks (of `layers`) whose kept activations are offloaded: the first layers − (window + 1).
inline int offloaded_blocks(const ActivationPolicy& policy, int layers) {
  if (policy.offload == ActivationOffload::none) return 0;
  return std::max(0, layers - (policy.window + 1));
}
inline const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

struct NamedCount {
  std::string name;
  std::int64_t count = 0;  // elements
};

struct ModelFootprint {
  std::int64_t params = 0;  // Ψ
  // One entry per kind of layer (e.g. "embedding", "block", "final layernorm"): its elements.
  std::vector<NamedCount> layer_kinds;
  // Every layer's parameters in forward order, as the engine's layers (Model::layer_params); they
  // add up to Ψ. Empty: not known (the optimizer offload fraction then splits Ψ, not layers).
  std::vector<std::int64_t> layer_params;
  // One micro-batch's activation tensors, in elements (all layers together).
  std::vector<NamedCount> activation_tensors;
  // What the model's buffers for one micro-batch take, in bytes, when it knows (0: unknown; the
  // planner then counts activation_tensors at the precision's bytes): with 2-byte (bf16/fp16) and
  // 4-byte (fp32) activations, under `activations` (what the model keeps and recomputes).
  std::int64_t activation_bytes_2 = 0, activation_bytes_4 = 0;
  // Of what the blocks keep, the bytes offloaded to pinned host memory (--offload-activations
  // cpu; not counted in activation_bytes_2/4, which stay on the device).
  std::int64_t offloaded_activation_bytes_2 = 0, offloaded_activation_bytes_4 = 0;
  ActivationPolicy activations;
  // FLOPs of one micro-batch's forward, recomputation (under `activations`) and backward, as the
  // model's tasks declare them: their matmuls and attention (the element-wise tasks left out);
  // 0: unknown. What the step bound's compute time is made of (sim/step_bound.hpp).
  double training_flops = 0;
  // The GPU kernels of one micro-batch by cost class (runtime/gpu_cost.hpp), with 2-byte (bf16)
  // and 4-byte (fp32) storage, attention as our own kernel (the plan picks: sim::with_attention);
  // empty: not known (the step bound then charges training_flops at one rate).
  std::vector<sim::CountedGpuWork> training_gpu_kernels_2, training_gpu_kernels_4;
  // One micro-batch's attention, for what a kernel needs beside its buffers (the cuDNN
  // workspace, tasks/attention_cudnn.hpp): batch, sequence, query heads, key/value heads, head
  // size; zeros: unknown.
  struct AttentionShape {
    int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_size = 0;
  } attention;

  NamedCount largest_layer() const {
    if (layer_kinds.empty()) return {};
    return *std::max_element(layer_kinds.begin(), layer_kinds.end(),
                             [](const NamedCount& a, const NamedCount& b) { return a.count < b.count; });
  }
  std::int64_t activation_elements() const {
    std::int64_t total = 0;
    for (const NamedCount& t : activation_tensors) total += t.count;
    return total;
  }
};

}  // namespace starzero
