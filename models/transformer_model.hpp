#pragma once
// What the transformer models (GptModel: models/gpt.hpp, LlamaModel: models/llama.hpp) share
// outside their blocks: the micro-batch's tokens in, the loss and the probabilities out, and the
// copies between the engine's per-layer arrays and llm.c's flat order (a layout's LlmcRun); and
// the base both derive from (TransformerModel), which holds the shape, the layout, the tiles and
// the activation policy and answers everything but the blocks' tasks.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/block_activations.hpp"
#include "models/gpt_layout.hpp"  // LlmcRun
#include "models/sequence_tiles.hpp"
#include "models/token_model.hpp"
#include "offload/footprint.hpp"
#include "offload/model.hpp"
#include "runtime/tensor.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/nn.hpp"

namespace starzero {

// Submits the load of one micro-batch's `count` inputs and targets into `tokens` and `targets`
// (tasks named `inputs_task` and "load_targets"); std::invalid_argument for a wrong count, a
// token outside 0..vocab-1 (a target may also be kMaskedTarget), or a `global` count of the
// global batch's targets that cannot hold these.
void submit_token_batch(const Tensor& tokens, const Tensor& targets, std::span<const int> inputs,
                        std::span<const int> target_ids, const TargetCount& global, std::size_t count, int vocab,
                        const std::string& inputs_task);

// How a micro-batch's N per-target losses make its loss and gradient (TokenModel::set_batch),
// its global batch's targets `global`: unmasked, the mean (Σ / N) and 1/N per loss, as without
// masks; masked, the share G / (N · counted) of each loss (0 when none counts).
class LossWeights {
 public:
  LossWeights(const TargetCount& global, std::size_t rows);
  // The cross-entropy backward's dloss (tasks/nn.hpp).
  float dloss() const;
  // The loss from the sum of the N losses, the masked ones 0.
  double loss(double sum) const;

 private:
  std::size_t rows_;
  bool masked_;
  double share_;  // masked: G / (N · counted), or 0
};

// The loss of the `losses` (fp32, waits for their writer) as `weights` makes it.
double loss_of(const Tensor& losses, const LossWeights& weights);
// Row (b, t) of the [B, T, width] fp32 `probs`, its first `vocab` values (waits for their
// writer); std::out_of_range outside B x T.
std::vector<float> probability_row(const Tensor& probs, int b, int t, int B, int T, int width, int vocab);

// Every piece of each tensor (the whole one when it is not split).
std::vector<starpu_data_handle_t> pieces_of(const std::vector<const Tensor*>& tensors);

// Offload (--offload-activations cpu, the first storage.offloaded() blocks), after block `block`'s
// forward: what the block keeps goes back to its pinned host home and its device copy may be
// evicted, but its `output` (the next block reads it first); its `input`, block − 1's output, now
// that this block has read it.
void submit_block_write_back(const BlockActivationStorage& storage, int block, const Tensor& input,
                             const Tensor& output);
// After block `block`'s backward: block − W − 1's kept activations and its input
// (`output_of(block − W − 2)`) come back, W + 1 blocks ahead at most; the gate is this backward's
// last output, `gate`.
void submit_block_fetch(const BlockActivationStorage& storage, int block, int window,
                        const std::function<const Tensor&(int)>& output_of, const Tensor& gate);

// The per-layer arrays (one per layer, of the layer's size) and the flat vector both match `layout`.
template <class Layout, class LayerValues>
void check_layer_sizes(const Layout& layout, const std::vector<LayerValues>& layers, std::size_t flat, const char* who) {
  bool ok = layers.size() == std::size_t(layout.layers()) && flat == layout.param_count();
  for (int l = 0; ok && l < layout.layers(); ++l) ok = layers[std::size_t(l)].size() == layout.layer_params(l);
  if (!ok) throw std::invalid_argument(std::string(who) + ": sizes do not match the model");
}

// The layers' arrays into llm.c's flat order, run by run.
template <class Layout>
void layers_to_llmc_order(const Layout& layout, const std::vector<std::span<const float>>& layers,
                          std::span<float> flat) {
  check_layer_sizes(layout, layers, flat.size(), "layers_to_llmc");
  for (int l = 0; l < layout.layers(); ++l)
    for (const LlmcRun& run : layout.layer_runs(l))
      std::copy_n(layers[std::size_t(l)].begin() + std::ptrdiff_t(run.layer_offset), run.count,
                  flat.begin() + std::ptrdiff_t(run.llmc_offset));
}

// llm.c's flat order into the layers' arrays.
template <class Layout>
void llmc_order_to_layers(const Layout& layout, std::span<const float> flat,
                          const std::vector<std::span<float>>& layers) {
  check_layer_sizes(layout, layers, flat.size(), "llmc_to_layers");
  for (int l = 0; l < layout.layers(); ++l)
    for (const LlmcRun& run : layout.layer_runs(l))
      std::copy_n(flat.begin() + std::ptrdiff_t(run.llmc_offset), run.count,
                  layers[std::size_t(l)].begin() + std::ptrdiff_t(run.layer_offset));
}

// A transformer of `Shape` laid out by `Layout` (GPT-2's, Llama 3's): layer 0 the embedding,
// layers 1..L the blocks, layer L+1 the head. The derived model allocates its buffers and submits
// the tasks; this base answers the rest from the buffers token_io() names.
template <class Shape, class Layout>
class TransformerModel : public TokenModel {
 public:
  int layers() const override { return shape_.layers + 2; }
  std::size_t layer_params(int layer) const override { return layout_.layer_params(layer); }
  DType dtype() const override { return dims_.dtype; }

