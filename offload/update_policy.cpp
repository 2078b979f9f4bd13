#include "offload/update_policy.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/sim.hpp"
#include "tasks/collectives.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

UpdateTasks::UpdateTasks(Model& model, std::vector<LayerBuffers>& layers, const EngineOptions& options, bool sharded,
                         tasks::CollectiveOrder* order, bool cpu_adamw)
    : model_(model),
      layers_(layers),
      options_(options),
      ranks_(options.comm ? options.comm->size() : 1),
      sharded_(sharded),
      order_(order),
      clip_scale_(Tensor::host(DType::f32, 1, "clip_scale")),
      grad_norm_(Tensor::host(DType::f32, 1, "grad_norm")),
      grad_sumsq_total_(Tensor::host(DType::f32, 1, "grad_sumsq_total")),
      unclipped_scale_(Tensor::host(DType::f32, 1, "unclipped_scale")),
      unclipped_norm_(Tensor::host(DType::f32, 1, "unclipped_norm")) {
  if (cpu_adamw) cpu_adam_token_.emplace(Tensor::host(DType::f32, 1, "cpu_adam_pool"));
}

// First the layer whose update is waited for first (docs/architecture.md, "The CPU AdamW pool"):
// the next forward reads the parameters from layer 0 up; a delayed update's gradients are
// overwritten by the backward from the top down.
optim::CpuAdamPool UpdateTasks::cpu_adam_pool(int layer, bool delayed) const {
  const int turn = delayed ? layer : model_.layers() - 1 - layer;
  return {cpu_adam_token_->handle(), *options_.offload.adam_threads, options_.host_numa_node, turn};
}

// Each rank's part of the reduced gradients (the slice AdamW reads), summed across ranks when
// sharded; then the clipping scale AdamW waits for. Exact clipping is a global point: every
// AdamW waits for the norm of all gradients. Gradients summed over ranks and micro-batches:
// AdamW gets their mean.
void UpdateTasks::submit_grad_norm(int micro_batches) {
  const DType dtype = model_.dtype();
  std::vector<starpu_data_handle_t> partial_sums;
  for (int l = model_.layers() - 1; l >= 0; --l) {
    LayerBuffers& layer = layers_[std::size_t(l)];
    const BufferSlice& grad = layer.plan.update().grad;
    optim::submit_sum_of_squares(layer.tensor(grad.buffer).handle(), optim::Slice{grad.offset, grad.count}, dtype,
                                 layer.sum_of_squares.handle(), indexed_name("grad_sumsq", l));
    partial_sums.push_back(layer.sum_of_squares.handle());
  }
  if (sharded_) {
    optim::submit_sum_scalars(partial_sums, grad_sumsq_total_.handle(), "grad_sumsq_local");
    tasks::submit_all_reduce(*order_, grad_sumsq_total_.handle(), DType::f32, "all_reduce_grad_sumsq");
    partial_sums = {grad_sumsq_total_.handle()};
  }
  const float divisor = float(ranks_ * micro_batches);
  optim::submit_clip_scale(partial_sums, options_.grad_clip, divisor, clip_scale_.handle(), grad_norm_.handle(),
                           "clip_scale");
  // Without clipping AdamW needs only the divisor: it does not wait for the norm.
  if (options_.grad_clip <= 0) submit_unclipped_scale(micro_batches);
}

void UpdateTasks::submit_unclipped_scale(int micro_batches) {
  optim::submit_clip_scale({}, 0.0f, float(ranks_ * micro_batches), unclipped_scale_.handle(),
                           unclipped_norm_.handle(), "unclipped_scale");
}

