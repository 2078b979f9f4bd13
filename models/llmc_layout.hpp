#pragma once
// What the layouts of llm.c's transformers share (GptLayout: models/gpt_layout.hpp, LlamaLayout:
// models/llama_layout.hpp): the engine sees L + 2 layers of three kinds (layer 0 the embedding,
// layers 1..L the blocks, layer L+1 the head), each kind one flat array of its tensors; llm.c's
// file holds the tensors whole, one after the other, per-layer ones layer-major. A model names
// its tensors (an enum `Param`, in llm.c's order); its layers are of the three LlmcLayerKinds.
// LlmcLayout places a table of LlmcTensors.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "train/state_layout.hpp"

namespace starzero {

// The kind of engine layer a tensor belongs to: layer 0, each of layers 1..L, layer L+1 (GPT's
// final layernorm, Llama's final RMSNorm and lm_head).
enum class LlmcLayerKind { embedding, block, head };

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

// a·b and a+b, for element counts; std::invalid_argument "<model> model too large" on overflow.
inline std::int64_t llmc_checked_mul(std::int64_t a, std::int64_t b, const char* model) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw std::invalid_argument(std::string(model) + " model too large: element count overflows 64 bits");
  return product;
}
inline std::int64_t llmc_checked_add(std::int64_t a, std::int64_t b, const char* model) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw std::invalid_argument(std::string(model) + " model too large: element count overflows 64 bits");
  return sum;
}

// A model's named preset shape.
template <class Shape>
struct LlmcPreset {
  std::string_view name;
  Shape shape;
};

// The names of `presets`, in order.
template <class Shape>
std::vector<std::string> llmc_preset_names(std::span<const LlmcPreset<Shape>> presets) {
  std::vector<std::string> names;
  for (const LlmcPreset<Shape>& preset : presets) names.emplace_back(preset.name);
  return names;
}

// The shape of preset `name`; std::invalid_argument "unknown <what> '<name>'; valid: <names>".
template <class Shape>
Shape llmc_preset(std::span<const LlmcPreset<Shape>> presets, std::string_view name, const char* what) {
  for (const LlmcPreset<Shape>& preset : presets)
    if (preset.name == name) return preset.shape;
  std::string names;
  for (const std::string& n : llmc_preset_names(presets)) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(name) + "'; valid: " + names);
}

// One row of a layout's table, for a concrete shape.
template <class Param>
struct LlmcTensor {
  Param id;
  std::string_view name;  // llm.c's name
  LlmcLayerKind layer_kind;
  std::vector<std::size_t> dims;  // e.g. {Vp, C}, {L, 3C, C}
  bool per_layer = false;         // leading layer dimension: block l-1 (layer l) holds slice l-1
  std::size_t count = 0;          // elements of the whole tensor (all layers)
  std::size_t layer_count = 0;    // elements in one layer's array (count / L when per_layer)
  std::size_t layer_offset = 0;   // first element inside its layer's flat array
  std::size_t llmc_offset = 0;    // first element in llm.c's flat order (layer 0's slice)
};

// The layout of a model of `Shape` (its `layers` blocks) whose tensors are LlmcTensor<Param>:
// the engine's layers, each layer's size and where its elements sit in llm.c's order. A model
// names it (GptLayout = LlmcLayout<GptShape, GptParam>) and defines the constructor from a shape
// for its own Shape and Param (explicitly specialized in its layout .cpp, declared in its header):
// it validates the shape and gives the table to place().
template <class Shape, class Param>
class LlmcLayout {
 public:
  using Tensor = LlmcTensor<Param>;

  explicit LlmcLayout(const Shape& shape);  // per model; validates the shape (std::invalid_argument)

  const Shape& shape() const { return shape_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }  // llm.c's order
  const Tensor& operator[](Param param) const { return tensors_[std::size_t(param)]; }

