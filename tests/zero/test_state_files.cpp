// The training-state files (train/state_files.hpp, train/sharded_state.hpp): real files in a
// temporary directory, checked against the raw bytes independently of the readers. The model is
// a StateLayout made here, so no model is needed.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/sharding.hpp"
#include "tests/raw_files.hpp"
#include "tests/temp_dir.hpp"
#include "train/sharded_state.hpp"
#include "train/state_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

using namespace starzero::testing;

namespace {

// A model of three layers of 5, 7 and 4 parameters (odd sizes, so that shards are padded). Its
// shape fields are (8, 10, 2, 2, width, 16); error messages print them as "test(...)".
StateLayout test_layout(std::int32_t width = 4) {
  StateLayout layout;
  layout.shape_fields = {8, 10, 2, 2, width, 16};
  layout.layer_params = {5, 7, 4};
  layout.print_fields = [](const StateShapeFields& fields) {
    std::string text = "test(";
    for (std::int32_t field : fields) text += (text.size() > 5 ? "," : "") + std::to_string(field);
    return text + ")";
  };
  return layout;
}

// Random values with the ones a copy must keep bit for bit: infinities, NaN, signed zero, a
// denormal.
std::vector<float> test_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<float> values(n);
  for (auto& x : values) x = normal(rng);
  const std::vector<float> special = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                                      -0.0f, std::numeric_limits<float>::denorm_min()};
  for (std::size_t i = 0; i < special.size() && i < n; ++i) values[i * 5 % n] = special[i];
  return values;
}

TrainingState test_state(std::size_t n) {
  TrainingState s;
  s.step = 123456789012345ull;
  s.data_position = 987654321ull;
  s.rng.seed(42);
  s.rng.discard(1000);
  s.master = test_values(n, 3);
  s.m = test_values(n, 4);
  s.v = test_values(n, 5);
  return s;
}

void require_same_state(const TrainingState& a, TrainingState b) {
  CHECK(a.step == b.step);
  CHECK(a.data_position == b.data_position);
  CHECK(a.rng == b.rng);
  CHECK(same_bits(a.master, b.master));
  CHECK(same_bits(a.m, b.m));
  CHECK(same_bits(a.v, b.v));
  std::mt19937_64 rng = a.rng;
  CHECK(rng() == b.rng());  // continues the same sequence
}

}  // namespace

TEST_CASE("training state: round trip restores everything exactly", "[state]") {
  TempDir dir;
  const StateLayout layout = test_layout();
  const fs::path file = dir / "state.szts";

  SECTION("full parameter vector") {
    const TrainingState state = test_state(layout.param_count());
    write_training_state(file, layout, state);
    const std::vector<char> raw = read_raw(file);
    CHECK(std::string(raw.data(), 4) == "SZTS");
    CHECK(raw_at<std::uint32_t>(raw, 4) == kTrainingStateVersion);
    CHECK(raw_at<std::int32_t>(raw, 8) == 8);    // first shape field (GPT: maxT)
    CHECK(raw_at<std::int32_t>(raw, 28) == 16);  // last shape field (GPT: Vp)
    CHECK(raw_at<std::uint64_t>(raw, 32) == state.step);
    CHECK(raw_at<std::uint64_t>(raw, 40) == state.data_position);
    CHECK(raw_at<std::uint64_t>(raw, 48) == layout.param_count());
    const auto rng_bytes = raw_at<std::uint64_t>(raw, 56);
    CHECK(raw.size() == 64 + rng_bytes + 12 * layout.param_count());
    CHECK(raw_at<float>(raw, 64 + rng_bytes + 4) == state.master[1]);
    CHECK(raw_at<float>(raw, 64 + rng_bytes + 4 * layout.param_count()) == state.m[0]);
    require_same_state(state, read_training_state(file, layout));
  }
  SECTION("one rank's shard") {
    const TrainingState state = test_state(9);
    write_training_state(file, layout, state);
    require_same_state(state, read_training_state(file, layout));
  }
  SECTION("empty vectors") {
    const TrainingState state = test_state(0);
    write_training_state(file, layout, state);
    require_same_state(state, read_training_state(file, layout));
  }
  CHECK(dir.entries() == std::vector<std::string>{"state.szts"});
}

