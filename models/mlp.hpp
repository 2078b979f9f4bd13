#pragma once
// A residual-MLP token classifier: a small model that is not GPT, trained by the same engine
// (it proves the engine and the trainer know only offload/model.hpp and train/trainable.hpp).
//
// The task: learn a fixed random mapping token -> label, a permutation of V = 64 classes drawn
// from the seed. One token per row (T = 1).
//   layer 0        embedding [wte V·C | wpe 1·C]: x0 = wte[token] + wpe[0] (encoder, T = 1)
//   layers 1..K    residual MLP blocks [W C·C | b C]: x_k = x_{k-1} + gelu(x_{k-1}·Wᵀ + b)
//   layer K+1      classifier head [W V·C | b V]: logits = x_K·Wᵀ + b, softmax cross-entropy
// No weight tying: no layer touches another's parameters (shared_groups() stays empty).
// Training rows of step s: V tokens drawn from (seed, s); validation: all V tokens in order.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"
#include "tasks/nn.hpp"
#include "train/state_layout.hpp"
#include "train/trainable.hpp"

namespace starzero {

struct MlpShape {
  int classes = 64;  // V: tokens and labels
  int hidden = 32;   // C
  int blocks = 3;    // K residual blocks
  std::size_t layer_params(int layer) const;
  int layers() const { return blocks + 2; }
  StateLayout state_layout() const;  // shape fields {V, C, K, 0, 0, 0}
  std::string to_string() const;     // "V=64 C=32 K=3"
};

class TokenClassifier final : public Trainable {
 public:
  // Micro-batches of `batch` tokens; training data drawn from `seed`.
  TokenClassifier(const MlpShape& shape, int batch, std::uint64_t seed);
  ~TokenClassifier() override;

  // Model
  int layers() const override { return shape_.layers(); }
  std::size_t layer_params(int layer) const override { return shape_.layer_params(layer); }
  std::string layer_name(int layer) const override;
  DType dtype() const override { return DType::f32; }
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override;
  void submit_forward(int layer, const GroupHandles& groups) override;
  void submit_backward(int layer, const GroupHandles& groups) override;

  // Trainable
  int micro_batch() const override { return dims_.B; }
  int row_tokens() const override { return 1; }
  void load_train_rows(std::uint64_t step, const BatchRows& rows) override;
  std::size_t validation_batches(int global_rows) const override;
  void load_validation_rows(std::size_t batch, const BatchRows& rows) override;
  double mean_loss() const override;
  std::optional<double> accuracy() const override;

  // Submits the copy of one micro-batch's tokens and labels (asynchronous tasks).
  void set_batch(std::span<const int> tokens, std::span<const int> labels);
  // The label of every token (the permutation drawn from the seed).
  const std::vector<int>& labels() const { return label_of_; }

 private:
  struct Buffers;
  void submit_block_forward(int block, const GroupHandles& groups);
  void submit_block_backward(int block, const GroupHandles& groups);
  void load_tokens(const std::vector<int>& global_tokens, const BatchRows& rows);

  MlpShape shape_;
  tasks::Dims dims_;
  std::uint64_t seed_;
  std::vector<int> label_of_;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace starzero
