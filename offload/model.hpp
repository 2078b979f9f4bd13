#pragma once
// What the engine needs of a model, and nothing more: a sequence of layers, each with one flat
// parameter array (its "group"), and functions that submit a layer's forward and backward
// tasks on the data handles the engine gives it. The engine walks the layers forward, then
// backward, and adds the collective and optimizer tasks around them (docs/architecture.md); it never
// looks inside a layer.
#include <starpu.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/dtype.hpp"

namespace starzero {

// The parameter and gradient handles of the groups, as the engine holds them for this step.
class GroupHandles {
 public:
  virtual ~GroupHandles() = default;
  // Full parameters of group g in the model's dtype (valid while the layer's tasks are
  // submitted; under ZeRO-3 the engine gathers them just before).
  virtual starpu_data_handle_t param(int group) const = 0;
  // Full gradient of group g: backward tasks ACCUMULATE into it (the engine zeroes it).
  virtual starpu_data_handle_t grad(int group) const = 0;
  // Piece `piece` of group g's gradient, when the engine split it as Model::gradient_pieces asked;
  // nullptr when the gradient is whole (the model then writes it through grad(g) only).
  virtual starpu_data_handle_t grad_piece(int group, std::size_t piece) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual int layers() const = 0;  // layers == parameter groups, in forward order
  virtual std::size_t layer_params(int layer) const = 0;
  virtual std::string layer_name(int layer) const = 0;
  virtual DType dtype() const = 0;  // parameters, gradients and activations

  // Groups other than its own whose parameters (and gradients) a layer's tasks touch, such as a
  // classifier tied to the embedding. The engine makes them available too.
  virtual std::vector<int> shared_groups(int /*layer*/) const { return {}; }

  // Consecutive element counts into which the engine may split a layer's gradient (they add up to
  // layer_params(layer)), so that backward tasks writing different pieces run at the same time
  // (StarPU sub-handles, as Tensor::split). Empty, the default: the gradient stays whole. The
  // engine splits only a gradient held in main memory for the whole run; elsewhere grad_piece()
  // is nullptr. Tasks that use the whole gradient (zeroing, reductions, AdamW) still may: StarPU
  // puts the pieces back together, which costs no copy in main memory.
  virtual std::vector<std::size_t> gradient_pieces(int /*layer*/) const { return {}; }

  // Initial fp32 values of one layer's parameters (deterministic from the seed and the layer).
  // The engine calls it for several layers at once, from several threads.
  virtual void init_layer(int layer, std::span<float> params, std::uint64_t seed) const = 0;

  // Submit the layer's tasks for the current micro-batch. Asynchronous: nothing waits.
  virtual void submit_forward(int layer, const GroupHandles& groups) = 0;
  virtual void submit_backward(int layer, const GroupHandles& groups) = 0;
};

}  // namespace starzero
