#pragma once
// Host-side file I/O (no StarPU) of GPT-2's llm.c formats: checkpoints and token shards.
//
// Every reader checks the whole file before trusting it (magic, version, shape, exact size) and
// throws FileFormatError (runtime/files.hpp) with the file name and what is wrong. Every writer
// goes through write_file_atomically: a crash or error never leaves a half-written target behind.
// Integers and floats are stored in the machine's (little-endian) byte order, as llm.c does.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/gpt_layout.hpp"
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

// ---- llm.c checkpoint -------------------------------------------------------------------------
// 256 int32 header: [0] magic 20240326, [1] version, [2..7] shape (GptShape::fields); then every
// parameter in llm.c order as fp32 (version 3) or bf16 (version 5: upper 16 bits of fp32).
inline constexpr std::int32_t kLlmcCheckpointMagic = 20240326;
inline constexpr std::int32_t kLlmcCheckpointFp32 = 3;
inline constexpr std::int32_t kLlmcCheckpointBf16 = 5;
inline constexpr std::size_t kLlmcHeaderInts = 256;

struct LlmcCheckpoint {
  GptShape shape;
  std::vector<float> params;          // always fp32, llm.c order; bf16 files are widened exactly
  int version = kLlmcCheckpointFp32;  // the version the file was stored with
};

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path);
// The header alone (params left empty): shape and version, with the same checks as a full read,
// the file's size included, but without reading the parameters.
LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path);
LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path, const GptShape& expected);
// Also throws FileFormatError when the file's shape differs from `expected` (lists both).
LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path, const GptShape& expected);
// The parameters read piece by piece in file order straight into their destinations, with no copy
// of the whole file in memory: `destination(llmc_offset, count)` gives where a piece's values go
// (`count` floats; bf16 files are widened exactly); `pieces` add up to shape.param_count(). The
// header and the file's size are checked first, as read_llmc_checkpoint(path, expected) does.
// Returns the file's version.
int read_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& expected,
                                  const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                  std::span<const std::size_t> pieces);
// version 3 stores fp32 as is, version 5 rounds to bf16 (nearest even). params.size() must be
// shape.param_count() (std::invalid_argument otherwise); I/O failures throw std::system_error.
void write_llmc_checkpoint(const std::filesystem::path& path, const GptShape& shape, std::span<const float> params,
                           int version = kLlmcCheckpointFp32);
// The same file written piece by piece, so that no more than one piece is in memory: `fill`
// gets each piece's first llm.c offset and its values to set, in file order; `pieces` are the
// piece sizes, adding up to shape.param_count().
void write_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& shape, int version,
                                    const std::function<void(std::size_t, std::span<float>)>& fill,
                                    std::span<const std::size_t> pieces);

// ---- llm.c token shard ------------------------------------------------------------------------
// 256 int32 header: [0] magic 20240520, [1] version 1, [2] number of tokens; then uint16 tokens.
inline constexpr std::int32_t kLlmcTokenMagic = 20240520;
inline constexpr std::int32_t kLlmcTokenVersion = 1;

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path);
void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);

}  // namespace starzero
