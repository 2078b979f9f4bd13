#include "models/mlp.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "tasks/elementwise.hpp"

namespace starzero {

namespace {

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// label_of[token]: a permutation of 0..V-1 drawn from the seed (Fisher-Yates with our own
// draws, so every standard library gives the same one).
std::vector<int> random_permutation(int V, std::uint64_t seed) {
  std::vector<int> p(static_cast<std::size_t>(V));
  std::iota(p.begin(), p.end(), 0);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  for (int i = V - 1; i > 0; --i) std::swap(p[std::size_t(i)], p[std::size_t(rng() % std::uint64_t(i + 1))]);
  return p;
}

// The B tokens of step `step` (a function of seed and step only).
std::vector<int> random_tokens(int B, int V, std::uint64_t seed, std::uint64_t step) {
  std::mt19937_64 rng(seed * 7919u + step);
  std::vector<int> tokens(static_cast<std::size_t>(B));
  for (int& t : tokens) t = int(rng() % std::uint64_t(V));
  return tokens;
}

}  // namespace

std::size_t MlpShape::layer_params(int layer) const {
  const std::size_t V = std::size_t(classes), C = std::size_t(hidden);
  if (layer == 0) return V * C + C;                     // wte, wpe
  if (layer >= 1 && layer <= blocks) return C * C + C;  // W, b
  if (layer == blocks + 1) return V * C + V;            // W, b
  throw std::out_of_range("MLP layer " + std::to_string(layer) + " out of range");
}

StateLayout MlpShape::state_layout() const {
  StateLayout layout;
  layout.shape_fields = {classes, hidden, blocks, 0, 0, 0};
  for (int l = 0; l < layers(); ++l) layout.layer_params.push_back(layer_params(l));
  return layout;
}

std::string MlpShape::to_string() const {
  return "V=" + std::to_string(classes) + " C=" + std::to_string(hidden) + " K=" + std::to_string(blocks);
}

// Activations and their gradients. Block b: h = x·Wᵀ + b, g = gelu(h), out = x + g.
struct TokenClassifier::Buffers {
  struct Block {
    Tensor h, g, out, dh, dg, dout;
  };
  Tensor tokens, labels, embedded, dembedded, logits, dlogits, probs, losses;
  std::vector<Block> blocks;

