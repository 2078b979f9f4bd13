#pragma once
// The ZeRO engine: walks a Model's layers and submits one training step as a task graph
// (docs/architecture.md): forward of every layer, backward in reverse order, and per layer the
// collective and optimizer tasks of the chosen ZeRO stage. Nothing waits inside a step.
//
// What ZeRO shards is decided once (ZeroState, offload/layer_plan.hpp), and each layer's buffers
// and operations once, in its LayerPlan: allocation, task submission and the memory ledger all
// read the plan, and the planner (offload/planner.hpp) counts bytes from the same code.
//
// States of a layer (FSDP2's words) and the transitions the engine submits between them:
//   parameters  sharded: only this rank's shard (param_shard) is held (ZeRO-3);
//               unsharded: the full parameters (param) are there for forward and backward.
//     unshard   ZeRO-3: all-gather param_shard -> param before each forward and each backward,
//               with a prefetch window: gather k+W+1 waits for the release of gather k (at
//               most W+1 layers live). One rank with the parameters on the host: fetched.
//     reshard   ZeRO-3: free param after the layer's tasks; one rank with the parameters on the
//               host: drop the device copy.
//   gradients   unsharded: the full gradient (grad) that backward accumulates into;
//               sharded (reduced): this rank's part, grad_shard or its shard-sized slice of grad.
//     allocate  ZeRO-2/3: grad comes to life before the layer's first backward, once the one
//               freed grad_window reductions earlier is gone; stages 0-1 hold it for good.
//     reduce    all-reduce (ZeRO-0), reduce-scatter in place (ZeRO-1) or into grad_shard
//               (ZeRO-1 under optimizer offload; ZeRO-2/3 after every micro-batch, then grad is
//               freed). fp32 accumulation adds the full gradient before the reduction (stages
//               0-1) or each reduced shard after it (stages 2-3), rounded once per step.
//   optimizer   master/m/v of this rank's shard (everything when not sharded), fp32.
//     update    AdamW: a device kernel at an offset into the buffers, or under optimizer offload
//               a CPU task that reads the gradient shard and writes a parameter shard whole.
//     publish   make the update what the model reads: all-gather of the full parameters
//               (ZeRO-1/2, in place or from param_shard), or copy of a delayed update's
//               param_next into place; nothing where the update wrote there (one rank, ZeRO-0,
//               ZeRO-3).
// With one rank (or no communicator) there are no collectives and all stages are the same.
//
// Buffers per layer l, N ranks, s = ceil(count/N) (full buffers are padded to N·s):
//   param[l]        full, model dtype      stages 0-2: held; 3: gathered for each use
//   param_shard[l]  s, model dtype         ZeRO-3; ZeRO-1/2 under optimizer offload or delay
//   param_next[l]   s or full              delayed update where no param_shard takes it
//   grad[l]         full, model dtype      stages 0-1: held; 2-3: freed after its reduce-scatter
//   grad_shard[l]   s, model dtype         ZeRO-2/3; ZeRO-1 under optimizer offload
//   grad_partial[l] s, model dtype         ZeRO-2/3: a later micro-batch's reduced shard
//   grad_accum[l]   fp32, full or s        fp32 gradient accumulation
//   master/m/v[l]   fp32, s (stage 0: full)
//
// Gradient clipping by global norm is exact: every AdamW waits for the norm over all gradient
// shards, a global point after the whole backward. With clipping off (grad_clip <= 0) AdamW of
// layer l waits only for its own gradient and overlaps the backward of the layers below; the
// norm is still computed, off the critical path. With the delayed update, clipping stays exact
// and costs no overlap (the update runs during the next step's forward and backward).
//
// ZeRO-Offload (docs/architecture.md):
//   offload.optimizer cpu:  master/m/v in pinned host memory on a chosen NUMA node; AdamW is a
//                           CPU-only task (fused SIMD kernel, adam_threads threads) that reads
//                           the gradient shard and writes a parameter shard whole: StarPU moves
//                           the shard down and the updated parameters up, precision bytes each
//                           way; at stages 1-2 an all-gather then rebuilds the full parameters.
//   offload.optimizer nvme: master/m/v homed on a StarPU disk node (out-of-core), fetched to RAM
//                           by the CPU Adam task and evicted under the host-memory limit.
//   offload.params cpu:     ZeRO-3: parameter shards in pinned host memory, fetched per layer by
//                           the all-gathers inside the prefetch window. One rank (any stage): the
//                           full parameters in pinned host memory, fetched to the device per layer
//                           inside the same window, the device copy dropped after; with the
//                           optimizer offloaded too, the full gradients are streamed: homed on the
//                           host, on the device only around each backward that accumulates into
//                           them, inside the gradient window (grad_window).
//   offload.optimizer_fraction F: only the last layers holding F·Ψ are offloaded as above; the
//                           first ones keep their state on the device and run the device AdamW
//                           (offload/optimizer_split.hpp: the rule and why). Each layer's plan
//                           says which: LayerPlanInput::offload_optimizer is per layer.
// Delayed update (ZeRO-Offload's DPU; it changes the math): after `delayed_update_warmup` steps,
// the gradient of step t is applied during step t+1 (its AdamW runs beside step t+1's forward and
// backward, which still use the parameters from before that update), and published once step
// t+1's backward is done with the parameters. flush() applies a pending update.
//
// The engine in parts (FSDP2 keeps the same split):
//   offload/engine_options.hpp   the options and the rules that join them (check_engine_options);
//   offload/layer_buffers.hpp    one layer's buffers, allocated at their planned homes;
//   offload/step_walk.hpp        the forward and backward walks and the transitions above;
//   offload/update_policy.hpp    the update: synchronous, delayed or speculative, and its tasks;
//   offload/engine_state.cpp     parameters and optimizer state in and out (checkpoints).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "offload/engine_options.hpp"
#include "offload/layer_buffers.hpp"
#include "offload/layer_plan.hpp"
#include "offload/model.hpp"
#include "offload/optimizer_split.hpp"
#include "offload/step_walk.hpp"
#include "offload/update_policy.hpp"
#include "runtime/ledger.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

