#include "offload/layer_plan.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace starzero {

ZeroState ZeroState::of(int stage, std::int64_t ranks) {
  // Checked by the run or the planner (check_zero_options); here an assert.
  if (stage < 0 || stage > 3 || ranks < 1)
    throw std::logic_error("ZeroState: unchecked stage " + std::to_string(stage) + " or ranks " + std::to_string(ranks));
  ZeroState z;
  z.stage = stage;
  z.ranks = ranks;
  z.collectives = ranks > 1;
  z.sharded = z.collectives && stage >= 1;
  z.shard_grads = z.collectives && stage >= 2;
  z.shard_params = z.collectives && stage == 3;
  return z;
}

std::string_view layer_buffer_name(LayerBuffer buffer) {
  switch (buffer) {
    case LayerBuffer::param: return "param";
    case LayerBuffer::param_shard: return "param_shard";
    case LayerBuffer::param_next: return "param_next";
    case LayerBuffer::grad: return "grad";
    case LayerBuffer::grad_shard: return "grad_shard";
    case LayerBuffer::grad_partial: return "grad_partial";
    case LayerBuffer::grad_accum: return "grad_accum";
    case LayerBuffer::optimizer_state: return "optimizer_state";
    case LayerBuffer::optimizer_state_next: return "optimizer_state_next";
  }
  return "?";
}

namespace {

// The input is derived by the engine and the planner from checked options (check_engine_options,
// offload/engine_options.hpp, and validate, offload/placement.hpp): a broken rule is an assert.
void validate(const LayerPlanInput& in) {
  const auto unchecked = [](const std::string& what) { return std::logic_error("LayerPlanInput: " + what); };
  if (in.rank < 0 || in.rank >= in.ranks)
    throw unchecked("rank " + std::to_string(in.rank) + " outside 0.." + std::to_string(in.ranks - 1));
  if (in.offload_params != ParamOffload::none && in.stage != 3 && in.ranks > 1)
    throw unchecked("parameter offload outside ZeRO-3 with several ranks");
  if (!(in.optimizer_bytes_per_param >= 0) || !std::isfinite(in.optimizer_bytes_per_param))
    throw unchecked("optimizer bytes per parameter < 0");
  if (in.speculative_update && (in.offload_optimizer == OptimizerOffload::nvme || in.delayed_update))
    throw unchecked("the speculative update with NVMe offload or the delayed update");
}

MemoryPlace place_of(BufferHome home) {
  switch (home) {
    case BufferHome::pinned_host: return MemoryPlace::host;
    case BufferHome::disk: return MemoryPlace::disk;
    default: return MemoryPlace::device;
  }
}

}  // namespace

LayerPlan::LayerPlan(const LayerPlanInput& input) : input_(input), zero_(ZeroState::of(input.stage, input.ranks)) {
  validate(input_);
  // ceil(count / N) without overflow; N·s <= count + N - 1 fits in 64 bits for int64 inputs.
  const auto ranks = std::size_t(zero_.ranks);
  shard_ = input_.params / ranks + (input_.params % ranks != 0 ? 1 : 0);
  plan_buffers();
  plan_operations();
}

PlannedBuffer& LayerPlan::add(LayerBuffer role, Extent extent, DType dtype, BufferHome home, Lifetime lifetime,
                              MemoryCategory category) {
  PlannedBuffer& b = buffers_.emplace_back();
  b.role = role;
  b.extent = extent;
  b.elements = extent == Extent::shard ? shard_ : padded();
  b.dtype = dtype;
  b.bytes_per_element = double(dtype_size(dtype));
  b.home = home;
  b.lifetime = lifetime;
  b.category = category;
  // A transient buffer's held copies depend on who writes and reads it: the caller says.
  if (lifetime == Lifetime::held && home != BufferHome::transient) b.held_at.push_back(place_of(home));
  return b;
}

