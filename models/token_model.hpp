#pragma once
// The interface of a model fed token rows (models/transformer_model.hpp's TransformerModel):
// what a family's Trainable (models/transformer_family.hpp) and `starzero bench step` drive.
#include <cstddef>
#include <span>
#include <vector>

#include "offload/model.hpp"
#include "train/trainable.hpp"  // Tiling

namespace starzero {

// A Model fed token rows: what `bench step` and a family's Trainable drive (models/registry.hpp).
class TokenModel : public Model {
 public:
  // Sequences per micro-batch (B) and tokens per sequence (T).
  virtual int batch() const = 0;
  virtual int seq() const = 0;
  // How its ops are cut into tasks: the tile count, and the head groups of a model whose attention
  // is cut by heads (empty otherwise), as built (the automatic choices made).
  virtual Tiling tiling() const = 0;
  // Submits the copy of one micro-batch's B·T inputs and targets (asynchronous tasks).
  virtual void set_batch(std::span<const int> inputs, std::span<const int> targets) = 0;
  // Mean loss of the last forward pass; waits only for that pass's loss task.
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
