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
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "offload/layer_plan.hpp"
#include "offload/model.hpp"
#include "offload/optimizer_split.hpp"
#include "offload/placement.hpp"
#include "optimizers/adamw.hpp"
#include "optimizers/adamw_codelet.hpp"
#include "runtime/comm.hpp"
#include "runtime/ledger.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

namespace tasks {
class CollectiveOrder;
}
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
  // (no `auto`: train/run.cpp resolves them before the engine). optimizer_fraction F: the state of
  // the last layers holding at least F·Ψ is offloaded (offload/optimizer_split.hpp; 1: every
  // layer). params: stage 3 with several ranks; any stage with one. delayed_update_warmup >= 0:
  // the delayed update after that many synchronous steps. speculative_update: exact clipping
  // without the wait (optimizer cpu, grad_clip > 0): each CPU AdamW runs as soon as its gradient is
  // reduced, from one set of optimizer state into a second, and a commit after the norm adopts
  // it, re-runs it clipped or discards it (docs/architecture.md, "Exact clipping"); bit-identical
  // to the synchronous update, 12 more bytes per parameter on the host. speculative_fraction: of
  // the CPU-updated layers, the last ones holding this share are speculative, the others update
  // after the norm. Its adam_threads and paths are the host plan's input, not read here.
  OffloadOptions offload;
  DiskNode* nvme = nullptr;  // the disk node for optimizer offload nvme (outlives the engine)
  int host_numa_node = -1;   // where pinned host buffers live (-1: not bound)
  int adam_threads = 1;      // CPU AdamW threads under optimizer offload (the host plan's)
  // The seeds' fp32 gradient-accumulation buffer (bf16 models): micro-batch gradients are added
  // in fp32 (full per layer at stages 0-1, the shard at 2-3) and rounded to bf16 once per step.
  bool fp32_grad_accum = false;
  // Testing the handling of non-finite gradients: (step, layer) pairs whose gradient is made NaN
  // after the backward (fp32 models only).
  std::vector<std::pair<int, int>> nan_gradients;
  // Testing a stuck run: at this step a task on layer 0's gradient never ends (0: never).
  int hang_at_step = 0;
};

// Optimizer state of one layer (fp32, this rank's shard), for checkpoints and exact resume.
struct LayerOptimizerState {
  std::vector<float> master, m, v;
};

