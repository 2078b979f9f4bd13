// llm.c checkpoints and token shards, and atomic writes: real files in a temporary directory;
// layouts are checked against the raw bytes, independently of the reader. (The training-state
// files are in test_state_files.cpp.)
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <vector>
#include "tests/raw_files.hpp"
#include "tests/temp_dir.hpp"

#include "models/gpt_files.hpp"
#include "runtime/dtype.hpp"

using namespace starzero;
namespace fs = std::filesystem;

using namespace starzero::testing;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A small model: maxT 8, V 10 padded to 16, 2 layers, 2 heads, 4 channels.
GptShape tiny_shape() {
  GptShape s;
  s.max_seq = 8;
  s.vocab = 10;
  s.padded_vocab = 16;
  s.layers = 2;
  s.heads = 2;
  s.channels = 4;
  return s;
}

// Random values plus the cases bf16 rounding must get right: ties to even both ways, values that
// round up into the next exponent, denormals, infinities, NaN, signed zero.
std::vector<float> test_params(std::size_t n, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<float> p(n);
  for (auto& x : p) x = normal(rng);
  const std::vector<float> special = {
      float_of(0x3F808000u),  // 1 + 2^-8: exact tie, even below -> 0x3F80
      float_of(0x3F818000u),  // tie with odd low bit -> rounds up to 0x3F82
      float_of(0x3F80C000u),  // above the tie -> 0x3F81
      float_of(0x3FFFFFFFu),  // rounds up into the next exponent -> 0x4000
      float_of(0x00000001u),  // smallest denormal
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      -0.0f,
      65504.f,
  };
  for (std::size_t i = 0; i < special.size() && i < n; ++i) p[i * 7 % n] = special[i];
  return p;
}

}  // namespace

