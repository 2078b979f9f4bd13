#include "offload/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/session.hpp"
#include "runtime/sim.hpp"
#include "tasks/collectives.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/faults.hpp"

namespace starzero {

namespace {

// The options reach the engine checked (check_engine_options, offload/engine_options.hpp) and
// resolved (train/run.cpp); what is left to see here is what only the engine knows of, or what a
// caller that skipped the run's check got wrong (std::logic_error).
void assert_runnable(const Model& model, const EngineOptions& options) {
  const OffloadOptions& offload = options.offload;
  if (offload.optimizer == OptimizerOffload::nvme && !options.nvme)
    throw std::logic_error("the engine: optimizer offload to nvme without a disk node");
  if (offload.optimizer_fraction.automatic || offload.speculative_fraction.automatic)
    throw std::logic_error("the engine: offload fractions not resolved (auto)");
  if (offload.optimizer_offloaded() && !(offload.adam_threads && *offload.adam_threads >= 1))
    throw std::logic_error("the engine: the CPU AdamW's threads not resolved");
  if (offload.speculative_update && options.grad_clip <= 0)
    throw std::logic_error("the engine: the speculative update without clipping");
  if (options.fp32_grad_accum && model.dtype() != DType::bf16)
    throw std::logic_error("the engine: an fp32 gradient-accumulation buffer for a model that is not bf16");
  // The testing hook's one home: only the engine knows the model's layers.
  for (const auto& [step, layer] : options.nan_gradients)
    if (layer < 0 || layer >= model.layers() || model.dtype() != DType::f32)
      throw std::invalid_argument("NaN gradients (testing) need an fp32 model and a layer in 0.." +
                                  std::to_string(model.layers() - 1) + ", not layer " + std::to_string(layer));
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options) : model_(model), options_(options) {
  if (options.comm) {
    ranks_ = options.comm->size();
    rank_ = options.comm->rank();
  }
  assert_runnable(model, options);
  if (options.host_comm && (options.host_comm->size() != ranks_ || options.host_comm->rank() != rank_))
    throw std::logic_error("the host communicator must have the same ranks as the engine's");
  zero_ = ZeroState::of(options.zero.stage, ranks_);
  split_optimizer(model);
  if (zero_.collectives) order_ = std::make_unique<tasks::CollectiveOrder>(*options.comm);
  const BufferHomes homes{options.host_numa_node, options.nvme};
  layers_.reserve(std::size_t(model.layers()));
  for (int l = 0; l < model.layers(); ++l) layers_.emplace_back(layer_plan_input(l), l, homes);
  split_gradients();
  walk_ = std::make_unique<StepWalk>(model, layers_, options.zero, order_.get(), ledger_);
  update_tasks_ =
      std::make_unique<UpdateTasks>(model, layers_, options_, zero_.sharded, order_.get(), optimizer_offloaded());
  update_ = make_update_policy(options.offload, *update_tasks_);
  initialise_state();
  add_held_bytes_to_ledger();
}

Engine::~Engine() { starpu_task_wait_for_all(); }

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

// The state a run starts from: parameters drawn, Adam's moments zeroed, the device-side master
// sent up.
void Engine::initialise_state() {
  // A simulation runs no kernel and reads no value: drawing an 8B model's parameters on the host
  // would take minutes for nothing (the buffers are registered all the same).
  if (options_.initialise_params && sim::kernels_run) initialise_params();
  // Adam's moments start at zero where they live. Offloaded to pinned host memory they already are
  // (PinnedHostBuffer zero-fills at allocation); on NVMe a CPU worker zeroes them; else the device.
  // (Zeroed on the GPU, offloaded moments were allocated there and written back: 103 GB for a 13B
  // model, which filled a simulated H200 to StarPU's limit and made it evict all run long; zeroed
  // by tasks on the CPU workers, they held step 1's AdamW back by 5 s.)
  for (LayerBuffers& layer : layers_) {
    const BufferHome home = layer.plan.buffer(LayerBuffer::optimizer_state).home;
    if (home == BufferHome::pinned_host) continue;
    const auto zero = home == BufferHome::disk ? tasks::submit_zero_on_host : tasks::submit_zero;
    zero(layer.m.handle(), "zero_adam_m");
    zero(layer.v.handle(), "zero_adam_v");
  }
  // The fp32 master of a GPU-side optimizer starts in its home in main memory: send it to the GPU
  // now, behind step 1. (Fetched by the first AdamW instead, it crossed PCIe during step 2's
  // forward: 26.8 GB for a 7B model, 0.5 s of step 2.)
  if (starpu_cuda_worker_get_count() > 0) {
    const unsigned gpu = starpu_worker_get_memory_node(starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0));
    for (LayerBuffers& layer : layers_)
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
    LayerBuffers& layer = layers_[l];
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
  for (const LayerBuffers& layer : layers_)
    for (const LayerPlan::HeldCopy& copy : layer.plan.held_copies())
      ledger_.add(copy.buffer->category, layer.plan.bytes(*copy.buffer), copy.place);
}


void Engine::submit_forward() {
  update_->settle();
  walk_->forward();
}

void Engine::submit_gradients() {
  if (zero_.shard_grads)
    throw std::logic_error("submit_gradients: full gradients are not kept at ZeRO-2/3 with several ranks");
  update_->settle();
  walk_->forward();
  walk_->backward(true, true, [this](int group) { update_tasks_->fetch_gradient_to_host(group); });
}

std::vector<std::vector<float>> Engine::gradients() const {
  std::vector<std::vector<float>> out;
  for (const LayerBuffers& layer : layers_) {
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
  optim::AdamWHyper hyper = options_.adam;
  hyper.lr = lr;
  hyper.step = step;
  update_->begin_step(hyper, micro_batches);
  const auto reduced = [this](int group) {
    update_tasks_->fetch_gradient_to_host(group);
    update_->gradient_reduced(group);
  };
  for (int m = 0; m < micro_batches; ++m) {
    if (load_micro_batch) load_micro_batch(m);
    walk_->forward();
    walk_->backward(m == 0, m == micro_batches - 1, reduced);
  }
  update_->end_backward();
  submit_debug_faults(step);
  update_tasks_->submit_grad_norm(micro_batches);
  update_->end_step(hyper, step);
}

// Testing hooks (EngineOptions): a task that never ends, NaN gradients.
void Engine::submit_debug_faults(int step) {
  if (options_.hang_at_step == step)
    tasks::submit_hang(layers_.front().tensor(layers_.front().plan.update().grad.buffer).handle(), "debug_hang");
  for (const auto& [nan_step, l] : options_.nan_gradients)
    if (nan_step == step) {
      LayerBuffers& layer = layers_.at(std::size_t(l));
      tasks::submit_scale(std::numeric_limits<float>::quiet_NaN(), layer.tensor(layer.plan.update().grad.buffer),
                          indexed_name("debug_nan_gradient", l));
    }
}

CommitCounts Engine::commits() { return update_->commits(); }

int Engine::last_step_rollbacks() { return update_->last_step_rollbacks(); }

void Engine::flush() { update_->flush(); }

int Engine::first_nonfinite_gradient_layer() const {
  for (std::size_t l = 0; l < layers_.size(); ++l)
    if (!std::isfinite(read_f32(layers_[l].sum_of_squares).at(0))) return int(l);
  return -1;
}

float Engine::last_grad_norm() const {
  auto view = update_tasks_->grad_norm().view(Access::read);
  return view.as<float>()[0];
}

std::size_t Engine::padded_parameter_count() const {
  std::size_t n = 0;
  for (const LayerBuffers& layer : layers_) n += layer.padded();
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
  for (const LayerBuffers& layer : layers_) n += layer.count();
  return n;
}

}  // namespace starzero
