#include "offload/engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <tbb/parallel_for.h>

#include "optimizers/adamw_codelet.hpp"
#include "runtime/disk.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/session.hpp"
#include "runtime/sim.hpp"
#include "tasks/collectives.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/faults.hpp"
#include "tasks/marks.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

namespace {

std::string at(std::string_view what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

}  // namespace

void check_engine_options(const EngineOptions& options, int ranks) {
  if (options.zero.stage < 0 || options.zero.stage > 3)
    throw std::invalid_argument("--stage " + std::to_string(options.zero.stage) + " is not a ZeRO stage (0..3)");
  if (options.zero.prefetch_depth < 0) throw std::invalid_argument("prefetch depth must be >= 0");
  if (options.zero.grad_window < 1) throw std::invalid_argument("gradient window must be >= 1");
  if (options.adam_threads < 1) throw std::invalid_argument("CPU Adam threads must be >= 1");
  validate(options.offload);
  // With one rank nothing is sharded and every stage is the same: the parameters may live on the
  // host at any stage. With several, only ZeRO-3 shards them.
  if (options.offload.params != ParamOffload::none && options.zero.stage != 3 && ranks > 1)
    throw std::invalid_argument(
        "--offload-params cpu needs --stage 3 with several ranks (stages 0-2 keep full parameters on the device)");
  if (options.offload.speculative_update && options.grad_clip <= 0)
    throw std::invalid_argument(
        "--speculative-update needs clipping (--grad-clip > 0): without it every AdamW already starts as soon as its "
        "own gradient is reduced");
}

// One layer's buffers, as its plan says (offload/layer_plan.hpp): param and grad always exist,
// the optional ones where the plan has them.
struct Engine::Layer {
  LayerPlan plan;
  Tensor param, grad;
  std::optional<Tensor> param_shard, grad_shard;
  std::optional<Tensor> grad_partial;  // ZeRO-2/3 with accumulation: a later micro-batch's shard
  std::optional<Tensor> param_next;    // delayed update: AdamW's output until it is published
  std::optional<Tensor> grad_accum;    // fp32 gradient accumulation: full, or the shard at 2-3
  Tensor master, m, v, sum_of_squares;
  // The speculative update's second set of optimizer state. After each step's tasks are
  // submitted the sets are swapped: master, m, v name the latest state.
  std::optional<Tensor> master_next, m_next, v_next;

  Layer(Engine& engine, int layer)
      : plan(engine.layer_plan_input(layer)),
        param(engine.allocate(plan.buffer(LayerBuffer::param), at("param", layer))),
        grad(engine.allocate(plan.buffer(LayerBuffer::grad), at("grad", layer))),
        master(engine.allocate(plan.buffer(LayerBuffer::optimizer_state), at("master", layer))),
        m(engine.allocate(plan.buffer(LayerBuffer::optimizer_state), at("adam_m", layer))),
        v(engine.allocate(plan.buffer(LayerBuffer::optimizer_state), at("adam_v", layer))),
        sum_of_squares(Tensor::transient(DType::f32, 1, at("grad_sumsq", layer))) {
    for (LayerBuffer role : {LayerBuffer::param_shard, LayerBuffer::param_next, LayerBuffer::grad_shard,
                             LayerBuffer::grad_partial, LayerBuffer::grad_accum})
      if (plan.has(role))
        optional_tensor(role).emplace(engine.allocate(plan.buffer(role), at(layer_buffer_name(role), layer)));
    if (plan.has(LayerBuffer::optimizer_state_next)) {
      const PlannedBuffer& next = plan.buffer(LayerBuffer::optimizer_state_next);
      master_next.emplace(engine.allocate(next, at("master_next", layer)));
      m_next.emplace(engine.allocate(next, at("adam_m_next", layer)));
      v_next.emplace(engine.allocate(next, at("adam_v_next", layer)));
    }
  }

  bool speculative() const { return master_next.has_value(); }
  optim::AdamWStateHandles state() const { return {master.handle(), m.handle(), v.handle()}; }
  optim::AdamWStateHandles next_state() const { return {master_next->handle(), m_next->handle(), v_next->handle()}; }
  // The step's result is in the second set now: it becomes the state.
  void adopt_next_state() {
    std::swap(master, *master_next);
    std::swap(m, *m_next);
    std::swap(v, *v_next);
  }

  std::size_t count() const { return plan.count(); }
  std::size_t shard() const { return plan.shard(); }
  std::size_t padded() const { return plan.padded(); }
  std::size_t own_offset() const { return plan.own_offset(); }

  // The tensor of a planned buffer (not the optimizer state: master, m and v are three).
  Tensor& tensor(LayerBuffer role) {
    if (role == LayerBuffer::param) return param;
    if (role == LayerBuffer::grad) return grad;
    std::optional<Tensor>& tensor = optional_tensor(role);
    if (!tensor) throw std::logic_error("layer has no " + std::string(layer_buffer_name(role)));
    return *tensor;
  }

 private:
  std::optional<Tensor>& optional_tensor(LayerBuffer role) {
    switch (role) {
      case LayerBuffer::param_shard: return param_shard;
      case LayerBuffer::param_next: return param_next;
      case LayerBuffer::grad_shard: return grad_shard;
      case LayerBuffer::grad_partial: return grad_partial;
      case LayerBuffer::grad_accum: return grad_accum;
      default: throw std::logic_error("not an optional layer buffer: " + std::string(layer_buffer_name(role)));
    }
  }
};

class Engine::Handles final : public GroupHandles {
 public:
  explicit Handles(const std::vector<Engine::Layer>& layers) : layers_(layers) {}
  starpu_data_handle_t param(int group) const override { return layers_.at(std::size_t(group)).param.handle(); }
  starpu_data_handle_t grad(int group) const override { return layers_.at(std::size_t(group)).grad.handle(); }
  starpu_data_handle_t grad_piece(int group, std::size_t piece) const override {
    const Tensor& grad = layers_.at(std::size_t(group)).grad;
    return grad.pieces() > 1 ? grad.piece(piece) : nullptr;
  }

