#include "train/state_files.hpp"

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace starzero {

namespace {
// mt19937_64's text form is 312 numbers of at most 20 digits; anything far larger is corrupt.
constexpr std::uint64_t kMaxRngTextBytes = 64 * 1024;
}  // namespace

void write_training_state(const std::filesystem::path& path, const StateLayout& layout, const TrainingState& state) {
  const std::size_t n = state.master.size();
  if (state.m.size() != n || state.v.size() != n)
    throw std::invalid_argument("training state " + path.string() + ": master/m/v sizes differ (" + std::to_string(n) +
                                ", " + std::to_string(state.m.size()) + ", " + std::to_string(state.v.size()) + ")");
  if (n > layout.param_count())
    throw std::invalid_argument("training state " + path.string() + ": " + std::to_string(n) +
                                " elements exceed the parameter count " + std::to_string(layout.param_count()) +
                                " of " + layout.describe(layout.shape_fields));
  std::ostringstream rng_text;
  rng_text << state.rng;
  const std::string rng = rng_text.str();

  write_file_atomically(path, [&](std::ostream& os) {
    write_bytes(os, kTrainingStateMagic.data(), kTrainingStateMagic.size());
    const std::uint32_t version = kTrainingStateVersion;
    write_bytes(os, &version, sizeof version);
    write_bytes(os, layout.shape_fields.data(), sizeof layout.shape_fields);
    const std::array<std::uint64_t, 4> fields = {state.step, state.data_position, std::uint64_t(n),
                                                 std::uint64_t(rng.size())};
    write_bytes(os, fields.data(), sizeof fields);
    write_bytes(os, rng.data(), rng.size());
    write_bytes(os, state.master.data(), n * sizeof(float));
    write_bytes(os, state.m.data(), n * sizeof(float));
    write_bytes(os, state.v.data(), n * sizeof(float));
  });
}

TrainingState read_training_state(const std::filesystem::path& path, const StateLayout& expected) {
  FileReader in(path);
  if (in.size() < kTrainingStateHeaderBytes)
    throw_format_error(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                                 std::to_string(kTrainingStateHeaderBytes));
  std::array<char, 4> magic{};
  in.read_exact(magic.data(), magic.size());
  if (magic != kTrainingStateMagic) throw_format_error(path, "wrong magic: not a starzero training state (SZTS)");
  const auto version = in.read_value<std::uint32_t>();
  if (version != kTrainingStateVersion)
    throw_format_error(
        path, "unknown version " + std::to_string(version) + " (known: " + std::to_string(kTrainingStateVersion) + ")");
  StateShapeFields shape_fields{};
  in.read_exact(shape_fields.data(), sizeof shape_fields);
  if (shape_fields != expected.shape_fields)
    throw_format_error(path, "shape mismatch: file has " + expected.describe(shape_fields) + ", expected " +
                                 expected.describe(expected.shape_fields));

  TrainingState state;
  state.step = in.read_value<std::uint64_t>();
  state.data_position = in.read_value<std::uint64_t>();
  const auto n = in.read_value<std::uint64_t>();
  const auto rng_bytes = in.read_value<std::uint64_t>();
  if (n > expected.param_count())
    throw_format_error(path, "state length " + std::to_string(n) + " exceeds the parameter count " +
                                 std::to_string(expected.param_count()));
  if (rng_bytes > kMaxRngTextBytes) throw_format_error(path, "implausible RNG state size " + std::to_string(rng_bytes));
  // 3·n·4 bytes must not wrap around to a plausible size (n is bounded by the layout only).
  if (n > (std::numeric_limits<std::size_t>::max() - kTrainingStateHeaderBytes - rng_bytes) / (3 * sizeof(float)))
    throw_format_error(path, "implausible state length " + std::to_string(n));
  const std::size_t need = kTrainingStateHeaderBytes + std::size_t(rng_bytes) + 3 * std::size_t(n) * sizeof(float);
  if (in.size() != need)
    throw_format_error(path, describe_size_mismatch(in.size(), need, std::to_string(n) + " elements of master/m/v"));

  std::string rng(std::size_t(rng_bytes), '\0');
  in.read_exact(rng.data(), rng.size());
  std::istringstream rng_text(rng);
  rng_text >> state.rng;
  if (!rng_text) throw_format_error(path, "corrupt RNG state text");

  for (auto* vec : {&state.master, &state.m, &state.v}) {
    vec->resize(std::size_t(n));
    in.read_exact(vec->data(), vec->size() * sizeof(float));
  }
  return state;
}

}  // namespace starzero