// std::invalid_argument (one line, naming the flags) for options no engine of `ranks` ranks can run:
// the offload options' own rules (validate, offload/placement.hpp), then the ones that join them
// with the rest: parameter offload outside ZeRO-3 with several ranks, the speculative update
// without clipping. The run checks with it before StarPU starts (train/run.cpp), the engine again
// when built.
void check_engine_options(const EngineOptions& options, int ranks);

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
  bool has_pending_update() const { return pending_update_.has_value(); }
  // The speculative update: what every commit so far did, layer by layer: adopted (nothing to
  // do), re-run clipped, discarded (non-finite norm). All zero without it. Clipping is global: a
  // clipped step re-runs every CPU-updated layer. Waits for the commit tasks, and checks that they
  // did what the engine decided (std::logic_error otherwise).
  struct CommitCounts {
    std::int64_t adopted = 0, rerun = 0, discarded = 0;
  };
  CommitCounts commits() const;
  // The layers whose AdamW the last step's clipping re-ran (rolled back): 0 when it was not
  // clipped, or skipped, or without the speculative update. Waits for the norm only.
  int last_step_rollbacks() const;
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
  std::vector<std::vector<float>> master_params() const;
  // One layer of them (collective in the same way: every rank asks for the same layers in the
  // same order), so that a writer holds one layer at a time.
  std::vector<float> master_layer(int layer) const;
  // Replaces master and model parameters from full per-layer values (every rank passes the same).
  void set_master_params(const std::vector<std::vector<float>>& layers);
  // The same, with `fill` writing each layer's values where they go, the workers asleep
  // meanwhile: it calls destination(layer, count) once per layer (from any thread) and fills the
  // span it returns. Unsharded master weights in main memory are that span (no copy on the way);
  // otherwise a copy of the layer, which every buffer takes its part of.
  using LayerValues = std::function<std::span<float>(int layer, std::size_t count)>;
  void load_master_params(const std::function<void(const LayerValues& destination)>& fill);
  // This rank's optimizer state per layer (its shards), and its inverse.
  std::vector<LayerOptimizerState> optimizer_state() const;
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
  void initialise_params();  // the model's initial values into the buffers (constructor)
  // The constructor's steps, in its order (each named in engine.cpp).
  void split_optimizer(const Model& model);
  void check_grad_window() const;
  void find_gradient_touchers();
  void initialise_state();
  void split_gradients();    // as Model::gradient_pieces asks, where allowed (constructor)
  class Handles;
  struct Layer;
  // A layer's full values into the copies the model reads (parameter shard, full parameters).
  void write_model_params(Layer& layer, std::span<const float> values);
  void submit_forward_walk();
  // speculative: the step's AdamW hyperparameters when each layer's speculative AdamW follows
  // its reduction (the last micro-batch).
  void submit_backward_walk(bool first_micro_batch, bool last_micro_batch,
                            const optim::AdamWHyper* speculative = nullptr);
  std::vector<int> uses(int layer) const;  // its own group and the groups it shares
  void submit_window_mark(int layer, int delta, const std::string& name);
  void gather(int layer, const char* pass);
  void release(int layer, const char* pass);
  void allocate_gradient(int group, bool first_micro_batch);
  void stream_gradients_in(int layer, bool first_micro_batch);
  void stream_gradients_out(int layer);
  void reduce_gradient(int group, bool first_micro_batch, bool last_micro_batch);
  void reduce_into_shard_each_micro_batch(int group, bool first_micro_batch, bool last_micro_batch);
  void submit_grad_norm(int micro_batches);
  void add_held_bytes_to_ledger();
  LayerPlanInput layer_plan_input(int layer) const;
  // A tensor for one planned buffer, at its home.
  Tensor allocate(const PlannedBuffer& buffer, const std::string& name);
  Communicator& host_comm() const { return options_.host_comm ? *options_.host_comm : *options_.comm; }
  void submit_update(int layer, const optim::AdamWHyper& hyper, bool delayed);
  void submit_publish(int layer, bool delayed);
  // The pool as layer l's AdamW takes it. First the layer whose update is waited for first
  // (docs/architecture.md, "The CPU AdamW pool"): the next forward reads the parameters from
  // layer 0 up; a delayed update's gradients are overwritten by the backward from the top down.
  optim::CpuAdamPool cpu_adam_pool(int layer, bool delayed = false) const {
    const int turn = delayed ? layer : model_.layers() - 1 - layer;
    return {cpu_adam_token_->handle(), options_.adam_threads, options_.host_numa_node, turn};
  }
  void submit_speculative_update(int layer, const optim::AdamWHyper& hyper);
  void submit_commit(int layer, const optim::AdamWHyper& hyper);
  // Once the last speculative step's norm is known (waits for it): its commits, where needed.
  // Every reader of parameters or optimizer state and every submission calls it first.
  void resolve_speculation() const;
  void fetch_gradient_to_host(int group);
  void send_update_to_device(int layer);

  Model& model_;
  EngineOptions options_;
  int ranks_ = 1, rank_ = 0;
  ZeroState zero_;
  OptimizerSplit optimizer_split_;  // whose optimizer state is offloaded (before layers_: they read it)
  OptimizerSplit speculative_split_;  // whose CPU AdamW is speculative (before layers_ too)
  std::vector<Layer> layers_;
  std::unique_ptr<Handles> handles_;
  std::unique_ptr<tasks::CollectiveOrder> order_;
  Tensor clip_scale_, grad_norm_, grad_sumsq_total_;
  Tensor unclipped_scale_, unclipped_norm_;             // 1/(ranks·micro-batches), no norm: grad_clip <= 0,
                                                        // and the speculative AdamW
  Tensor commit_counts_;                                // the speculative update's commits, by outcome
  std::optional<Tensor> cpu_adam_token_;                // optimizer offload: one CPU AdamW at a time
  std::optional<optim::AdamWHyper> pending_update_;     // delayed update not yet submitted
  // A speculative step whose commit is not decided yet (its hyperparameters), what the commits
  // decided so far, and how many layers the last step re-ran. (Mutable: the const readers of
  // state resolve first.)
  mutable std::optional<optim::AdamWHyper> unresolved_;
  mutable CommitCounts decisions_;
  mutable int last_rollbacks_ = 0;
  std::vector<Tensor> window_slots_;                    // ZeRO-3 prefetch window tokens
  std::uint64_t gathers_ = 0;                           // ZeRO-3 gathers submitted (selects the window slot)
  std::vector<int> first_toucher_, last_toucher_;       // per group: backward layers touching it
  std::vector<starpu_data_handle_t> recently_reduced_;  // ZeRO-2/3: full gradients just freed
  std::deque<starpu_data_handle_t> streamed_out_;       // streamed gradients: the last grad_window written home
  MemoryLedger ledger_;
};

}  // namespace starzero