// Which buffers exist, in the engine's allocation order: param, grad, the optimizer state, then
// the ones only some configurations have.
void LayerPlan::plan_buffers() {
  const ZeroState& z = zero_;
  const DType dtype = input_.dtype;
  const bool offloaded = input_.offload_optimizer != OptimizerOffload::none;
  const bool params_on_host = input_.offload_params == ParamOffload::cpu;
  const bool delayed = input_.delayed_update;
  const Extent optimizer_extent = z.sharded ? Extent::shard : Extent::full;
  // A separate parameter shard: ZeRO-3 always; ZeRO-1/2 when AdamW cannot write the full buffer
  // in place (the CPU task would move the whole layer; the delayed update must not touch what the
  // next forward reads). A separate delayed-update output where no such shard takes it.
  const bool param_shard = z.shard_params || (z.sharded && (offloaded || delayed));
  const bool param_next = delayed && (!z.sharded || z.shard_params);
  // A separate gradient shard: ZeRO-2/3, and ZeRO-1 under offload (only the shard goes down).
  const bool grad_shard = z.shard_grads || (z.sharded && offloaded);
  // One rank with parameters and optimizer on the host: the full gradient lives there too and is on
  // the device only while a backward accumulates into it (GradAccess::streamed).
  const bool streamed_grad = !z.collectives && params_on_host && offloaded;
  const BufferHome next_home = offloaded ? BufferHome::pinned_host : BufferHome::device;

  buffers_.reserve(9);  // every LayerBuffer at most once: the references below stay valid
  using C = MemoryCategory;
  if (z.shard_params) {
    add(LayerBuffer::param, Extent::full, dtype, BufferHome::transient, Lifetime::per_use, C::params);
  } else if (params_on_host) {  // one rank, any stage: the whole model on the host
    add(LayerBuffer::param, Extent::full, dtype, BufferHome::pinned_host, Lifetime::held, C::params);
  } else {
    PlannedBuffer& param = add(LayerBuffer::param, Extent::full, dtype, BufferHome::device, Lifetime::held, C::params);
    // The CPU AdamW writes the full buffer on the host when no separate buffer takes the update.
    if (offloaded && !param_shard && !param_next) param.held_at.push_back(MemoryPlace::host);
  }
  // Under optimizer offload the CPU AdamW reads the full gradient on the host every step: it gets a
  // pinned home there, allocated once. (Transient, StarPU pinned a host copy the first time AdamW
  // read it, and again whenever its allocation cache had dropped it: 0.65 ms per MB on the
  // simulated H200, 390 ms per layer of a 13B model, which stalled step 2.)
  const BufferHome grad_home = offloaded && !grad_shard                 ? BufferHome::pinned_host
                               : input_.split_gradient && !z.shard_grads ? BufferHome::device
                                                                         : BufferHome::transient;
  PlannedBuffer& grad = add(LayerBuffer::grad, Extent::full, dtype, grad_home,
                            z.shard_grads ? Lifetime::per_use : Lifetime::held, C::grads);
  // (Homed in main memory for split pieces, the device copy is the home itself: counted once.
  // Offloaded without a shard, its pinned home is the host copy the CPU AdamW reads. Streamed, the
  // device copy is in flight only: the ledger follows it as the graph runs.)
  if (!z.shard_grads && !streamed_grad && grad_home != BufferHome::device)
    grad.held_at.push_back(MemoryPlace::device);

  const BufferHome state_home = input_.offload_optimizer == OptimizerOffload::nvme ? BufferHome::disk
                                : offloaded                                        ? BufferHome::pinned_host
                                                                                   : BufferHome::device;
  add(LayerBuffer::optimizer_state, optimizer_extent, DType::f32, state_home, Lifetime::held, C::optimizer)
      .bytes_per_element = input_.optimizer_bytes_per_param;
  // The speculative update's second set: a step reads one set and writes the other (the CPU
  // AdamW only; a device AdamW waits for the norm as before).
  if (input_.speculative_update && offloaded)
    add(LayerBuffer::optimizer_state_next, optimizer_extent, DType::f32, state_home, Lifetime::held, C::optimizer)
        .bytes_per_element = input_.optimizer_bytes_per_param;

  if (param_shard) {
    PlannedBuffer& shard =
        add(LayerBuffer::param_shard, Extent::shard, dtype,
            offloaded || params_on_host ? BufferHome::pinned_host : BufferHome::device, Lifetime::held, C::params);
    // ZeRO-3 with the optimizer offloaded but not the parameters: the device keeps a copy of the
    // shard AdamW wrote on the host (the all-gathers read it there).
    if (z.shard_params && offloaded && !params_on_host) shard.held_at.push_back(MemoryPlace::device);
  }
  if (param_next) add(LayerBuffer::param_next, optimizer_extent, dtype, next_home, Lifetime::held, C::params);
  if (grad_shard) {
    PlannedBuffer& shard =
        add(LayerBuffer::grad_shard, Extent::shard, dtype, BufferHome::transient, Lifetime::held, C::grads);
    if (z.shard_grads) shard.held_at.push_back(MemoryPlace::device);
    if (offloaded) shard.held_at.push_back(MemoryPlace::host);  // comes down for the CPU AdamW
  }
  if (z.shard_grads)
    add(LayerBuffer::grad_partial, Extent::shard, dtype, BufferHome::transient, Lifetime::per_use, C::grads);
  if (input_.fp32_grad_accum)
    add(LayerBuffer::grad_accum, z.shard_grads ? Extent::shard : Extent::full, DType::f32, BufferHome::device,
        Lifetime::held, C::grads);
}

