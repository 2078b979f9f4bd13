// libFuzzer harness: the set of training-state files of a run as ShardedTrainingState::find reads
// it (train/sharded_state.hpp): FILE.state, or FILE.rank<r>-of-<N>.state for r < N, found by
// listing the directory.
//
// The input is split on "|SZ|": the first part names the files, each further part is one file.
// An empty first part gives the names a run writes (one part: FILE.state; N parts:
// FILE.rank<r>-of-N.state); otherwise its letters, digits, '.', '-' and '_' (at most 40) replace N
// in the names. find is called with a fixed small layout and with the layout of the GPT shape
// rank 0's header names (as `starzero consolidate` does). It may only reject the files with
// FileFormatError (or std::system_error from the file system); when it accepts them, each file has
// exactly the size its header gives, and every layer's slices read back the files' values.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/gpt_layout.hpp"
#include "runtime/sharding.hpp"
#include "train/sharded_state.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSeparator = "|SZ|";

// The seed corpus's layout: three layers of 5, 7 and 4 parameters (fuzz/make_corpus.cpp).
StateLayout small_layout() {
  StateLayout layout;
  layout.shape_fields = {8, 10, 2, 2, 4, 16};
  layout.layer_params = {5, 7, 4};
  return layout;
}

std::vector<std::string_view> split(std::string_view input) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t at = input.find(kSeparator, start);
    parts.push_back(input.substr(start, at == input.npos ? input.npos : at - start));
    if (at == input.npos) return parts;
    start = at + kSeparator.size();
  }
}

// What find must have checked of every file it accepted: the exact size its header gives.
void check_files(const std::vector<std::string_view>& files, const ShardedTrainingState& state) {
  FUZZ_CHECK(state.ranks() >= 1 && std::size_t(state.ranks()) <= files.size());
  for (int r = 0; r < state.ranks(); ++r) {
    const std::string_view file = files[std::size_t(r)];
    FUZZ_CHECK(file.size() >= kTrainingStateHeaderBytes);
    std::uint64_t fields[4];  // step, data_position, count, rng_bytes
    std::memcpy(fields, file.data() + 32, sizeof fields);
    FUZZ_CHECK(fields[0] == state.step());
    const unsigned __int128 need =
        (unsigned __int128)kTrainingStateHeaderBytes + fields[3] + (unsigned __int128)fields[2] * 3 * sizeof(float);
    FUZZ_CHECK(need == file.size());
  }
}

// Reads every layer's first and last elements (and all of a small layer) of each array, and a
// slice past the end (zeros).
void read_layers(const ShardedTrainingState& state) {
  const std::vector<std::size_t>& layers = state.layout().layer_params;
  std::vector<float> buffer(80);
  for (std::size_t l = 0; l < layers.size() && l < 64; ++l) {
    for (auto array : {ShardedTrainingState::Array::master, ShardedTrainingState::Array::m,
                       ShardedTrainingState::Array::v}) {
      const std::size_t count = layers[l];
      const std::size_t n = std::min<std::size_t>(count, 64);
      state.read(int(l), array, 0, std::span(buffer).first(n));
      state.read(int(l), array, count - n, std::span(buffer).first(n));
      std::fill(buffer.begin(), buffer.end(), 1.0f);
      state.read(int(l), array, count, std::span(buffer).first(8));
      for (std::size_t i = 0; i < 8; ++i) FUZZ_CHECK(buffer[i] == 0.0f);
    }
  }
}

void find_with(const fs::path& checkpoint, const std::vector<std::string_view>& files,
               const std::function<std::optional<ShardedTrainingState>()>& find) {
  std::optional<ShardedTrainingState> state;
  try {
    state = find();
  } catch (const FileFormatError&) {
    return;
  } catch (const std::system_error&) {
    return;
  }
  if (!state) return;
  check_files(files, *state);
  read_layers(*state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path dir = fuzz::scratch_dir() / "run";
  static const StateLayout small = small_layout();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path checkpoint = dir / "model.bin";

  std::vector<std::string_view> parts = split(std::string_view(reinterpret_cast<const char*>(data), size));
  std::string ranks_name;
  for (char c : parts[0])
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ranks_name += c;
  ranks_name.resize(std::min<std::size_t>(ranks_name.size(), 40));
  const bool named = !parts[0].empty();
  const std::vector<std::string_view> files(parts.begin() + 1, parts.end());
  if (files.size() > 8) return 0;
  for (std::size_t r = 0; r < files.size(); ++r) {
    const fs::path path =
        named ? fs::path(checkpoint.string() + ".rank" + std::to_string(r) + "-of-" + ranks_name + ".state")
              : training_state_path(checkpoint, int(r), int(files.size()));
    fuzz::write_input(path, reinterpret_cast<const std::uint8_t*>(files[r].data()), files[r].size());
  }

  find_with(checkpoint, files, [&] { return ShardedTrainingState::find(checkpoint, small); });
  find_with(checkpoint, files, [&] { return ShardedTrainingState::find(checkpoint, gpt_state_layout_from_fields); });
  return 0;
}