 private:
  const std::vector<Engine::Layer>& layers_;
};

namespace {

std::vector<float> read_f32(const Tensor& tensor) {
  auto view = tensor.view(Access::read);
  return {view.as<float>().begin(), view.as<float>().end()};
}

// Writes the whole tensor from full[offset ...] (a shard of a layer, or all of it), zero past the
// end of full (the padding), straight into the tensor's buffer (fp32, or rounded to bf16).
void write_part(Tensor& tensor, std::span<const float> full, std::size_t offset) {
  const std::size_t n = tensor.count();
  const std::size_t available = offset < full.size() ? std::min(n, full.size() - offset) : 0;
  const std::span<const float> values = full.subspan(offset, available);
  auto view = tensor.view(Access::write);
  if (tensor.dtype() == DType::f32) {
    const std::span<float> out = view.as<float>();
    std::copy(values.begin(), values.end(), out.begin());
    std::fill(out.begin() + std::ptrdiff_t(available), out.end(), 0.0f);
  } else {
    const std::span<bf16> out = view.as<bf16>();
    for (std::size_t i = 0; i < n; ++i) out[i] = from_float<bf16>(i < available ? values[i] : 0.0f);
  }
}

// What no engine can do with these options and this model, before anything is allocated.
void check_options(const Model& model, const EngineOptions& options, int ranks) {
  check_engine_options(options, ranks);
  if (options.offload.optimizer == OptimizerOffload::nvme && !options.nvme)
    throw std::invalid_argument("optimizer offload to nvme needs a disk node");
  if (options.offload.optimizer_fraction.automatic || options.offload.speculative_fraction.automatic)
    throw std::invalid_argument("the engine needs resolved offload fractions, not auto");
  for (const auto& [step, layer] : options.nan_gradients)
    if (layer < 0 || layer >= model.layers() || model.dtype() != DType::f32)
      throw std::invalid_argument("NaN gradients (testing) need an fp32 model and a layer in 0.." +
                                  std::to_string(model.layers() - 1) + ", not layer " + std::to_string(layer));
  if (options.fp32_grad_accum && model.dtype() != DType::bf16)
    throw std::invalid_argument(
        "the fp32 gradient-accumulation buffer is for bf16 models (fp32 gradients already are)");
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      clip_scale_(Tensor::host(DType::f32, 1, "clip_scale")),
      grad_norm_(Tensor::host(DType::f32, 1, "grad_norm")),
      grad_sumsq_total_(Tensor::host(DType::f32, 1, "grad_sumsq_total")),
      unclipped_scale_(Tensor::host(DType::f32, 1, "unclipped_scale")),
      unclipped_norm_(Tensor::host(DType::f32, 1, "unclipped_norm")),
      commit_counts_(Tensor::host(DType::f32, 3, "adamw_commit_counts")) {
  if (options.comm) {
    ranks_ = options.comm->size();
    rank_ = options.comm->rank();
  }
  check_options(model, options, ranks_);
  if (options.host_comm && (options.host_comm->size() != ranks_ || options.host_comm->rank() != rank_))
    throw std::invalid_argument("the host communicator must have the same ranks as the engine's");
  zero_ = ZeroState::of(options.zero.stage, ranks_);
  split_optimizer(model);
  if (zero_.collectives) order_ = std::make_unique<tasks::CollectiveOrder>(*options.comm);
  if (optimizer_offloaded()) cpu_adam_token_.emplace(Tensor::host(DType::f32, 1, "cpu_adam_pool"));
  const int L = model.layers();
  layers_.reserve(std::size_t(L));
  for (int l = 0; l < L; ++l) layers_.emplace_back(*this, l);
  split_gradients();
  handles_ = std::make_unique<Handles>(layers_);
  check_grad_window();
  find_gradient_touchers();
  initialise_state();
  add_held_bytes_to_ledger();
  if (zero_.shard_params || layers_.front().plan.param_access() == ParamAccess::fetched_per_use)
    for (int slot = 0; slot <= options.zero.prefetch_depth; ++slot)
      window_slots_.push_back(Tensor::host(DType::f32, 1, at("prefetch_window", slot)));
}

// Whose optimizer state is offloaded and whose CPU AdamW is speculative (optimizer_split.hpp).
void Engine::split_optimizer(const Model& model) {
  std::vector<std::int64_t> layer_params;
  for (int l = 0; l < model.layers(); ++l) layer_params.push_back(std::int64_t(model.layer_params(l)));
  optimizer_split_ = split_optimizer_state(
      layer_params, options_.offload.optimizer_offloaded() ? options_.offload.optimizer_fraction.value : 0.0);
  speculative_split_ = split_optimizer_state(
      layer_params, options_.offload.speculative_update
                        ? speculative_share(optimizer_split_, options_.offload.speculative_fraction.value)
                        : 0.0);
}

// A streamed gradient comes in only once the one written home grad_window earlier is gone, so
// every group a layer touches must fit the window at once.
void Engine::check_grad_window() const {
  if (layers_.front().plan.grad_access() == GradAccess::streamed)
    for (int l = 0; l < model_.layers(); ++l)
      if (uses(l).size() > std::size_t(options_.zero.grad_window))
        throw std::invalid_argument("gradient window " + std::to_string(options_.zero.grad_window) + ": layer " +
                                    std::to_string(l) + " touches " + std::to_string(uses(l).size()) +
                                    " parameter groups, which stream in together; use --grad-window " +
                                    std::to_string(uses(l).size()) + " or more");
}

// Which backward layers touch each group's gradient: its own and those sharing it.
void Engine::find_gradient_touchers() {
  const int L = model_.layers();
  first_toucher_.resize(std::size_t(L));
  last_toucher_.resize(std::size_t(L));
  for (int g = 0; g < L; ++g) first_toucher_[std::size_t(g)] = last_toucher_[std::size_t(g)] = g;
  for (int l = 0; l < L; ++l)
    for (int g : model_.shared_groups(l)) {
      first_toucher_.at(std::size_t(g)) = std::max(first_toucher_[std::size_t(g)], l);
      last_toucher_.at(std::size_t(g)) = std::min(last_toucher_[std::size_t(g)], l);
    }
}

// The state a run starts from: parameters drawn, Adam's moments zeroed, the commit counts, the
// device-side master sent up.
void Engine::initialise_state() {
  // A simulation runs no kernel and reads no value: drawing an 8B model's parameters on the host
  // would take minutes for nothing (the buffers are registered all the same).
  if (options_.initialise_params && sim::kernels_run) initialise_params();
  // Adam's moments start at zero where they live. Offloaded to pinned host memory they already are
  // (PinnedHostBuffer zero-fills at allocation); on NVMe a CPU worker zeroes them; else the device.
  // (Zeroed on the GPU, offloaded moments were allocated there and written back: 103 GB for a 13B
  // model, which filled a simulated H200 to StarPU's limit and made it evict all run long; zeroed
  // by tasks on the CPU workers, they held step 1's AdamW back by 5 s.)
  for (Layer& layer : layers_) {
    const BufferHome home = layer.plan.buffer(LayerBuffer::optimizer_state).home;
    if (home == BufferHome::pinned_host) continue;
    const auto zero = home == BufferHome::disk ? tasks::submit_zero_on_host : tasks::submit_zero;
    zero(layer.m.handle(), "zero_adam_m");
    zero(layer.v.handle(), "zero_adam_v");
  }
  if (options_.offload.speculative_update) {
    auto counts = commit_counts_.view(Access::write);
    std::fill(counts.as<float>().begin(), counts.as<float>().end(), 0.0f);
  }
  // The fp32 master of a GPU-side optimizer starts in its home in main memory: send it to the GPU
  // now, behind step 1. (Fetched by the first AdamW instead, it crossed PCIe during step 2's
  // forward: 26.8 GB for a 7B model, 0.5 s of step 2.)
  if (starpu_cuda_worker_get_count() > 0) {
    const unsigned gpu = starpu_worker_get_memory_node(starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0));
    for (Layer& layer : layers_)
      if (layer.plan.buffer(LayerBuffer::optimizer_state).home == BufferHome::device)
        starpu_data_prefetch_on_node(layer.master.handle(), gpu, 1);
  }
}

// A gradient held in main memory for the whole run is split as the model asks; the padding past
// the layer's parameters (sharding) is one more piece. Elsewhere (a transient or offloaded
// gradient) it stays whole: StarPU 1.3 gathers pieces on the home node, which those lack or which
// is not main memory.
void Engine::split_gradients() {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    // A home in main memory is what the plan gives a gradient it lets the model split
    // (LayerPlanInput::split_gradient): held for the run, no GPU.
    if (layer.plan.buffer(LayerBuffer::grad).home != BufferHome::device) continue;
    std::vector<std::size_t> pieces = model_.gradient_pieces(int(l));
    const std::size_t sum = std::accumulate(pieces.begin(), pieces.end(), std::size_t(0));
    if (sum != model_.layer_params(int(l)) || sum > layer.grad.count())
      throw std::logic_error("gradient pieces of layer " + std::to_string(l) + " do not add up to its parameters");
    if (sum < layer.grad.count()) pieces.push_back(layer.grad.count() - sum);
    layer.grad.split(pieces);
  }
}

LayerPlanInput Engine::layer_plan_input(int layer) const {
  LayerPlanInput input;
  input.stage = options_.zero.stage;
  input.ranks = ranks_;
  input.rank = rank_;
  // Per layer: the last layers' state offloaded, the first ones' on the device (optimizer_split.hpp).
  input.offload_optimizer = optimizer_split_.offloaded(layer) ? options_.offload.optimizer : OptimizerOffload::none;
  input.offload_params = options_.offload.params;
  input.delayed_update = options_.offload.delayed_update_warmup >= 0;
  input.speculative_update = options_.offload.speculative_update && speculative_split_.offloaded(layer);
  input.fp32_grad_accum = options_.fp32_grad_accum;
  input.dtype = model_.dtype();
  input.params = model_.layer_params(layer);
  input.optimizer_bytes_per_param = 3 * double(dtype_size(DType::f32));  // AdamW: master, m, v
  input.split_gradient = !model_.gradient_pieces(layer).empty() && starpu_cuda_worker_get_count() == 0;
  return input;
}

const LayerPlan& Engine::layer_plan(int layer) const { return layers_.at(std::size_t(layer)).plan; }

// The bytes this rank holds for good, as the plans place them (the planner sums the same
// copies); transient ones are added and removed as the graph runs.
void Engine::add_held_bytes_to_ledger() {
  for (const Layer& layer : layers_)
    for (const LayerPlan::HeldCopy& copy : layer.plan.held_copies())
      ledger_.add(copy.buffer->category, layer.plan.bytes(*copy.buffer), copy.place);
}

Engine::~Engine() { starpu_task_wait_for_all(); }

std::vector<int> Engine::uses(int layer) const {
  std::vector<int> groups{layer};
  for (int g : model_.shared_groups(layer))
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  return groups;
}

// ZeRO-3: a mark on the current window slot and the full parameters of the groups a layer uses;
// `delta` (+1 when gathered, -1 when released) updates the count of layers in flight and their
// bytes as the mark is reached.
void Engine::submit_window_mark(int layer, int delta, const std::string& name) {
  const std::vector<int> groups = uses(layer);
  std::vector<starpu_data_handle_t> handles{window_slots_[gathers_ % window_slots_.size()].handle()};
  std::int64_t bytes = 0;
  for (int g : groups) {
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

// Unshard, once the window slot is free (the release of the gather W+1 before this one): ZeRO-3
// all-gathers the full parameters a layer needs; one rank with the parameters on the host fetches
// them to the device, a task that becomes ready W+1 layers ahead and takes no worker, so the copy
// runs beside compute (left to the layer's own tasks, StarPU would copy only once they are ready,
// with the GPU waiting; a fetch task on the CUDA worker would hold the compute queued behind it).
void Engine::gather(int layer, const char* pass) {
  const ParamAccess access = layers_[std::size_t(layer)].plan.param_access();
  if (access == ParamAccess::resident) return;
  submit_window_mark(layer, +1, at(std::string("window_") + pass, layer));
  if (access == ParamAccess::fetched_per_use) {
    std::vector<starpu_data_handle_t> params;
    for (int g : uses(layer)) params.push_back(layers_[std::size_t(g)].param.handle());
    tasks::submit_move_to_device(params, at(std::string("param_fetch_") + pass, layer));
    return;
  }
  for (int g : uses(layer)) {
    Layer& l = layers_[std::size_t(g)];
    tasks::submit_all_gather(*order_, l.param_shard->handle(), l.param.handle(), l.count(), model_.dtype(),
                             at(std::string("all_gather_") + pass, g));
  }
}

// Reshard: the full parameters a layer used are freed (ZeRO-3), or their device copy may go
// (one rank with the parameters on the host).
void Engine::release(int layer, const char* pass) {
  switch (layers_[std::size_t(layer)].plan.param_access()) {
    case ParamAccess::resident: return;
    case ParamAccess::fetched_per_use:  // the host copy stays valid: the device copy goes first
      submit_window_mark(layer, -1, at(std::string("release_") + pass, layer));
      ++gathers_;
      for (int g : uses(layer)) starpu_data_wont_use(layers_[std::size_t(g)].param.handle());
      return;
    case ParamAccess::gathered_per_use:
      submit_window_mark(layer, -1, at(std::string("release_") + pass, layer));
      ++gathers_;
      for (int g : uses(layer)) layers_[std::size_t(g)].param.invalidate_submit();
      return;
  }
}

// A full gradient held for good is zeroed for the step (and for every micro-batch when the fp32
// buffer accumulates); one allocated per use (ZeRO-2/3) comes to life just before its group's
// first backward, and only once the full gradient freed grad_window reductions ago is gone. A
// streamed one is zeroed on the device by stream_gradients_in.
void Engine::allocate_gradient(int group, bool first_micro_batch) {
  Layer& layer = layers_[std::size_t(group)];
  if (layer.plan.grad_access() == GradAccess::streamed) return;
  const bool per_use = layer.plan.buffer(LayerBuffer::grad).lifetime == Lifetime::per_use;
  if (!per_use && !first_micro_batch && !layer.grad_accum) return;
  if (per_use) {
    std::vector<starpu_data_handle_t> handles{layer.grad.handle()};
    const std::size_t window = std::size_t(options_.zero.grad_window);
    if (recently_reduced_.size() >= window) handles.push_back(recently_reduced_[recently_reduced_.size() - window]);
    const auto bytes = std::int64_t(layer.grad.bytes());
    tasks::submit_mark(
        handles, [this, bytes] { ledger_.add(MemoryCategory::grads, bytes); }, at("grad_alloc", group));
  }
  tasks::submit_zero(layer.grad.handle(), at("zero_grad", group));
}

// Streamed gradients (one rank, parameters and optimizer on the host; GradAccess::streamed): every
// group a layer's backward touches comes to the device before it, once the gradient written home
// grad_window gradients earlier (counted across micro-batches and steps) is gone: zeroed there
// where the step (with the fp32 buffer: the micro-batch) first touches it, else fetched back from
// its host home, where the earlier micro-batches' or layers' sum is. The marks only order (they
// move and change no data) and keep the ledger's count of gradients in flight.
void Engine::stream_gradients_in(int layer, bool first_micro_batch) {
  for (int g : uses(layer)) {
    Layer& group = layers_[std::size_t(g)];
    if (group.plan.grad_access() != GradAccess::streamed) continue;
    std::vector<starpu_data_handle_t> handles{group.grad.handle()};
    if (streamed_out_.size() == std::size_t(options_.zero.grad_window)) handles.push_back(streamed_out_.front());
    const auto bytes = std::int64_t(group.grad.bytes());
    tasks::submit_mark(
        handles, [this, bytes] { ledger_.add(MemoryCategory::grads, bytes); }, at("grad_alloc", g));
    if (first_toucher_[std::size_t(g)] == layer && (first_micro_batch || group.grad_accum))
      tasks::submit_zero(group.grad.handle(), at("zero_grad", g));
    else
      tasks::submit_move_to_device({group.grad.handle()}, at("grad_fetch", g));
  }
}

// After the layer's backward (and the fp32 accumulation): StarPU writes each streamed gradient home
// (where the CPU AdamW, or the next toucher, reads it) and its device copy is the first to go.
void Engine::stream_gradients_out(int layer) {
  for (int g : uses(layer)) {
    Layer& group = layers_[std::size_t(g)];
    if (group.plan.grad_access() != GradAccess::streamed) continue;
    const auto bytes = std::int64_t(group.grad.bytes());
    tasks::submit_mark(
        {group.grad.handle()}, [this, bytes] { ledger_.remove(MemoryCategory::grads, bytes); }, at("grad_free", g));
    starpu_data_wont_use(group.grad.handle());
    // The window runs on across micro-batches and steps (the next one's first gradients would
    // otherwise come in beside this one's last).
    streamed_out_.push_back(group.grad.handle());
    if (streamed_out_.size() > std::size_t(options_.zero.grad_window)) streamed_out_.pop_front();
  }
}

void Engine::reduce_gradient(int group, bool first_micro_batch, bool last_micro_batch) {
  Layer& layer = layers_[std::size_t(group)];
  const LayerPlan& plan = layer.plan;
  const DType dtype = model_.dtype();
  if (plan.fp32_accumulation() == Fp32Accumulation::full_before_reduction) {
    // The micro-batch's full gradient is added in fp32; the sum is rounded once and reduced
    // once, after the last micro-batch.
    if (first_micro_batch) tasks::submit_zero(layer.grad_accum->handle(), at("zero_grad_accum", group));
    tasks::submit_accumulate_widen(layer.grad.handle(), layer.grad_accum->handle(), at("accumulate_grad_fp32", group));
    if (!last_micro_batch) return;
    tasks::submit_narrow(layer.grad_accum->handle(), layer.grad.handle(), at("round_grad", group));
  }
  if (plan.reduce_every_micro_batch()) {
    reduce_into_shard_each_micro_batch(group, first_micro_batch, last_micro_batch);
    return;
  }
  if (!last_micro_batch) return;  // reduced once, accumulated
  switch (plan.grad_reduction()) {
    case GradReduction::none: return;
    case GradReduction::all_reduce:
      tasks::submit_all_reduce(*order_, layer.grad.handle(), dtype, at("all_reduce_grad", group));
      return;
    case GradReduction::reduce_scatter_in_place:
      tasks::submit_reduce_scatter_in_place(*order_, layer.grad.handle(), layer.count(), dtype,
                                            at("reduce_scatter_grad", group));
      return;
    case GradReduction::reduce_scatter_into_shard:  // ZeRO-1 under offload: only the shard goes down
      tasks::submit_reduce_scatter(*order_, layer.grad.handle(), layer.grad_shard->handle(), layer.count(), dtype,
                                   at("reduce_scatter_grad", group));
      return;
  }
}

// ZeRO-2/3: each micro-batch's full gradient is reduce-scattered into the shard and freed. A
// later micro-batch's shard goes to grad_partial and is added to the shard in the model's dtype;
// with the fp32 buffer every shard is added there and rounded once, at the end.
void Engine::reduce_into_shard_each_micro_batch(int group, bool first_micro_batch, bool last_micro_batch) {
  Layer& layer = layers_[std::size_t(group)];
  const DType dtype = model_.dtype();
  const bool fp32_accumulation = layer.plan.fp32_accumulation() == Fp32Accumulation::shard_after_reduction;
  const bool into_shard = first_micro_batch || fp32_accumulation;
  Tensor& target = into_shard ? *layer.grad_shard : *layer.grad_partial;
  tasks::submit_reduce_scatter(*order_, layer.grad.handle(), target.handle(), layer.count(), dtype,
                               at("reduce_scatter_grad", group));
  if (fp32_accumulation) {
    if (first_micro_batch) tasks::submit_zero(layer.grad_accum->handle(), at("zero_grad_accum", group));
    tasks::submit_accumulate_widen(layer.grad_shard->handle(), layer.grad_accum->handle(),
                                   at("accumulate_grad_fp32", group));
    if (last_micro_batch)
      tasks::submit_narrow(layer.grad_accum->handle(), layer.grad_shard->handle(), at("round_grad", group));
  } else if (!into_shard) {
    tasks::submit_accumulate(layer.grad_partial->handle(), layer.grad_shard->handle(), dtype,
                             at("accumulate_grad_shard", group));
    layer.grad_partial->invalidate_submit();
  }
  const auto bytes = std::int64_t(layer.grad.bytes());
  tasks::submit_mark(
      {layer.grad.handle()}, [this, bytes] { ledger_.remove(MemoryCategory::grads, bytes); }, at("grad_free", group));
  layer.grad.invalidate_submit();
  recently_reduced_.push_back(layer.grad.handle());
}

void Engine::submit_forward_walk() {
  for (int l = 0; l < model_.layers(); ++l) {
    gather(l, "fwd");
    model_.submit_forward(l, *handles_);
    release(l, "fwd");
  }
}

void Engine::submit_backward_walk(bool first_micro_batch, bool last_micro_batch,
                                  const optim::AdamWHyper* speculative) {
  recently_reduced_.clear();
  for (int l = model_.layers() - 1; l >= 0; --l) {
    for (int g = 0; g < model_.layers(); ++g)
      if (first_toucher_[std::size_t(g)] == l) allocate_gradient(g, first_micro_batch);
    stream_gradients_in(l, first_micro_batch);
    gather(l, "bwd");
    model_.submit_backward(l, *handles_);
    release(l, "bwd");
    for (int g = 0; g < model_.layers(); ++g)
      if (last_toucher_[std::size_t(g)] == l) {
        reduce_gradient(g, first_micro_batch, last_micro_batch);
        if (last_micro_batch) {
          fetch_gradient_to_host(g);
          // The speculative AdamW of a group is ready once its reduced gradient is.
          if (speculative) submit_speculative_update(g, *speculative);
        }
      }
    stream_gradients_out(l);
  }
}

void Engine::submit_forward() {
  resolve_speculation();
  submit_forward_walk();
}

void Engine::submit_gradients() {
  if (zero_.shard_grads)
    throw std::logic_error("submit_gradients: full gradients are not kept at ZeRO-2/3 with several ranks");
  resolve_speculation();
  submit_forward_walk();
  submit_backward_walk(true, true);
}

std::vector<std::vector<float>> Engine::gradients() const {
  std::vector<std::vector<float>> out;
  for (const Layer& layer : layers_) {
    auto view = layer.grad.view(Access::read);
    std::vector<float> values(layer.count());
    for (std::size_t i = 0; i < layer.count(); ++i)
      values[i] = layer.grad.dtype() == DType::f32 ? view.as<float>()[i] : to_float(view.as<bf16>()[i]);
    out.push_back(std::move(values));
  }
  return out;
}

void Engine::submit_step(float lr, int step, int micro_batches, const std::function<void(int)>& load_micro_batch) {
  if (step < 1) throw std::invalid_argument("optimizer step must be >= 1");
  if (micro_batches < 1) throw std::invalid_argument("at least one micro-batch per step");
  // Delayed update: the previous step's AdamW runs beside this step's forward and backward,
  // which read the parameters from before it; they are published once the backward is done.
  const std::optional<optim::AdamWHyper> previous = std::exchange(pending_update_, std::nullopt);
  if (previous)
    for (int l = model_.layers() - 1; l >= 0; --l) submit_update(l, *previous, true);
  resolve_speculation();  // the previous step's, if the caller has not read its norm yet
  optim::AdamWHyper hyper = options_.adam;
  hyper.lr = lr;
  hyper.step = step;
  // The speculative AdamW multiplies the summed gradient by the unclipped scale: it does not wait
  // for the norm.
  const bool speculative = options_.offload.speculative_update;
  if (speculative)
    optim::submit_clip_scale({}, 0.0f, float(ranks_ * micro_batches), unclipped_scale_.handle(),
                             unclipped_norm_.handle(), "unclipped_scale");
  for (int m = 0; m < micro_batches; ++m) {
    if (load_micro_batch) load_micro_batch(m);
    submit_forward_walk();
    submit_backward_walk(m == 0, m == micro_batches - 1, speculative ? &hyper : nullptr);
  }
  if (previous)
    for (int l = model_.layers() - 1; l >= 0; --l) submit_publish(l, true);
  if (options_.hang_at_step == step)
    tasks::submit_hang(layers_.front().tensor(layers_.front().plan.update().grad.buffer).handle(), "debug_hang");
  for (const auto& [nan_step, l] : options_.nan_gradients)
    if (nan_step == step) {
      Layer& layer = layers_.at(std::size_t(l));
      tasks::submit_scale(std::numeric_limits<float>::quiet_NaN(), layer.tensor(layer.plan.update().grad.buffer),
                          at("debug_nan_gradient", l));
    }

  submit_grad_norm(micro_batches);

  if (options_.offload.delayed_update_warmup >= 0 && step > options_.offload.delayed_update_warmup) {
    pending_update_ = hyper;  // submitted at the start of the next step (or by flush)
    return;
  }
  // With exact clipping every AdamW waits for the global norm, so all become ready at once:
  // submitted in forward order, the next step's forward (layer 0 first) starts while the later
  // layers update. Without clipping each waits only for its own gradient, which the backward
  // finishes from the last layer down.
  // (A speculative layer's update is submitted already: resolve_speculation fixes it up if the
  // step turns out clipped. Its all-gather (ZeRO-1/2) comes here all the same, in this order with
  // the other collectives: submitted during the backward, it would hold back the reductions of the
  // layers below until the CPU AdamW is done.)
  for (int i = 0; i < model_.layers(); ++i) {
    const int l = options_.grad_clip > 0 ? i : model_.layers() - 1 - i;
    Layer& layer = layers_[std::size_t(l)];
    if (layer.speculative()) {
      submit_publish(l, false);
      continue;
    }
    submit_update(l, hyper, false);
    submit_publish(l, false);
    send_update_to_device(l);
  }
  if (!speculative) return;
  // From here on master, m, v name the step's result; the old state is in the second set until
  // the next step overwrites it.
  for (Layer& layer : layers_)
    if (layer.speculative()) layer.adopt_next_state();
  unresolved_ = hyper;
}

// The CPU AdamW reads the reduced gradient on the host: a task that runs nowhere brings it down as
// soon as it is complete, not when the AdamW task starts, which the CPU Adam pool serialises:
// fetched then, each layer's transfer stalled the pool (11 ms per layer of a 13B model on the
// simulated H200, 0.45 s a step). (StarPU's own asynchronous prefetch was tried first: in the
// simulated runs its requests were served only once the GPU had nothing else to do.)
void Engine::fetch_gradient_to_host(int group) {
  Layer& layer = layers_[std::size_t(group)];
  if (layer.plan.update().kernel != UpdateKernel::cpu || starpu_cuda_worker_get_count() == 0) return;
  tasks::submit_move_to_host({layer.tensor(layer.plan.update().grad.buffer).handle()}, at("fetch_grad", group));
}

// Likewise the CPU AdamW's parameters go up once written, where the model reads them in place (no
// collective publishes them, and they are not fetched per use): left to the next forward, its
// tasks waited for PCIe; a fetch task on the CUDA worker held the compute queued behind it.
void Engine::send_update_to_device(int l) {
  Layer& layer = layers_[std::size_t(l)];
  if (layer.plan.update().kernel != UpdateKernel::cpu || starpu_cuda_worker_get_count() == 0) return;
  if (layer.plan.publish(false).how != Publish::none || layer.plan.param_access() == ParamAccess::fetched_per_use)
    return;
  tasks::submit_move_to_device({layer.tensor(layer.plan.update().target.buffer).handle()}, at("fetch_param", l));
}

// The speculative update's commit, once the norm is known (the caller waited for it, or this
// waits): not clipped, the speculative result is the step and nothing is submitted; clipped or
// not finite, every speculative layer gets an adamw_commit task that re-runs its AdamW from the
// old state with the clip scale or restores the old state, then its publish again. The next
// step's tasks, submitted after this, read what the commits write. A simulation computes no norm:
// it runs the common case, nothing clipped.
void Engine::resolve_speculation() const {
  if (!unresolved_) return;
  const optim::AdamWHyper hyper = *std::exchange(unresolved_, std::nullopt);
  const int layers = int(std::count_if(layers_.begin(), layers_.end(), [](const Layer& l) { return l.speculative(); }));
  last_rollbacks_ = 0;
  const float scale = sim::kernels_run ? read_f32(clip_scale_).at(0) : 0.0f;
  if (!sim::kernels_run || scale == read_f32(unclipped_scale_).at(0)) {
    decisions_.adopted += layers;
    return;
  }
  const bool skipped = optim::skips_update(scale);
  (skipped ? decisions_.discarded : decisions_.rerun) += layers;
  if (!skipped) last_rollbacks_ = layers;
  auto& self = const_cast<Engine&>(*this);  // tasks only: no member the caller sees changes
  for (int l = 0; l < model_.layers(); ++l) {
    if (!layers_[std::size_t(l)].speculative()) continue;
    self.submit_commit(l, hyper);
    self.submit_publish(l, false);
    self.send_update_to_device(l);
  }
}

// The speculative AdamW of one layer: from its state into the second set, with the unclipped
// scale, writing the parameters where the synchronous update does.
void Engine::submit_speculative_update(int l, const optim::AdamWHyper& hyper) {
  Layer& layer = layers_[std::size_t(l)];
  if (!layer.speculative()) return;  // a device AdamW: it waits for the norm
  const UpdatePlan& update = layer.plan.update();
  optim::submit_adamw_cpu_speculative(layer.tensor(update.grad.buffer).handle(), layer.state(), layer.next_state(),
                                      layer.tensor(update.target.buffer).handle(), unclipped_scale_.handle(),
                                      model_.dtype(), hyper,
                                      cpu_adam_pool(l), at("adamw", l));
  // Sent up as if it were the step (the common case): a clipped step sends it again.
  send_update_to_device(l);
}

// Its commit when the step was clipped or not finite: the new set (master, m, v since the swap)
// and the parameters end as the synchronous AdamW would leave them (optimizers/adamw_codelet.hpp).
void Engine::submit_commit(int l, const optim::AdamWHyper& hyper) {
  Layer& layer = layers_[std::size_t(l)];
  const UpdatePlan& update = layer.plan.update();
  optim::submit_adamw_commit(clip_scale_.handle(), unclipped_scale_.handle(),
                             layer.tensor(update.grad.buffer).handle(), layer.next_state(), layer.state(),
                             layer.tensor(update.target.buffer).handle(), commit_counts_.handle(),
                             model_.dtype(), hyper,
                             cpu_adam_pool(l), at("adamw_commit", l));
}

Engine::CommitCounts Engine::commits() const {
  resolve_speculation();
  if (!options_.offload.speculative_update) return {};
  const std::vector<float> counts = read_f32(commit_counts_);
  const CommitCounts ran{0, std::int64_t(counts[std::size_t(optim::CommitOutcome::rerun)]),
                         std::int64_t(counts[std::size_t(optim::CommitOutcome::discarded)])};
  // The commit tasks decide again from the same two scales: they must agree with the engine.
  if (counts[std::size_t(optim::CommitOutcome::adopted)] != 0 || ran.rerun != decisions_.rerun ||
      ran.discarded != decisions_.discarded)
    throw std::logic_error("speculative update: the commit tasks did not do what the engine decided");
  return decisions_;
}

int Engine::last_step_rollbacks() const {
  resolve_speculation();
  return last_rollbacks_;
}

// Global gradient norm over the reduced gradients: each rank's part (the slice AdamW reads),
// summed across ranks when sharded; then the clipping scale AdamW waits for.
void Engine::submit_grad_norm(int micro_batches) {
  const DType dtype = model_.dtype();
  std::vector<starpu_data_handle_t> partial_sums;
  for (int l = model_.layers() - 1; l >= 0; --l) {
    Layer& layer = layers_[std::size_t(l)];
    const BufferSlice& grad = layer.plan.update().grad;
    optim::submit_sum_of_squares(layer.tensor(grad.buffer).handle(), optim::Slice{grad.offset, grad.count}, dtype,
                                 layer.sum_of_squares.handle(), at("grad_sumsq", l));
    partial_sums.push_back(layer.sum_of_squares.handle());
  }
  if (zero_.sharded) {
    optim::submit_sum_scalars(partial_sums, grad_sumsq_total_.handle(), "grad_sumsq_local");
    tasks::submit_all_reduce(*order_, grad_sumsq_total_.handle(), DType::f32, "all_reduce_grad_sumsq");
    partial_sums = {grad_sumsq_total_.handle()};
  }
  // Exact clipping is a global point: every AdamW waits for the norm of all gradients.
  // Gradients summed over ranks and micro-batches: AdamW gets their mean.
  const float divisor = float(ranks_ * micro_batches);
  optim::submit_clip_scale(partial_sums, options_.grad_clip, divisor, clip_scale_.handle(), grad_norm_.handle(),
                           "clip_scale");
  // Without clipping AdamW needs only the divisor: it does not wait for the norm.
  if (options_.grad_clip <= 0)
    optim::submit_clip_scale({}, 0.0f, divisor, unclipped_scale_.handle(), unclipped_norm_.handle(), "unclipped_scale");
}

void Engine::flush() {
  resolve_speculation();
  if (!pending_update_) return;
  for (int l = model_.layers() - 1; l >= 0; --l) submit_update(l, *pending_update_, true);
  for (int l = model_.layers() - 1; l >= 0; --l) submit_publish(l, true);
  pending_update_.reset();
}

// AdamW of one layer: the own shard of the optimizer state, the reduced gradient, and the
// parameters it writes (see engine.hpp; `delayed`: into a buffer the model does not read yet).
void Engine::submit_update(int l, const optim::AdamWHyper& hyper, bool delayed) {
  Layer& layer = layers_[std::size_t(l)];
  const UpdatePlan& update = layer.plan.update();
  const DType dtype = model_.dtype();
  const std::string name = at("adamw", l);
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

// Makes a layer's updated parameters the ones the model reads: the all-gather of ZeRO-1/2, or
// the copy of a delayed update into place.
void Engine::submit_publish(int l, bool delayed) {
  Layer& layer = layers_[std::size_t(l)];
  const PublishPlan& publish = layer.plan.publish(delayed);
  const DType dtype = model_.dtype();
  switch (publish.how) {
    case Publish::none: return;  // AdamW wrote where the model reads
    case Publish::copy_next:
      tasks::submit_copy(layer.param_next->handle(), layer.tensor(publish.destination).handle(),
                         at("publish_param", l));
      return;
    case Publish::all_gather_from_shard:
      tasks::submit_all_gather(*order_, layer.param_shard->handle(), layer.param.handle(), layer.count(), dtype,
                               at("all_gather_param", l));
      // The shard was only needed for the gather: the device copy may go (offload keeps it on the host).
      if (publish.drop_device_shard) starpu_data_wont_use(layer.param_shard->handle());
      return;
    case Publish::all_gather_in_place:
      tasks::submit_all_gather_in_place(*order_, layer.param.handle(), layer.count(), dtype, at("all_gather_param", l));
      return;
  }
}

Tensor Engine::allocate(const PlannedBuffer& buffer, const std::string& name) {
  const std::size_t count = buffer.elements;
  const DType dtype = buffer.dtype;
  switch (buffer.home) {
    case BufferHome::device: return Tensor::host(dtype, count, name);
    case BufferHome::transient: return Tensor::transient(dtype, count, name);
    case BufferHome::pinned_host:
      return Tensor::with_home(
          dtype, count, name,
          std::make_unique<PinnedHostBuffer>(count * dtype_size(dtype), options_.host_numa_node, name));
    case BufferHome::disk:
      return Tensor::with_home(dtype, count, name, options_.nvme->home(count * dtype_size(dtype), name));
  }
  throw std::logic_error("unknown buffer home");
}

int Engine::first_nonfinite_gradient_layer() const {
  for (std::size_t l = 0; l < layers_.size(); ++l)
    if (!std::isfinite(read_f32(layers_[l].sum_of_squares).at(0))) return int(l);
  return -1;
}

float Engine::last_grad_norm() const {
  auto view = grad_norm_.view(Access::read);
  return view.as<float>()[0];
}

std::vector<float> Engine::master_layer(int l) const {
  resolve_speculation();
  // Direct collectives below must not run while collective tasks use the communicator.
  if (sharded()) starpu_task_wait_for_all();
  const Layer& layer = layers_.at(std::size_t(l));
  std::vector<float> mine = read_f32(layer.master);
  if (!sharded()) {
    mine.resize(layer.count());
    return mine;
  }
  std::vector<float> full(layer.padded());
  host_comm().all_gather(mine.data(), full.data(), layer.count(), DType::f32);
  full.resize(layer.count());
  return full;
}

std::vector<std::vector<float>> Engine::master_params() const {
  std::vector<std::vector<float>> out;
  for (int l = 0; l < int(layers_.size()); ++l) out.push_back(master_layer(l));
  return out;
}

// Every rank initialises every layer from the same seed and keeps its own part. The layers are
// drawn in parallel (each from its own seed: the same values whatever the threads), with StarPU's
// workers asleep so that they leave the cores to it, straight into where load_master_params puts
// a layer's values.
void Engine::initialise_params() {
  load_master_params([&](const LayerValues& destination) {
    tbb::parallel_for(0, int(layers_.size()), [&](int l) {
      model_.init_layer(l, destination(l, layers_[std::size_t(l)].count()), options_.seed);
    });
  });
}

void Engine::write_model_params(Layer& layer, std::span<const float> values) {
  if (layer.param_shard) write_part(*layer.param_shard, values, layer.own_offset());
  if (!layer.param.is_transient()) write_part(layer.param, values, 0);
}

void Engine::set_master_params(const std::vector<std::vector<float>>& values) {
  resolve_speculation();
  if (values.size() != layers_.size()) throw std::invalid_argument("set_master_params: wrong number of layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    if (values[l].size() != layer.count())
      throw std::invalid_argument("set_master_params: wrong size for layer " + std::to_string(l));
    write_part(layer.master, values[l], sharded() ? layer.own_offset() : 0);
    write_model_params(layer, values[l]);
  }
}

// Unsharded master weights in main memory are filled in place (their views are taken before the
// workers sleep); otherwise a copy of each layer, of which every buffer takes its part. The
// destination may be asked for different layers from several threads at once.
void Engine::load_master_params(const std::function<void(const LayerValues& destination)>& fill) {
  resolve_speculation();
  const bool in_place = !sharded() && options_.offload.optimizer != OptimizerOffload::nvme;
  std::deque<Tensor::HostView> masters;
  if (in_place)
    for (const Layer& layer : layers_) masters.emplace_back(layer.master.handle(), Access::write, layer.master.bytes());
  std::vector<std::vector<float>> copies(in_place ? 0 : layers_.size());
  std::vector<char> filled(layers_.size(), 0);
  {
    const PausedWorkers paused;
    fill([&](int l, std::size_t count) {
      if (l < 0 || std::size_t(l) >= layers_.size() || count != layers_[std::size_t(l)].count())
        throw std::invalid_argument("load_master_params: layer " + std::to_string(l) + " of " + std::to_string(count) +
                                    " values does not fit the model");
      filled[std::size_t(l)] = 1;
      if (!in_place) {
        copies[std::size_t(l)].resize(count);
        return std::span<float>(copies[std::size_t(l)]);
      }
      const std::span<float> values = masters[std::size_t(l)].as<float>();
      std::fill(values.begin() + std::ptrdiff_t(count), values.end(), 0.0f);  // the padding
      return values.first(count);
    });
  }
  for (std::size_t l = 0; l < layers_.size(); ++l)
    if (!filled[l]) throw std::invalid_argument("load_master_params: layer " + std::to_string(l) + " was not given");
  if (!in_place) return set_master_params(copies);
  for (std::size_t l = 0; l < layers_.size(); ++l)
    write_model_params(layers_[l], masters[l].as<float>().first(layers_[l].count()));
}

std::vector<LayerOptimizerState> Engine::optimizer_state() const {
  resolve_speculation();
  std::vector<LayerOptimizerState> out;
  for (const Layer& layer : layers_) {
    LayerOptimizerState state{read_f32(layer.master), read_f32(layer.m), read_f32(layer.v)};
    if (!sharded())  // the full state, without the collectives' padding
      for (auto* values : {&state.master, &state.m, &state.v}) values->resize(layer.count());
    out.push_back(std::move(state));
  }
  return out;
}

void Engine::set_optimizer_state(const std::vector<LayerOptimizerState>& state) {
  resolve_speculation();
  if (state.size() != layers_.size()) throw std::invalid_argument("set_optimizer_state: wrong number of layers");
  if (sharded()) starpu_task_wait_for_all();
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    const std::size_t n = sharded() ? layer.master.count() : layer.count();
    if (state[l].master.size() != n || state[l].m.size() != n || state[l].v.size() != n)
      throw std::invalid_argument("set_optimizer_state: wrong size for layer " + std::to_string(l));
    // Unsharded state comes without padding; the padding stays zero.
    write_part(layer.master, state[l].master, 0);
    write_part(layer.m, state[l].m, 0);
    write_part(layer.v, state[l].v, 0);
    // The model's parameters follow the master weights.
    if (layer.param_shard) write_part(*layer.param_shard, state[l].master, 0);
    if (!layer.param.is_transient()) {
      if (sharded()) {
        std::vector<float> full(layer.padded());
        host_comm().all_gather(state[l].master.data(), full.data(), layer.count(), DType::f32);
        write_part(layer.param, full, 0);
      } else {
        write_part(layer.param, state[l].master, 0);
      }
    }
  }
}

std::size_t Engine::padded_parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.padded();
  return n;
}

std::size_t Engine::regathered_elements_per_step() const {
  if (!zero_.shard_params) return 0;
  std::size_t n = 0;
  for (int l = 0; l < model_.layers(); ++l)
    for (int g : model_.shared_groups(l)) n += 2 * layers_[std::size_t(g)].padded();  // forward and backward
  return n;
}

std::size_t Engine::parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.count();
  return n;
}

}  // namespace starzero