BufferSlice LayerPlan::whole(LayerBuffer role) const { return {role, 0, buffer(role).elements}; }

void LayerPlan::plan_operations() {
  const ZeroState& z = zero_;
  const bool offloaded = input_.offload_optimizer != OptimizerOffload::none;

  param_access_ = z.shard_params                               ? ParamAccess::gathered_per_use
                  : input_.offload_params == ParamOffload::cpu ? ParamAccess::fetched_per_use
                                                               : ParamAccess::resident;
  grad_access_ = z.shard_grads                                                  ? GradAccess::per_use
                 : param_access_ == ParamAccess::fetched_per_use && offloaded ? GradAccess::streamed
                                                                               : GradAccess::resident;

  if (!z.collectives)
    grad_reduction_ = GradReduction::none;
  else if (z.stage == 0)
    grad_reduction_ = GradReduction::all_reduce;
  else if (has(LayerBuffer::grad_shard))
    grad_reduction_ = GradReduction::reduce_scatter_into_shard;
  else
    grad_reduction_ = GradReduction::reduce_scatter_in_place;

  fp32_accumulation_ = !input_.fp32_grad_accum ? Fp32Accumulation::none
                       : z.shard_grads         ? Fp32Accumulation::shard_after_reduction
                                               : Fp32Accumulation::full_before_reduction;

  // The update reads this rank's reduced gradient: its shard, its shard-sized slice of the full buffer
  // (ZeRO-1 in place), or the whole (replicated) gradient; it writes a separate buffer where one
  // exists, else the full parameters in place.
  update_.kernel = offloaded ? UpdateKernel::cpu : UpdateKernel::device;
  update_.grad = has(LayerBuffer::grad_shard) ? whole(LayerBuffer::grad_shard)
                 : z.sharded                  ? BufferSlice{LayerBuffer::grad, own_offset(), shard_}
                                              : whole(LayerBuffer::grad);
  update_.target = has(LayerBuffer::param_shard) ? whole(LayerBuffer::param_shard)
                   : z.sharded                   ? BufferSlice{LayerBuffer::param, own_offset(), shard_}
                                                 : whole(LayerBuffer::param);
  update_.delayed_target = has(LayerBuffer::param_next) ? whole(LayerBuffer::param_next) : update_.target;

  if (z.sharded && !z.shard_params) {
    publish_.how = has(LayerBuffer::param_shard) ? Publish::all_gather_from_shard : Publish::all_gather_in_place;
    publish_.drop_device_shard = has(LayerBuffer::param_shard) && offloaded;
  }
  delayed_publish_ = publish_;
  if (has(LayerBuffer::param_next)) {
    delayed_publish_ = {};
    delayed_publish_.how = Publish::copy_next;
    delayed_publish_.destination = has(LayerBuffer::param_shard) ? LayerBuffer::param_shard : LayerBuffer::param;
  }
}

bool LayerPlan::has(LayerBuffer role) const {
  return std::any_of(buffers_.begin(), buffers_.end(), [role](const PlannedBuffer& b) { return b.role == role; });
}

const PlannedBuffer& LayerPlan::buffer(LayerBuffer role) const {
  for (const PlannedBuffer& b : buffers_)
    if (b.role == role) return b;
  throw std::logic_error("layer plan: no " + std::string(layer_buffer_name(role)) + " buffer");
}

std::int64_t LayerPlan::bytes(const PlannedBuffer& buffer) const {
  const double per_element = buffer.bytes_per_element;
  if (per_element == std::floor(per_element)) return std::int64_t(buffer.elements) * std::int64_t(per_element);
  return std::int64_t(std::llround(double(buffer.elements) * per_element));
}

double LayerPlan::unpadded_bytes(const PlannedBuffer& buffer) const {
  const double divisor = buffer.extent == Extent::shard ? double(zero_.ranks) : 1.0;
  return buffer.bytes_per_element * double(input_.params) / divisor;
}

std::vector<LayerPlan::HeldCopy> LayerPlan::held_copies() const {
  std::vector<HeldCopy> copies;
  for (const PlannedBuffer& b : buffers_)
    if (b.lifetime == Lifetime::held)
      for (MemoryPlace place : b.held_at) copies.push_back({&b, place});
  return copies;
}

}  // namespace starzero
