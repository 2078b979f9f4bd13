#include "offload/step_walk.hpp"

#include <algorithm>
#include <stdexcept>

#include "tasks/collectives.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/marks.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

StepWalk::StepWalk(Model& model, std::vector<LayerBuffers>& layers, const ZeroOptions& zero,
                   tasks::CollectiveOrder* order, MemoryLedger& ledger)
    : model_(model),
      layers_(layers),
      zero_(zero),
      order_(order),
      ledger_(ledger),
      handles_(layers),
      unsharded_(layers.size(), 0) {
  const int L = model_.layers();
  // A streamed gradient comes in only once the one written home grad_window earlier is gone, so
  // every group a layer touches must fit the window at once.
  if (layers_.front().plan.grad_access() == GradAccess::streamed)
    for (int l = 0; l < L; ++l)
      if (uses(l).size() > std::size_t(zero_.grad_window))
        throw std::invalid_argument("gradient window " + std::to_string(zero_.grad_window) + ": layer " +
                                    std::to_string(l) + " touches " + std::to_string(uses(l).size()) +
                                    " parameter groups, which stream in together; use --grad-window " +
                                    std::to_string(uses(l).size()) + " or more");
  // Which backward layers touch each group's gradient: its own and those sharing it.
  first_toucher_.resize(std::size_t(L));
  last_toucher_.resize(std::size_t(L));
  for (int g = 0; g < L; ++g) first_toucher_[std::size_t(g)] = last_toucher_[std::size_t(g)] = g;
  for (int l = 0; l < L; ++l)
    for (int g : model_.shared_groups(l)) {
      first_toucher_.at(std::size_t(g)) = std::max(first_toucher_[std::size_t(g)], l);
      last_toucher_.at(std::size_t(g)) = std::min(last_toucher_[std::size_t(g)], l);
    }
  if (layers_.front().plan.param_access() != ParamAccess::resident)
    for (int slot = 0; slot <= zero_.prefetch_depth; ++slot)
      window_slots_.push_back(Tensor::host(DType::f32, 1, indexed_name("prefetch_window", slot)));
}

std::vector<int> StepWalk::uses(int layer) const {
  std::vector<int> groups{layer};
  for (int g : model_.shared_groups(layer))
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  return groups;
}

void StepWalk::forward() {
  for (int l = 0; l < model_.layers(); ++l) {
    unshard(l, "fwd");
    model_.submit_forward(l, handles_);
    reshard(l, "fwd");
  }
}

void StepWalk::backward(bool first_micro_batch, bool last_micro_batch, const GradientReduced& reduced) {
  recently_reduced_.clear();
  for (int l = model_.layers() - 1; l >= 0; --l) {
    for (int g = 0; g < model_.layers(); ++g)
      if (first_toucher_[std::size_t(g)] == l) allocate_gradient(g, first_micro_batch);
    stream_gradients_in(l, first_micro_batch);
    unshard(l, "bwd");
    model_.submit_backward(l, handles_);
    reshard(l, "bwd");
    for (int g = 0; g < model_.layers(); ++g)
      if (last_toucher_[std::size_t(g)] == l) {
        reduce_gradient(g, first_micro_batch, last_micro_batch);
        if (last_micro_batch && reduced) reduced(g);
      }
    stream_gradients_out(l);
  }
}

// A mark on the current window slot and the full parameters of the groups a layer uses; `delta`
// (+1 when unsharded, -1 when resharded) updates the count of layers in flight and their bytes
// as the mark is reached.
void StepWalk::submit_window_mark(int layer, int delta, const std::string& name) {
  std::vector<starpu_data_handle_t> handles{window_slots_[unshards_ % window_slots_.size()].handle()};
  std::int64_t bytes = 0;
  for (int g : uses(layer)) {
    handles.push_back(layers_[std::size_t(g)].param.handle());
    bytes += std::int64_t(layers_[std::size_t(g)].param.bytes());
  }
  // Items count layers in flight (a layer may need several groups: the tied classifier).
  tasks::submit_mark(
      handles,
      [this, bytes, delta] {
        ledger_.add(MemoryCategory::temporaries, delta * bytes);
        if (delta > 0)
          ledger_.add_item(MemoryCategory::temporaries);
        else
          ledger_.remove_item(MemoryCategory::temporaries);
      },
      name);
}

