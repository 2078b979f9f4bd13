#include "models/sharded_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <regex>
#include <system_error>

namespace starzero {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBlockTensors = 12;

std::array<std::size_t, kBlockTensors> block_tensor_sizes(std::size_t C) {
  return {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
}

// A read-only file descriptor.
class Fd {
 public:
  explicit Fd(const fs::path& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw FileFormatError(path.string() + ": cannot open: " + std::strerror(errno));
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { ::close(fd_); }
  void read_at(std::uint64_t offset, void* out, std::size_t bytes, const fs::path& path) const {
    auto* at = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_, at, bytes, off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw FileFormatError(path.string() + ": truncated or unreadable at byte " + std::to_string(offset));
      at += got;
      offset += std::uint64_t(got);
      bytes -= std::size_t(got);
    }
  }

 private:
  int fd_;
};

}  // namespace

int gpt_layers(const GptShape& shape) { return shape.layers + 2; }

std::size_t gpt_layer_params(const GptShape& shape, int layer) {
  const std::size_t C = std::size_t(shape.channels);
  if (layer == 0) return std::size_t(shape.padded_vocab) * C + std::size_t(shape.max_seq) * C;
  if (layer >= 1 && layer <= shape.layers) return 12 * C * C + 13 * C;
  if (layer == shape.layers + 1) return 2 * C;
  throw std::out_of_range("GPT layer " + std::to_string(layer) + " out of range");
}

std::vector<LlmcRun> gpt_layer_runs(const GptShape& shape, int layer) {
  const std::size_t C = std::size_t(shape.channels), L = std::size_t(shape.layers);
  const std::size_t wte = std::size_t(shape.padded_vocab) * C, wpe = std::size_t(shape.max_seq) * C;
  if (layer == 0) return {{0, 0, wte}, {wte, wte, wpe}};
  const auto sizes = block_tensor_sizes(C);
  std::size_t tensor_start = wte + wpe;  // llm.c offset of the first per-layer tensor
  if (layer >= 1 && layer <= shape.layers) {
    const std::size_t l = std::size_t(layer - 1);
    std::vector<LlmcRun> runs;
    std::size_t block_offset = 0;
    for (std::size_t t = 0; t < kBlockTensors; ++t) {
      runs.push_back({tensor_start + l * sizes[t], block_offset, sizes[t]});
      block_offset += sizes[t];
      tensor_start += L * sizes[t];
    }
    return runs;
  }
  if (layer != shape.layers + 1) throw std::out_of_range("GPT layer " + std::to_string(layer) + " out of range");
  for (std::size_t t = 0; t < kBlockTensors; ++t) tensor_start += L * sizes[t];
  return {{tensor_start, 0, C}, {tensor_start + C, C, C}};
}

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
    const std::regex pattern(std::regex_replace(checkpoint.filename().string(), std::regex(R"([.^$|()\[\]{}*+?\\])"),
                                                R"(\$&)") +
                             R"(\.rank0-of-(\d+)\.state)");
    if (fs::is_directory(dir))
      for (const auto& entry : fs::directory_iterator(dir)) {
        std::smatch match;
        const std::string name = entry.path().filename().string();
        if (std::regex_match(name, match, pattern)) {
          if (ranks != 0) throw FileFormatError(checkpoint.string() + ": training states of several rank counts beside it");
          ranks = std::stoi(match[1]);
        }
      }
  }
  return ranks;
}

}  // namespace

std::optional<ShardedTrainingState> ShardedTrainingState::find(const fs::path& checkpoint) {
  const int ranks = count_state_ranks(checkpoint);
  if (ranks == 0) return std::nullopt;
  const fs::path first = training_state_path(checkpoint, 0, ranks);
  std::array<char, 32> header{};
  Fd(first).read_at(0, header.data(), header.size(), first);
  if (std::memcmp(header.data(), "SZTS", 4) != 0) throw FileFormatError(first.string() + ": not a starzero training state");
  std::array<std::int32_t, 6> dims{};
  std::memcpy(dims.data(), header.data() + 8, sizeof dims);
  const GptShape shape{dims[0], dims[1], dims[5], dims[2], dims[3], dims[4]};
  try {
    shape.validate();
  } catch (const std::exception& e) {
    throw FileFormatError(first.string() + ": invalid shape: " + e.what());
  }
  return find(checkpoint, shape);
}

