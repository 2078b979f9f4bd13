#pragma once
// Host-side file I/O (no StarPU) of GPT-2's llm.c formats: checkpoints and token shards, as
// GptCheckpointFile and GptTokenShardFile, the llm.c files of models/llmc_format.hpp with what
// GPT-2's differ in (GptLlmcCodec), and the order of llm.c's parameter tensors.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "models/gpt_layout.hpp"
#include "models/llmc_format.hpp"
#include "runtime/files.hpp"

namespace starzero {

// One of the 16 llm.c parameter tensors. Per-layer tensors are stored layer-major: layer l's
// slice is [l·count/L, (l+1)·count/L) of the tensor, i.e. [offset + l·layer_count(L), ...) of
// the flat parameter vector.
struct TensorSpec {
  std::string name;
  std::size_t count = 0;   // elements of the whole tensor (all layers)
  bool per_layer = false;  // has a leading layer dimension
  std::size_t offset = 0;  // first element in the flat llm.c parameter vector
  std::size_t layer_count(int layers) const { return per_layer ? count / std::size_t(layers) : count; }
};

// wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb,
// lnfw, lnfb: llm.c's order (GptLayout's table); the counts add up to shape.param_count().
std::vector<TensorSpec> llmc_tensor_specs(const GptShape& shape);

// ---- llm.c checkpoint and token shard (models/llmc_format.hpp) ----------------------------------
// Checkpoint: 256 int32 header [0] magic 20240326, [1] version, [2..7] shape (GptShape::fields).
// Token shard: 256 int32 header [0] magic 20240520, [1] version 1, [2] count; then uint16 tokens.
inline constexpr std::int32_t kLlmcCheckpointMagic = 20240326;
inline constexpr std::int32_t kLlmcTokenMagic = 20240520;
inline constexpr std::int32_t kLlmcTokenVersion = 1;

// What GPT-2's llm.c files are (the codec of models/llmc_format.hpp).
struct GptLlmcCodec {
  using Shape = GptShape;
  using Token = std::uint16_t;
  static constexpr LlmcFileIds kIds{"llm.c", kLlmcCheckpointMagic, kLlmcTokenMagic, kLlmcTokenVersion};
  // The magics a wrong one may be, named in the message.
  static constexpr std::array<LlmcOtherMagic, 1> kNotCheckpoint{{{kLlmcTokenMagic, "token shard"}}};
  static constexpr std::array<LlmcOtherMagic, 1> kNotTokenShard{{{kLlmcCheckpointMagic, "checkpoint"}}};
  static LlmcHeaderWords checkpoint_header(const GptShape& shape, int version, const std::filesystem::path& path);
  static GptShape shape_from_header(const LlmcHeaderWords& header, const std::filesystem::path& path);
};

using GptCheckpointFile = LlmcCheckpointFile<GptLlmcCodec>;
using GptTokenShardFile = LlmcTokenShardFile<GptLlmcCodec>;
using LlmcCheckpoint = GptCheckpointFile::Checkpoint;

}  // namespace starzero