  const Shape& shape() const { return shape_; }
  const Layout& layout() const { return layout_; }
  int batch() const override { return dims_.B; }
  int seq() const override { return dims_.T; }
  int tiles() const { return tiles_.count(); }
  Tiling tiling() const override { return {tiles(), std::nullopt}; }
  const ActivationPolicy& activation_policy() const { return activations_; }
  std::size_t activation_bytes() const override {
    const TokenIo io = token_io();
    return io.storage.bytes(io.scratch_bytes);
  }
  std::size_t offloaded_activation_bytes() const override { return token_io().storage.offloaded_bytes(); }

  using TokenModel::set_batch;
  void set_batch(std::span<const int> inputs, std::span<const int> targets, const TargetCount& global) override {
    const TokenIo io = token_io();
    submit_token_batch(io.tokens, io.targets, inputs, targets, global, std::size_t(dims_.N()), shape_.vocab,
                       load_task_);
    loss_weights_ = LossWeights(global, std::size_t(dims_.N()));
  }
  double mean_loss() const override { return loss_of(token_io().losses, loss_weights_); }
  std::vector<float> probabilities(int b, int t) const override {
    return probability_row(token_io().probs, b, t, dims_.B, dims_.T, dims_.Vp, dims_.V);
  }

  // llm.c's flat parameter order <-> the layers' arrays (the layout's runs).
  void layers_to_llmc(const std::vector<std::span<const float>>& layer_values, std::span<float> llmc) const {
    layers_to_llmc_order(layout_, layer_values, llmc);
  }
  void llmc_to_layers(std::span<const float> llmc, const std::vector<std::span<float>>& layer_values) const {
    llmc_order_to_layers(layout_, llmc, layer_values);
  }

 protected:
  // The buffers the base reads: the micro-batch's tokens and targets, the per-token losses, the
  // probabilities [B, T, dims.Vp], and the blocks' activation storage with the scratch bytes it
  // does not hold.
  struct TokenIo {
    const Tensor &tokens, &targets, &losses, &probs;
    const BlockActivationStorage& storage;
    std::size_t scratch_bytes;
  };

  // `dims`: the tasks' shapes for the whole micro-batch (its B the tiles' sum); `load_task`: the
  // name of set_batch's inputs task.
  TransformerModel(const Shape& shape, SequenceTiles tiles, const tasks::Dims& dims,
                   const ActivationPolicy& activations, std::string load_task)
      : shape_(shape),
        layout_(shape),
        activations_(activations),
        tiles_(std::move(tiles)),
        dims_(dims),
        load_task_(std::move(load_task)),
        loss_weights_(TargetCount{std::size_t(dims.N()), std::size_t(dims.N())}, std::size_t(dims.N())) {
    for (int n : tiles_.sequences()) {
      tile_dims_.push_back(dims_);
      tile_dims_.back().B = n;
    }
  }
  virtual TokenIo token_io() const = 0;

  // The cross-entropy backward's gradient per counted target of the micro-batch set last.
  float dloss() const { return loss_weights_.dloss(); }

  // `name`, with ".t<k>" when there is more than one tile.
  std::string tile_name(const std::string& name, int tile) const {
    return tiles_.count() == 1 ? name : name + ".t" + std::to_string(tile);
  }
  // "<op>[block]", with the tile suffix.
  std::string block_tile_name(const char* op, int block, int tile) const {
    return tile_name(std::string(op) + "[" + std::to_string(block) + "]", tile);
  }

  // The start of block `block`'s backward: its forward again (`recompute`) when the policy
  // recomputes, then the gradients it accumulates into zeroed: its own (`own`: its slot's, shared
  // with other blocks) and `dinput`, the gradient of the block below's output (or of the
  // embedding), which this backward is the first to write.
  void begin_block_backward(const std::vector<const Tensor*>& own, const Tensor& dinput,
                            const std::function<void()>& recompute) const {
    if (activations_.recompute != Recompute::none) recompute();
    for (const Tensor* gradient : own) tasks::submit_zero(gradient->handle(), "zero_" + gradient->name());
    tasks::submit_zero(dinput.handle(), "zero_" + dinput.name());
  }
  // A residual's backward (dinp1 += dout, dinp2 += dout), one task per tile: "<op>[block]".
  void submit_residual_backward(const char* op, int block, const Tensor& dinp1, const Tensor& dinp2,
                                const Tensor& dout) const {
    for (int k = 0; k < tiles_.count(); ++k)
      tasks::submit_residual_backward(tile_dims_[std::size_t(k)], dinp1.piece(std::size_t(k)),
                                      dinp2.piece(std::size_t(k)), dout.piece(std::size_t(k)),
                                      block_tile_name(op, block, k));
  }

  Shape shape_;
  Layout layout_;
  ActivationPolicy activations_;
  SequenceTiles tiles_;
  tasks::Dims dims_;
  std::vector<tasks::Dims> tile_dims_;  // dims_ with tile k's sequences as B

 private:
  std::string load_task_;
  LossWeights loss_weights_;  // of the micro-batch set last
};

}  // namespace starzero