namespace tasks {
class CollectiveOrder;
}

// Optimizer state of one layer (fp32, this rank's shard), for checkpoints and exact resume.
struct LayerOptimizerState {
  std::vector<float> master, m, v;
};

class Engine {
 public:
  Engine(Model& model, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Forward and backward of `micro_batches` micro-batches, accumulating their gradients (each
  // micro-batch's inputs are set by `load_micro_batch(m)`, or by the caller beforehand when there
  // is one), the collectives of the stage, the global gradient norm of the mean gradient, and
  // AdamW at learning rate `lr` as optimizer step `step` (1-based). ZeRO-0/1 reduce the
  // accumulated gradient once; ZeRO-2/3 reduce-scatter after every micro-batch into the shard
  // (the full gradient is freed each time, as without accumulation).
  void submit_step(float lr, int step, int micro_batches = 1, const std::function<void(int)>& load_micro_batch = {});
  // Applies a pending delayed update (no-op otherwise). Call before reading parameters or
  // optimizer state for a checkpoint; the next step then starts a new delay pipeline.
  void flush();
  // The speculative update: what every commit so far did, layer by layer: adopted (nothing to
  // do), re-run clipped, discarded (non-finite norm). All zero without it. Clipping is global: a
  // clipped step re-runs every CPU-updated layer. Waits for the commit tasks, and checks that they
  // did what the engine decided (std::logic_error otherwise).
  // Not const, as none of the readers of parameters or optimizer state below are: the last
  // speculative step's commit is submitted first, once its norm is known.
  CommitCounts commits();
  // The layers whose AdamW the last step's clipping re-ran (rolled back): 0 when it was not
  // clipped, or skipped, or without the speculative update. Waits for the norm only.
  int last_step_rollbacks();
  // Forward only (evaluation): no gradients, no update.
  void submit_forward();
  // Zeroed gradients, forward and backward of the current micro-batch: no reduction, no update.
  // Single rank (or stage 0-1) only: the full gradients stay for gradients().
  void submit_gradients();
  // Every layer's full gradient as fp32 (waits for the backward).
  std::vector<std::vector<float>> gradients() const;

  // Global gradient norm (before clipping) of the last step; waits for it.
  float last_grad_norm() const;
  // Whether a step whose gradient norm is not finite leaves the parameters and optimizer state
  // as they were: with clipping, every AdamW waits for the norm and skips on a non-finite one;
  // without it AdamW does not wait, so such a step has already updated.
  bool skips_nonfinite_steps() const { return options_.grad_clip > 0; }
  // The first layer, in forward order, whose gradient (this rank's part of it) had a non-finite
  // value in the last step; -1 when none had. Waits for the step's sums of squares.
  int first_nonfinite_gradient_layer() const;

  // Full fp32 master parameters per layer, gathered from every rank's shard (waits). Collective
  // when the optimizer state is sharded: every rank must call it.
  std::vector<std::vector<float>> master_params();
  // One layer of them (collective in the same way: every rank asks for the same layers in the
  // same order), so that a writer holds one layer at a time.
  std::vector<float> master_layer(int layer);
  // Replaces master and model parameters from full per-layer values (every rank passes the same).
  void set_master_params(const std::vector<std::vector<float>>& layers);
  // The same, with `fill` writing each layer's values where they go, the workers asleep
  // meanwhile: it calls destination(layer, count) once per layer (from any thread) and fills the
  // span it returns. Unsharded master weights in main memory are that span (no copy on the way);
  // otherwise a copy of the layer, which every buffer takes its part of.
  using LayerValues = std::function<std::span<float>(int layer, std::size_t count)>;
  void load_master_params(const std::function<void(const LayerValues& destination)>& fill);
  // This rank's optimizer state per layer (its shards), and its inverse.
  std::vector<LayerOptimizerState> optimizer_state();
  void set_optimizer_state(const std::vector<LayerOptimizerState>& state);

  std::size_t parameter_count() const;  // Ψ of the model
  // Σ over layers of N·ceil(count/N): what the collectives move (the padding is < N per layer).
  std::size_t padded_parameter_count() const;
  // ZeRO-3: elements gathered per step beyond once per layer and pass (groups shared by another
  // layer, e.g. the tied embedding gathered again for the classifier).
  std::size_t regathered_elements_per_step() const;
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int stage() const { return options_.zero.stage; }
  const EngineOptions& options() const { return options_; }
  bool sharded() const { return zero_.sharded; }
  // What ZeRO shards in this run, and each layer's buffers and operations.
  const ZeroState& zero_state() const { return zero_; }
  const LayerPlan& layer_plan(int layer) const;
  bool fp32_grad_accum() const { return options_.fp32_grad_accum; }
  // Whether some layer's optimizer state is offloaded (there is a CPU AdamW), and whose.
  bool optimizer_offloaded() const { return optimizer_split_.offloaded_params > 0; }
  const OptimizerSplit& optimizer_split() const { return optimizer_split_; }
  // Whose CPU AdamW is speculative: the last of optimizer_split's layers (none without it).
  const OptimizerSplit& speculative_split() const { return speculative_split_; }
  std::string layer_name(int layer) const { return model_.layer_name(layer); }
  const MemoryLedger& ledger() const { return ledger_; }
  DType model_dtype() const { return model_.dtype(); }

 private:
  // The constructor's steps, in its order (each named in engine.cpp).
  void split_optimizer(const Model& model);
  void initialise_state();
  void initialise_params();  // the model's initial values into the buffers
  void split_gradients();    // as Model::gradient_pieces asks, where allowed
  void add_held_bytes_to_ledger();
  LayerPlanInput layer_plan_input(int layer) const;
  // A layer's full values into the copies the model reads (parameter shard, full parameters).
  void write_model_params(LayerBuffers& layer, std::span<const float> values);
  void submit_debug_faults(int step);
  Communicator& host_comm() const { return options_.host_comm ? *options_.host_comm : *options_.comm; }

  Model& model_;
  EngineOptions options_;
  int ranks_ = 1, rank_ = 0;
  ZeroState zero_;
  OptimizerSplit optimizer_split_;    // whose optimizer state is offloaded (before layers_: they read it)
  OptimizerSplit speculative_split_;  // whose CPU AdamW is speculative (before layers_ too)
  std::unique_ptr<tasks::CollectiveOrder> order_;
  std::vector<LayerBuffers> layers_;
  MemoryLedger ledger_;
  std::unique_ptr<StepWalk> walk_;            // the forward and backward walks, with their transitions
  std::unique_ptr<UpdateTasks> update_tasks_;  // AdamW, publish, the norm
  std::unique_ptr<UpdatePolicy> update_;      // synchronous, delayed or speculative
};

}  // namespace starzero
