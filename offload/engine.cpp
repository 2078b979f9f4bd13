#include "offload/engine.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "optimizers/adamw_codelet.hpp"
#include "runtime/disk.hpp"
#include "runtime/host_memory.hpp"
#include "tasks/collectives.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/marks.hpp"

namespace starzero {

namespace {

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

}  // namespace

// One layer's buffers (see engine.hpp for which exist at which stage and placement).
struct Engine::Layer {
  std::size_t count = 0;   // the model's parameters in this layer
  std::size_t shard = 0;   // ceil(count / N)
  std::size_t padded = 0;  // N · shard: the size of full buffers
  std::size_t own_offset = 0;  // rank · shard
  Tensor param, grad;
  std::optional<Tensor> param_shard, grad_shard;
  std::optional<Tensor> grad_partial;  // ZeRO-2/3 with accumulation: a later micro-batch's shard
  std::optional<Tensor> param_next;    // delayed update: AdamW's output until it is published
  std::optional<Tensor> grad_accum;    // fp32 gradient accumulation: full, or the shard at 2-3
  Tensor master, m, v, sum_of_squares;

  Layer(Engine& engine, int layer)
      : count(engine.model_.layer_params(layer)),
        shard((count + std::size_t(engine.ranks_) - 1) / std::size_t(engine.ranks_)),
        padded(shard * std::size_t(engine.ranks_)),
        own_offset(shard * std::size_t(engine.rank_)),
        param(engine.options_.stage == 3 && engine.ranks_ > 1
                  ? Tensor::transient(engine.model_.dtype(), padded, at("param", layer))
              : engine.options_.offload_params == ParamOffload::cpu  // one rank: the whole model on the host
                  ? engine.pinned_tensor(engine.model_.dtype(), padded, at("param", layer))
                  : Tensor::host(engine.model_.dtype(), padded, at("param", layer))),
        grad(Tensor::transient(engine.model_.dtype(), padded, at("grad", layer))),
        master(engine.optimizer_tensor(optimizer_count(engine), at("master", layer))),
        m(engine.optimizer_tensor(optimizer_count(engine), at("adam_m", layer))),
        v(engine.optimizer_tensor(optimizer_count(engine), at("adam_v", layer))),
        sum_of_squares(Tensor::transient(DType::f32, 1, at("grad_sumsq", layer))) {
    const int ranks = engine.ranks_, stage = engine.options_.stage;
    const bool offloaded = engine.optimizer_offloaded();
    const bool delayed = engine.options_.delayed_update_warmup >= 0;
    const DType dtype = engine.model_.dtype();
    // A separate parameter shard: ZeRO-3 always; ZeRO-1/2 when AdamW cannot write the full
    // buffer in place (the CPU task would move the whole layer; the delayed update must not
    // touch what the next forward reads).
    if (ranks > 1 && (stage == 3 || (stage >= 1 && (offloaded || delayed)))) {
      const bool on_host = offloaded || engine.options_.offload_params == ParamOffload::cpu;
      param_shard.emplace(on_host ? engine.pinned_tensor(dtype, shard, at("param_shard", layer))
                                  : Tensor::host(dtype, shard, at("param_shard", layer)));
    }
    if (delayed && !(ranks > 1 && (stage == 1 || stage == 2)))
      param_next.emplace(offloaded ? engine.pinned_tensor(dtype, optimizer_count(engine), at("param_next", layer))
                                   : Tensor::host(dtype, optimizer_count(engine), at("param_next", layer)));
    // A separate gradient shard: ZeRO-2/3, and ZeRO-1 under offload (only the shard goes down).
    if (ranks > 1 && (stage >= 2 || (stage == 1 && offloaded)))
      grad_shard.emplace(Tensor::transient(dtype, shard, at("grad_shard", layer)));
    if (ranks > 1 && stage >= 2) grad_partial.emplace(Tensor::transient(dtype, shard, at("grad_partial", layer)));
    if (engine.options_.fp32_grad_accum)
      grad_accum.emplace(Tensor::host(DType::f32, ranks > 1 && stage >= 2 ? shard : padded, at("grad_accum", layer)));
  }
  std::size_t optimizer_count(const Engine& engine) const { return engine.sharded() ? shard : padded; }
};

class Engine::Handles final : public GroupHandles {
 public:
  explicit Handles(const std::vector<Engine::Layer>& layers) : layers_(layers) {}
  starpu_data_handle_t param(int group) const override { return layers_.at(std::size_t(group)).param.handle(); }
  starpu_data_handle_t grad(int group) const override { return layers_.at(std::size_t(group)).grad.handle(); }

