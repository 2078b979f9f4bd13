#pragma once
// Host-side file I/O (no StarPU) of llm.c's Llama 3 formats (train_llama3.py): checkpoints and
// token shards, as LlamaCheckpointFile and LlamaTokenShardFile, the llm.c files of
// models/llmc_format.hpp with what Llama 3's differ in (LlamaLlmcCodec): its header.
//
// Checkpoint: 256 int32 header, then every parameter in llm.c order (models/llama_layout.hpp) as
// fp32 (version 3) or bf16 (version 5, round to nearest even):
//   [0] 20240803  [1] version  [2] block_size (max_seq)  [3] vocab_size  [4] n_layer  [5] n_head
//   [6] n_kv_head [7] n_embd   [8] ffn_dim_multiplier    [9] multiple_of [10] norm_eps
//   [11] rope_theta [12] use_scaled_rope [13] max_gen_batch_size [14] major [15] minor version
// train_llama3.py assigns the float fields to the int32 header, so they arrive truncated
// (ffn_dim_multiplier 1.3 -> 1, norm_eps 1e-5 -> 0, rope_theta 500000.0 -> 500000). The writer
// stores them the same way (saturated at int32's range); the reader takes the real multiplier of
// the models Meta published (known by version and width, e.g. 3.1 with C=4096, NH=32, NKV=8: 1.3)
// and checks the header against it, uses the header's fields as they are for any other shape (an
// integer multiplier, or 0 for none; refused when the hidden size they give overflows int), and
// norm_eps 1e-5 (llm.c's only value; the field must read 0).
//
// Token shard: 256 int32 header [0] 20240801, [1] version 7, [2] number of tokens; then uint32
// tokens (Llama 3's vocabulary of 128256).
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "models/llama_layout.hpp"
#include "models/llmc_format.hpp"
#include "runtime/files.hpp"

namespace starzero {

inline constexpr std::int32_t kLlamaCheckpointMagic = 20240803;
inline constexpr std::int32_t kLlamaTokenMagic = 20240801;
inline constexpr std::int32_t kLlamaTokenVersion = 7;
inline constexpr int kLlama3Vocab = 128256;

// The header llm.c writes for `shape` and `version` (max_gen_batch_size 4, as llm.c's default).
LlmcHeaderWords llama_checkpoint_header(const LlamaShape& shape, int version);
// The shape a header describes (see above); FileFormatError naming `path` for an inconsistent or
// invalid one (magic and version are not checked here).
LlamaShape llama_shape_from_header(const LlmcHeaderWords& header, const std::filesystem::path& path);

// What Llama 3's llm.c files are (the codec of models/llmc_format.hpp).
struct LlamaLlmcCodec {
  using Shape = LlamaShape;
  using Token = std::uint32_t;
  static constexpr LlmcFileIds kIds{"llm.c Llama 3", kLlamaCheckpointMagic, kLlamaTokenMagic, kLlamaTokenVersion};
  // The magics a wrong one may be, named in the message (20240326: GPT-2's).
  static constexpr std::array<LlmcOtherMagic, 2> kNotCheckpoint{
      {{20240326, "GPT-2 checkpoint"}, {kLlamaTokenMagic, "token shard"}}};
  static constexpr std::array<LlmcOtherMagic, 0> kNotTokenShard{};
  // llama_checkpoint_header, refused (std::invalid_argument) when a reader would not rebuild
  // `shape` from it.
  static LlmcHeaderWords checkpoint_header(const LlamaShape& shape, int version, const std::filesystem::path& path);
  static LlamaShape shape_from_header(const LlmcHeaderWords& header, const std::filesystem::path& path) {
    return llama_shape_from_header(header, path);
  }
};

using LlamaCheckpointFile = LlmcCheckpointFile<LlamaLlmcCodec>;
using LlamaTokenShardFile = LlmcTokenShardFile<LlamaLlmcCodec>;
using LlamaCheckpoint = LlamaCheckpointFile::Checkpoint;

}  // namespace starzero