// The own shard of the optimizer state, the reduced gradient, and the parameters it writes.
void UpdateTasks::update(int l, const optim::AdamWHyper& hyper, bool delayed) {
  LayerBuffers& layer = layers_[std::size_t(l)];
  const UpdatePlan& update = layer.plan.update();
  const DType dtype = model_.dtype();
  const std::string name = indexed_name("adamw", l);
  const starpu_data_handle_t scale = options_.grad_clip > 0 ? clip_scale_.handle() : unclipped_scale_.handle();
  const starpu_data_handle_t grad = layer.tensor(update.grad.buffer).handle();
  const BufferSlice& target = delayed ? update.delayed_target : update.target;
  const starpu_data_handle_t param = layer.tensor(target.buffer).handle();
  switch (update.kernel) {
    case UpdateKernel::cpu:  // whole buffers: the gradient shard down, the parameter shard up
      optim::submit_adamw_cpu(grad, layer.master.handle(), layer.m.handle(), layer.v.handle(), param, scale, dtype,
                              hyper, cpu_adam_pool(l, delayed), name);
      return;
    case UpdateKernel::device:
      optim::submit_adamw(grad, update.grad.offset, layer.master.handle(), layer.m.handle(), layer.v.handle(), param,
                          target.offset, scale, dtype, hyper, name);
      return;
  }
}

// The all-gather of ZeRO-1/2, or the copy of a delayed update into place.
void UpdateTasks::publish(int l, bool delayed) {
  LayerBuffers& layer = layers_[std::size_t(l)];
  const PublishPlan& publish = layer.plan.publish(delayed);
  const DType dtype = model_.dtype();
  switch (publish.how) {
    case Publish::none: return;  // AdamW wrote where the model reads
    case Publish::copy_next:
      tasks::submit_copy(layer.param_next->handle(), layer.tensor(publish.destination).handle(),
                         indexed_name("publish_param", l));
      return;
    case Publish::all_gather_from_shard:
      tasks::submit_all_gather(*order_, layer.param_shard->handle(), layer.param.handle(), layer.count(), dtype,
                               indexed_name("all_gather_param", l));
      // The shard was only needed for the gather: the device copy may go (offload keeps it on the host).
      if (publish.drop_device_shard) starpu_data_wont_use(layer.param_shard->handle());
      return;
    case Publish::all_gather_in_place:
      tasks::submit_all_gather_in_place(*order_, layer.param.handle(), layer.count(), dtype,
                                        indexed_name("all_gather_param", l));
      return;
  }
}

// With exact clipping every AdamW waits for the global norm, so all become ready at once:
// submitted in forward order, the next step's forward (layer 0 first) starts while the later
// layers update. Without clipping each waits only for its own gradient, which the backward
// finishes from the last layer down. (A speculative layer's all-gather (ZeRO-1/2) comes here all
// the same, in this order with the other collectives: submitted during the backward, it would
// hold back the reductions of the layers below until the CPU AdamW is done.)
void UpdateTasks::update_in_step(const optim::AdamWHyper& hyper) {
  for (int i = 0; i < layers(); ++i) {
    const int l = options_.grad_clip > 0 ? i : layers() - 1 - i;
    if (layers_[std::size_t(l)].speculative()) {
      publish(l, false);
      continue;
    }
    update(l, hyper, false);
    publish(l, false);
    send_update_to_device(l);
  }
}

// The CPU AdamW reads the reduced gradient on the host: a task that runs nowhere brings it down as
// soon as it is complete, not when the AdamW task starts, which the CPU Adam pool serialises:
// fetched then, each layer's transfer stalled the pool (11 ms per layer of a 13B model on the
// simulated H200, 0.45 s a step). (StarPU's own asynchronous prefetch was tried first: in the
// simulated runs its requests were served only once the GPU had nothing else to do.)
void UpdateTasks::fetch_gradient_to_host(int group) {
  LayerBuffers& layer = layers_[std::size_t(group)];
  if (layer.plan.update().kernel != UpdateKernel::cpu || starpu_cuda_worker_get_count() == 0) return;
  tasks::submit_move_to_host({layer.tensor(layer.plan.update().grad.buffer).handle()},
                             indexed_name("fetch_grad", group));
}

// Likewise the CPU AdamW's parameters go up once written, where the model reads them in place (no
// collective publishes them, and they are not fetched per use): left to the next forward, its
// tasks waited for PCIe; a fetch task on the CUDA worker held the compute queued behind it.
void UpdateTasks::send_update_to_device(int l) {
  LayerBuffers& layer = layers_[std::size_t(l)];
  if (layer.plan.update().kernel != UpdateKernel::cpu || starpu_cuda_worker_get_count() == 0) return;
  if (layer.plan.publish(false).how != Publish::none || layer.plan.param_access() == ParamAccess::fetched_per_use)
    return;
  tasks::submit_move_to_device({layer.tensor(layer.plan.update().target.buffer).handle()},
                               indexed_name("fetch_param", l));
}