TEST_CASE("training state: malformed files and bad arguments", "[state]") {
  TempDir dir;
  const StateLayout layout = test_layout();
  const fs::path good = dir / "good.szts";
  write_training_state(good, layout, test_state(layout.param_count()));
  const std::vector<char> bytes = read_raw(good);
  const fs::path bad = dir / "broken_state.szts";
  auto read_bad = [&] { read_training_state(bad, layout); };

  SECTION("missing file") { require_format_error(read_bad, bad, "cannot open"); }
  SECTION("a length whose 3·n·4 bytes wrap around to the file's size") {
    StateLayout huge = layout;  // a layout whose parameter count allows such a length
    huge.layer_params = {std::size_t(1) << 61};
    const std::uint64_t n = 1537228672809129302u;  // 12·n = 2^64 + 8
    const std::uint64_t rng_bytes = raw_at<std::uint64_t>(bytes, 56);
    write_patched(bad, bytes, [&](auto& b) {
      set_raw(b, 48, n);
      b.resize(std::size_t(64 + rng_bytes + 8));
    });
    require_format_error([&] { read_training_state(bad, huge); }, bad, "implausible state length");
  }
  SECTION("shape mismatch lists both shapes") {
    write_raw(bad, bytes);
    const StateLayout other = test_layout(8);
    try {
      read_training_state(bad, other);
      FAIL("expected a shape mismatch");
    } catch (const FileFormatError& e) {
      const std::string msg = e.what();
      CHECK(msg.find("broken_state.szts") != std::string::npos);
      CHECK(msg.find("shape mismatch") != std::string::npos);
      CHECK(msg.find(layout.describe(layout.shape_fields)) != std::string::npos);
      CHECK(msg.find(other.describe(other.shape_fields)) != std::string::npos);
    }
  }
  struct Corruption {
    std::string what;
    std::function<void(std::vector<char>&)> patch;
    std::string message;  // what the error says
  };
  const std::vector<Corruption> corruptions = {
      {"truncated header", [](auto& b) { b.resize(40); }, "truncated header"},
      {"wrong magic", [](auto& b) { b[3] = 'X'; }, "wrong magic"},
      {"a layer checkpoint's magic (SZCK)",
       [](auto& b) {
         b[2] = 'C';
         b[3] = 'K';
       },
       "not a starzero training state"},
      {"wrong version", [](auto& b) { set_raw<std::uint32_t>(b, 4, 9); }, "unknown version 9"},
      {"truncated data", [](auto& b) { b.pop_back(); }, "truncated data"},
      {"trailing bytes", [](auto& b) { b.insert(b.end(), 4, '\0'); }, "trailing data"},
      {"length larger than the parameter count",
       [&](auto& b) { set_raw<std::uint64_t>(b, 48, layout.param_count() + 1); }, "exceeds the parameter count"},
      {"implausible RNG text size", [](auto& b) { set_raw<std::uint64_t>(b, 56, std::uint64_t(1) << 40); },
       "implausible RNG state size"},
      {"corrupt RNG text", [](auto& b) { b[64] = 'z'; }, "corrupt RNG state text"},
  };
  for (const Corruption& corruption : corruptions) {
    DYNAMIC_SECTION(corruption.what) {
      write_patched(bad, bytes, corruption.patch);
      require_format_error(read_bad, bad, corruption.message);
    }
  }
  SECTION("writer rejects master/m/v of different sizes or too long") {
    TrainingState s = test_state(10);
    s.v.pop_back();
    CHECK_THROWS_AS(write_training_state(bad, layout, s), std::invalid_argument);
    TrainingState big = test_state(layout.param_count() + 1);
    CHECK_THROWS_AS(write_training_state(bad, layout, big), std::invalid_argument);
    CHECK_FALSE(fs::exists(bad));
  }
}

