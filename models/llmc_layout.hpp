#pragma once
// What the layouts of llm.c's transformers share (GptLayout: models/gpt_layout.hpp, LlamaLayout:
// models/llama_layout.hpp): the engine sees L + 2 layers of three kinds (layer 0 the embedding,
// layers 1..L the blocks, layer L+1 the head), each kind one flat array of its tensors; llm.c's
// file holds the tensors whole, one after the other, per-layer ones layer-major. A layout's
// tensor type has `layer_kind` (an enum of those three kinds, in that order), `count`,
// `layer_count`, `layer_offset` and its offset in llm.c's order (the member `FileOffset`).
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace starzero {

// A run of elements that is contiguous both in a layer's array and in llm.c's order.
struct LlmcRun {
  std::size_t llmc_offset, layer_offset, count;
};

// The kind (0 embedding, 1 block, 2 head) of engine layer `layer` of a model of `blocks` blocks;
// std::out_of_range naming `model` outside 0..blocks+1.
inline std::size_t llmc_layer_kind(int layer, int blocks, const char* model) {
  if (layer == 0) return 0;
  if (layer >= 1 && layer <= blocks) return 1;
  if (layer == blocks + 1) return 2;
  throw std::out_of_range(std::string(model) + " layer " + std::to_string(layer) + " out of range 0.." +
                          std::to_string(blocks + 1));
}

// Places the tensors, in llm.c's order: each one's offset in its kind's layer array (which
// `kind_params` sums up per kind) and in llm.c's order. Returns the parameter count.
template <auto FileOffset, class Tensor>
std::size_t place_llmc_tensors(std::vector<Tensor>& tensors, std::array<std::size_t, 3>& kind_params) {
  std::size_t file_end = 0;
  for (Tensor& tensor : tensors) {
    // kind_params grows tensor by tensor: the running end of that kind's layer array.
    std::size_t& layer_end = kind_params[std::size_t(tensor.layer_kind)];
    tensor.layer_offset = layer_end;
    layer_end += tensor.layer_count;
    tensor.*FileOffset = file_end;
    file_end += tensor.count;
  }
  return file_end;
}

// Where the elements of engine layer `layer` (of kind `kind`) sit in llm.c's order, by
// increasing layer offset: block b (layer b + 1) holds slice b of each per-layer tensor.
template <auto FileOffset, class Tensor>
std::vector<LlmcRun> llmc_layer_runs(const std::vector<Tensor>& tensors, int layer, std::size_t kind) {
  const std::size_t slice = kind == 1 ? std::size_t(layer - 1) : 0;
  std::vector<LlmcRun> runs;
  for (const Tensor& tensor : tensors)
    if (std::size_t(tensor.layer_kind) == kind)
      runs.push_back({tensor.*FileOffset + slice * tensor.layer_count, tensor.layer_offset, tensor.layer_count});
  return runs;
}

}  // namespace starzero