TEST_CASE("GptShape: parameter count, validation and llm.c tensor specs", "[llmc]") {
  const GptShape gpt2 = GptShape::gpt2_124m();
  CHECK(gpt2.max_seq == 1024);
  CHECK(gpt2.vocab == 50257);
  CHECK(gpt2.padded_vocab == 50304);
  CHECK(gpt2.layers == 12);
  CHECK(gpt2.heads == 12);
  CHECK(gpt2.channels == 768);
  CHECK(gpt2.param_count() == 124'475'904u);
  CHECK_NOTHROW(gpt2.validate());

  const GptShape tiny = tiny_shape();
  CHECK(tiny.param_count() == 16 * 4 + 8 * 4 + 2 * (12 * 16 + 13 * 4) + 2 * 4);

  const auto specs = llmc_tensor_specs(gpt2);
  const std::vector<std::string> names = {"wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
                                          "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
  REQUIRE(specs.size() == names.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CHECK(specs[i].name == names[i]);
    CHECK(specs[i].offset == offset);
    const bool per_layer = i >= 2 && i < 14;
    CHECK(specs[i].per_layer == per_layer);
    if (per_layer) CHECK(specs[i].count % 12 == 0);
    offset += specs[i].count;
  }
  CHECK(offset == gpt2.param_count());
  const std::size_t C = 768;
  CHECK(specs[0].count == 50304 * C);
  CHECK(specs[1].count == 1024 * C);
  CHECK(specs[4].layer_count(12) == 3 * C * C);
  CHECK(specs[5].layer_count(12) == 3 * C);
  CHECK(specs[10].layer_count(12) == 4 * C * C);
  CHECK(specs[12].layer_count(12) == 4 * C * C);
  CHECK(specs[14].layer_count(12) == C);

  GptShape bad = tiny;
  bad.heads = 3;  // 4 % 3 != 0
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad = tiny;
  bad.padded_vocab = 9;  // < V
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad = tiny;
  bad.layers = 0;
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad = tiny;
  bad.channels = -4;
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad = tiny;
  bad.channels = 1 << 30;  // parameter bytes overflow 63 bits
  bad.heads = 1;
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad = tiny;
  bad.layers = (1 << 16) + 1;  // a layout of that many layers would be built before any size check
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  bad.layers = 1 << 16;
  CHECK_NOTHROW(bad.validate());
}

TEST_CASE("llm.c checkpoint: fp32 (version 3) round trip is bit-exact with llm.c's layout", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const std::vector<float> params = test_params(shape.param_count());
  const fs::path file = dir / "model.bin";
  GptCheckpointFile::write(file, shape, params, 3);

  const std::vector<char> raw = read_raw(file);
  REQUIRE(raw.size() == 1024 + 4 * shape.param_count());
  CHECK(raw_at<std::int32_t>(raw, 0) == 20240326);
  CHECK(raw_at<std::int32_t>(raw, 4) == 3);
  CHECK(raw_at<std::int32_t>(raw, 8) == 8);    // maxT
  CHECK(raw_at<std::int32_t>(raw, 12) == 10);  // V
  CHECK(raw_at<std::int32_t>(raw, 16) == 2);   // L
  CHECK(raw_at<std::int32_t>(raw, 20) == 2);   // NH
  CHECK(raw_at<std::int32_t>(raw, 24) == 4);   // C
  CHECK(raw_at<std::int32_t>(raw, 28) == 16);  // Vp
  for (std::size_t i = 8; i < 256; ++i) CHECK(raw_at<std::int32_t>(raw, 4 * i) == 0);
  CHECK(std::memcmp(raw.data() + 1024, params.data(), params.size() * 4) == 0);

  const LlmcCheckpoint back = GptCheckpointFile::read(file);
  CHECK(back.shape == shape);
  CHECK(back.version == 3);
  CHECK(same_bits(back.params, params));
  CHECK(same_bits(GptCheckpointFile::read(file, shape).params, params));
  // The header alone: the same shape and version, no parameters.
  const LlmcCheckpoint header = GptCheckpointFile::read_header(file);
  CHECK(header.shape == shape);
  CHECK(header.version == 3);
  CHECK(header.params.empty());
  CHECK(dir.entries() == std::vector<std::string>{"model.bin"});
}

TEST_CASE("llm.c checkpoint: bf16 (version 5) stores rounded params, read back widened exactly", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const std::vector<float> params = test_params(shape.param_count(), 2);
  const fs::path file = dir / "model_bf16.bin";
  GptCheckpointFile::write(file, shape, params, 5);

  const std::vector<char> raw = read_raw(file);
  REQUIRE(raw.size() == 1024 + 2 * shape.param_count());
  CHECK(raw_at<std::int32_t>(raw, 0) == 20240326);
  CHECK(raw_at<std::int32_t>(raw, 4) == 5);
  CHECK(raw_at<std::int32_t>(raw, 24) == 4);
  CHECK(raw_at<std::int32_t>(raw, 28) == 16);

  // Round to nearest even, checked on hand-made cases independently of float_to_bf16.
  auto stored = [&](std::size_t i) { return raw_at<std::uint16_t>(raw, 1024 + 2 * i); };
  const std::size_t n = params.size();
  CHECK(stored(0 * 7 % n) == 0x3F80);
  CHECK(stored(1 * 7 % n) == 0x3F82);
  CHECK(stored(2 * 7 % n) == 0x3F81);
  CHECK(stored(3 * 7 % n) == 0x4000);
  CHECK(stored(5 * 7 % n) == 0x7F80);             // +inf
  CHECK(stored(6 * 7 % n) == 0xFF80);             // -inf
  CHECK((stored(7 * 7 % n) & 0x7F80) == 0x7F80);  // NaN stays NaN
  CHECK((stored(7 * 7 % n) & 0x007F) != 0);
  CHECK(stored(8 * 7 % n) == 0x8000);  // -0
  for (std::size_t i = 0; i < n; ++i) CHECK(stored(i) == float_to_bf16(params[i]));

  const LlmcCheckpoint back = GptCheckpointFile::read(file, shape);
  CHECK(back.version == 5);
  CHECK(back.shape == shape);
  REQUIRE(back.params.size() == n);
  std::vector<float> rounded(n);
  for (std::size_t i = 0; i < n; ++i) rounded[i] = float_of(std::uint32_t(float_to_bf16(params[i])) << 16);
  CHECK(same_bits(back.params, rounded));
  // Exactly representable values survive bf16 untouched.
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isnan(params[i]) && (bits_of(params[i]) & 0xFFFFu) == 0) CHECK(back.params[i] == params[i]);
}

