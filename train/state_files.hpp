#pragma once
// The training-state file (starzero's own format, beside a checkpoint, for exact resume):
// TrainingState and its reader and writer. One rank's file is FILE.state or
// FILE.rank<r>-of-<N>.state (train/sharded_state.hpp reads any rank count's files piece by
// piece). The model is described by a StateLayout (train/state_layout.hpp).
//
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
// Writes are atomic (write_file_atomically); reads check the whole file and throw FileFormatError.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "runtime/files.hpp"
#include "train/state_layout.hpp"

namespace starzero {

inline constexpr std::array<char, 4> kTrainingStateMagic = {'S', 'Z', 'T', 'S'};
inline constexpr std::uint32_t kTrainingStateVersion = 1;
inline constexpr std::size_t kTrainingStateHeaderBytes = 64;  // the fixed part, up to the RNG text

struct TrainingState {
  std::uint64_t step = 0;           // optimizer steps done
  std::uint64_t data_position = 0;  // samples of the training stream drawn up to `step` (models/data.hpp)
  std::mt19937_64 rng;              // any randomness that must continue exactly
  std::vector<float> master, m, v;  // fp32 master weights and AdamW moments, same length
};

// master, m and v must have the same length, at most layout.param_count() (invalid_argument).
// GPT: write_training_state(path, GptLayout(shape).state_layout(), state).
void write_training_state(const std::filesystem::path& path, const StateLayout& layout, const TrainingState& state);
// Throws FileFormatError on a bad magic/version, sizes inconsistent with the file, truncation,
// trailing bytes or shape fields other than `expected`'s.
TrainingState read_training_state(const std::filesystem::path& path, const StateLayout& expected);

}  // namespace starzero