namespace {

// The full (unpadded) arrays of every layer of one run: what the ranks' files hold between them.
struct FullArrays {
  std::vector<std::vector<float>> master, m, v;  // [layer][element]
};

FullArrays full_arrays(const StateLayout& layout) {
  FullArrays full;
  unsigned seed = 10;
  for (const std::size_t count : layout.layer_params) {
    full.master.push_back(test_values(count, seed++));
    full.m.push_back(test_values(count, seed++));
    full.v.push_back(test_values(count, seed++));
  }
  return full;
}

// Writes what each of `ranks` ranks saves at `step`: every layer's shard of rank r (padded with
// zeros past the layer's end), or with one rank every layer whole.
void write_rank_files(const fs::path& checkpoint, const StateLayout& layout, const FullArrays& full, int ranks,
                      std::uint64_t step) {
  for (int r = 0; r < ranks; ++r) {
    TrainingState state;
    state.step = step;
    for (std::size_t l = 0; l < layout.layer_params.size(); ++l) {
      const std::size_t count = layout.layer_params[l];
      const std::size_t shard = shard_count(count, std::size_t(ranks));
      for (std::size_t i = std::size_t(r) * shard; i < std::size_t(r + 1) * shard; ++i) {
        state.master.push_back(i < count ? full.master[l][i] : 0.f);
        state.m.push_back(i < count ? full.m[l][i] : 0.f);
        state.v.push_back(i < count ? full.v[l][i] : 0.f);
      }
    }
    write_training_state(training_state_path(checkpoint, r, ranks), layout, state);
  }
}

std::vector<float> read_slice(const ShardedTrainingState& saved, int layer, ShardedTrainingState::Array array,
                              std::size_t begin, std::size_t count) {
  std::vector<float> out(count, -1.f);
  saved.read(layer, array, begin, out);
  return out;
}

}  // namespace

TEST_CASE("sharded training state: any rank count's files read back every layer exactly", "[state]") {
  TempDir dir;
  const StateLayout layout = test_layout();
  const FullArrays full = full_arrays(layout);
  const fs::path checkpoint = dir / "model.bin";

  CHECK(training_state_path(checkpoint, 0, 1) == dir / "model.bin.state");
  CHECK(training_state_path(checkpoint, 2, 3) == dir / "model.bin.rank2-of-3.state");
  CHECK_FALSE(ShardedTrainingState::find(checkpoint, layout).has_value());

  const int ranks = GENERATE(1, 2, 3);
  INFO("ranks: " << ranks);
  write_rank_files(checkpoint, layout, full, ranks, 77);
  const auto saved = ShardedTrainingState::find(checkpoint, layout);
  REQUIRE(saved.has_value());
  CHECK(saved->ranks() == ranks);
  CHECK(saved->sharded() == (ranks > 1));
  CHECK(saved->step() == 77);
  CHECK(saved->layout().shape_fields == layout.shape_fields);

  using Array = ShardedTrainingState::Array;
  for (int l = 0; l < int(layout.layer_params.size()); ++l) {
    const std::size_t count = layout.layer_params[std::size_t(l)];
    CHECK(same_bits(read_slice(*saved, l, Array::master, 0, count), full.master[std::size_t(l)]));
    CHECK(same_bits(read_slice(*saved, l, Array::m, 0, count), full.m[std::size_t(l)]));
    CHECK(same_bits(read_slice(*saved, l, Array::v, 0, count), full.v[std::size_t(l)]));
  }
  // A piece across the ranks' boundaries, and one that runs past the layer's end (reads as 0).
  const std::vector<float> middle(full.m[1].begin() + 2, full.m[1].begin() + 6);
  CHECK(same_bits(read_slice(*saved, 1, Array::m, 2, 4), middle));
  CHECK(same_bits(read_slice(*saved, 0, Array::v, 3, 4), {full.v[0][3], full.v[0][4], 0.f, 0.f}));
  CHECK(same_bits(read_slice(*saved, 2, Array::master, 9, 2), {0.f, 0.f}));

  // The layout can come from the stored shape fields.
  const auto derived = ShardedTrainingState::find(checkpoint, [&](const StateShapeFields& fields) {
    CHECK(fields == layout.shape_fields);
    return test_layout(fields[4]);
  });
  REQUIRE(derived.has_value());
  CHECK(same_bits(read_slice(*derived, 1, Array::master, 0, 7), full.master[1]));
}

