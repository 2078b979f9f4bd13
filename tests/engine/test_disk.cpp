// runtime/disk: tensors homed on a StarPU out-of-core disk node, in real StarPU sessions.
#include <starpu.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/disk.hpp"
#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "tasks/elementwise.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;
using starzero::testing::TempDir;

namespace {

SessionOptions cpu_session(std::size_t cpu_memory_limit_mib = 0) {
  SessionOptions options;
  options.cpu_workers = 2;
  options.cuda_workers = 0;
  options.cpu_memory_limit_mib = cpu_memory_limit_mib;
  options.background_writeback = false;  // as with any disk node (runtime/session.hpp)
  return options;
}

constexpr std::size_t kDiskCapacity = std::size_t(64) << 20;

// The home file of the tensor called `name` (the only entry ending in -<name>.bin).
std::filesystem::path home_file(const std::filesystem::path& dir, const std::string& name) {
  std::filesystem::path found;
  int matches = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = "-" + name + ".bin";
    if (file.rfind("starzero-", 0) == 0 && file.size() > suffix.size() &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found = entry.path();
      ++matches;
    }
  }
  REQUIRE(matches == 1);
  return found;
}

// Makes StarPU bring the latest value of `tensor` into its home file, then reads the file: the
// value really is on the disk, not only in a main-memory cache.
std::vector<float> value_in_home_file(const Tensor& tensor, const DiskNode& disk, const std::filesystem::path& file) {
  std::vector<float> values(tensor.count());
  REQUIRE(starpu_data_acquire_on_node(tensor.handle(), int(disk.node()), STARPU_R) == 0);
  std::ifstream in(file, std::ios::binary);
  const bool read = bool(in.read(reinterpret_cast<char*>(values.data()), std::streamsize(tensor.bytes())));
  starpu_data_release_on_node(tensor.handle(), int(disk.node()));
  REQUIRE(read);
  return values;
}

bool bitwise_equal(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

std::size_t first_difference(std::span<const float> a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size() == b.size() ? a.size() : std::min(a.size(), b.size());
}

}  // namespace

TEST_CASE("a disk-homed tensor round-trips through StarPU CPU tasks and its file", "[disk]") {
  Session session(cpu_session());
  TempDir tmp("disk");
  const std::filesystem::path dir = tmp / "nvme";  // missing: the DiskNode creates it
  unsigned node = 0;
  {
    DiskNode disk(dir.string(), kDiskCapacity);
    node = disk.node();
    CHECK(std::filesystem::is_directory(dir));
    CHECK(disk.directory() == dir.string());
    CHECK(disk.capacity_bytes() == kDiskCapacity);
    CHECK(starpu_node_get_kind(disk.node()) == STARPU_DISK_RAM);
    CHECK(disk.bytes_on_disk() == 0);
    // StarPU's bandwidth probe file (and its NNN/NNN directories) are gone again.
    CHECK(std::filesystem::is_empty(dir));

    constexpr std::size_t n = 1'000'003;
    std::vector<float> expected(n), other(n);
    {
      Tensor a = Tensor::with_home(DType::f32, n, "a", disk.home(n * 4, "a"));
      Tensor b = Tensor::host(DType::f32, n, "b");
      CHECK(a.home_node() == int(disk.node()));
      CHECK(disk.bytes_on_disk() == n * 4);
      const auto file = home_file(dir, "a");
      CHECK(std::filesystem::file_size(file) == n * 4);

      // A new home reads as zeros.
      {
        auto view = a.view(Access::read);
        CHECK(std::all_of(view.as<float>().begin(), view.as<float>().end(), [](float v) { return v == 0.0f; }));
      }

      std::mt19937 rng(20240611);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      for (auto& v : expected) v = uniform(rng);
      for (auto& v : other) v = uniform(rng);
      {
        auto va = a.view(Access::write);
        auto vb = b.view(Access::write);
        std::copy(expected.begin(), expected.end(), va.as<float>().begin());
        std::copy(other.begin(), other.end(), vb.as<float>().begin());
      }
      // Each step is one fp32 rounding (alpha·x is exact for alpha = 0.5 and -2), so the host
      // does the same arithmetic in float and the results agree bit for bit.
      tasks::submit_axpy(0.5f, b, a, "a+=b/2");
      tasks::submit_scale(3.0f, a, "a*=3");
      tasks::submit_accumulate(b.handle(), a.handle(), DType::f32, "a+=b");
      tasks::submit_axpy(-2.0f, b, a, "a-=2b");
      session.wait_all();
      for (std::size_t i = 0; i < n; ++i) {
        float v = expected[i];
        v = v + 0.5f * other[i];
        v = v * 3.0f;
        v = v + other[i];
        v = v + -2.0f * other[i];
        expected[i] = v;
      }

      const auto on_disk = value_in_home_file(a, disk, file);
      CHECK(first_difference(on_disk, expected) == n);
      auto view = a.view(Access::read);
      CHECK(first_difference(view.as<const float>(), expected) == n);
      CHECK(bitwise_equal(view.as<const float>(), expected));
    }
    // The tensor and its home are gone: so is the file.
    CHECK(disk.bytes_on_disk() == 0);
    CHECK(std::filesystem::is_empty(dir));
  }
  // The directory the DiskNode created stays (StarPU keeps the node until shutdown), empty, and
  // the node is marked full so that StarPU puts none of its own spills there any more.
  CHECK(std::filesystem::is_empty(dir));
  CHECK(starpu_memory_get_available(node) <= 0);
}