// Once the window slot is free (the reshard of the unshard W+1 before this one): ZeRO-3
// all-gathers the full parameters a layer needs; one rank with the parameters on the host fetches
// them to the device, a task that becomes ready W+1 layers ahead and takes no worker, so the copy
// runs beside compute (left to the layer's own tasks, StarPU would copy only once they are ready,
// with the GPU waiting; a fetch task on the CUDA worker would hold the compute queued behind it).
void StepWalk::unshard(int layer, const char* pass) {
  const ParamAccess access = layers_[std::size_t(layer)].plan.param_access();
  if (access == ParamAccess::resident || unsharded_[std::size_t(layer)]) return;
  unsharded_[std::size_t(layer)] = 1;
  submit_window_mark(layer, +1, indexed_name(std::string("window_") + pass, layer));
  if (access == ParamAccess::fetched_per_use) {
    std::vector<starpu_data_handle_t> params;
    for (int g : uses(layer)) params.push_back(layers_[std::size_t(g)].param.handle());
    tasks::submit_move_to_device(params, indexed_name(std::string("param_fetch_") + pass, layer));
    return;
  }
  for (int g : uses(layer)) {
    LayerBuffers& l = layers_[std::size_t(g)];
    tasks::submit_all_gather(*order_, l.param_shard->handle(), l.param.handle(), l.count(), model_.dtype(),
                             indexed_name(std::string("all_gather_") + pass, g));
  }
}

// The full parameters a layer used are freed (ZeRO-3), or their device copy may go (one rank with
// the parameters on the host: the host copy stays valid).
void StepWalk::reshard(int layer, const char* pass) {
  const ParamAccess access = layers_[std::size_t(layer)].plan.param_access();
  if (access == ParamAccess::resident || !unsharded_[std::size_t(layer)]) return;
  unsharded_[std::size_t(layer)] = 0;
  submit_window_mark(layer, -1, indexed_name(std::string("release_") + pass, layer));
  ++unshards_;
  for (int g : uses(layer))
    if (access == ParamAccess::fetched_per_use)
      starpu_data_wont_use(layers_[std::size_t(g)].param.handle());
    else
      layers_[std::size_t(g)].param.invalidate_submit();
}

// A full gradient held for good is zeroed for the step (and for every micro-batch when the fp32
// buffer accumulates); one allocated per use (ZeRO-2/3) comes to life just before its group's
// first backward, and only once the full gradient freed grad_window reductions ago is gone. A
// streamed one is zeroed on the device by stream_gradients_in.
void StepWalk::allocate_gradient(int group, bool first_micro_batch) {
  LayerBuffers& layer = layers_[std::size_t(group)];
  if (layer.plan.grad_access() == GradAccess::streamed) return;
  const bool per_use = layer.plan.buffer(LayerBuffer::grad).lifetime == Lifetime::per_use;
  if (!per_use && !first_micro_batch && !layer.grad_accum) return;
  if (per_use) {
    std::vector<starpu_data_handle_t> handles{layer.grad.handle()};
    const std::size_t window = std::size_t(zero_.grad_window);
    if (recently_reduced_.size() >= window) handles.push_back(recently_reduced_[recently_reduced_.size() - window]);
    const auto bytes = std::int64_t(layer.grad.bytes());
    tasks::submit_mark(
        handles, [this, bytes] { ledger_.add(MemoryCategory::grads, bytes); }, indexed_name("grad_alloc", group));
  }
  tasks::submit_zero(layer.grad.handle(), indexed_name("zero_grad", group));
}

// Streamed gradients (one rank, parameters and optimizer on the host; GradAccess::streamed): every
// group a layer's backward touches comes to the device before it, once the gradient written home
// grad_window gradients earlier (counted across micro-batches and steps) is gone: zeroed there
// where the step (with the fp32 buffer: the micro-batch) first touches it, else fetched back from
// its host home, where the earlier micro-batches' or layers' sum is. The marks only order (they
// move and change no data) and keep the ledger's count of gradients in flight.
void StepWalk::stream_gradients_in(int layer, bool first_micro_batch) {
  for (int g : uses(layer)) {
    LayerBuffers& group = layers_[std::size_t(g)];
    if (group.plan.grad_access() != GradAccess::streamed) continue;
    std::vector<starpu_data_handle_t> handles{group.grad.handle()};
    if (streamed_out_.size() == std::size_t(zero_.grad_window)) handles.push_back(streamed_out_.front());
    const auto bytes = std::int64_t(group.grad.bytes());
    tasks::submit_mark(
        handles, [this, bytes] { ledger_.add(MemoryCategory::grads, bytes); }, indexed_name("grad_alloc", g));
    if (first_toucher_[std::size_t(g)] == layer && (first_micro_batch || group.grad_accum))
      tasks::submit_zero(group.grad.handle(), indexed_name("zero_grad", g));
    else
      tasks::submit_move_to_device({group.grad.handle()}, indexed_name("grad_fetch", g));
  }
}

