#pragma once
// BlockActivationStorage: the activation tensors of one micro-batch as models/gpt.cpp and
// models/llama.cpp hold them. It owns every tensor (the model's own, and its blocks'), lays out
// the blocks' forward tensors under an ActivationPolicy (offload/footprint.hpp) — kept per block,
// with a pinned host home for the offloaded blocks, or shared in slots — and their gradients in
// shared slots, and counts the bytes that stay on the device and those offloaded. Each model
// keeps its own tables of tensor kinds and makes the tensors (the callables of make_blocks).
#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "offload/footprint.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

class BlockActivationStorage {
 public:
  // Gradient slots: block b's backward writes slot b % 2 and the dresidual3 of slot (b − 1) % 2.
  static constexpr int kGradientSlots = 2;

  // One block's tensors, in the order of the model's tables: forward kinds, then gradients.
  struct BlockTensors {
    std::vector<Tensor*> forward, gradients;
  };

  // The storage of a model of `layers` blocks under `policy`: the kept tensors of the first
  // offloaded_blocks(policy, layers) blocks are offloaded (--offload-activations cpu).
  BlockActivationStorage(int layers, const ActivationPolicy& policy)
      : offloaded_(offloaded_blocks(policy, layers)), kept_(std::size_t(layers)) {}

  // Stores `tensor`; the reference stays valid as long as the storage (a deque never moves its
  // elements when it grows at the back).
  Tensor& keep(Tensor tensor) {
    tensors_.push_back(std::move(tensor));
    return tensors_.back();
  }

  // Makes every block's tensors, block by block, each block's forward kinds and then its
  // gradients in table order: that is the order in which StarPU registers their handles.
  // `kinds`: elements with a `name`; `gradients`: elements whose first member is the name.
  // A forward kind that `kept_per_block(kind)` is the block's own, "<name>[b]", made with a host
  // home when the block is offloaded; else block b shares slot b % forward_slots's,
  // "<name>_slot[s]", made on first use. Gradients: slot b % kGradientSlots's, "<name>[s]".
  // make_forward(kind index, name, host) and make_gradient(gradient index, name) return a Tensor.
  template <class Kinds, class Gradients, class KeptPerBlock, class MakeForward, class MakeGradient>
  std::vector<BlockTensors> make_blocks(const Kinds& kinds, const Gradients& gradients, int forward_slots,
                                        KeptPerBlock kept_per_block, MakeForward make_forward,
                                        MakeGradient make_gradient) {
    const int layers = int(kept_.size());
    // [slot][kind]: null until a block of that slot first needs it.
    std::vector<std::vector<Tensor*>> forward_slot_tensors(std::size_t(forward_slots),
                                                           std::vector<Tensor*>(std::size(kinds)));
    std::vector<std::vector<Tensor*>> gradient_slot_tensors(kGradientSlots, std::vector<Tensor*>(std::size(gradients)));
    std::vector<BlockTensors> blocks(kept_.size());
    for (int b = 0; b < layers; ++b) {
      BlockTensors& block = blocks[std::size_t(b)];
      std::size_t i = 0;
      for (const auto& kind : kinds) {
        if (kept_per_block(kind)) {
          block.forward.push_back(&keep(make_forward(i, indexed(kind.name, b), b < offloaded_)));
          kept_[std::size_t(b)].push_back(block.forward.back());
        } else {
          // GPT has no forward slots with --recompute none, where it keeps every kind per block.
          if (forward_slots < 1) throw std::logic_error(std::string(kind.name) + " is in a slot, but there are none");
          const int slot = b % forward_slots;
          Tensor*& shared = forward_slot_tensors[std::size_t(slot)][i];
          if (!shared) shared = &keep(make_forward(i, indexed(std::string(kind.name) + "_slot", slot), false));
          block.forward.push_back(shared);
        }
        ++i;
      }
      i = 0;
      for (const auto& gradient : gradients) {
        const int slot = b % kGradientSlots;
        Tensor*& shared = gradient_slot_tensors[std::size_t(slot)][i];
        if (!shared) shared = &keep(make_gradient(i, indexed(std::get<0>(gradient), slot)));
        block.gradients.push_back(shared);
        ++i;
      }
    }
    return blocks;
  }

  // Blocks whose kept tensors are offloaded: the first offloaded().
  int offloaded() const { return offloaded_; }
  // What block b keeps for its backward (its own forward tensors, in table order).
  const std::vector<const Tensor*>& kept(int block) const { return kept_[std::size_t(block)]; }

  // Bytes of every tensor and of `scratch_bytes` but the offloaded ones: what a micro-batch's
  // activations take on the device (StarPU allocates a transient tensor where it is first written
  // and keeps it for the run).
  std::size_t bytes(std::size_t scratch_bytes) const {
    std::size_t total = scratch_bytes;
    for (const Tensor& tensor : tensors_) total += tensor.bytes();
    return total - offloaded_bytes();
  }
  // The offloaded blocks' kept tensors, whose home is pinned host memory.
  std::size_t offloaded_bytes() const {
    std::size_t total = 0;
    for (int b = 0; b < offloaded_; ++b)
      for (const Tensor* tensor : kept_[std::size_t(b)]) total += tensor->bytes();
    return total;
  }

 private:
  static std::string indexed(std::string_view name, int index) {
    return std::string(name) + "[" + std::to_string(index) + "]";
  }

  std::deque<Tensor> tensors_;
  int offloaded_;
  std::vector<std::vector<const Tensor*>> kept_;  // per block
};

}  // namespace starzero
