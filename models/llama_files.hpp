#pragma once
// Host-side file I/O (no StarPU) of llm.c's Llama 3 formats (train_llama3.py): checkpoints and
// token shards. As models/gpt_files.hpp: every reader checks the whole file before trusting it
// (magic, version, header, exact size) and throws FileFormatError naming the file and what is
// wrong; every writer goes through write_file_atomically (temporary file + rename).
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
#include <functional>
#include <span>
#include <vector>

#include "models/llama_layout.hpp"
#include "runtime/files.hpp"

namespace starzero {

inline constexpr std::int32_t kLlamaCheckpointMagic = 20240803;
inline constexpr std::int32_t kLlamaCheckpointFp32 = 3;
inline constexpr std::int32_t kLlamaCheckpointBf16 = 5;
inline constexpr std::int32_t kLlamaTokenMagic = 20240801;
inline constexpr std::int32_t kLlamaTokenVersion = 7;
inline constexpr int kLlama3Vocab = 128256;
inline constexpr std::size_t kLlamaHeaderInts = 256;

using LlamaHeader = std::array<std::int32_t, kLlamaHeaderInts>;

// The header llm.c writes for `shape` and `version` (max_gen_batch_size 4, as llm.c's default).
LlamaHeader llama_checkpoint_header(const LlamaShape& shape, int version);
// The shape a header describes (see above); FileFormatError naming `path` for an inconsistent or
// invalid one (magic and version are not checked here).
LlamaShape llama_shape_from_header(const LlamaHeader& header, const std::filesystem::path& path);

struct LlamaCheckpoint {
  LlamaShape shape;
  std::vector<float> params;  // fp32, llm.c order; bf16 files are widened exactly
  int version = kLlamaCheckpointFp32;
};

// The header alone (params left empty), with every check of a full read, the file's size
// included. With `expected`: also FileFormatError when the file's model differs (same_model).
LlamaCheckpoint read_llama_checkpoint_header(const std::filesystem::path& path);
LlamaCheckpoint read_llama_checkpoint_header(const std::filesystem::path& path, const LlamaShape& expected);
LlamaCheckpoint read_llama_checkpoint(const std::filesystem::path& path);
// The parameters read in file order straight into `destination(file_offset, count)`; `pieces`
// add up to the parameter count. Returns the file's version.
int read_llama_checkpoint_streamed(const std::filesystem::path& path, const LlamaShape& expected,
                                   const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                   std::span<const std::size_t> pieces);
// std::invalid_argument for a wrong parameter count, version or shape; I/O errors propagate.
void write_llama_checkpoint(const std::filesystem::path& path, const LlamaShape& shape, std::span<const float> params,
                            int version = kLlamaCheckpointFp32);
// Piece by piece: `fill(file_offset, values)` sets each piece's values, in file order.
void write_llama_checkpoint_streamed(const std::filesystem::path& path, const LlamaShape& shape, int version,
                                     const std::function<void(std::size_t, std::span<float>)>& fill,
                                     std::span<const std::size_t> pieces);

// Llama 3 token shards (version 7, uint32 tokens).
std::vector<std::uint32_t> read_llama_token_shard(const std::filesystem::path& path);
void write_llama_token_shard(const std::filesystem::path& path, std::span<const std::uint32_t> tokens);
// The magic of a file's first int32 (0 when it is shorter), to tell the formats apart.
std::int32_t file_magic(const std::filesystem::path& path);

}  // namespace starzero
