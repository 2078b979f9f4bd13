#include "offload/engine.hpp"

#include <stdexcept>
#include <string>

#include "optimizers/adamw_codelet.hpp"
#include "tasks/elementwise.hpp"

namespace starzero {

// One layer's buffers: its parameters in the model's dtype, their gradient, the fp32 master
// copy and Adam moments, and the partial sum of squares for the global norm.
struct Engine::Layer {
  Tensor param, grad, master, m, v, sum_of_squares;
  Layer(const Model& model, int layer)
      : param(Tensor::host(model.dtype(), model.layer_params(layer), "param[" + std::to_string(layer) + "]")),
        grad(Tensor::transient(model.dtype(), model.layer_params(layer), "grad[" + std::to_string(layer) + "]")),
        master(Tensor::host(DType::f32, model.layer_params(layer), "master[" + std::to_string(layer) + "]")),
        m(Tensor::host(DType::f32, model.layer_params(layer), "adam_m[" + std::to_string(layer) + "]")),
        v(Tensor::host(DType::f32, model.layer_params(layer), "adam_v[" + std::to_string(layer) + "]")),
        sum_of_squares(Tensor::transient(DType::f32, 1, "grad_sumsq[" + std::to_string(layer) + "]")) {}
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

void write_param_copy(Tensor& param, std::span<const float> values) {
  auto view = param.view(Access::write);
  if (param.dtype() == DType::f32) {
    std::copy(values.begin(), values.end(), view.as<float>().begin());
  } else {
    auto out = view.as<bf16>();
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = from_float<bf16>(values[i]);
  }
}

void write_f32(Tensor& tensor, std::span<const float> values) {
  auto view = tensor.view(Access::write);
  std::copy(values.begin(), values.end(), view.as<float>().begin());
}

std::vector<float> read_f32(const Tensor& tensor) {
  auto view = tensor.view(Access::read);
  return {view.as<float>().begin(), view.as<float>().end()};
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      clip_scale_(Tensor::host(DType::f32, 1, "clip_scale")),
      grad_norm_(Tensor::host(DType::f32, 1, "grad_norm")) {
  layers_.reserve(std::size_t(model.layers()));
  for (int l = 0; l < model.layers(); ++l) {
    layers_.emplace_back(model, l);
    Layer& layer = layers_.back();
    std::vector<float> init(model.layer_params(l));
    model.init_layer(l, init, options.seed);
    write_f32(layer.master, init);
    write_param_copy(layer.param, init);
    std::fill(init.begin(), init.end(), 0.0f);
    write_f32(layer.m, init);
    write_f32(layer.v, init);
  }
  handles_ = std::make_unique<Handles>(layers_);
}

Engine::~Engine() = default;

void Engine::submit_forward() {
  for (int l = 0; l < model_.layers(); ++l) model_.submit_forward(l, *handles_);
}

void Engine::submit_gradients() {
  for (Layer& layer : layers_) tasks::submit_zero(layer.grad.handle(), "zero_" + layer.grad.name());
  submit_forward();
  for (int l = model_.layers() - 1; l >= 0; --l) model_.submit_backward(l, *handles_);
}

std::vector<std::vector<float>> Engine::gradients() const {
  std::vector<std::vector<float>> out;
  for (const Layer& layer : layers_) {
    auto view = layer.grad.view(Access::read);
    if (layer.grad.dtype() == DType::f32) {
      out.emplace_back(view.as<float>().begin(), view.as<float>().end());
    } else {
      std::vector<float> values;
      for (bf16 g : view.as<bf16>()) values.push_back(to_float(g));
      out.push_back(std::move(values));
    }
  }
  return out;
}

void Engine::submit_step(float lr, int step) {
  if (step < 1) throw std::invalid_argument("optimizer step must be >= 1");
  submit_gradients();
  std::vector<starpu_data_handle_t> partial_sums;
  // A layer's gradient is complete once every backward that touches it has been submitted:
  // its own and those of later layers sharing it (e.g. the tied embedding).
  for (int l = model_.layers() - 1; l >= 0; --l) {
    Layer& layer = layers_[std::size_t(l)];
    optim::submit_sum_of_squares(layer.grad.handle(), model_.dtype(), layer.sum_of_squares.handle(),
                                 "grad_sumsq[" + std::to_string(l) + "]");
    partial_sums.push_back(layer.sum_of_squares.handle());
  }
  // Exact global-norm clipping is a global point: every Adam waits for every gradient.
  optim::submit_clip_scale(partial_sums, options_.grad_clip, clip_scale_.handle(), grad_norm_.handle(), "clip_scale");
  optim::AdamWHyper hyper = options_.adam;
  hyper.lr = lr;
  hyper.step = step;
  for (int l = model_.layers() - 1; l >= 0; --l) {
    Layer& layer = layers_[std::size_t(l)];
    optim::submit_adamw(layer.grad.handle(), layer.master.handle(), layer.m.handle(), layer.v.handle(),
                        layer.param.handle(), clip_scale_.handle(), model_.dtype(), hyper,
                        "adamw[" + std::to_string(l) + "]");
  }
}

float Engine::last_grad_norm() const {
  auto view = grad_norm_.view(Access::read);
  return view.as<float>()[0];
}

std::vector<std::vector<float>> Engine::master_params() const {
  std::vector<std::vector<float>> out;
  for (const Layer& layer : layers_) out.push_back(read_f32(layer.master));
  return out;
}

void Engine::set_master_params(const std::vector<std::vector<float>>& values) {
  if (values.size() != layers_.size()) throw std::invalid_argument("set_master_params: wrong number of layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (values[l].size() != layers_[l].master.count())
      throw std::invalid_argument("set_master_params: wrong size for layer " + std::to_string(l));
    write_f32(layers_[l].master, values[l]);
    write_param_copy(layers_[l].param, values[l]);
  }
}

std::vector<LayerOptimizerState> Engine::optimizer_state() const {
  std::vector<LayerOptimizerState> out;
  for (const Layer& layer : layers_) out.push_back({read_f32(layer.master), read_f32(layer.m), read_f32(layer.v)});
  return out;
}

void Engine::set_optimizer_state(const std::vector<LayerOptimizerState>& state) {
  if (state.size() != layers_.size()) throw std::invalid_argument("set_optimizer_state: wrong number of layers");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const std::size_t n = layers_[l].master.count();
    if (state[l].master.size() != n || state[l].m.size() != n || state[l].v.size() != n)
      throw std::invalid_argument("set_optimizer_state: wrong size for layer " + std::to_string(l));
    write_f32(layers_[l].master, state[l].master);
    write_param_copy(layers_[l].param, state[l].master);
    write_f32(layers_[l].m, state[l].m);
    write_f32(layers_[l].v, state[l].v);
  }
}

std::size_t Engine::parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.master.count();
  return n;
}

}  // namespace starzero