TEST_CASE("llm.c checkpoint: read piece by piece into destinations, fp32 and bf16", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const std::size_t n = shape.param_count();
  const std::vector<float> params = test_params(n, 3);
  for (int version : {3, 5}) {
    INFO("version " << version);
    const fs::path file = dir / ("streamed" + std::to_string(version) + ".bin");
    GptCheckpointFile::write(file, shape, params, version);
    const std::vector<float> whole = GptCheckpointFile::read(file, shape).params;
    // Uneven pieces written backwards into a buffer: each lands at its llm.c offset.
    const std::vector<std::size_t> pieces{1, 16, n - 30, 13};
    std::vector<float> got(n, -7.0f);
    std::vector<std::size_t> offsets;
    const int read_version = GptCheckpointFile::read_streamed(
        file, shape,
        [&](std::size_t offset, std::size_t count) {
          offsets.push_back(offset);
          return std::span<float>(got).subspan(offset, count);
        },
        pieces);
    CHECK(read_version == version);
    CHECK(offsets == std::vector<std::size_t>{0, 1, 17, n - 13});
    CHECK(same_bits(got, whole));
    // Pieces that do not cover the file, another shape, a truncated file.
    CHECK_THROWS_AS(GptCheckpointFile::read_streamed(
                        file, shape, [&](std::size_t o, std::size_t c) { return std::span<float>(got).subspan(o, c); },
                        std::vector<std::size_t>{n - 1}),
                    std::invalid_argument);
    GptShape other = shape;
    other.layers = 3;
    CHECK_THROWS_AS(
        GptCheckpointFile::read_streamed(
            file, other, [&](std::size_t o, std::size_t c) { return std::span<float>(got).subspan(o, c); }, pieces),
        FileFormatError);
  }
}

TEST_CASE("llm.c checkpoint: malformed files throw FileFormatError naming the file", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const fs::path good = dir / "good.bin";
  GptCheckpointFile::write(good, shape, test_params(shape.param_count()), 3);
  const std::vector<char> bytes = read_raw(good);
  const fs::path bad = dir / "broken_ckpt.bin";
  // The full read and the header read (which checks the file's size too) reject the same files.
  const bool header_only = GENERATE(false, true);
  INFO((header_only ? "GptCheckpointFile::read_header" : "GptCheckpointFile::read"));
  auto read_bad = [&] {
    if (header_only)
      GptCheckpointFile::read_header(bad);
    else
      GptCheckpointFile::read(bad);
  };

  SECTION("missing file") { require_format_error(read_bad, bad, "cannot open"); }
  SECTION("truncated header") {
    write_raw(bad, std::vector<char>(bytes.begin(), bytes.begin() + 100));
    require_format_error(read_bad, bad, "truncated header");
  }
  SECTION("empty file") {
    write_raw(bad, {});
    require_format_error(read_bad, bad, "truncated header");
  }
  SECTION("wrong magic") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 0, 12345);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "wrong magic 12345");
  }
  SECTION("a token shard is not a checkpoint") {
    GptTokenShardFile::write(bad, std::vector<std::uint16_t>(600, 1));
    require_format_error(read_bad, bad, "token shard");
  }
  SECTION("unknown version") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 4, 4);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "unknown version 4");
  }
  SECTION("invalid shape") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 20, 3);  // NH = 3 does not divide C = 4
    write_raw(bad, b);
    require_format_error(read_bad, bad, "invalid shape");
  }
  SECTION("negative dimension") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 16, -2);  // L
    write_raw(bad, b);
    require_format_error(read_bad, bad, "invalid shape");
  }
  SECTION("truncated data") {
    write_raw(bad, std::vector<char>(bytes.begin(), bytes.end() - 4));
    require_format_error(read_bad, bad, "truncated data");
  }
  SECTION("header only") {
    write_raw(bad, std::vector<char>(bytes.begin(), bytes.begin() + 1024));
    require_format_error(read_bad, bad, "truncated data");
  }
  SECTION("trailing bytes") {
    auto b = bytes;
    b.push_back('x');
    write_raw(bad, b);
    require_format_error(read_bad, bad, "trailing data");
  }
  SECTION("a bf16 header on fp32 data is trailing data") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 4, 5);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "trailing data");
  }
  SECTION("shape mismatch lists both shapes") {
    write_raw(bad, bytes);
    GptShape other = shape;
    other.layers = 3;
    require_format_error([&] { GptCheckpointFile::read(bad, other); }, bad, "shape mismatch");
    try {
      GptCheckpointFile::read(bad, other);
    } catch (const FileFormatError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(shape.to_string()) != std::string::npos);
      CHECK(msg.find(other.to_string()) != std::string::npos);
    }
  }
}

