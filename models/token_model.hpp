#pragma once
// The interface of a model fed token rows (models/transformer_model.hpp's TransformerModel):
// what a family's Trainable (models/transformer_family.hpp) and `starzero bench step` drive.
#include <cstddef>
#include <span>
#include <vector>

#include "offload/model.hpp"
#include "tasks/loss_mask.hpp"
#include "train/trainable.hpp"  // Tiling, TargetCount

namespace starzero {

// The targets of `targets` and those that count (not masked: tasks/loss_mask.hpp).
inline TargetCount count_targets(std::span<const int> targets) {
  TargetCount count{targets.size(), 0};
  for (int id : targets) count.counted += is_masked_target(id) ? 0 : 1;
  return count;
}

// A Model fed token rows: what `bench step` and a family's Trainable drive (models/registry.hpp).
class TokenModel : public Model {
 public:
  // Sequences per micro-batch (B) and tokens per sequence (T).
  virtual int batch() const = 0;
  virtual int seq() const = 0;
  // How its ops are cut into tasks: the tile count, and the head groups of a model whose attention
  // is cut by heads (empty otherwise), as built (the automatic choices made).
  virtual Tiling tiling() const = 0;
  // Submits the copy of one micro-batch's B·T inputs and targets (asynchronous tasks), the
  // micro-batch a whole batch: its loss is the mean over its counted targets. A target may be
  // kMaskedTarget (tasks/loss_mask.hpp): that position is not learned (loss 0, no gradient, not
  // in the mean); every input and every other target is a token of the vocabulary.
  void set_batch(std::span<const int> inputs, std::span<const int> targets) {
    set_batch(inputs, targets, count_targets(targets));
  }
  // The same for one micro-batch of a global batch whose targets are `global`: mean_loss() and
  // the gradient are this micro-batch's share of the global batch's mean over its counted
  // targets, Σ (losses) · G / (N · counted) for N targets here and G there, so that their mean
  // over the G / N micro-batches of the global batch (the engine's and the trainer's) is that
  // mean. When nothing in the global batch is masked, the micro-batch's mean as it always was
  // (the same bits: the gradient of each loss 1/N).
  virtual void set_batch(std::span<const int> inputs, std::span<const int> targets, const TargetCount& global) = 0;
  // Mean loss of the last forward pass as set_batch weighs it; waits only for that pass's loss task.
  virtual double mean_loss() const = 0;
  // Softmax probabilities of position t of sequence b after the last forward pass (the first V
  // of them), for sampling; waits for that pass.
  virtual std::vector<float> probabilities(int b, int t) const = 0;
  // Bytes of one micro-batch's activation buffers, their gradients and scratch, as allocated,
  // that stay on the device; and what --offload-activations cpu keeps in pinned host memory
  // instead (not in the first).
  virtual std::size_t activation_bytes() const = 0;
  virtual std::size_t offloaded_activation_bytes() const = 0;
};

}  // namespace starzero
