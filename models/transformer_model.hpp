#pragma once
// What the transformer models (GptModel: models/gpt.hpp, LlamaModel: models/llama.hpp) share
// outside their blocks: the micro-batch's tokens in, the loss and the probabilities out, and the
// copies between the engine's per-layer arrays and llm.c's flat order (a layout's LlmcRun).
#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt_layout.hpp"  // LlmcRun
#include "runtime/tensor.hpp"

namespace starzero {

// Submits the load of one micro-batch's `count` inputs and targets into `tokens` and `targets`
// (tasks named `inputs_task` and "load_targets"); std::invalid_argument for a wrong count or a
// token outside 0..vocab-1.
void submit_token_batch(const Tensor& tokens, const Tensor& targets, std::span<const int> inputs,
                        std::span<const int> target_ids, std::size_t count, int vocab, const std::string& inputs_task);
// Mean of the `count` fp32 `losses` (waits for their writer).
double mean_of_losses(const Tensor& losses, std::size_t count);
// Row (b, t) of the [B, T, width] fp32 `probs`, its first `vocab` values (waits for their
// writer); std::out_of_range outside B x T.
std::vector<float> probability_row(const Tensor& probs, int b, int t, int B, int T, int width, int vocab);

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

}  // namespace starzero
