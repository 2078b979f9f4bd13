#pragma once
// What the transformer model tests (test_gpt_model.cpp, test_llama_model.cpp) share: a CPU
// session, random tokens and parameters, the engine's layers <-> llm.c's flat order, and the
// checks each model makes against its double-precision reference (the loss, every gradient by
// central finite differences, bf16 against fp32). A model type here has layers(),
// layer_params(l), layout(), set_batch(), mean_loss().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "models/transformer_model.hpp"
#include "offload/engine.hpp"
#include "runtime/session.hpp"

namespace starzero::testing {

using Layers = std::vector<std::vector<float>>;

// Two CPU workers (the test machine has 2 cores), no GPU.
inline SessionOptions cpu_session(const std::string& policy = "lws") {
  SessionOptions o;
  o.policy = policy;
  o.cpu_workers = 2;
  o.cuda_workers = 0;
  return o;
}

inline std::vector<int> random_tokens(std::mt19937& rng, std::size_t n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Random llm.c-order parameters: N(0, sigma) everywhere, then the norms' gains U(0.5, 1.5): the
// L·C of each of `per_layer_gains`' offsets, and the C of `final_gain`.
inline std::vector<float> random_params_with_gains(std::size_t total, float sigma, std::size_t layers,
                                                   std::size_t channels, std::initializer_list<std::size_t> per_layer_gains,
                                                   std::size_t final_gain, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_real_distribution<float> gain(0.5f, 1.5f);
  std::vector<float> p(total);
  for (auto& x : p) x = normal(rng);
  for (std::size_t start : per_layer_gains)
    for (std::size_t i = 0; i < layers * channels; ++i) p[start + i] = gain(rng);
  for (std::size_t i = 0; i < channels; ++i) p[final_gain + i] = gain(rng);
  return p;
}

// llm.c's flat order into the model's per-layer arrays, and back.
template <class Model>
Layers to_layers(const Model& model, const std::vector<float>& flat) {
  Layers layers;
  for (int l = 0; l < model.layers(); ++l) layers.emplace_back(model.layer_params(l));
  llmc_order_to_layers(model.layout(), flat, std::vector<std::span<float>>(layers.begin(), layers.end()));
  return layers;
}
template <class Model>
std::vector<float> to_flat(const Model& model, const Layers& layers) {
  std::vector<float> flat(model.layout().param_count());
  layers_to_llmc_order(model.layout(), std::vector<std::span<const float>>(layers.begin(), layers.end()), flat);
  return flat;
}

inline bool bitwise_equal(const Layers& a, const Layers& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t l = 0; l < a.size(); ++l)
    if (a[l].size() != b[l].size() || std::memcmp(a[l].data(), b[l].data(), a[l].size() * sizeof(float)) != 0)
      return false;
  return true;
}

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * double(b[i]);
    aa += double(a[i]) * double(a[i]);
    bb += double(b[i]) * double(b[i]);
  }
  return ab / std::sqrt(aa * bb);
}

// The engine options of the comparisons with a reference: seed 7, no gradient clipping.
inline EngineOptions reference_options() {
  EngineOptions opts;
  opts.seed = 7;
  opts.grad_clip = 0;
  return opts;
}

// The reference's loss of (parameters, inputs, targets).
using ReferenceLoss =
    std::function<double(const std::vector<double>&, const std::vector<int>&, const std::vector<int>&)>;

// `trials` random batches on `params(trial)`: the model's fp32 loss (forward, and again in the
// forward of the gradients) within `rtol` of the reference's. An engine of reference_options().
template <class Model>
void check_loss_trials(Model& model, int trials, int vocab, double rtol,
                       const std::function<std::vector<float>(std::uint32_t)>& params, const ReferenceLoss& reference) {
  const EngineOptions opts = reference_options();
  Engine engine(model, opts);
  std::mt19937 rng(11);
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  for (std::uint32_t trial = 0; trial < std::uint32_t(trials); ++trial) {
    const std::vector<float> p = params(trial);
    const auto inputs = random_tokens(rng, N, vocab);
    const auto targets = random_tokens(rng, N, vocab);
    engine.set_master_params(to_layers(model, p));
    model.set_batch(inputs, targets);
    engine.submit_forward();
    const double loss = model.mean_loss();
    const double expected = reference(std::vector<double>(p.begin(), p.end()), inputs, targets);
    INFO("trial " << trial << ": model " << std::setprecision(10) << loss << ", reference " << expected
                  << ", relative error " << std::abs(loss - expected) / std::abs(expected));
    CHECK(std::isfinite(loss));
    CHECK(std::abs(loss - expected) <= rtol * std::abs(expected));
    // The forward inside submit_gradients computes the same loss.
    engine.submit_gradients();
    CHECK(std::abs(model.mean_loss() - expected) <= rtol * std::abs(expected));
  }
}