namespace {

class SynchronousUpdate : public UpdatePolicy {
 public:
  explicit SynchronousUpdate(UpdateTasks& tasks) : tasks_(tasks) {}
  void begin_step(const optim::AdamWHyper&, int) override {}
  void gradient_reduced(int) override {}
  void end_backward() override {}
  void end_step(const optim::AdamWHyper& hyper, int) override { tasks_.update_in_step(hyper); }
  void settle() override {}
  void flush() override {}
  CommitCounts commits() override { return {}; }
  int last_step_rollbacks() override { return 0; }

 protected:
  UpdateTasks& tasks_;
};

// After `warmup` synchronous steps, the previous step's AdamW runs beside this step's forward and
// backward, which read the parameters from before it; they are published once the backward is
// done.
class DelayedUpdate final : public SynchronousUpdate {
 public:
  DelayedUpdate(UpdateTasks& tasks, int warmup) : SynchronousUpdate(tasks), warmup_(warmup) {}
  void begin_step(const optim::AdamWHyper&, int) override {
    previous_ = std::exchange(pending_, std::nullopt);
    if (previous_) submit_updates(*previous_);
  }
  void end_backward() override {
    if (previous_) submit_publishes();
    previous_.reset();
  }
  void end_step(const optim::AdamWHyper& hyper, int step) override {
    if (step > warmup_)
      pending_ = hyper;  // submitted at the start of the next step (or by flush)
    else
      tasks_.update_in_step(hyper);
  }
  void flush() override {
    if (!pending_) return;
    submit_updates(*pending_);
    submit_publishes();
    pending_.reset();
  }

 private:
  void submit_updates(const optim::AdamWHyper& hyper) {
    for (int l = tasks_.layers() - 1; l >= 0; --l) tasks_.update(l, hyper, true);
  }
  void submit_publishes() {
    for (int l = tasks_.layers() - 1; l >= 0; --l) tasks_.publish(l, true);
  }

  int warmup_;
  std::optional<optim::AdamWHyper> pending_;   // the last step's update, not submitted yet
  std::optional<optim::AdamWHyper> previous_;  // the one this step submitted, to publish
};

// The speculative layers' CPU AdamW runs as each gradient is reduced, with the unclipped scale,
// from the state into the second set; the other layers update synchronously. The commit comes
// once the norm is known (settle).
class SpeculativeUpdate final : public SynchronousUpdate {
 public:
  explicit SpeculativeUpdate(UpdateTasks& tasks)
      : SynchronousUpdate(tasks), commit_counts_(Tensor::host(DType::f32, 3, "adamw_commit_counts")) {
    auto counts = commit_counts_.view(Access::write);
    std::fill(counts.as<float>().begin(), counts.as<float>().end(), 0.0f);
  }
  void begin_step(const optim::AdamWHyper& hyper, int micro_batches) override {
    settle();  // the previous step's, if the caller has not read its norm yet
    step_ = hyper;
    // The speculative AdamW multiplies the summed gradient by the unclipped scale: it does not
    // wait for the norm.
    tasks_.submit_unclipped_scale(micro_batches);
  }
  void gradient_reduced(int group) override;
  void end_step(const optim::AdamWHyper& hyper, int) override;
  void settle() override;
  void flush() override { settle(); }
  CommitCounts commits() override;
  int last_step_rollbacks() override {
    settle();
    return last_rollbacks_;
  }

 private:
  int speculative_layers() const;

