#pragma once
// The engine's options (offload/engine.hpp): the ZeRO stage and its windows, the optimizer, where
// the model states go, and the testing hooks; one object from the run (train/run.cpp) to the
// engine, its step walks and its update policy.
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/comm.hpp"
#include "offload/placement.hpp"
#include "optimizers/adamw.hpp"

namespace starzero {

class DiskNode;

// How the data-parallel ranks share the model states: the ZeRO stage and the windows that bound
// what it holds at once. One object from the flags (RunOptions::zero) to the engine.
struct ZeroOptions {
  int stage = 0;           // ZeRO stage 0..3 (--stage)
  int prefetch_depth = 1;  // ZeRO-3: layers gathered ahead of the one being computed (--prefetch-depth)
  int grad_window = 2;     // ZeRO-2/3: a full gradient is allocated only once the one freed
                           // grad_window reductions earlier is gone (bounds live full grads);
                           // streamed gradients (one rank) likewise, counted per group (--grad-window)
};

struct EngineOptions {
  optim::AdamWHyper adam;     // lr and step are set per step
  float grad_clip = 1.0f;     // global-norm clipping threshold; <= 0: no clipping
  std::uint64_t seed = 1337;  // parameter initialisation
  // false: the parameters are left unset for set_master_params (a checkpoint is loaded next),
  // which saves drawing them; the AdamW moments are zeroed either way.
  bool initialise_params = true;
  ZeroOptions zero;              // the ZeRO stage and its windows
  Communicator* comm = nullptr;  // data-parallel ranks; nullptr: one rank
  // For the engine's direct collectives on host buffers (gathering master weights for a
  // checkpoint): an MPI communicator of the same ranks when `comm` is NCCL; nullptr: `comm`.
  Communicator* host_comm = nullptr;
  // Where the model states go and how the CPU AdamW runs: the run's offload options
  // (offload/placement.hpp), the same object the planner reads. Its fractions must be resolved
  // (no `auto`), and adam_threads given where the optimizer is offloaded: train/run.cpp resolves
  // them from the host plan before the engine. optimizer_fraction F: the state of
  // the last layers holding at least F·Ψ is offloaded (offload/optimizer_split.hpp; 1: every
  // layer). params: stage 3 with several ranks; any stage with one. delayed_update_warmup >= 0:
  // the delayed update after that many synchronous steps. speculative_update: exact clipping
  // without the wait (optimizer cpu, grad_clip > 0): each CPU AdamW runs as soon as its gradient is
  // reduced, from one set of optimizer state into a second, and a commit after the norm adopts
  // it, re-runs it clipped or discards it (docs/architecture.md, "Exact clipping"); bit-identical
  // to the synchronous update, 12 more bytes per parameter on the host. speculative_fraction: of
  // the CPU-updated layers, the last ones holding this share are speculative, the others update
  // after the norm. adam_threads: the CPU AdamW's threads. Its paths are the host plan's input.
  OffloadOptions offload;
  DiskNode* nvme = nullptr;  // the disk node for optimizer offload nvme (outlives the engine)
  int host_numa_node = -1;   // where pinned host buffers live (-1: not bound)
  // The seeds' fp32 gradient-accumulation buffer (bf16 models): micro-batch gradients are added
  // in fp32 (full per layer at stages 0-1, the shard at 2-3) and rounded to bf16 once per step.
  bool fp32_grad_accum = false;
  // Testing the handling of non-finite gradients: (step, layer) pairs whose gradient is made NaN
  // after the backward (fp32 models only).
  std::vector<std::pair<int, int>> nan_gradients;
  // Testing a stuck run: at this step a task on layer 0's gradient never ends (0: never).
  int hang_at_step = 0;
};

// The rules of a run's ZeRO and engine options, each written once with its one message
// (std::invalid_argument, one line naming the flags). A run is checked once, before StarPU starts:
// train/run.cpp's check_options calls check_engine_options; `starzero plan` calls the rules its
// flags can break. Below that (the engine, the layer plans, the planner, the host plan) the
// options are taken as checked, and a broken rule is a std::logic_error: a caller that did not check.

// --stage 0..3, --prefetch-depth >= 0, --grad-window >= 1 (the planner's fields are 64-bit).
void check_zero_options(std::int64_t stage, std::int64_t prefetch_depth, std::int64_t grad_window);
inline void check_zero_options(const ZeroOptions& zero) {
  check_zero_options(zero.stage, zero.prefetch_depth, zero.grad_window);
}
// --offload-params cpu with several ranks needs ZeRO-3 (stages 0-2 keep full parameters on the
// device); with one rank nothing is sharded and every stage is the same.
void check_param_offload_stage(const OffloadOptions& offload, int stage, std::int64_t ranks);
// Everything no engine of `ranks` ranks can run: the offload options' own rules (validate,
// offload/placement.hpp), the ZeRO options, parameter offload and the stage, and the speculative
// update without clipping.
void check_engine_options(const EngineOptions& options, int ranks);

}  // namespace starzero