  Buffers(const tasks::Dims& d, int K)
      : tokens(Tensor::transient(DType::i32, rows(d), "tokens")),
        labels(Tensor::transient(DType::i32, rows(d), "labels")),
        embedded(activation(d, d.C, "embedded", 0)),
        dembedded(activation(d, d.C, "dembedded", 0)),
        logits(activation(d, d.V, "logits", 0)),
        dlogits(activation(d, d.V, "dlogits", 0)),
        probs(activation(d, d.V, "probs", 0)),
        losses(Tensor::host(DType::f32, rows(d), "losses")) {
    for (int b = 0; b < K; ++b)
      blocks.push_back(Block{activation(d, d.C, "h", b), activation(d, d.C, "g", b), activation(d, d.C, "out", b),
                             activation(d, d.C, "dh", b), activation(d, d.C, "dg", b), activation(d, d.C, "dout", b)});
  }
  static std::size_t rows(const tasks::Dims& d) { return std::size_t(d.N()); }
  static Tensor activation(const tasks::Dims& d, int width, const char* name, int block) {
    return Tensor::transient(DType::f32, rows(d) * std::size_t(width), at(name, block));
  }
  // The input of block b (and its gradient): the embedding or the block below.
  const Tensor& input(int b) const { return b == 0 ? embedded : blocks[std::size_t(b - 1)].out; }
  const Tensor& input_grad(int b) const { return b == 0 ? dembedded : blocks[std::size_t(b - 1)].dout; }
};

TokenClassifier::TokenClassifier(const MlpShape& shape, int batch, std::uint64_t seed)
    : shape_(shape),
      dims_{DType::f32, batch, /*T=*/1, shape.hidden, /*NH=*/1, shape.classes, shape.classes},
      seed_(seed),
      label_of_(random_permutation(shape.classes, seed)),
      buffers_(std::make_unique<Buffers>(dims_, shape.blocks)) {
  if (shape.classes < 2 || shape.hidden < 1 || shape.blocks < 0 || batch < 1)
    throw std::invalid_argument("MLP needs at least 2 classes, hidden >= 1, blocks >= 0 and batch >= 1");
}

TokenClassifier::~TokenClassifier() = default;

std::string TokenClassifier::layer_name(int layer) const {
  if (layer == 0) return "embedding";
  if (layer <= shape_.blocks) return at("block", layer - 1);
  return "classifier";
}

// Weights N(0, 0.05), biases zero.
void TokenClassifier::init_layer(int layer, std::span<float> params, std::uint64_t seed) const {
  if (params.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong parameter count");
  std::mt19937_64 rng(seed * 1000003u + std::uint64_t(layer));
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const std::size_t biases = layer == shape_.blocks + 1 ? std::size_t(shape_.classes) : std::size_t(shape_.hidden);
  const std::size_t weights = layer == 0 ? params.size() : params.size() - biases;
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = i < weights ? normal(rng) : 0.0f;
}

void TokenClassifier::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& a = *buffers_;
  const std::size_t wte = std::size_t(shape_.classes) * std::size_t(shape_.hidden);
  if (layer == 0) {
    tasks::submit_zero(a.dembedded.handle(), "zero_dembedded");
    tasks::submit_encoder_forward(dims_, a.embedded.handle(), a.tokens.handle(), groups.param(0), 0, wte,
                                  "embedding_fwd");
  } else if (layer <= shape_.blocks) {
    submit_block_forward(layer - 1, groups);
  } else {
    tasks::submit_zero(a.dlogits.handle(), "zero_dlogits");
    tasks::submit_matmul_forward(dims_, a.logits.handle(), a.input(shape_.blocks).handle(),
                                 {groups.param(layer), 0, (long long)wte}, shape_.hidden, shape_.classes,
                                 "classifier_fwd");
    tasks::submit_crossentropy_forward(dims_, a.losses.handle(), a.probs.handle(), a.logits.handle(), a.labels.handle(),
                                       "crossentropy_fwd");
  }
}

void TokenClassifier::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& a = *buffers_;
  const std::size_t wte = std::size_t(shape_.classes) * std::size_t(shape_.hidden);
  if (layer == 0) {
    tasks::submit_encoder_backward(dims_, groups.grad(0), 0, wte, a.dembedded.handle(), a.tokens.handle(),
                                   "embedding_bwd");
  } else if (layer <= shape_.blocks) {
    submit_block_backward(layer - 1, groups);
  } else {
    tasks::submit_crossentropy_backward(dims_, a.dlogits.handle(), a.probs.handle(), a.labels.handle(),
                                        "crossentropy_bwd", 1.0f / float(dims_.N()));
    tasks::submit_matmul_backward(dims_, a.input_grad(shape_.blocks).handle(), groups.grad(layer), a.dlogits.handle(),
                                  a.input(shape_.blocks).handle(), {groups.param(layer), 0, (long long)wte},
                                  shape_.hidden, shape_.classes, "classifier_bwd");
  }
}

void TokenClassifier::submit_block_forward(int b, const GroupHandles& groups) {
  const Buffers::Block& a = buffers_->blocks[std::size_t(b)];
  const Tensor& x = buffers_->input(b);
  const tasks::WeightRef weight{groups.param(b + 1), 0,
                                (long long)(std::size_t(shape_.hidden) * std::size_t(shape_.hidden))};
  // What the block's backward (and the layer above it) accumulates into: zeroed every forward.
  for (const Tensor* gradient : {&a.dh, &a.dg, &a.dout})
    tasks::submit_zero(gradient->handle(), "zero_" + gradient->name());
  tasks::submit_matmul_forward(dims_, a.h.handle(), x.handle(), weight, shape_.hidden, shape_.hidden, at("fc_fwd", b));
  tasks::submit_gelu_forward(dims_, a.g.handle(), a.h.handle(), at("gelu_fwd", b));
  tasks::submit_residual_forward(dims_, a.out.handle(), x.handle(), a.g.handle(), at("residual_fwd", b));
}

