// The engine's state in and out (offload/engine.hpp): master weights gathered from the ranks'
// shards and written back into every copy the model reads, the optimizer state per rank, and the
// parameters' first values (drawn, or loaded from a checkpoint straight into their buffers).
#include "offload/engine.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

#include <tbb/parallel_for.h>

#include "runtime/session.hpp"

namespace starzero {

std::vector<float> Engine::master_layer(int l) {
  update_->settle();
  // Direct collectives below must not run while collective tasks use the communicator.
  if (sharded()) starpu_task_wait_for_all();
  const LayerBuffers& layer = layers_.at(std::size_t(l));
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

std::vector<std::vector<float>> Engine::master_params() {
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

void Engine::write_model_params(LayerBuffers& layer, std::span<const float> values) {
  if (layer.param_shard) write_part(*layer.param_shard, values, layer.own_offset());
  if (!layer.param.is_transient()) write_part(layer.param, values, 0);
}

void Engine::set_master_params(const std::vector<std::vector<float>>& values) {
  update_->settle();
  if (values.size() != layers_.size()) throw std::invalid_argument("set_master_params: wrong number of layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    LayerBuffers& layer = layers_[l];
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
  update_->settle();
  const bool in_place = !sharded() && options_.offload.optimizer != OptimizerOffload::nvme;
  std::deque<Tensor::HostView> masters;
  if (in_place)
    for (const LayerBuffers& layer : layers_) masters.emplace_back(layer.master.handle(), Access::write, layer.master.bytes());
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

std::vector<LayerOptimizerState> Engine::optimizer_state() {
  update_->settle();
  std::vector<LayerOptimizerState> out;
  for (const LayerBuffers& layer : layers_) {
    LayerOptimizerState state{read_f32(layer.master), read_f32(layer.m), read_f32(layer.v)};
    if (!sharded())  // the full state, without the collectives' padding
      for (auto* values : {&state.master, &state.m, &state.v}) values->resize(layer.count());
    out.push_back(std::move(state));
  }
  return out;
}

void Engine::set_optimizer_state(const std::vector<LayerOptimizerState>& state) {
  update_->settle();
  if (state.size() != layers_.size()) throw std::invalid_argument("set_optimizer_state: wrong number of layers");
  if (sharded()) starpu_task_wait_for_all();
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    LayerBuffers& layer = layers_[l];
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

}  // namespace starzero