// After the layer's backward (and the fp32 accumulation): StarPU writes each streamed gradient home
// (where the CPU AdamW, or the next toucher, reads it) and its device copy is the first to go.
void StepWalk::stream_gradients_out(int layer) {
  for (int g : uses(layer)) {
    LayerBuffers& group = layers_[std::size_t(g)];
    if (group.plan.grad_access() != GradAccess::streamed) continue;
    const auto bytes = std::int64_t(group.grad.bytes());
    tasks::submit_mark(
        {group.grad.handle()}, [this, bytes] { ledger_.remove(MemoryCategory::grads, bytes); },
        indexed_name("grad_free", g));
    starpu_data_wont_use(group.grad.handle());
    // The window runs on across micro-batches and steps (the next one's first gradients would
    // otherwise come in beside this one's last).
    streamed_out_.push_back(group.grad.handle());
    if (streamed_out_.size() > std::size_t(zero_.grad_window)) streamed_out_.pop_front();
  }
}

void StepWalk::reduce_gradient(int group, bool first_micro_batch, bool last_micro_batch) {
  LayerBuffers& layer = layers_[std::size_t(group)];
  const LayerPlan& plan = layer.plan;
  const DType dtype = model_.dtype();
  if (plan.fp32_accumulation() == Fp32Accumulation::full_before_reduction) {
    // The micro-batch's full gradient is added in fp32; the sum is rounded once and reduced
    // once, after the last micro-batch.
    if (first_micro_batch) tasks::submit_zero(layer.grad_accum->handle(), indexed_name("zero_grad_accum", group));
    tasks::submit_accumulate_widen(layer.grad.handle(), layer.grad_accum->handle(),
                                   indexed_name("accumulate_grad_fp32", group));
    if (!last_micro_batch) return;
    tasks::submit_narrow(layer.grad_accum->handle(), layer.grad.handle(), indexed_name("round_grad", group));
  }
  if (plan.reduce_every_micro_batch()) {
    reduce_into_shard_each_micro_batch(group, first_micro_batch, last_micro_batch);
    return;
  }
  if (!last_micro_batch) return;  // reduced once, accumulated
  const std::string name = indexed_name(plan.grad_reduction() == GradReduction::all_reduce ? "all_reduce_grad"
                                                                                           : "reduce_scatter_grad",
                                        group);
  switch (plan.grad_reduction()) {
    case GradReduction::none: return;
    case GradReduction::all_reduce: tasks::submit_all_reduce(*order_, layer.grad.handle(), dtype, name); return;
    case GradReduction::reduce_scatter_in_place:
      tasks::submit_reduce_scatter_in_place(*order_, layer.grad.handle(), layer.count(), dtype, name);
      return;
    case GradReduction::reduce_scatter_into_shard:  // ZeRO-1 under offload: only the shard goes down
      tasks::submit_reduce_scatter(*order_, layer.grad.handle(), layer.grad_shard->handle(), layer.count(), dtype,
                                   name);
      return;
  }
}

// ZeRO-2/3: each micro-batch's full gradient is reduce-scattered into the shard and freed. A
// later micro-batch's shard goes to grad_partial and is added to the shard in the model's dtype;
// with the fp32 buffer every shard is added there and rounded once, at the end.
void StepWalk::reduce_into_shard_each_micro_batch(int group, bool first_micro_batch, bool last_micro_batch) {
  LayerBuffers& layer = layers_[std::size_t(group)];
  const DType dtype = model_.dtype();
  const bool fp32_accumulation = layer.plan.fp32_accumulation() == Fp32Accumulation::shard_after_reduction;
  const bool into_shard = first_micro_batch || fp32_accumulation;
  Tensor& target = into_shard ? *layer.grad_shard : *layer.grad_partial;
  tasks::submit_reduce_scatter(*order_, layer.grad.handle(), target.handle(), layer.count(), dtype,
                               indexed_name("reduce_scatter_grad", group));
  if (fp32_accumulation) {
    if (first_micro_batch) tasks::submit_zero(layer.grad_accum->handle(), indexed_name("zero_grad_accum", group));
    tasks::submit_accumulate_widen(layer.grad_shard->handle(), layer.grad_accum->handle(),
                                   indexed_name("accumulate_grad_fp32", group));
    if (last_micro_batch)
      tasks::submit_narrow(layer.grad_accum->handle(), layer.grad_shard->handle(), indexed_name("round_grad", group));
  } else if (!into_shard) {
    tasks::submit_accumulate(layer.grad_partial->handle(), layer.grad_shard->handle(), dtype,
                             indexed_name("accumulate_grad_shard", group));
    layer.grad_partial->invalidate_submit();
  }
  const auto bytes = std::int64_t(layer.grad.bytes());
  tasks::submit_mark(
      {layer.grad.handle()}, [this, bytes] { ledger_.remove(MemoryCategory::grads, bytes); },
      indexed_name("grad_free", group));
  layer.grad.invalidate_submit();
  recently_reduced_.push_back(layer.grad.handle());
}

}  // namespace starzero