void TokenClassifier::submit_block_backward(int b, const GroupHandles& groups) {
  const Buffers::Block& a = buffers_->blocks[std::size_t(b)];
  const Tensor& x = buffers_->input(b);
  const Tensor& dx = buffers_->input_grad(b);
  const tasks::WeightRef weight{groups.param(b + 1), 0,
                                (long long)(std::size_t(shape_.hidden) * std::size_t(shape_.hidden))};
  tasks::submit_residual_backward(dims_, dx.handle(), a.dg.handle(), a.dout.handle(), at("residual_bwd", b));
  tasks::submit_gelu_backward(dims_, a.dh.handle(), a.h.handle(), a.dg.handle(), at("gelu_bwd", b));
  tasks::submit_matmul_backward(dims_, dx.handle(), groups.grad(b + 1), a.dh.handle(), x.handle(), weight,
                                shape_.hidden, shape_.hidden, at("fc_bwd", b));
}

void TokenClassifier::set_batch(std::span<const int> tokens, std::span<const int> labels) {
  const std::size_t rows = Buffers::rows(dims_);
  if (tokens.size() != rows || labels.size() != rows)
    throw std::invalid_argument("set_batch: need " + std::to_string(rows) + " tokens and labels");
  tasks::submit_load_tokens(buffers_->tokens.handle(), tokens.data(), rows, "load_tokens");
  tasks::submit_load_tokens(buffers_->labels.handle(), labels.data(), rows, "load_labels");
}

// This rank's rows of a global batch of tokens, with their labels.
void TokenClassifier::load_tokens(const std::vector<int>& global_tokens, const BatchRows& rows) {
  if (rows.count != dims_.B || rows.first < 0 || rows.first + rows.count > int(global_tokens.size()))
    throw std::invalid_argument("MLP: rows outside the global batch");
  const std::vector<int> mine(global_tokens.begin() + rows.first, global_tokens.begin() + rows.first + rows.count);
  std::vector<int> labels;
  for (int token : mine) labels.push_back(label_of_[std::size_t(token)]);
  set_batch(mine, labels);
}

void TokenClassifier::load_train_rows(std::uint64_t step, const BatchRows& rows) {
  load_tokens(random_tokens(rows.global, shape_.classes, seed_, step), rows);
}

std::size_t TokenClassifier::validation_batches(int global_rows) const {
  return global_rows > 0 ? std::size_t(shape_.classes / global_rows) : 0;
}

void TokenClassifier::load_validation_rows(std::size_t batch, const BatchRows& rows) {
  std::vector<int> tokens(std::size_t(rows.global));
  std::iota(tokens.begin(), tokens.end(), int(batch) * rows.global);
  load_tokens(tokens, rows);
}

double TokenClassifier::mean_loss() const {
  auto view = buffers_->losses.view(Access::read);
  double sum = 0;
  for (float loss : view.as<float>()) sum += loss;
  return sum / double(dims_.B);
}

std::optional<double> TokenClassifier::accuracy() const {
  auto probs_view = buffers_->probs.view(Access::read);
  auto labels_view = buffers_->labels.view(Access::read);
  const float* probs = probs_view.as<float>().data();
  int correct = 0;
  for (int r = 0; r < dims_.B; ++r) {
    const float* row = probs + std::size_t(r) * std::size_t(shape_.classes);
    correct += int(std::max_element(row, row + shape_.classes) - row) == labels_view.as<int>()[std::size_t(r)];
  }
  return double(correct) / double(dims_.B);
}

}  // namespace starzero