TEST_CASE("sharded training state: missing, mismatched and malformed files throw FileFormatError", "[state]") {
  TempDir dir;
  const StateLayout layout = test_layout();
  const FullArrays full = full_arrays(layout);
  const fs::path checkpoint = dir / "model.bin";
  write_rank_files(checkpoint, layout, full, 2, 5);
  auto find = [&] { ShardedTrainingState::find(checkpoint, layout); };

  SECTION("a rank's file is missing") {
    fs::remove(training_state_path(checkpoint, 1, 2));
    require_format_error(find, training_state_path(checkpoint, 1, 2), "missing (rank 1 of 2)");
  }
  SECTION("files of several rank counts") {
    write_rank_files(checkpoint, layout, full, 3, 5);
    require_format_error(find, checkpoint, "several rank counts");
  }
  SECTION("another shape") {
    require_format_error([&] { ShardedTrainingState::find(checkpoint, test_layout(8)); },
                         training_state_path(checkpoint, 0, 2), "expected");
  }
  SECTION("shape fields no model has") {
    require_format_error(
        [&] {
          ShardedTrainingState::find(
              checkpoint, [](const StateShapeFields&) -> StateLayout { throw std::invalid_argument("no such model"); });
        },
        training_state_path(checkpoint, 0, 2), "invalid shape: no such model");
  }
  SECTION("ranks at different steps") {
    TrainingState rank1 = read_training_state(training_state_path(checkpoint, 1, 2), layout);
    rank1.step = 6;
    write_training_state(training_state_path(checkpoint, 1, 2), layout, rank1);
    require_format_error(find, training_state_path(checkpoint, 1, 2), "differs from rank 0's file");
  }
  SECTION("a truncated file") {
    const fs::path file = training_state_path(checkpoint, 1, 2);
    write_patched(file, read_raw(file), [](auto& b) { b.pop_back(); });
    require_format_error(find, file, "size does not match its header");
  }
  SECTION("an RNG text size that wraps the arrays' offset around to 0") {
    const fs::path file = training_state_path(checkpoint, 0, 2);
    write_patched(file, read_raw(file), [](auto& b) {
      set_raw(b, 56, ~std::uint64_t(0) - 63);  // 64 + rng_bytes = 2^64
      b.resize(3 * 9 * sizeof(float));         // the size of 9 elements' arrays alone
    });
    require_format_error(find, file, "size does not match its header");
  }
  SECTION("a rank count too large for an int") {
    const fs::path other = dir / "other.bin";
    const fs::path file = other.string() + ".rank0-of-99999999999.state";
    write_raw(file, read_raw(training_state_path(checkpoint, 0, 2)));
    require_format_error([&] { ShardedTrainingState::find(other, layout); }, file, "rank count out of range");
  }
  SECTION("a file too short for its header") {
    const fs::path file = training_state_path(checkpoint, 0, 2);
    write_patched(file, read_raw(file), [](auto& b) { b.resize(20); });
    require_format_error(find, file, "truncated or unreadable at byte");
  }
  SECTION("not a training state") {
    const fs::path file = training_state_path(checkpoint, 1, 2);
    write_patched(file, read_raw(file), [](auto& b) { b[0] = 'X'; });
    require_format_error(find, file, "not a starzero training state");
  }
}
