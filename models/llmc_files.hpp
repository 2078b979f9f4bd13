#pragma once
// Host-side file I/O (no StarPU): llm.c checkpoints and token shards, starzero's training state
// file for exact resume, and the atomic write all of them go through.
//
// Every reader checks the whole file before trusting it (magic, version, shape, exact size) and
// throws FileFormatError with the file name and what is wrong. Every writer goes through
// write_file_atomically: a crash or error never leaves a half-written target behind.
// Integers and floats are stored in the machine's (little-endian) byte order, as llm.c does.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt_layout.hpp"
#include "models/state_layout.hpp"

namespace starzero {

// A file that cannot be used: missing, truncated, wrong magic/version/shape, trailing bytes.
class FileFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
// 256 int32 header: [0] magic 20240326, [1] version, [2..7] shape (gpt_shape_fields); then every
// parameter in llm.c order as fp32 (version 3) or bf16 (version 5: upper 16 bits of fp32).
inline constexpr std::int32_t kLlmcCheckpointMagic = 20240326;
inline constexpr std::int32_t kLlmcCheckpointFp32 = 3;
inline constexpr std::int32_t kLlmcCheckpointBf16 = 5;
inline constexpr std::size_t kLlmcHeaderInts = 256;

struct LlmcCheckpoint {
  GptShape shape;
  std::vector<float> params;  // always fp32, llm.c order; bf16 files are widened exactly
  int version = kLlmcCheckpointFp32;  // the version the file was stored with
};

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path);
// Also throws FileFormatError when the file's shape differs from `expected` (lists both).
LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path, const GptShape& expected);
// version 3 stores fp32 as is, version 5 rounds to bf16 (nearest even). params.size() must be
// shape.param_count() (std::invalid_argument otherwise); I/O failures throw std::system_error.
void write_llmc_checkpoint(const std::filesystem::path& path, const GptShape& shape,
                           std::span<const float> params, int version = kLlmcCheckpointFp32);
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

// ---- training state (starzero's own format, beside a checkpoint, for exact resume) ------------
// Layout (native little-endian):
//   0  char[4]   "SZTS"
//   4  uint32    version (kTrainingStateVersion)
//   8  int32[6]  shape fields (StateLayout; GPT: maxT, V, L, NH, C, Vp, llm.c header order [2..7])
//   32 uint64    step
//   40 uint64    data_position
//   48 uint64    n: length of master, m and v (the full parameter count, or one rank's shard)
//   56 uint64    r: bytes of the RNG text
//   64 char[r]   the std::mt19937_64 state as operator<< writes it
//   then float32 master[n], m[n], v[n]; nothing after.
inline constexpr std::uint32_t kTrainingStateVersion = 1;

struct TrainingState {
  std::uint64_t step = 0;           // optimizer steps done
  std::uint64_t data_position = 0;  // next sequential batch / sample position of the data loader
  std::mt19937_64 rng;              // any randomness that must continue exactly
  std::vector<float> master, m, v;  // fp32 master weights and AdamW moments, same length
};

// master, m and v must have the same length, at most layout.param_count() (invalid_argument).
// GPT: write_training_state(path, gpt_state_layout(shape), state).
void write_training_state(const std::filesystem::path& path, const StateLayout& layout,
                          const TrainingState& state);
// Throws FileFormatError on a bad magic/version, sizes inconsistent with the file, truncation,
// trailing bytes or shape fields other than `expected`'s.
TrainingState read_training_state(const std::filesystem::path& path, const StateLayout& expected);

// ---- atomic write -----------------------------------------------------------------------------
// Writes `path` through a temporary file in the same directory (<name>.tmp.<pid>): `write` fills
// the stream, then the file is fsync'ed, renamed over `path`, and the directory fsync'ed. On any
// failure (including `write` throwing or leaving the stream bad) the temporary file is removed,
// `path` is left as it was and the error propagates (I/O errors as std::system_error).
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

}  // namespace starzero
