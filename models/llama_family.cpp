// Llama 3 as a model family: `starzero train --model llama3` (docs/llama.md). What Llama 3 names
// of the transformer family (models/transformer_family.hpp): its shape, model, llm.c Llama 3
// checkpoint and token shards. The shape comes from a checkpoint when one is given (a
// contradicting shape flag is an error naming both), else from a preset (default llama3-tiny) and
// the shape flags; the vocabulary from the data (a text file: bytes, 256; an llm.c Llama 3 token
// shard: 128256; an llm.c GPT-2 shard: 50257).
#include <filesystem>
#include <stdexcept>

#include "models/llama.hpp"
#include "models/llama_files.hpp"
#include "models/llama_flops.hpp"
#include "models/llama_layout.hpp"
#include "models/gpt_files.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/transformer_family.hpp"
#include "tasks/nn_llama_kernels.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

// A shape whose width the flags changed: H from the preset's rule, and header fields llm.c's
// int32 header can hold exactly (H as the multiple, no multiplier) unless the preset's still do.
void settle_ffn(LlamaShape& shape) {
  shape.ffn_hidden = kernels::llama_ffn_hidden(shape.channels, shape.ffn_dim_multiplier, shape.multiple_of);
  try {
    if (llama_shape_from_header(llama_checkpoint_header(shape, kLlmcCheckpointFp32), "flags").same_model(shape))
      return;
  } catch (const FileFormatError&) {
  }
  shape.ffn_dim_multiplier = 0.0f;
  shape.multiple_of = shape.ffn_hidden;
}

struct LlamaTraits : TransformerTypes<LlamaShape, LlamaModel, LlamaLayout, LlamaLlmcCodec, LlamaHfFolder> {
  static std::string describe(const LlamaShape& shape) { return "Llama 3 " + shape.to_string(); }
  static LlamaShape preset(std::string_view name) { return llama_preset(name); }
  static std::vector<std::string> preset_names() { return llama_preset_names(); }
  static std::string preset_fields(const LlamaShape& s) {
    return "L=" + std::to_string(s.layers) + " C=" + std::to_string(s.channels) + " NH=" + std::to_string(s.heads) +
           " NKV=" + std::to_string(s.kv_heads) + " maxT=" + std::to_string(s.max_seq);
  }
  static LlamaShape shape_from_flags(const ModelRequest& request, int vocab) {
    LlamaShape shape = with_shape_flags(llama_preset(request.preset.value_or(preset_names().front())), request);
    shape.vocab = vocab;  // the data decides the vocabulary
    try {
      if (shape.channels <= 0 || shape.heads <= 0) shape.validate();
      settle_ffn(shape);
      shape.validate();
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("invalid model shape: ") + e.what());
    }
    return shape;
  }
  // llm.c's GPT-2 shards (uint16 tokens) or Llama 3 ones (uint32, inside Llama 3's vocabulary),
  // told apart by the first shard's magic.
  static TokenShardFormat token_shard_format(const fs::path& first) {
    if (file_magic(first) == kLlmcTokenMagic) return gpt2_token_shards();
    return {"Llama 3", 4, kLlama3Vocab, [](const fs::path& path) { return LlamaTokenShardFile::count(path); }};
  }
  // The memory and FLOPs of llama_footprint, and the GPU kernels the step bound charges.
  static ModelFootprint footprint(const LlamaShape& shape, int B, int T, const ActivationPolicy& activations) {
    ModelFootprint footprint = llama_footprint(shape, B, T, activations);
    const int seq = T > 0 ? T : shape.max_seq;  // llama_footprint's default
    footprint.training_gpu_kernels_2 = llama_training_gpu_kernels(shape, DType::bf16, B, seq, activations);
    footprint.training_gpu_kernels_4 = llama_training_gpu_kernels(shape, DType::f32, B, seq, activations);
    return footprint;
  }
  static constexpr auto activation_bytes = llama_activation_bytes;
  static constexpr auto offloaded_activation_bytes = llama_offloaded_activation_bytes;
  // Attention runs as one task per tile: no head groups.
  static void check_tiling(const LlamaShape&, const Tiling& tiling) {
    if (tiling.head_groups)
      throw std::invalid_argument("--head-groups: Llama 3's attention runs as one task per tile (GPT only)");
  }
  static std::unique_ptr<LlamaModel> make_model(const LlamaShape& shape, DType dtype, int B, int T,
                                                const Tiling& tiling, const ActivationPolicy& activations) {
    return std::make_unique<LlamaModel>(shape, dtype, B, T, tiling.tiles.value(), activations);
  }
  static LlamaShape planned_shape(const LlamaShape& shape, int) { return shape; }
  static int kv_heads(const LlamaShape& shape) { return shape.kv_heads; }
  static int ffn_hidden(const LlamaShape& shape) { return shape.ffn_hidden; }
  // Llama's state files record {V, C, L, NH, NKV, -H} (GPT's six fields are all positive, the
  // MLP's end in zeros).
  static std::unique_ptr<CheckpointFormat> format_of_state(const StateShapeFields& fields) {
    try {
      return std::make_unique<LlmcFileFormat<LlamaTraits>>(LlamaShape::from_fields(fields));
    } catch (const std::invalid_argument&) {
      return nullptr;
    }
  }
};

}  // namespace

ModelFamily llama3_family() {
  return transformer_family<LlamaTraits>(
      "llama3",
      "Llama 3 in llm.c's layout (--preset llama3-tiny|llama3-1B|llama3-8B|llama3-70B, --layers, --channels, "
      "--heads, --max-seq; llm.c Llama 3 checkpoints and token shards)");
}

}  // namespace starzero