  Tensor commit_counts_;                          // what the commit tasks did, by outcome
  optim::AdamWHyper step_;                        // the step being submitted
  std::optional<optim::AdamWHyper> unresolved_;   // a step whose commit is not decided yet
  CommitCounts decisions_;                        // what the commits decided so far
  int last_rollbacks_ = 0;                        // layers the last step re-ran
};

int SpeculativeUpdate::speculative_layers() const {
  int n = 0;
  for (int l = 0; l < tasks_.layers(); ++l) n += tasks_.layer(l).speculative() ? 1 : 0;
  return n;
}

// The speculative AdamW of one layer: from its state into the second set, with the unclipped
// scale, writing the parameters where the synchronous update does; sent up as if it were the step
// (the common case): a clipped step sends it again. A device AdamW waits for the norm.
void SpeculativeUpdate::gradient_reduced(int l) {
  LayerBuffers& layer = tasks_.layer(l);
  if (!layer.speculative()) return;
  const UpdatePlan& update = layer.plan.update();
  optim::submit_adamw_cpu_speculative(layer.tensor(update.grad.buffer).handle(), layer.state(), layer.next_state(),
                                      layer.tensor(update.target.buffer).handle(), tasks_.unclipped_scale().handle(),
                                      tasks_.dtype(), step_, tasks_.cpu_adam_pool(l), indexed_name("adamw", l));
  tasks_.send_update_to_device(l);
}

// From here on master, m, v name the step's result; the old state is in the second set until the
// next step overwrites it.
void SpeculativeUpdate::end_step(const optim::AdamWHyper& hyper, int) {
  tasks_.update_in_step(hyper);
  for (int l = 0; l < tasks_.layers(); ++l)
    if (tasks_.layer(l).speculative()) tasks_.layer(l).adopt_next_state();
  unresolved_ = hyper;
}

// The commit, once the norm is known (this waits for it): not clipped, the speculative result is
// the step and nothing is submitted; clipped or not finite, every speculative layer gets an
// adamw_commit task that re-runs its AdamW from the old state with the clip scale or restores the
// old state (optimizers/adamw_codelet.hpp), then its publish again. The next step's tasks,
// submitted after this, read what the commits write. A simulation computes no norm: it runs the
// common case, nothing clipped.
void SpeculativeUpdate::settle() {
  if (!unresolved_) return;
  const optim::AdamWHyper hyper = *std::exchange(unresolved_, std::nullopt);
  const int layers = speculative_layers();
  last_rollbacks_ = 0;
  const float scale = sim::kernels_run ? read_f32(tasks_.clip_scale()).at(0) : 0.0f;
  if (!sim::kernels_run || scale == read_f32(tasks_.unclipped_scale()).at(0)) {
    decisions_.adopted += layers;
    return;
  }
  const bool skipped = optim::skips_update(scale);
  (skipped ? decisions_.discarded : decisions_.rerun) += layers;
  if (!skipped) last_rollbacks_ = layers;
  for (int l = 0; l < tasks_.layers(); ++l) {
    LayerBuffers& layer = tasks_.layer(l);
    if (!layer.speculative()) continue;
    const UpdatePlan& update = layer.plan.update();
    // The new set (master, m, v since the swap) and the parameters end as the synchronous AdamW
    // would leave them.
    optim::submit_adamw_commit(tasks_.clip_scale().handle(), tasks_.unclipped_scale().handle(),
                               layer.tensor(update.grad.buffer).handle(), layer.next_state(), layer.state(),
                               layer.tensor(update.target.buffer).handle(), commit_counts_.handle(), tasks_.dtype(),
                               hyper, tasks_.cpu_adam_pool(l), indexed_name("adamw_commit", l));
    tasks_.publish(l, false);
    tasks_.send_update_to_device(l);
  }
}

// The commit tasks decide again from the same two scales: they must agree with the engine.
CommitCounts SpeculativeUpdate::commits() {
  settle();
  const std::vector<float> counts = read_f32(commit_counts_);
  const CommitCounts ran{0, std::int64_t(counts[std::size_t(optim::CommitOutcome::rerun)]),
                         std::int64_t(counts[std::size_t(optim::CommitOutcome::discarded)])};
  if (counts[std::size_t(optim::CommitOutcome::adopted)] != 0 || ran.rerun != decisions_.rerun ||
      ran.discarded != decisions_.discarded)
    throw std::logic_error("speculative update: the commit tasks did not do what the engine decided");
  return decisions_;
}

}  // namespace

std::unique_ptr<UpdatePolicy> make_update_policy(const OffloadOptions& offload, UpdateTasks& tasks) {
  if (offload.speculative_update) return std::make_unique<SpeculativeUpdate>(tasks);
  if (offload.delayed_update_warmup >= 0) return std::make_unique<DelayedUpdate>(tasks, offload.delayed_update_warmup);
  return std::make_unique<SynchronousUpdate>(tasks);
}

}  // namespace starzero