  int layers() const { return shape_.layers + 2; }
  // std::out_of_range outside 0..L+1.
  LlmcLayerKind layer_kind(int layer) const { return LlmcLayerKind(llmc_layer_kind(layer, shape_.layers, model_)); }
  std::size_t layer_params(int layer) const { return kind_params_[std::size_t(layer_kind(layer))]; }
  std::size_t param_count() const { return param_count_; }
  // The tensors of layer kind `kind`, in the order they sit in its layer array.
  std::vector<const Tensor*> kind_tensors(LlmcLayerKind kind) const {
    std::vector<const Tensor*> in_kind;
    for (const Tensor& tensor : tensors_)
      if (tensor.layer_kind == kind) in_kind.push_back(&tensor);
    std::sort(in_kind.begin(), in_kind.end(),
              [](const Tensor* a, const Tensor* b) { return a->layer_offset < b->layer_offset; });
    return in_kind;
  }
  // The training state's layout (train/state_layout.hpp): the shape's fields (Shape::fields),
  // every layer's size, and how messages print such fields (Shape::print_fields).
  StateLayout state_layout() const {
    StateLayout state;
    state.shape_fields = shape_.fields();
    for (int layer = 0; layer < layers(); ++layer) state.layer_params.push_back(layer_params(layer));
    state.print_fields = &Shape::print_fields;
    return state;
  }
  // Where the elements of one layer's array sit in llm.c's order, by increasing layer offset:
  // block b (layer b + 1) holds slice b of each per-layer tensor.
  std::vector<LlmcRun> layer_runs(int layer) const {
    const std::size_t kind = std::size_t(layer_kind(layer));
    const std::size_t slice = kind == 1 ? std::size_t(layer - 1) : 0;
    std::vector<LlmcRun> runs;
    for (const Tensor& tensor : tensors_)
      if (std::size_t(tensor.layer_kind) == kind)
        runs.push_back({tensor.llmc_offset + slice * tensor.layer_count, tensor.layer_offset, tensor.layer_count});
    return runs;
  }

 protected:
  // `model` ("GPT", "Llama") for messages.
  LlmcLayout(const Shape& shape, const char* model) : shape_(shape), model_(model) {}
  // Places the table `defs`, in llm.c's order: each row's id, name, layer_kind and dims (the
  // block tensors' leading with L), `dim_size(dim)` giving a dimension's size for this shape (the
  // shape validated first, so that every count fits). Each tensor goes into its kind's layer array
  // and into llm.c's order.
  template <class Defs, class DimSize>
  void place(const Defs& defs, DimSize dim_size) {
    std::size_t file_end = 0;
    for (const auto& def : defs) {
      Tensor tensor{def.id, def.name, def.layer_kind, {}};
      for (const auto& dim : def.dims) tensor.dims.push_back(std::size_t(dim_size(dim)));
      tensor.per_layer = def.layer_kind == LlmcLayerKind::block;
      tensor.layer_count = 1;  // the elements of dims[1..] when per_layer, else of all dims
      for (std::size_t i = tensor.per_layer ? 1 : 0; i < tensor.dims.size(); ++i) tensor.layer_count *= tensor.dims[i];
      tensor.count = tensor.per_layer ? tensor.dims[0] * tensor.layer_count : tensor.layer_count;
      // kind_params_ grows tensor by tensor: the running end of that kind's layer array.
      std::size_t& layer_end = kind_params_[std::size_t(tensor.layer_kind)];
      tensor.layer_offset = layer_end;
      layer_end += tensor.layer_count;
      tensor.llmc_offset = file_end;
      file_end += tensor.count;
      tensors_.push_back(std::move(tensor));
    }
    param_count_ = file_end;
  }

 private:
  Shape shape_;
  const char* model_;
  std::vector<Tensor> tensors_;
  std::array<std::size_t, 3> kind_params_{};  // per LlmcLayerKind: elements of one such layer
  std::size_t param_count_ = 0;
};

}  // namespace starzero
