#include "train/sharded_state.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <regex>
#include <stdexcept>

#include "runtime/sharding.hpp"

namespace starzero {

namespace fs = std::filesystem;

fs::path training_state_path(const fs::path& checkpoint, int rank, int ranks) {
  if (ranks == 1) return checkpoint.string() + ".state";
  return checkpoint.string() + ".rank" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".state";
}

namespace {

// How many ranks wrote the state beside `checkpoint` (0: none).
int count_state_ranks(const fs::path& checkpoint) {
  int ranks = 0;
  if (fs::exists(training_state_path(checkpoint, 0, 1))) {
    ranks = 1;
  } else {
    const fs::path dir = checkpoint.has_parent_path() ? checkpoint.parent_path() : fs::path(".");
    const std::regex pattern(
        std::regex_replace(checkpoint.filename().string(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
        R"(\.rank0-of-(\d+)\.state)");
    if (fs::is_directory(dir))
      for (const auto& entry : fs::directory_iterator(dir)) {
        std::smatch match;
        const std::string name = entry.path().filename().string();
        if (std::regex_match(name, match, pattern)) {
          if (ranks != 0)
            throw FileFormatError(checkpoint.string() + ": training states of several rank counts beside it");
          const std::string digits = match[1];
          const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), ranks);
          if (error != std::errc() || end != digits.data() + digits.size())
            throw FileFormatError(entry.path().string() + ": rank count out of range");
        }
      }
  }
  return ranks;
}

struct StateHeader {
  StateShapeFields shape_fields{};
  std::uint64_t step = 0;
  std::uint64_t data_position = 0;
  std::uint64_t count = 0;      // elements of each of master, m, v
  std::uint64_t rng_bytes = 0;  // the RNG text between the header and the arrays
};

// Checks the magic and version; the arrays are not read.
StateHeader read_state_header(const fs::path& path) {
  std::array<char, kTrainingStateHeaderBytes> bytes{};
  read_file_at(path, 0, bytes.data(), bytes.size());
  if (!std::equal(kTrainingStateMagic.begin(), kTrainingStateMagic.end(), bytes.begin()))
    throw FileFormatError(path.string() + ": not a starzero training state");
  std::uint32_t version;
  std::memcpy(&version, bytes.data() + 4, sizeof version);
  if (version != kTrainingStateVersion)
    throw FileFormatError(path.string() + ": unknown version " + std::to_string(version));
  StateHeader header;
  std::memcpy(header.shape_fields.data(), bytes.data() + 8, sizeof header.shape_fields);
  std::array<std::uint64_t, 4> fields{};  // step, data_position, count, rng_bytes
  std::memcpy(fields.data(), bytes.data() + 32, sizeof fields);
  header.step = fields[0];
  header.data_position = fields[1];
  header.count = fields[2];
  header.rng_bytes = fields[3];
  return header;
}

}  // namespace

std::optional<ShardedTrainingState> ShardedTrainingState::find(const fs::path& checkpoint,
                                                               const LayoutOfFields& layout_of) {
  const int ranks = count_state_ranks(checkpoint);
  if (ranks == 0) return std::nullopt;
  const fs::path first = training_state_path(checkpoint, 0, ranks);
  const StateShapeFields fields = read_state_header(first).shape_fields;
  StateLayout layout;
  try {
    layout = layout_of(fields);
  } catch (const std::invalid_argument& e) {
    throw FileFormatError(first.string() + ": invalid shape: " + e.what());
  }
  return find(checkpoint, layout);
}

std::optional<ShardedTrainingState> ShardedTrainingState::find(const fs::path& checkpoint, const StateLayout& layout) {
  const int ranks = count_state_ranks(checkpoint);
  if (ranks == 0) return std::nullopt;

  ShardedTrainingState state;
  state.layout_ = layout;
  std::uint64_t total = 0, total_shards = 0;
  for (const std::size_t count : layout.layer_params) {
    total += count;
    total_shards += shard_count(count, std::size_t(ranks));
  }
  for (int r = 0; r < ranks; ++r) {
    const fs::path path = training_state_path(checkpoint, r, ranks);
    if (!fs::exists(path))
      throw FileFormatError(path.string() + ": missing (rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                            ")");
    // The full check (magic, version, shape, exact size) without loading the arrays.
    const StateHeader header = read_state_header(path);
    if (header.shape_fields != layout.shape_fields)
      throw FileFormatError(path.string() + ": shape " + layout.describe(header.shape_fields) + ", expected " +
                            layout.describe(layout.shape_fields));
    if (header.count != total && header.count != total_shards)
      throw FileFormatError(path.string() + ": " + std::to_string(header.count) + " elements: neither the model (" +
                            std::to_string(total) + ") nor a 1/" + std::to_string(ranks) + " shard of it");
    const File file{path, kTrainingStateHeaderBytes + header.rng_bytes, header.count};
    // Header, RNG text and three arrays, nothing after; computed so that no sum wraps around.
    const std::uint64_t size = fs::file_size(path);
    if (size < kTrainingStateHeaderBytes || header.rng_bytes > size - kTrainingStateHeaderBytes ||
        (size - file.arrays_offset) / (3 * sizeof(float)) != file.count ||
        (size - file.arrays_offset) % (3 * sizeof(float)) != 0)
      throw FileFormatError(path.string() + ": size does not match its header");
    const bool sharded = ranks > 1 && header.count == total_shards && header.count != total;
    if (r == 0) {
      state.step_ = header.step;
      state.data_position_ = header.data_position;
      state.sharded_ = sharded;
    } else if (header.step != state.step_ || sharded != state.sharded_) {
      throw FileFormatError(path.string() + ": step or layout differs from rank 0's file");
    }
    state.files_.push_back(file);
  }
  std::size_t start = 0;
  for (const std::size_t count : layout.layer_params) {
    state.layer_start_.push_back(start);
    start += state.sharded_ ? shard_count(count, std::size_t(ranks)) : count;
  }
  return state;
}

void ShardedTrainingState::read_file(const File& file, std::uint64_t element, std::span<float> out) const {
  if (out.empty()) return;
  read_file_at(file.path, file.arrays_offset + element * sizeof(float), out.data(), out.size_bytes());
}

void ShardedTrainingState::read(int layer, Array array, std::size_t begin, std::span<float> out) const {
  const std::size_t count = layout_.layer_params.at(std::size_t(layer));
  const std::size_t array_index = std::size_t(array);
  std::fill(out.begin(), out.end(), 0.0f);
  const std::size_t end = std::min(begin + out.size(), count);
  if (begin >= end) return;
  if (!sharded_) {
    const File& file = files_[0];
    read_file(file, array_index * file.count + layer_start_[std::size_t(layer)] + begin, out.first(end - begin));
    return;
  }
  const std::size_t shard = shard_count(count, files_.size());
  for (std::size_t position = begin; position < end;) {
    const std::size_t rank = position / shard;
    const std::size_t in_shard = position % shard;
    const std::size_t n = std::min(shard - in_shard, end - position);
    const File& file = files_[rank];
    read_file(file, array_index * file.count + layer_start_[std::size_t(layer)] + in_shard,
              out.subspan(position - begin, n));
    position += n;
  }
}

}  // namespace starzero