std::optional<ShardedTrainingState> ShardedTrainingState::find(const fs::path& checkpoint, const GptShape& shape) {
  const int ranks = count_state_ranks(checkpoint);
  if (ranks == 0) return std::nullopt;

  ShardedTrainingState state;
  state.shape_ = shape;
  const int L = gpt_layers(shape);
  std::uint64_t total = 0, total_shards = 0;
  for (int l = 0; l < L; ++l) {
    total += gpt_layer_params(shape, l);
    total_shards += (gpt_layer_params(shape, l) + std::uint64_t(ranks) - 1) / std::uint64_t(ranks);
  }
  for (int r = 0; r < ranks; ++r) {
    const fs::path path = training_state_path(checkpoint, r, ranks);
    if (!fs::exists(path)) throw FileFormatError(path.string() + ": missing (rank " + std::to_string(r) + " of " + std::to_string(ranks) + ")");
    // The full check (magic, version, shape, exact size) without loading the arrays.
    Fd fd(path);
    std::array<char, 64> header{};
    fd.read_at(0, header.data(), header.size(), path);
    if (std::memcmp(header.data(), "SZTS", 4) != 0) throw FileFormatError(path.string() + ": not a starzero training state");
    std::uint32_t version;
    std::memcpy(&version, header.data() + 4, 4);
    if (version != kTrainingStateVersion) throw FileFormatError(path.string() + ": unknown version " + std::to_string(version));
    std::array<std::int32_t, 6> dims{};
    std::memcpy(dims.data(), header.data() + 8, sizeof dims);
    const GptShape file_shape{dims[0], dims[1], dims[5], dims[2], dims[3], dims[4]};
    if (!(file_shape == shape))
      throw FileFormatError(path.string() + ": shape " + file_shape.to_string() + ", expected " + shape.to_string());
    std::uint64_t fields[4];
    std::memcpy(fields, header.data() + 32, sizeof fields);
    const auto [step, data_position, count, rng_bytes] = std::array<std::uint64_t, 4>{fields[0], fields[1], fields[2], fields[3]};
    (void)data_position;
    File file{path, 64 + rng_bytes, count};
    if (fs::file_size(path) != file.arrays_offset + 3 * count * sizeof(float))
      throw FileFormatError(path.string() + ": size does not match its header");
    const bool sharded = ranks > 1 && count == total_shards && count != total;
    if (count != total && count != total_shards)
      throw FileFormatError(path.string() + ": " + std::to_string(count) + " elements: neither the model (" +
                            std::to_string(total) + ") nor a 1/" + std::to_string(ranks) + " shard of it");
    if (r == 0) {
      state.step_ = step;
      state.sharded_ = sharded;
    } else if (step != state.step_ || sharded != state.sharded_) {
      throw FileFormatError(path.string() + ": step or layout differs from rank 0's file");
    }
    state.files_.push_back(file);
  }
  std::size_t start = 0;
  for (int l = 0; l < L; ++l) {
    state.layer_start_.push_back(start);
    const std::size_t n = gpt_layer_params(shape, l);
    start += state.sharded_ ? (n + std::size_t(ranks) - 1) / std::size_t(ranks) : n;
  }
  return state;
}

void ShardedTrainingState::read_file(const File& file, std::uint64_t element, std::span<float> out) const {
  if (out.empty()) return;
  Fd fd(file.path);
  fd.read_at(file.arrays_offset + element * sizeof(float), out.data(), out.size_bytes(), file.path);
}

void ShardedTrainingState::read(int layer, Array array, std::size_t begin, std::span<float> out) const {
  const std::size_t count = gpt_layer_params(shape_, layer);
  const std::size_t array_index = std::size_t(array);
  std::fill(out.begin(), out.end(), 0.0f);
  const std::size_t end = std::min(begin + out.size(), count);
  if (begin >= end) return;
  if (!sharded_) {
    const File& file = files_[0];
    read_file(file, array_index * file.count + layer_start_[std::size_t(layer)] + begin, out.first(end - begin));
    return;
  }
  const std::size_t shard = (count + files_.size() - 1) / files_.size();
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