TEST_CASE("disk-homed tensors larger than STARPU_LIMIT_CPU_MEM are evicted to disk and stay correct", "[disk]") {
  constexpr std::size_t limit_mib = 16;
  constexpr int tensors = 8;
  constexpr std::size_t n = std::size_t(1) << 20;  // 4 MiB each: 32 MiB in all, twice the limit
  constexpr int rounds = 3;

  Session session(cpu_session(limit_mib));
  REQUIRE(starpu_memory_get_total(STARPU_MAIN_RAM) == starpu_ssize_t(limit_mib << 20));
  TempDir tmp("disk_ooc");
  {
    DiskNode disk(tmp.path().string(), kDiskCapacity);
    std::vector<Tensor> state;
    std::vector<std::vector<float>> expected(tensors, std::vector<float>(n));
    for (int k = 0; k < tensors; ++k) {
      const std::string name = "state" + std::to_string(k);
      state.push_back(Tensor::with_home(DType::f32, n, name, disk.home(n * 4, name)));
      for (std::size_t i = 0; i < n; ++i) expected[k][i] = float((i * 7 + std::size_t(k) * 13) % 1024) - 512.0f;
      auto view = state.back().view(Access::write);
      std::copy(expected[k].begin(), expected[k].end(), view.as<float>().begin());
    }
    CHECK(disk.bytes_on_disk() == tensors * n * 4);

    // Each tensor is touched 2·rounds times, in rotation, by tasks that each hold two of them.
    for (int r = 0; r < rounds; ++r)
      for (int k = 0; k < tensors; ++k) {
        const int next = (k + 1) % tensors;
        tasks::submit_scale(0.5f, state[k], "halve");
        tasks::submit_accumulate(state[k].handle(), state[next].handle(), DType::f32, "pass-on");
        for (std::size_t i = 0; i < n; ++i) {
          expected[k][i] = expected[k][i] * 0.5f;
          expected[next][i] = expected[next][i] + expected[k][i];
        }
      }
    session.wait_all();

    // At most limit / 4 MiB = 4 of them fit in main memory: the others were written back home.
    int in_ram = 0;
    for (const auto& t : state) {
      int allocated = 0, valid = 0, requested = 0;
      starpu_data_query_status(t.handle(), STARPU_MAIN_RAM, &allocated, &valid, &requested);
      in_ram += allocated;
    }
    CHECK(in_ram <= int(limit_mib / 4));
    CHECK(starpu_memory_get_available(STARPU_MAIN_RAM) >= 0);

    // While alive: one file of the right size per tensor, and nothing else.
    CHECK(tmp.entries().size() == std::size_t(tensors));
    for (int k = 0; k < tensors; ++k) {
      CAPTURE(k);
      const auto file = home_file(tmp.path(), "state" + std::to_string(k));
      CHECK(std::filesystem::file_size(file) == n * 4);
      CHECK(first_difference(value_in_home_file(state[k], disk, file), expected[k]) == n);
      auto view = state[k].view(Access::read);
      CHECK(bitwise_equal(view.as<const float>(), expected[k]));
    }
    state.clear();
    CHECK(disk.bytes_on_disk() == 0);
  }
  // After the tensors and the DiskNode: no file left.
  CHECK(tmp.entries().empty());
}