// The gradient of one random batch (token 3 both an input and a target) at `params`.
struct BatchGradient {
  std::vector<int> inputs, targets;
  std::vector<float> grad;  // llm.c's order
};
template <class Model>
BatchGradient batch_gradient(Model& model, Engine& engine, const std::vector<float>& params, int vocab) {
  std::mt19937 rng(5);
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  BatchGradient g{random_tokens(rng, N, vocab), random_tokens(rng, N, vocab), {}};
  g.inputs[1] = 3;
  g.targets[6] = 3;
  engine.set_master_params(to_layers(model, params));
  model.set_batch(g.inputs, g.targets);
  engine.submit_gradients();
  g.grad = to_flat(model, engine.gradients());
  REQUIRE(g.grad.size() == params.size());
  return g;
}

// Every element of `grad` against central differences of `loss` at `params` (step `step`):
// |grad − fd| <= rtol·|fd| + atol, and most gradients clearly non-zero. `name(k)` for messages.
inline void check_finite_differences(const std::vector<float>& grad, const std::vector<float>& params,
                                     const std::function<double(const std::vector<double>&)>& loss, double rtol,
                                     double atol, double step, const std::function<std::string(std::size_t)>& name) {
  std::vector<double> p(params.begin(), params.end());
  std::size_t failures = 0, significant = 0;
  double worst = 0;
  std::ostringstream report;
  for (std::size_t k = 0; k < p.size(); ++k) {
    const double saved = p[k];
    p[k] = saved + step;
    const double up = loss(p);
    p[k] = saved - step;
    const double down = loss(p);
    p[k] = saved;
    const double fd = (up - down) / (2 * step);
    const double err = std::abs(double(grad[k]) - fd);
    const double bound = rtol * std::abs(fd) + atol;
    if (std::abs(fd) > 1e-4) ++significant;
    worst = std::max(worst, err / bound);
    if (!(err <= bound) && ++failures <= 20) report << name(k) << ": engine " << grad[k] << ", fd " << fd << "\n";
  }
  INFO("parameters " << p.size() << ", |fd| > 1e-4: " << significant << ", worst err/bound " << worst);
  INFO("first failures:\n" << report.str());
  CHECK(failures == 0);
  // Not vacuous: most parameters have a clearly non-zero gradient.
  CHECK(significant > p.size() / 2);
}

// Tolerances of check_finite_differences: |grad − fd| <= rtol·|fd| + atol, differences of `step`.
struct FdTolerance {
  double rtol, atol, step;
};
// The fp32 models' against their double references.
inline constexpr FdTolerance kReferenceFd{1e-3, 1e-5, 1e-5};

// The fp32 gradient of one random batch (batch_gradient, an engine of reference_options()) at
// `params`, every element checked against central differences of the reference's loss on that
// batch (check_finite_differences); the batch and the gradient, for checks of their own.
template <class Model>
BatchGradient check_reference_gradient(Model& model, const std::vector<float>& params, int vocab,
                                       const ReferenceLoss& reference, const FdTolerance& tolerance,
                                       const std::function<std::string(std::size_t)>& name) {
  const EngineOptions opts = reference_options();
  Engine engine(model, opts);
  BatchGradient g = batch_gradient(model, engine, params, vocab);
  check_finite_differences(
      g.grad, params, [&](const std::vector<double>& p) { return reference(p, g.inputs, g.targets); },
      tolerance.rtol, tolerance.atol, tolerance.step, name);
  return g;
}

