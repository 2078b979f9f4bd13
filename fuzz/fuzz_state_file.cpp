// libFuzzer harness: one rank's training-state file (train/state_files.hpp, "SZTS" version 1,
// FILE.state or FILE.rank<r>-of-<N>.state). The input is the file; read_training_state reads it
// against a fixed small layout (the seed corpus's), and against the layout of the GPT shape that
// its own header names (what a run without another source of the shape would do). It may only
// reject the file with FileFormatError; an accepted file has exactly the size its header gives,
// its arrays are the file's bytes, and it round trips through the writer.
#include <cstring>
#include <optional>
#include <sstream>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/gpt_layout.hpp"
#include "train/state_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

// The seed corpus's layout: three layers of 5, 7 and 4 parameters (fuzz/make_corpus.cpp).
StateLayout small_layout() {
  StateLayout layout;
  layout.shape_fields = {8, 10, 2, 2, 4, 16};
  layout.layer_params = {5, 7, 4};
  return layout;
}

void check_accepted(const std::uint8_t* data, std::size_t size, const StateLayout& layout, const TrainingState& state) {
  std::uint64_t fields[4];
  std::memcpy(fields, data + 32, sizeof fields);
  const std::uint64_t n = fields[2], rng_bytes = fields[3];
  FUZZ_CHECK(state.step == fields[0] && state.data_position == fields[1]);
  FUZZ_CHECK(n <= layout.param_count());
  FUZZ_CHECK(state.master.size() == n && state.m.size() == n && state.v.size() == n);
  // The exact size, computed without wrapping around.
  FUZZ_CHECK(rng_bytes <= size && (size - kTrainingStateHeaderBytes - rng_bytes) / 12 == n &&
             (size - kTrainingStateHeaderBytes - rng_bytes) % 12 == 0);
  const std::uint8_t* arrays = data + kTrainingStateHeaderBytes + rng_bytes;
  if (n > 0) {
    FUZZ_CHECK(std::memcmp(state.master.data(), arrays, n * 4) == 0);
    FUZZ_CHECK(std::memcmp(state.m.data(), arrays + n * 4, n * 4) == 0);
    FUZZ_CHECK(std::memcmp(state.v.data(), arrays + n * 8, n * 4) == 0);
  }
  // The writer stores what was read (its RNG text is the generator's canonical one).
  static const fs::path copy = fuzz::scratch_dir() / "copy.state";
  write_training_state(copy, layout, state);
  const TrainingState again = read_training_state(copy, layout);
  FUZZ_CHECK(again.step == state.step && again.data_position == state.data_position && again.rng == state.rng);
  FUZZ_CHECK(again.master.size() == n &&
             (n == 0 || (std::memcmp(again.master.data(), state.master.data(), n * 4) == 0 &&
                         std::memcmp(again.m.data(), state.m.data(), n * 4) == 0 &&
                         std::memcmp(again.v.data(), state.v.data(), n * 4) == 0)));
}

void read_with(const std::uint8_t* data, std::size_t size, const fs::path& path, const StateLayout& layout) {
  std::optional<TrainingState> state;
  try {
    state = read_training_state(path, layout);
  } catch (const FileFormatError&) {
    return;
  }
  check_accepted(data, size, layout, *state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "model.bin.state";
  static const StateLayout small = small_layout();
  fuzz::write_input(path, data, size);
  read_with(data, size, path, small);
  // The layout of the GPT shape the header names, when it names a valid one.
  if (size >= 32) {
    StateShapeFields fields;
    std::memcpy(fields.data(), data + 8, sizeof fields);
    std::optional<StateLayout> own;
    try {
      own = gpt_state_layout_from_fields(fields);
    } catch (const std::invalid_argument&) {
    }
    if (own) read_with(data, size, path, *own);
  }
  return 0;
}