TEST_CASE("llm.c checkpoint: invalid arguments to the writer touch no file", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const fs::path file = dir / "model.bin";
  CHECK_THROWS_AS(GptCheckpointFile::write(file, shape, test_params(shape.param_count() - 1), 3), std::invalid_argument);
  CHECK_THROWS_AS(GptCheckpointFile::write(file, shape, test_params(shape.param_count()), 4), std::invalid_argument);
  GptShape bad = shape;
  bad.heads = 3;
  CHECK_THROWS_AS(GptCheckpointFile::write(file, bad, test_params(shape.param_count()), 3), std::invalid_argument);
  CHECK(dir.entries().empty());
}

namespace {
// Lowers the file-size limit for this process and ignores SIGXFSZ, so writes past the limit
// fail with EFBIG: a real I/O error in the middle of a write. Restores both on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_) == 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = old_;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_{};
};
}  // namespace

TEST_CASE("stale temporaries of killed saves are removed, nothing else", "[llmc]") {
  TempDir dir;
  // A process that has exited: a child that ran and was reaped, so its pid is free.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid()),
                    self = std::to_string(::getpid());
  const std::vector<std::string> stale{"ck.bin.tmp." + dead, "ck.bin.state.tmp." + dead,
                                       "ck.bin.rank1-of-2.state.tmp." + dead};
  const std::vector<std::string> kept{"ck.bin",  // the checkpoint itself
                                      "ck.bin.tmp." + alive,
                                      "ck.bin.state.tmp." + self,  // running processes
                                      "other.bin.tmp." + dead,     // another checkpoint
                                      "ck.bin.tmp.x1",
                                      "ck.bin.tmp."};  // not a pid
  for (const auto& names : {stale, kept})
    for (const std::string& name : names) write_raw(dir / name, {'x'});
  const std::vector<fs::path> removed = remove_stale_temporaries(dir / "ck.bin");
  std::vector<std::string> removed_names;
  for (const fs::path& p : removed) removed_names.push_back(p.filename().string());
  std::sort(removed_names.begin(), removed_names.end());
  std::vector<std::string> want = stale;
  std::sort(want.begin(), want.end());
  CHECK(removed_names == want);
  std::vector<std::string> left = kept;
  std::sort(left.begin(), left.end());
  CHECK(dir.entries() == left);
  // A directory that does not exist: nothing to do.
  CHECK(remove_stale_temporaries(dir / "missing" / "ck.bin").empty());
  // A pid that runs again, reused by a process started after the file was last written (here:
  // the parent, started after a file dated 2001), does not own the file: it goes.
  write_raw(dir / ("ck.bin.tmp." + alive), {'x'});
  fs::last_write_time(dir / ("ck.bin.tmp." + alive), fs::file_time_type::clock::now() - std::chrono::hours(24 * 365 * 25));
  CHECK_FALSE(process_may_own(::getppid(), dir / ("ck.bin.tmp." + alive)));
  CHECK(process_may_own(::getpid(), dir / ("ck.bin.state.tmp." + self)));  // written after this process started
  REQUIRE(remove_stale_temporaries(dir / "ck.bin").size() == 1);
  CHECK_FALSE(fs::exists(dir / ("ck.bin.tmp." + alive)));
  // A zombie (exited, not reaped yet) answers signal 0 but runs no more.
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  REQUIRE(zombie > 0);
  for (int i = 0; i < 200 && process_running(zombie); ++i) ::usleep(10000);
  CHECK_FALSE(process_running(zombie));
  REQUIRE(::waitpid(zombie, &status, 0) == zombie);
}