// The loss of the model's default initialisation (engine seed 2024) on one batch of random tokens
// (drawn from seed 3): about ln(vocab) when the initial logits are small.
template <class Model>
double initial_loss(Model& model, int vocab) {
  EngineOptions opts;
  opts.seed = 2024;
  Engine engine(model, opts);
  std::mt19937 rng(3);
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  model.set_batch(random_tokens(rng, N, vocab), random_tokens(rng, N, vocab));
  engine.submit_forward();
  return model.mean_loss();
}

// `steps` AdamW steps at `lr` (engine seed 1) on one batch of random tokens (drawn from seed
// 17), memorised: the loss before, after, and every 25 steps (of the parameters before the step).
struct OverfitResult {
  double initial, final;
  std::string trajectory;  // " 25:<loss> 50:<loss> ..."
};
template <class Model>
OverfitResult overfit_one_batch(Model& model, int vocab, int steps, float lr) {
  EngineOptions opts;
  opts.seed = 1;
  Engine engine(model, opts);
  std::mt19937 rng(17);
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  const auto inputs = random_tokens(rng, N, vocab);
  const auto targets = random_tokens(rng, N, vocab);
  OverfitResult result{};
  model.set_batch(inputs, targets);
  engine.submit_forward();
  result.initial = model.mean_loss();
  std::ostringstream trajectory;
  for (int step = 1; step <= steps; ++step) {
    model.set_batch(inputs, targets);
    engine.submit_step(lr, step);
    if (step % 25 == 0) trajectory << " " << step << ":" << model.mean_loss();
  }
  model.set_batch(inputs, targets);
  engine.submit_forward();
  result.final = model.mean_loss();
  result.trajectory = trajectory.str();
  return result;
}

// Per token of the vocabulary: whether it is one of the batch's inputs, and the sum of |gradient|
// over its embedding row (rows of `channels` from `offset` of the flat gradient).
struct EmbeddingRows {
  std::vector<bool> is_input;
  std::vector<double> magnitude;
};
inline EmbeddingRows embedding_rows(const BatchGradient& g, int vocab, std::size_t channels, std::size_t offset) {
  EmbeddingRows rows{std::vector<bool>(std::size_t(vocab), false), std::vector<double>(std::size_t(vocab), 0.0)};
  for (int t : g.inputs) rows.is_input[std::size_t(t)] = true;
  for (std::size_t v = 0; v < std::size_t(vocab); ++v)
    for (std::size_t c = 0; c < channels; ++c) rows.magnitude[v] += std::abs(double(g.grad[offset + v * channels + c]));
  return rows;
}

// The same parameters and batch in bf16 and fp32 (models made by `make(dtype)`): the losses
// within `loss_rtol`, the bf16 gradients finite and their cosine with fp32's above `min_cosine`.
template <class Model>
void check_bf16_follows_fp32(const std::function<std::unique_ptr<Model>(DType)>& make, const std::vector<float>& params,
                             int vocab, double loss_rtol, double min_cosine) {
  const EngineOptions opts = reference_options();
  std::mt19937 rng(9);
  std::vector<int> inputs, targets;
  auto loss_and_grad = [&](DType dtype) {
    const std::unique_ptr<Model> model = make(dtype);
    if (inputs.empty()) {
      const std::size_t N = std::size_t(model->batch()) * std::size_t(model->seq());
      inputs = random_tokens(rng, N, vocab);
      targets = random_tokens(rng, N, vocab);
    }
    Engine engine(*model, opts);
    engine.set_master_params(to_layers(*model, params));
    model->set_batch(inputs, targets);
    engine.submit_gradients();
    const double loss = model->mean_loss();
    return std::make_pair(loss, to_flat(*model, engine.gradients()));
  };
  const auto [loss32, grad32] = loss_and_grad(DType::f32);
  const auto [loss16, grad16] = loss_and_grad(DType::bf16);
  INFO("fp32 loss " << std::setprecision(8) << loss32 << ", bf16 loss " << loss16);
  CHECK(std::abs(loss16 - loss32) <= loss_rtol * std::abs(loss32));
  CHECK(std::all_of(grad16.begin(), grad16.end(), [](float g) { return std::isfinite(g); }));
  const double cos = cosine(grad16, grad32);
  INFO("gradient cosine similarity " << cos);
  CHECK(cos > min_cosine);
}

}  // namespace starzero::testing