 private:
  const std::vector<Engine::Layer>& layers_;
};

namespace {

void write_values(Tensor& tensor, std::span<const float> values, std::size_t offset = 0) {
  auto view = tensor.view(Access::readwrite);
  if (tensor.dtype() == DType::f32) {
    std::copy(values.begin(), values.end(), view.as<float>().begin() + std::ptrdiff_t(offset));
  } else {
    auto out = view.as<bf16>();
    for (std::size_t i = 0; i < values.size(); ++i) out[offset + i] = from_float<bf16>(values[i]);
  }
}

std::vector<float> read_f32(const Tensor& tensor) {
  auto view = tensor.view(Access::read);
  return {view.as<float>().begin(), view.as<float>().end()};
}

// The part of a full layer (count values) that falls into shard [offset, offset + shard),
// zero-padded past the end of the layer.
std::vector<float> shard_of(std::span<const float> full, std::size_t offset, std::size_t shard) {
  std::vector<float> out(shard, 0.0f);
  for (std::size_t i = 0; i < shard && offset + i < full.size(); ++i) out[i] = full[offset + i];
  return out;
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      clip_scale_(Tensor::host(DType::f32, 1, "clip_scale")),
      grad_norm_(Tensor::host(DType::f32, 1, "grad_norm")),
      grad_sumsq_total_(Tensor::host(DType::f32, 1, "grad_sumsq_total")),
      unclipped_scale_(Tensor::host(DType::f32, 1, "unclipped_scale")),
      unclipped_norm_(Tensor::host(DType::f32, 1, "unclipped_norm")) {
  if (options.stage < 0 || options.stage > 3) throw std::invalid_argument("ZeRO stage must be 0..3");
  if (options.prefetch_depth < 0) throw std::invalid_argument("prefetch depth must be >= 0");
  if (options.grad_window < 1) throw std::invalid_argument("gradient window must be >= 1");
  if (options.offload_params != ParamOffload::none && options.stage != 3)
    throw std::invalid_argument("parameter offload needs ZeRO stage 3 (stages 0-2 keep full parameters on the device)");
  if (options.offload_optimizer == OptimizerOffload::nvme && !options.nvme)
    throw std::invalid_argument("optimizer offload to nvme needs a disk node");
  if (options.adam_threads < 1) throw std::invalid_argument("CPU Adam threads must be >= 1");
  if (options.fp32_grad_accum && model.dtype() != DType::bf16)
    throw std::invalid_argument("the fp32 gradient-accumulation buffer is for bf16 models (fp32 gradients already are)");
  if (options.comm) {
    ranks_ = options.comm->size();
    rank_ = options.comm->rank();
  }
  if (options.host_comm && (options.host_comm->size() != ranks_ || options.host_comm->rank() != rank_))
    throw std::invalid_argument("the host communicator must have the same ranks as the engine's");
  if (ranks_ > 1) order_ = std::make_unique<tasks::CollectiveOrder>(*options.comm);
  if (optimizer_offloaded()) cpu_adam_token_.emplace(Tensor::host(DType::f32, 1, "cpu_adam_pool"));
  const int L = model.layers();
  layers_.reserve(std::size_t(L));
  for (int l = 0; l < L; ++l) layers_.emplace_back(*this, l);
  handles_ = std::make_unique<Handles>(layers_);

  // Which backward layers touch each group's gradient: its own and those sharing it.
  first_toucher_.resize(std::size_t(L));
  last_toucher_.resize(std::size_t(L));
  for (int g = 0; g < L; ++g) first_toucher_[std::size_t(g)] = last_toucher_[std::size_t(g)] = g;
  for (int l = 0; l < L; ++l)
    for (int g : model.shared_groups(l)) {
      first_toucher_.at(std::size_t(g)) = std::max(first_toucher_[std::size_t(g)], l);
      last_toucher_.at(std::size_t(g)) = std::min(last_toucher_[std::size_t(g)], l);
    }

  // Every rank initialises every layer from the same seed and keeps its own part.
  std::vector<std::vector<float>> initial(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    initial[std::size_t(l)].resize(layers_[std::size_t(l)].count);
    model.init_layer(l, initial[std::size_t(l)], options.seed);
  }
  set_master_params(initial);
  for (Layer& layer : layers_) {
    const std::vector<float> zeros(layer.m.count(), 0.0f);
    write_values(layer.m, zeros);
    write_values(layer.v, zeros);
  }

  // The bytes this rank holds for good; transient ones are added and removed as the graph runs.
  // Under optimizer offload the gradient shard and the parameter shard AdamW writes are host
  // staging buffers (the device keeps its own full gradient and parameters at stages 0-2).
  const std::int64_t dtype_bytes = std::int64_t(dtype_size(model.dtype()));
  const MemoryPlace state_place = options.offload_optimizer == OptimizerOffload::nvme ? MemoryPlace::disk
                                  : optimizer_offloaded()                              ? MemoryPlace::host
                                                                                       : MemoryPlace::device;
  const bool staged = optimizer_offloaded();
  const bool params_offloaded = options.offload_params == ParamOffload::cpu;
  const MemoryPlace shard_place =
      staged || options.offload_params == ParamOffload::cpu ? MemoryPlace::host : MemoryPlace::device;
  for (const Layer& layer : layers_) {
    const std::int64_t full = std::int64_t(layer.padded) * dtype_bytes, shard = std::int64_t(layer.shard) * dtype_bytes;
    if (!layer.param.is_transient())
      ledger_.add(MemoryCategory::params, full, params_offloaded ? MemoryPlace::host : MemoryPlace::device);
    if (layer.param_shard) {
      ledger_.add(MemoryCategory::params, shard, shard_place);
      // ZeRO-3 with the optimizer offloaded but not the parameters: the device keeps a copy of
      // the shard AdamW wrote on the host (the all-gathers read it there).
      if (options.stage == 3 && staged && !params_offloaded) ledger_.add(MemoryCategory::params, shard);
    }
    if (layer.param_next) ledger_.add(MemoryCategory::params, std::int64_t(layer.param_next->bytes()), shard_place);
    if (staged && !params_offloaded && !layer.param_shard && !layer.param_next)  // AdamW writes the full
      ledger_.add(MemoryCategory::params, full, MemoryPlace::host);             // buffer on the host
    if (layer.grad_shard) {
      if (!sharded() || options.stage >= 2) ledger_.add(MemoryCategory::grads, shard);  // the device's shard
      if (staged) ledger_.add(MemoryCategory::grads, shard, MemoryPlace::host);
    } else {
      ledger_.add(MemoryCategory::grads, full);
      if (staged) ledger_.add(MemoryCategory::grads, full, MemoryPlace::host);
    }
    if (layer.grad_shard && options.stage == 1) ledger_.add(MemoryCategory::grads, full);  // ZeRO-1: full grads stay
    ledger_.add(MemoryCategory::optimizer, 3 * std::int64_t(layer.master.bytes()), state_place);
    if (layer.grad_accum) ledger_.add(MemoryCategory::grads, std::int64_t(layer.grad_accum->bytes()));
  }
  if (options.stage == 3 && ranks_ > 1)
    for (int slot = 0; slot <= options.prefetch_depth; ++slot)
      window_slots_.push_back(Tensor::host(DType::f32, 1, at("prefetch_window", slot)));
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
        if (delta > 0) ledger_.add_item(MemoryCategory::temporaries);
        else ledger_.remove_item(MemoryCategory::temporaries);
      },
      name);
}

// ZeRO-3: all-gather the full parameters a layer needs, once the window slot is free (the
// release of the gather W+1 before this one).
void Engine::gather(int layer, const char* pass) {
  if (!(options_.stage == 3 && ranks_ > 1)) return;
  submit_window_mark(layer, +1, at((std::string("window_") + pass).c_str(), layer));
  for (int g : uses(layer)) {
    Layer& l = layers_[std::size_t(g)];
    tasks::submit_all_gather(*order_, l.param_shard->handle(), l.param.handle(), l.count, model_.dtype(),
                             at((std::string("all_gather_") + pass).c_str(), g));
  }
}

void Engine::release(int layer, const char* pass) {
  if (options_.offload_params == ParamOffload::cpu && ranks_ == 1) {
    // One rank, parameters on the host: the device copy may go once the layer is done.
    for (int g : uses(layer)) starpu_data_wont_use(layers_[std::size_t(g)].param.handle());
    return;
  }
  if (!(options_.stage == 3 && ranks_ > 1)) return;
  submit_window_mark(layer, -1, at((std::string("release_") + pass).c_str(), layer));
  ++gathers_;
  for (int g : uses(layer)) layers_[std::size_t(g)].param.invalidate_submit();
}

// ZeRO-2/3: the full gradient of a group comes to life just before its first backward, and
// only once the full gradient freed grad_window reductions ago is gone.
void Engine::allocate_gradient(int group, bool first_micro_batch) {
  Layer& layer = layers_[std::size_t(group)];
  const bool transient = ranks_ > 1 && options_.stage >= 2;
  // It accumulates across micro-batches, unless the fp32 buffer does.
  if (!transient && !first_micro_batch && !layer.grad_accum) return;
  if (transient) {
    std::vector<starpu_data_handle_t> handles{layer.grad.handle()};
    const std::size_t window = std::size_t(options_.grad_window);
    if (recently_reduced_.size() >= window) handles.push_back(recently_reduced_[recently_reduced_.size() - window]);
    const auto bytes = std::int64_t(layer.grad.bytes());
    tasks::submit_mark(handles, [this, bytes] { ledger_.add(MemoryCategory::grads, bytes); },
                       at("grad_alloc", group));
  }
  tasks::submit_zero(layer.grad.handle(), at("zero_grad", group));
}

void Engine::reduce_gradient(int group, bool first_micro_batch, bool last_micro_batch) {
  Layer& layer = layers_[std::size_t(group)];
  const DType dtype = model_.dtype();
  const bool shard_reduced = ranks_ > 1 && options_.stage >= 2;
  if (layer.grad_accum && !shard_reduced) {
    // Stages 0-1: the micro-batch's full gradient is added in fp32; the sum is rounded once and
    // reduced once, after the last micro-batch.
    if (first_micro_batch) tasks::submit_zero(layer.grad_accum->handle(), at("zero_grad_accum", group));
    tasks::submit_accumulate_widen(layer.grad.handle(), layer.grad_accum->handle(), at("accumulate_grad_fp32", group));
    if (!last_micro_batch) return;
    tasks::submit_narrow(layer.grad_accum->handle(), layer.grad.handle(), at("round_grad", group));
  }
  if (ranks_ == 1) return;
  if (options_.stage <= 1 && !last_micro_batch) return;  // reduced once, accumulated
  switch (options_.stage) {
    case 0:
      tasks::submit_all_reduce(*order_, layer.grad.handle(), dtype, at("all_reduce_grad", group));
      return;
    case 1:
      if (layer.grad_shard)  // offload: only the shard goes down to the CPU AdamW
        tasks::submit_reduce_scatter(*order_, layer.grad.handle(), layer.grad_shard->handle(), layer.count, dtype,
                                     at("reduce_scatter_grad", group));
      else
        tasks::submit_reduce_scatter_in_place(*order_, layer.grad.handle(), layer.count, dtype,
                                              at("reduce_scatter_grad", group));
      return;
    default: {
      // A later micro-batch's shard goes to grad_partial and is added to the shard, in the
      // model's dtype; with the fp32 buffer every shard is added there and rounded once, at the end.
      const bool into_shard = first_micro_batch || layer.grad_accum;
      Tensor& target = into_shard ? *layer.grad_shard : *layer.grad_partial;
      tasks::submit_reduce_scatter(*order_, layer.grad.handle(), target.handle(), layer.count, dtype,
                                   at("reduce_scatter_grad", group));
      if (layer.grad_accum) {
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
      tasks::submit_mark({layer.grad.handle()}, [this, bytes] { ledger_.remove(MemoryCategory::grads, bytes); },
                         at("grad_free", group));
      layer.grad.invalidate_submit();
      recently_reduced_.push_back(layer.grad.handle());
      return;
    }
  }
}

void Engine::submit_forward_walk() {
  for (int l = 0; l < model_.layers(); ++l) {
    gather(l, "fwd");
    model_.submit_forward(l, *handles_);
    release(l, "fwd");
  }
}

void Engine::submit_backward_walk(bool first_micro_batch, bool last_micro_batch) {
  recently_reduced_.clear();
  for (int l = model_.layers() - 1; l >= 0; --l) {
    for (int g = 0; g < model_.layers(); ++g)
      if (first_toucher_[std::size_t(g)] == l) allocate_gradient(g, first_micro_batch);
    gather(l, "bwd");
    model_.submit_backward(l, *handles_);
    release(l, "bwd");
    for (int g = 0; g < model_.layers(); ++g)
      if (last_toucher_[std::size_t(g)] == l) reduce_gradient(g, first_micro_batch, last_micro_batch);
  }
}

void Engine::submit_forward() { submit_forward_walk(); }

void Engine::submit_gradients() {
  if (sharded() && options_.stage >= 2)
    throw std::logic_error("submit_gradients: full gradients are not kept at ZeRO-2/3 with several ranks");
  submit_forward_walk();
  submit_backward_walk(true, true);
}

std::vector<std::vector<float>> Engine::gradients() const {
  std::vector<std::vector<float>> out;
  for (const Layer& layer : layers_) {
    auto view = layer.grad.view(Access::read);
    std::vector<float> values(layer.count);
    for (std::size_t i = 0; i < layer.count; ++i)
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
  for (int m = 0; m < micro_batches; ++m) {
    if (load_micro_batch) load_micro_batch(m);
    submit_forward_walk();
    submit_backward_walk(m == 0, m == micro_batches - 1);
  }
  if (previous)
    for (int l = model_.layers() - 1; l >= 0; --l) submit_publish(l, true);

  // Global gradient norm over the reduced gradients: each rank's shard, summed across ranks.
  const DType dtype = model_.dtype();
  std::vector<starpu_data_handle_t> partial_sums;
  for (int l = model_.layers() - 1; l >= 0; --l) {
    Layer& layer = layers_[std::size_t(l)];
    const starpu_data_handle_t grad = layer.grad_shard ? layer.grad_shard->handle() : layer.grad.handle();
    const optim::Slice slice = layer.grad_shard ? optim::Slice{0, layer.shard}
                               : sharded()      ? optim::Slice{layer.own_offset, layer.shard}
                                                : optim::Slice{0, layer.padded};
    optim::submit_sum_of_squares(grad, slice, dtype, layer.sum_of_squares.handle(), at("grad_sumsq", l));
    partial_sums.push_back(layer.sum_of_squares.handle());
  }
  if (sharded()) {
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
    optim::submit_clip_scale({}, 0.0f, divisor, unclipped_scale_.handle(), unclipped_norm_.handle(),
                             "unclipped_scale");

  optim::AdamWHyper hyper = options_.adam;
  hyper.lr = lr;
  hyper.step = step;
  if (options_.delayed_update_warmup >= 0 && step > options_.delayed_update_warmup) {
    pending_update_ = hyper;  // submitted at the start of the next step (or by flush)
    return;
  }
  for (int l = model_.layers() - 1; l >= 0; --l) {
    submit_update(l, hyper, false);
    submit_publish(l, false);
  }
}

void Engine::flush() {
  if (!pending_update_) return;
  for (int l = model_.layers() - 1; l >= 0; --l) submit_update(l, *pending_update_, true);
  for (int l = model_.layers() - 1; l >= 0; --l) submit_publish(l, true);
  pending_update_.reset();
}

// AdamW of one layer: the own shard of the optimizer state, the reduced gradient, and the
// parameters it writes (see engine.hpp; `delayed`: into a buffer the model does not read yet).
void Engine::submit_update(int l, const optim::AdamWHyper& hyper, bool delayed) {
  Layer& layer = layers_[std::size_t(l)];
  const DType dtype = model_.dtype();
  const std::string name = at("adamw", l);
  const starpu_data_handle_t scale = options_.grad_clip > 0 ? clip_scale_.handle() : unclipped_scale_.handle();
  // The gradient this rank updates with: its shard, or its block of the full buffer (ZeRO-1
  // in place), or the whole (replicated) gradient.
  const starpu_data_handle_t grad = layer.grad_shard ? layer.grad_shard->handle() : layer.grad.handle();
  const std::size_t grad_offset = layer.grad_shard || !sharded() ? 0 : layer.own_offset;
  // Where the updated parameters go: a separate buffer when there is one, else in place.
  Tensor* target = delayed && layer.param_next ? &*layer.param_next
                   : layer.param_shard          ? &*layer.param_shard
                                                : &layer.param;
  const std::size_t param_offset = target == &layer.param && sharded() ? layer.own_offset : 0;
  if (optimizer_offloaded()) {
    optim::submit_adamw_cpu(grad, layer.master.handle(), layer.m.handle(), layer.v.handle(), target->handle(), scale,
                            dtype, hyper, {cpu_adam_token_->handle(), options_.adam_threads, options_.host_numa_node}, name);
  } else {
    optim::submit_adamw(grad, grad_offset, layer.master.handle(), layer.m.handle(), layer.v.handle(),
                        target->handle(), param_offset, scale, dtype, hyper, name);
  }
}

// Makes a layer's updated parameters the ones the model reads: the all-gather of ZeRO-1/2, or
// the copy of a delayed update into place.
void Engine::submit_publish(int l, bool delayed) {
  Layer& layer = layers_[std::size_t(l)];
  const DType dtype = model_.dtype();
  if (delayed && layer.param_next) {
    tasks::submit_copy(layer.param_next->handle(), layer.param_shard ? layer.param_shard->handle() : layer.param.handle(),
                       at("publish_param", l));
    return;
  }
  if (!sharded() || options_.stage == 3) return;  // AdamW wrote where the model reads
  if (layer.param_shard) {
    tasks::submit_all_gather(*order_, layer.param_shard->handle(), layer.param.handle(), layer.count, dtype,
                             at("all_gather_param", l));
    // The shard was only needed for the gather: the device copy may go (offload keeps it on the host).
    if (optimizer_offloaded()) starpu_data_wont_use(layer.param_shard->handle());
  } else {
    tasks::submit_all_gather_in_place(*order_, layer.param.handle(), layer.count, dtype, at("all_gather_param", l));
  }
}

Tensor Engine::pinned_tensor(DType dtype, std::size_t count, const std::string& name) {
  return Tensor::with_home(dtype, count, name,
                           std::make_unique<PinnedHostBuffer>(count * dtype_size(dtype), options_.host_numa_node, name));
}

Tensor Engine::optimizer_tensor(std::size_t count, const std::string& name) {
  switch (options_.offload_optimizer) {
    case OptimizerOffload::none: return Tensor::host(DType::f32, count, name);
    case OptimizerOffload::cpu: return pinned_tensor(DType::f32, count, name);
    case OptimizerOffload::nvme: return Tensor::with_home(DType::f32, count, name, options_.nvme->home(count * 4, name));
  }
  throw std::logic_error("unknown optimizer placement");
}

float Engine::last_grad_norm() const {
  auto view = grad_norm_.view(Access::read);
  return view.as<float>()[0];
}

std::vector<std::vector<float>> Engine::master_params() const {
  // Direct collectives below must not run while collective tasks use the communicator.
  if (sharded()) starpu_task_wait_for_all();
  std::vector<std::vector<float>> out;
  for (const Layer& layer : layers_) {
    std::vector<float> mine = read_f32(layer.master);
    if (!sharded()) {
      mine.resize(layer.count);
      out.push_back(std::move(mine));
      continue;
    }
    std::vector<float> full(layer.padded);
    host_comm().all_gather(mine.data(), full.data(), layer.count, DType::f32);
    full.resize(layer.count);
    out.push_back(std::move(full));
  }
  return out;
}

void Engine::set_master_params(const std::vector<std::vector<float>>& values) {
  if (values.size() != layers_.size()) throw std::invalid_argument("set_master_params: wrong number of layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    if (values[l].size() != layer.count)
      throw std::invalid_argument("set_master_params: wrong size for layer " + std::to_string(l));
    const std::vector<float> full = shard_of(values[l], 0, layer.padded);
    write_values(layer.master, sharded() ? shard_of(values[l], layer.own_offset, layer.shard) : full);
    if (layer.param_shard) write_values(*layer.param_shard, shard_of(values[l], layer.own_offset, layer.shard));
    if (!layer.param.is_transient()) write_values(layer.param, full);
  }
}

std::vector<LayerOptimizerState> Engine::optimizer_state() const {
  std::vector<LayerOptimizerState> out;
  for (const Layer& layer : layers_) {
    LayerOptimizerState state{read_f32(layer.master), read_f32(layer.m), read_f32(layer.v)};
    if (!sharded())  // the full state, without the collectives' padding
      for (auto* values : {&state.master, &state.m, &state.v}) values->resize(layer.count);
    out.push_back(std::move(state));
  }
  return out;
}

void Engine::set_optimizer_state(const std::vector<LayerOptimizerState>& state) {
  if (state.size() != layers_.size()) throw std::invalid_argument("set_optimizer_state: wrong number of layers");
  if (sharded()) starpu_task_wait_for_all();
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    const std::size_t n = sharded() ? layer.master.count() : layer.count;
    if (state[l].master.size() != n || state[l].m.size() != n || state[l].v.size() != n)
      throw std::invalid_argument("set_optimizer_state: wrong size for layer " + std::to_string(l));
    // Unsharded state comes without padding; the padding stays zero.
    write_values(layer.master, shard_of(state[l].master, 0, layer.master.count()));
    write_values(layer.m, shard_of(state[l].m, 0, layer.master.count()));
    write_values(layer.v, shard_of(state[l].v, 0, layer.master.count()));
    // The model's parameters follow the master weights.
    if (layer.param_shard) write_values(*layer.param_shard, state[l].master);
    if (!layer.param.is_transient()) {
      if (sharded()) {
        std::vector<float> full(layer.padded);
        host_comm().all_gather(state[l].master.data(), full.data(), layer.count, DType::f32);
        write_values(layer.param, full);
      } else {
        write_values(layer.param, shard_of(state[l].master, 0, layer.padded));
      }
    }
  }
}

std::size_t Engine::padded_parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.padded;
  return n;
}

std::size_t Engine::regathered_elements_per_step() const {
  if (!(options_.stage == 3 && ranks_ > 1)) return 0;
  std::size_t n = 0;
  for (int l = 0; l < model_.layers(); ++l)
    for (int g : model_.shared_groups(l)) n += 2 * layers_[std::size_t(g)].padded;  // forward and backward
  return n;
}

std::size_t Engine::parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.count;
  return n;
}

}  // namespace starzero