TEST_CASE("atomic writes: a failed write leaves the old target byte-identical and no temp file", "[llmc]") {
  TempDir dir;
  const GptShape shape = tiny_shape();
  const fs::path target = dir / "model.bin";
  GptCheckpointFile::write(target, shape, test_params(shape.param_count(), 1), 3);
  const std::vector<char> before = read_raw(target);
  const std::vector<float> other = test_params(shape.param_count(), 99);

  SECTION("the writer throws halfway") {
    CHECK_THROWS_WITH(write_file_atomically(target,
                                            [](std::ostream& os) {
                                              os << "partial content";
                                              throw std::runtime_error("writer failed");
                                            }),
                      "writer failed");
  }
  SECTION("an I/O error in the middle (file size limit, EFBIG)") {
    FileSizeLimit limit(2048);  // the checkpoint needs 1024 + 4 * 592 bytes
    CHECK_THROWS_AS(GptCheckpointFile::write(target, shape, other, 3), std::system_error);
  }
  SECTION("the rename fails (target replaced by a non-empty directory)") {
    const fs::path dir_target = dir / "occupied";
    fs::create_directories(dir_target / "inside");
    CHECK_THROWS_AS(GptCheckpointFile::write(dir_target, shape, other, 3), std::system_error);
    CHECK(fs::is_directory(dir_target / "inside"));
    fs::remove_all(dir_target);
  }
  SECTION("the target directory does not exist") {
    const fs::path missing = dir / "no_such_dir" / "model.bin";
    try {
      GptCheckpointFile::write(missing, shape, other, 3);
      FAIL("expected an error");
    } catch (const std::system_error& e) {
      CHECK(std::string(e.what()).find("no_such_dir") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(dir / "no_such_dir"));
  }
  CHECK(read_raw(target) == before);
  CHECK(dir.entries() == std::vector<std::string>{"model.bin"});

  // And a successful write replaces the target.
  GptCheckpointFile::write(target, shape, other, 3);
  CHECK(same_bits(GptCheckpointFile::read(target).params, other));
  CHECK(dir.entries() == std::vector<std::string>{"model.bin"});
}

TEST_CASE("llm.c token shard: round trip and raw layout", "[llmc]") {
  TempDir dir;
  const fs::path file = dir / "tokens.bin";
  std::vector<std::uint16_t> tokens = {0, 1, 50256, 65535, 198, 13};
  for (int i = 0; i < 1000; ++i) tokens.push_back(std::uint16_t((i * 7919) % 50257));
  GptTokenShardFile::write(file, tokens);

  const std::vector<char> raw = read_raw(file);
  REQUIRE(raw.size() == 1024 + 2 * tokens.size());
  CHECK(raw_at<std::int32_t>(raw, 0) == 20240520);
  CHECK(raw_at<std::int32_t>(raw, 4) == 1);
  CHECK(raw_at<std::int32_t>(raw, 8) == std::int32_t(tokens.size()));
  for (std::size_t i = 3; i < 256; ++i) CHECK(raw_at<std::int32_t>(raw, 4 * i) == 0);
  CHECK(std::memcmp(raw.data() + 1024, tokens.data(), tokens.size() * 2) == 0);
  CHECK(GptTokenShardFile::read(file) == tokens);

  GptTokenShardFile::write(file, {});
  CHECK(GptTokenShardFile::read(file).empty());
  CHECK(dir.entries() == std::vector<std::string>{"tokens.bin"});
}

TEST_CASE("llm.c token shard: malformed files throw FileFormatError naming the file", "[llmc]") {
  TempDir dir;
  const fs::path good = dir / "good.bin";
  GptTokenShardFile::write(good, std::vector<std::uint16_t>(100, 7));
  const std::vector<char> bytes = read_raw(good);
  const fs::path bad = dir / "broken_shard.bin";
  auto read_bad = [&] { GptTokenShardFile::read(bad); };

  SECTION("missing file") { require_format_error(read_bad, bad, "cannot open"); }
  SECTION("truncated header") {
    write_raw(bad, std::vector<char>(bytes.begin(), bytes.begin() + 1000));
    require_format_error(read_bad, bad, "truncated header");
  }
  SECTION("wrong magic") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 0, 20240326);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "wrong magic 20240326");
  }
  SECTION("wrong version") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 4, 2);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "unknown version 2");
  }
  SECTION("count larger than the file") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 8, 101);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "truncated data");
  }
  SECTION("count smaller than the file") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 8, 99);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "trailing data");
  }
  SECTION("odd trailing byte") {
    auto b = bytes;
    b.push_back(1);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "inconsistent with the file size");
  }
  SECTION("negative count") {
    auto b = bytes;
    set_raw<std::int32_t>(b, 8, -1);
    write_raw(bad, b);
    require_format_error(read_bad, bad, "negative token count");
  }
}
