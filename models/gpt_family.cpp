// GPT-2 as a model family: `starzero train` (the default --model gpt). What GPT-2 names of the
// transformer family (models/transformer_family.hpp): its shape, model and llm.c checkpoint; the
// shape comes from a checkpoint when one is given (a contradicting shape flag is an error naming
// both), else from a preset and the shape flags; the vocabulary from the data (bytes 256, GPT-2
// tokens 50257), padded to a multiple of 128.
#include <filesystem>
#include <stdexcept>

#include "models/gpt.hpp"
#include "models/gpt_flops.hpp"
#include "models/gpt_layout.hpp"
#include "models/gpt_files.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/transformer_family.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

struct GptTraits : TransformerTypes<GptShape, GptModel, GptLayout, GptLlmcCodec, GptHfFolder> {
  static std::string describe(const GptShape& shape) { return shape.to_string(); }
  static GptShape preset(std::string_view name) { return gpt_preset(name); }
  static std::vector<std::string> preset_names() { return gpt_preset_names(); }
  static std::string preset_fields(const GptShape& s) {
    return "L=" + std::to_string(s.layers) + " NH=" + std::to_string(s.heads) + " C=" + std::to_string(s.channels) +
           " maxT=" + std::to_string(s.max_seq);
  }
  static GptShape shape_from_flags(const ModelRequest& request, int vocab) {
    GptShape shape = with_shape_flags(gpt_preset(request.preset.value_or(preset_names().front())), request);
    if (vocab != shape.vocab) {  // the data decides the vocabulary
      shape.vocab = vocab;
      shape.padded_vocab = (vocab + 127) / 128 * 128;
    }
    try {
      shape.validate();
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("invalid model shape: ") + e.what());
    }
    return shape;
  }
  // llm.c's GPT-2 token shards.
  static TokenShardFormat token_shard_format(const fs::path&) { return gpt2_token_shards(); }
  // --head-groups: whole heads per group.
  static void check_tiling(const GptShape& shape, const Tiling& tiling) {
    if (tiling.head_groups && (*tiling.head_groups < 1 || *tiling.head_groups > shape.heads))
      throw std::invalid_argument("--head-groups " + std::to_string(*tiling.head_groups) +
                                  ": a group holds whole heads, so 1 <= head groups <= the model's " +
                                  std::to_string(shape.heads) + " heads");
  }
  static ModelFootprint footprint(const GptShape& shape, int B, int T, const ActivationPolicy& activations) {
    ModelFootprint footprint = gpt_footprint(shape, B, activations);
    footprint.training_flops = gpt_training_flops(shape, B, T, activations);
    footprint.training_gpu_kernels_2 = gpt_training_gpu_kernels(shape, DType::bf16, B, T, activations);
    footprint.training_gpu_kernels_4 = gpt_training_gpu_kernels(shape, DType::f32, B, T, activations);
    return footprint;
  }
  static constexpr auto activation_bytes = gpt_activation_bytes;
  static constexpr auto offloaded_activation_bytes = gpt_offloaded_activation_bytes;
  // Head groups: --head-groups, else auto_head_groups on the running session.
  static std::unique_ptr<GptModel> make_model(const GptShape& shape, DType dtype, int B, int T, const Tiling& tiling,
                                              const ActivationPolicy& activations) {
    const int tiles = tiling.tiles.value();
    return std::make_unique<GptModel>(shape, dtype, B, T, tiles, activations,
                                      tiling.head_groups.value_or(auto_head_groups(shape.heads, tiles)));
  }
  // `plan --seq T` sizes the position table for T.
  static GptShape planned_shape(GptShape shape, int seq) {
    shape.max_seq = seq;
    return shape;
  }
  static int kv_heads(const GptShape& shape) { return shape.heads; }
  static int ffn_hidden(const GptShape& shape) { return 4 * shape.channels; }
  static std::unique_ptr<CheckpointFormat> format_of_state(const StateShapeFields& fields) {
    const GptShape shape = GptShape::from_fields(fields);
    try {
      shape.validate();
    } catch (const std::invalid_argument&) {
      return nullptr;
    }
    return std::make_unique<LlmcFileFormat<GptTraits>>(shape);
  }
};

}  // namespace

ModelFamily gpt_family() {
  return transformer_family<GptTraits>(
      "gpt", "GPT-2 in llm.c's layout (--preset, --layers, --channels, --heads, --max-seq; llm.c checkpoints)");
}

}  // namespace starzero