TEST_CASE("a disk node on a path under a regular file is refused with the path in the message", "[disk]") {
  Session session(cpu_session());
  TempDir tmp("disk_bad");
  const auto plain = tmp / "plain";
  std::ofstream(plain) << "not a directory";
  for (const auto& path : {plain / "nvme", plain}) {
    CAPTURE(path);
    try {
      DiskNode disk(path.string(), kDiskCapacity);
      FAIL("DiskNode accepted " << path);
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
    }
  }
  // The regular file is left alone.
  CHECK(tmp.entries() == std::vector<std::string>{"plain"});
}

TEST_CASE("a disk node checks its capacity, its homes and the session", "[disk]") {
  TempDir tmp("disk_args");
  // Without a StarPU session.
  CHECK_THROWS_AS(DiskNode(tmp.path().string(), kDiskCapacity), std::logic_error);

  Session session(cpu_session());
  // Below StarPU's minimum disk size (StarPU itself would assert).
  try {
    DiskNode disk(tmp.path().string(), DiskNode::min_capacity_bytes - 1);
    FAIL("DiskNode accepted a capacity below the minimum");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("16 MiB") != std::string::npos);
  }

  DiskNode disk(tmp.path().string(), DiskNode::min_capacity_bytes);
  CHECK_THROWS_AS(disk.home(0, "empty"), std::invalid_argument);
  auto first = disk.home(DiskNode::min_capacity_bytes / 2, "first");
  // Beyond the capacity: refused, and nothing is left behind.
  CHECK_THROWS_AS(disk.home(DiskNode::min_capacity_bytes / 2 + 1, "second"), std::runtime_error);
  CHECK(disk.bytes_on_disk() == DiskNode::min_capacity_bytes / 2);
  CHECK(tmp.entries().size() == 1);
  // Odd characters in a name do not escape the directory.
  auto odd = disk.home(4096, "../layer 3/m");
  CHECK(tmp.entries().size() == 2);
  first.reset();
  odd.reset();
  CHECK(disk.bytes_on_disk() == 0);
  CHECK(tmp.entries().empty());
}

TEST_CASE("StarPU spills tensors without a home into the directory and removes them at shutdown", "[disk]") {
  constexpr std::size_t n = std::size_t(1) << 20;  // 4 MiB; four of them against an 8 MiB limit
  constexpr int tensors = 4;
  TempDir tmp("disk_spill");
  {
    Session session(cpu_session(8));
    DiskNode disk(tmp.path().string(), kDiskCapacity);
    Tensor x = Tensor::host(DType::f32, n, "x");  // starpu_malloc'd homes do not count against the limit
    {
      auto view = x.view(Access::write);
      for (std::size_t i = 0; i < n; ++i) view.as<float>()[i] = float(i % 1000);
    }
    {
      std::vector<Tensor> temporaries;
      for (int k = 0; k < tensors; ++k) {
        temporaries.push_back(Tensor::transient(DType::f32, n, "t" + std::to_string(k)));
        tasks::submit_zero(temporaries.back().handle(), "zero");
        tasks::submit_axpy(float(k + 1), x, temporaries.back(), "axpy");
      }
      session.wait_all();
      // At most two fit in main memory: the others are in StarPU's own files, NNN/NNN/STARPU_XXXXXX.
      int on_disk = 0;
      for (const auto& t : temporaries) {
        int allocated = 0, valid = 0, requested = 0;
        starpu_data_query_status(t.handle(), disk.node(), &allocated, &valid, &requested);
        on_disk += valid;
      }
      CHECK(on_disk >= tensors - 2);
      CHECK(disk.bytes_on_disk() == 0);  // not ours
      for (int k = 0; k < tensors; ++k) {
        auto view = temporaries[k].view(Access::read);
        const auto values = view.as<const float>();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) wrong += values[i] != float(k + 1) * float(i % 1000);
        CHECK(wrong == 0);
      }
    }
    session.wait_all();
    // StarPU caches the freed spill files for reuse until shutdown; it never touches x's home.
  }
  CHECK(tmp.entries().empty());
}
