// `starzero-mlp`: a small model that is not GPT, trained by the same ZeRO engine.
//
// The engine only sees a starzero::Model (offload/model.hpp): layers, one flat parameter block
// each, and functions that submit a layer's tasks. This program defines its own model with the
// generic codelets (tasks/gpt_codelets.hpp) and trains it with any ZeRO stage, on one rank or
// on the ranks of mpirun, like `starzero train`.
//
// The task: learn a fixed random mapping token -> label, a permutation of V = 64 classes drawn
// from the seed. The model, a token classifier:
//   layer 0        embedding [wte V·C | wpe 1·C]: x0 = wte[token] + wpe[0] (encoder, T = 1)
//   layers 1..K    residual MLP blocks [W C·C | b C]: x_k = x_{k-1} + gelu(x_{k-1}·Wᵀ + b)
//   layer K+1      classifier head [W V·C | b V]: logits = x_K·Wᵀ + b, softmax cross-entropy
// No weight tying: no layer touches another's parameters (shared_groups() stays empty).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/cli.hpp"
#include "examples/ranks.hpp"
#include "offload/engine.hpp"
#include "offload/model.hpp"
#include "runtime/comm.hpp"
#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/gpt_codelets.hpp"

namespace starzero {
namespace {

constexpr int kClasses = 64;  // V: tokens and labels

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// ---- the model ---------------------------------------------------------------------------------

class TokenClassifier final : public Model {
 public:
  // Activations for micro-batches of `batch` tokens.
  TokenClassifier(int vocab, int hidden, int blocks, int batch)
      : vocab_(vocab),
        hidden_(hidden),
        blocks_(blocks),
        dims_{DType::f32, batch, /*T=*/1, hidden, /*NH=*/1, vocab, vocab},
        tokens_(Tensor::transient(DType::i32, rows(), "tokens")),
        labels_(Tensor::transient(DType::i32, rows(), "labels")),
        embedded_(activation(hidden, "embedded", 0)),
        dembedded_(activation(hidden, "dembedded", 0)),
        logits_(activation(vocab, "logits", 0)),
        dlogits_(activation(vocab, "dlogits", 0)),
        probs_(activation(vocab, "probs", 0)),
        losses_(Tensor::host(DType::f32, rows(), "losses")) {
    block_activations_.reserve(std::size_t(blocks));
    for (int b = 0; b < blocks; ++b) block_activations_.emplace_back(*this, b);
  }

  int layers() const override { return blocks_ + 2; }
  int head_layer() const { return blocks_ + 1; }

  std::size_t layer_params(int layer) const override {
    const std::size_t V = std::size_t(vocab_), C = std::size_t(hidden_);
    if (layer == 0) return V * C + C;                // wte, wpe
    if (layer <= blocks_) return C * C + C;          // W, b
    if (layer == head_layer()) return V * C + V;     // W, b
    throw std::out_of_range("layer " + std::to_string(layer) + " out of range");
  }

  std::string layer_name(int layer) const override {
    if (layer == 0) return "embedding";
    if (layer <= blocks_) return at("block", layer - 1);
    return "classifier";
  }

  DType dtype() const override { return DType::f32; }

