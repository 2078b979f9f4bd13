#pragma once
// How a step's AdamW is applied (offload/engine.hpp has the states and the math): one interface,
// three implementations, chosen once from the offload options (make_update_policy):
//   synchronous   every AdamW waits for the global norm (with clipping) and runs in the step;
//   delayed       ZeRO-Offload's DPU: after the warm-up steps, step t's AdamW runs beside step
//                 t+1's forward and backward and is published once that backward is done;
//   speculative   exact clipping without the wait: the CPU AdamW runs as soon as its gradient is
//                 reduced, into a second set of state, and a commit once the norm is known adopts
//                 it, re-runs it clipped or discards it (docs/architecture.md, "Exact clipping").
// The tasks every policy submits for a layer (its AdamW, its publish, the transfers around the
// CPU AdamW) and the step's gradient norm are UpdateTasks'.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "offload/engine_options.hpp"
#include "offload/layer_buffers.hpp"
#include "offload/model.hpp"
#include "optimizers/adamw.hpp"
#include "optimizers/adamw_codelet.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

namespace tasks {
class CollectiveOrder;
}

// What the speculative update's commits did, layer by layer: adopted (nothing to do), re-run
// clipped, discarded (non-finite norm).
struct CommitCounts {
  std::int64_t adopted = 0, rerun = 0, discarded = 0;
};

class UpdateTasks {
 public:
  // order: the collectives' order (nullptr without collectives); cpu_adamw: some layer's AdamW
  // runs on the CPU (the pool's token is made for it).
  UpdateTasks(Model& model, std::vector<LayerBuffers>& layers, const EngineOptions& options, bool sharded,
              tasks::CollectiveOrder* order, bool cpu_adamw);

  // The global gradient norm over the reduced gradients and the clipping scale AdamW waits for.
  void submit_grad_norm(int micro_batches);
  // The scale without the norm (1/(ranks·micro-batches)): AdamW without clipping, and the
  // speculative AdamW.
  void submit_unclipped_scale(int micro_batches);
  // AdamW of one layer (`delayed`: into a buffer the model does not read yet).
  void update(int layer, const optim::AdamWHyper& hyper, bool delayed);
  // Makes a layer's updated parameters the ones the model reads.
  void publish(int layer, bool delayed);
  // Every layer's update, publish and transfer up, in the order their readers need them; a
  // speculative layer's AdamW is submitted already, only its publish comes here.
  void update_in_step(const optim::AdamWHyper& hyper);
  // The transfers around a CPU AdamW: the reduced gradient down, the written parameters up.
  void fetch_gradient_to_host(int group);
  void send_update_to_device(int layer);

  // The pool as layer l's AdamW takes it.
  optim::CpuAdamPool cpu_adam_pool(int layer, bool delayed = false) const;
  LayerBuffers& layer(int l) { return layers_[std::size_t(l)]; }
  int layers() const { return int(layers_.size()); }
  DType dtype() const { return model_.dtype(); }
  const Tensor& clip_scale() const { return clip_scale_; }
  const Tensor& unclipped_scale() const { return unclipped_scale_; }
  const Tensor& grad_norm() const { return grad_norm_; }

 private:
  Model& model_;
  std::vector<LayerBuffers>& layers_;
  const EngineOptions& options_;
  int ranks_;
  bool sharded_;
  tasks::CollectiveOrder* order_;
  Tensor clip_scale_, grad_norm_, grad_sumsq_total_;
  Tensor unclipped_scale_, unclipped_norm_;  // 1/(ranks·micro-batches), no norm
  std::optional<Tensor> cpu_adam_token_;     // optimizer offload: one CPU AdamW at a time
};

class UpdatePolicy {
 public:
  virtual ~UpdatePolicy() = default;
  // Before the step's first forward, with the step's hyperparameters.
  virtual void begin_step(const optim::AdamWHyper& hyper, int micro_batches) = 0;
  // A group's gradient is reduced for the step (after the fetch to the host).
  virtual void gradient_reduced(int group) = 0;
  // After the step's last backward, before the gradient norm.
  virtual void end_backward() = 0;
  // After the norm: the step's AdamW and publish (optimizer step `step`, 1-based).
  virtual void end_step(const optim::AdamWHyper& hyper, int step) = 0;
  // Makes the parameters and optimizer state final for readers (the speculative commits).
  virtual void settle() = 0;
  // settle, then applies a pending delayed update.
  virtual void flush() = 0;
  // The speculative update's commits so far (zeros for the others); waits for the commit tasks.
  virtual CommitCounts commits() = 0;
  // The layers whose AdamW the last step's clipping re-ran (0 for the other policies).
  virtual int last_step_rollbacks() = 0;
};

std::unique_ptr<UpdatePolicy> make_update_policy(const OffloadOptions& offload, UpdateTasks& tasks);

}  // namespace starzero