  // Weights N(0, 0.05), biases zero.
  void init_layer(int layer, std::span<float> block, std::uint64_t seed) const override {
    if (block.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong block size");
    std::mt19937_64 rng(seed * 1000003u + std::uint64_t(layer));
    std::normal_distribution<float> normal(0.0f, 0.05f);
    const std::size_t weights = layer == 0 ? block.size() : block.size() - bias_count(layer);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = i < weights ? normal(rng) : 0.0f;
  }

  void submit_forward(int layer, const GroupHandles& groups) override {
    if (layer == 0) {
      tasks::submit_zero(dembedded_.handle(), "zero_dembedded");
      tasks::submit_encoder_forward(dims_, embedded_.handle(), tokens_.handle(), groups.param(0), 0, wte_size(),
                                    "embedding_fwd");
    } else if (layer <= blocks_) {
      submit_block_forward(layer - 1, groups);
    } else {
      tasks::submit_zero(dlogits_.handle(), "zero_dlogits");
      tasks::submit_matmul_forward(dims_, logits_.handle(), top_output().handle(), head_weight(groups.param(layer)),
                                   hidden_, vocab_, "classifier_fwd");
      tasks::submit_crossentropy_forward(dims_, losses_.handle(), probs_.handle(), logits_.handle(),
                                         labels_.handle(), "crossentropy_fwd");
    }
  }

  void submit_backward(int layer, const GroupHandles& groups) override {
    if (layer == 0) {
      tasks::submit_encoder_backward(dims_, groups.grad(0), 0, wte_size(), dembedded_.handle(), tokens_.handle(),
                                     "embedding_bwd");
    } else if (layer <= blocks_) {
      submit_block_backward(layer - 1, groups);
    } else {
      tasks::submit_crossentropy_backward(dims_, dlogits_.handle(), probs_.handle(), labels_.handle(),
                                          "crossentropy_bwd");
      tasks::submit_matmul_backward(dims_, top_output_grad().handle(), groups.grad(layer), dlogits_.handle(),
                                    top_output().handle(), head_weight(groups.param(layer)), hidden_, vocab_,
                                    "classifier_bwd");
    }
  }

  // Submits the copy of one micro-batch's tokens and labels (asynchronous tasks).
  void set_batch(std::span<const int> tokens, std::span<const int> labels) {
    if (tokens.size() != rows() || labels.size() != rows())
      throw std::invalid_argument("set_batch: need " + std::to_string(rows()) + " tokens and labels");
    tasks::submit_load_tokens(tokens_.handle(), tokens.data(), rows(), "load_tokens");
    tasks::submit_load_tokens(labels_.handle(), labels.data(), rows(), "load_labels");
  }

  // Per-row cross-entropy of the last forward pass (waits for it).
  std::vector<float> losses() const {
    auto view = losses_.view(Access::read);
    const auto values = view.as<float>();
    return {values.begin(), values.end()};
  }
  double mean_loss() const {
    double sum = 0;
    for (float loss : losses()) sum += loss;
    return sum / double(rows());
  }
  // Per row, the class of highest softmax probability after the last forward pass (waits for it).
  std::vector<int> predictions() const {
    auto view = probs_.view(Access::read);
    const float* probs = view.as<float>().data();
    std::vector<int> classes(rows());
    for (std::size_t r = 0; r < rows(); ++r) {
      const float* row = probs + r * std::size_t(vocab_);
      classes[r] = int(std::max_element(row, row + vocab_) - row);
    }
    return classes;
  }

  std::size_t rows() const { return std::size_t(dims_.N()); }

 private:
  // One block's activations and their gradients: h = x·Wᵀ + b, g = gelu(h), out = x + g.
  struct BlockActivations {
    Tensor h, g, out;
    Tensor dh, dg, dout;
    BlockActivations(const TokenClassifier& m, int block)
        : h(m.activation(m.hidden_, "h", block)),
          g(m.activation(m.hidden_, "g", block)),
          out(m.activation(m.hidden_, "out", block)),
          dh(m.activation(m.hidden_, "dh", block)),
          dg(m.activation(m.hidden_, "dg", block)),
          dout(m.activation(m.hidden_, "dout", block)) {}
    // What a block's backward (and the layer above it) accumulates into: zeroed every forward.
    std::vector<const Tensor*> gradients() const { return {&dh, &dg, &dout}; }
  };

  Tensor activation(int width, const char* name, int block) const {
    return Tensor::transient(DType::f32, rows() * std::size_t(width), at(name, block));
  }
  std::size_t wte_size() const { return std::size_t(vocab_) * std::size_t(hidden_); }
  std::size_t bias_count(int layer) const { return layer == head_layer() ? std::size_t(vocab_) : std::size_t(hidden_); }

  tasks::WeightRef block_weight(starpu_data_handle_t params) const {
    return {params, 0, (long long)(std::size_t(hidden_) * std::size_t(hidden_))};
  }
  tasks::WeightRef head_weight(starpu_data_handle_t params) const { return {params, 0, (long long)wte_size()}; }

  // The input of block b (and its gradient): the embedding or the block below.
  const Tensor& block_input(int b) const { return b == 0 ? embedded_ : block_activations_[std::size_t(b - 1)].out; }
  const Tensor& block_input_grad(int b) const {
    return b == 0 ? dembedded_ : block_activations_[std::size_t(b - 1)].dout;
  }
  const Tensor& top_output() const { return block_input(blocks_); }
  const Tensor& top_output_grad() const { return block_input_grad(blocks_); }

  void submit_block_forward(int b, const GroupHandles& groups) {
    const BlockActivations& a = block_activations_[std::size_t(b)];
    const Tensor& x = block_input(b);
    for (const Tensor* gradient : a.gradients()) tasks::submit_zero(gradient->handle(), "zero_" + gradient->name());
    tasks::submit_matmul_forward(dims_, a.h.handle(), x.handle(), block_weight(groups.param(b + 1)), hidden_,
                                 hidden_, at("fc_fwd", b));
    tasks::submit_gelu_forward(dims_, a.g.handle(), a.h.handle(), at("gelu_fwd", b));
    tasks::submit_residual_forward(dims_, a.out.handle(), x.handle(), a.g.handle(), at("residual_fwd", b));
  }

  void submit_block_backward(int b, const GroupHandles& groups) {
    const BlockActivations& a = block_activations_[std::size_t(b)];
    const Tensor& x = block_input(b);
    const Tensor& dx = block_input_grad(b);
    tasks::submit_residual_backward(dims_, dx.handle(), a.dg.handle(), a.dout.handle(), at("residual_bwd", b));
    tasks::submit_gelu_backward(dims_, a.dh.handle(), a.h.handle(), a.dg.handle(), at("gelu_bwd", b));
    tasks::submit_matmul_backward(dims_, dx.handle(), groups.grad(b + 1), a.dh.handle(), x.handle(),
                                  block_weight(groups.param(b + 1)), hidden_, hidden_, at("fc_bwd", b));
  }

  int vocab_, hidden_, blocks_;
  tasks::GptDims dims_;
  Tensor tokens_, labels_;
  Tensor embedded_, dembedded_;
  std::vector<BlockActivations> block_activations_;
  Tensor logits_, dlogits_, probs_, losses_;
};

// ---- the data: a fixed random permutation, random batches -------------------------------------

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
std::vector<int> random_tokens(int B, int V, std::uint64_t seed, int step) {
  std::mt19937_64 rng(seed * 7919u + std::uint64_t(step));
  std::vector<int> tokens(static_cast<std::size_t>(B));
  for (int& t : tokens) t = int(rng() % std::uint64_t(V));
  return tokens;
}

// ---- ranks and flags (as `starzero train` does) -------------------------------------------------

int int_flag(const cli::ArgParser& p, const char* name, std::int64_t fallback, std::int64_t min_value,
             std::int64_t max_value = std::int64_t{1} << 30) {
  const auto v = p.value(name);
  const std::int64_t value = v ? cli::parse_count(std::string("--") + name, *v) : fallback;
  if (value < min_value || value > max_value)
    throw UsageError(std::string("--") + name + ": " + std::to_string(value) + " is out of range (" +
                     std::to_string(min_value) + ".." + std::to_string(max_value) + ")");
  return int(value);
}

cli::ArgParser make_parser() {
  cli::ArgParser p("starzero-mlp");
  p.option("blocks", "K", "residual MLP blocks (default 3)")
      .option("hidden", "C", "hidden size (default 32)")
      .option("batch", "B", "tokens per step, divisible by the ranks (default 16)")
      .option("steps", "N", "optimizer steps (default 200)")
      .option("lr", "LR", "AdamW learning rate, constant (default 1e-2)")
      .option("stage", "S", "ZeRO stage 0..3 across the ranks of mpirun (default 0)")
      .option("prefetch-depth", "W", "ZeRO-3: layers all-gathered ahead (default 1)")
      .option("offload-optimizer", "WHERE", "none (default) or cpu: optimizer state in pinned host memory, CPU AdamW")
      .option("seed", "S", "initialisation, permutation and batches (default 1337)")
      .option("cpu-workers", "N", "StarPU CPU workers (default: one per core)")
      .option("cuda-workers", "N", "StarPU CUDA workers (default: one per GPU)")
      .flag("help", "show this help");
  return p;
}

// Loss summed and correct predictions counted over all V tokens, in forward passes of the
// global batch (each rank its rows; padding rows beyond V are ignored); summed over ranks.
std::vector<float> evaluate_all_tokens(TokenClassifier& model, Engine& engine, const std::vector<int>& label_of,
                                       const DataParallelRanks& ranks) {
  const int V = int(label_of.size());
  const int local = int(model.rows()), global = local * ranks.size();
  std::vector<float> loss_and_correct = {0.0f, 0.0f};
  for (int first = 0; first < V; first += global) {
    std::vector<int> tokens(std::size_t(local), 0), labels(std::size_t(local), label_of[0]);
    for (int r = 0; r < local; ++r) {
      const int token = first + ranks.rank() * local + r;
      if (token >= V) continue;
      tokens[std::size_t(r)] = token;
      labels[std::size_t(r)] = label_of[std::size_t(token)];
    }
    model.set_batch(tokens, labels);
    engine.submit_forward();
    const std::vector<float> losses = model.losses();
    const std::vector<int> predicted = model.predictions();
    for (int r = 0; r < local; ++r) {
      if (first + ranks.rank() * local + r >= V) continue;
      loss_and_correct[0] += losses[std::size_t(r)];
      loss_and_correct[1] += predicted[std::size_t(r)] == labels[std::size_t(r)] ? 1.0f : 0.0f;
    }
  }
  ranks.sum(loss_and_correct);
  return loss_and_correct;
}

int run(const cli::ArgParser& p) {
  const int blocks = int_flag(p, "blocks", 3, 0);
  const int hidden = int_flag(p, "hidden", 32, 1);
  const int B = int_flag(p, "batch", 16, 1);
  const int steps = int_flag(p, "steps", 200, 1);
  const float lr = float(p.value("lr") ? cli::parse_number("--lr", *p.value("lr")) : 1e-2);
  const int stage = int_flag(p, "stage", 0, 0, 3);
  const int prefetch_depth = int_flag(p, "prefetch-depth", 1, 0);
  const std::uint64_t seed = std::uint64_t(int_flag(p, "seed", 1337, 0));
  const bool offload =
      cli::parse_choice("--offload-optimizer", p.value("offload-optimizer").value_or("none"), {"none", "cpu"}) == "cpu";
  SessionOptions session_options;
  if (p.given("cpu-workers")) session_options.cpu_workers = int_flag(p, "cpu-workers", 0, 0);
  if (p.given("cuda-workers")) session_options.cuda_workers = int_flag(p, "cuda-workers", 0, 0);
  const int world = DataParallelRanks::world_size();
  if (B % world != 0)
    throw UsageError("--batch " + std::to_string(B) + " must be divisible by the " + std::to_string(world) + " ranks");

  const DataParallelRanks ranks;
  // With several ranks, an error on one must end them all (the others would wait in a
  // collective forever): MPI_Abort instead of unwinding into MPI_Finalize.
  try {
    session_options.trace_rank = ranks.rank();
    Session session(session_options);
    const int local_batch = B / world;
    TokenClassifier model(kClasses, hidden, blocks, local_batch);
    EngineOptions options;
    options.seed = seed;
    options.stage = stage;
    options.prefetch_depth = prefetch_depth;
    options.comm = ranks.engine_comm();
    if (offload) options.offload_optimizer = OptimizerOffload::cpu;
    Engine engine(model, options);
    if (ranks.leader())
      std::printf("starzero-mlp: %d classes, %d blocks, hidden %d, %zu parameters, batch %d on %d rank(s), ZeRO-%d%s\n",
                  kClasses, blocks, hidden, engine.parameter_count(), B, world, stage,
                  offload ? ", optimizer offloaded to the CPU" : "");

    const std::vector<int> label_of = random_permutation(kClasses, seed);
    for (int step = 1; step <= steps; ++step) {
      const std::vector<int> tokens = random_tokens(B, kClasses, seed, step);
      std::vector<int> mine(tokens.begin() + std::ptrdiff_t(ranks.rank() * local_batch),
                            tokens.begin() + std::ptrdiff_t((ranks.rank() + 1) * local_batch));
      std::vector<int> labels;
      for (int token : mine) labels.push_back(label_of[std::size_t(token)]);
      model.set_batch(mine, labels);
      engine.submit_step(lr, step);
      std::vector<float> loss = {float(model.mean_loss())};
      ranks.sum(loss);
      const double mean = double(loss[0]) / ranks.size();
      if (!std::isfinite(mean)) throw std::runtime_error("loss is " + std::to_string(mean) + " at step " + std::to_string(step));
      if (ranks.leader()) std::printf("step %d | loss %.6f\n", step, mean);
    }

    // Final loss and accuracy over all V tokens, after training.
    const std::vector<float> totals = evaluate_all_tokens(model, engine, label_of, ranks);
    if (ranks.leader()) {
      std::printf("final loss %.6f\n", double(totals[0]) / kClasses);
      std::printf("accuracy %.4f\n", double(totals[1]) / kClasses);
      std::fflush(stdout);
    }
    session.wait_all();
    return 0;
  } catch (const std::exception& e) {
    if (world > 1) {
      const bool usage = dynamic_cast<const UsageError*>(&e) || dynamic_cast<const std::invalid_argument*>(&e);
      std::fprintf(stderr, "starzero-mlp: rank %d of %d %s: %s\n", ranks.rank(), world, usage ? "error" : "failed",
                   e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, usage ? 2 : 1);
    }
    throw;
  }
}

}  // namespace
}  // namespace starzero

int main(int argc, char** argv) {
  using namespace starzero;
  cli::ArgParser parser = make_parser();
  try {
    parser.parse(argc, argv);
    if (parser.flag_set("help")) {
      std::printf("usage: starzero-mlp [options]\n\noptions:\n%s", parser.options_help().c_str());
      return 0;
    }
    return run(parser);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "starzero-mlp: error: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "starzero-mlp: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "starzero-mlp: failed: %s\n", e.what());
    return 1;
  }
}
