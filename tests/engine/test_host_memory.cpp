// runtime/host_memory: pinned, NUMA-local host buffers and their pageable fallback.
#include <hwloc.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/host_memory.hpp"
#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "tasks/elementwise.hpp"

using namespace starzero;

namespace {

constexpr std::size_t MiB = std::size_t(1) << 20;

// ---- capabilities through the raw syscalls (libcap may be missing) ---------------------------
bool read_caps(__user_cap_data_struct (&data)[_LINUX_CAPABILITY_U32S_3]) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return syscall(SYS_capget, &header, data) == 0;
}

bool has_cap_ipc_lock() {
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return read_caps(data) && (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

// Clears CAP_IPC_LOCK from this process's effective set (root then obeys RLIMIT_MEMLOCK).
bool drop_cap_ipc_lock() {
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (!read_caps(data)) return false;
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return syscall(SYS_capset, &header, data) == 0;
}

std::size_t memlock_soft_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 0;
  return lim.rlim_cur == RLIM_INFINITY ? SIZE_MAX : std::size_t(lim.rlim_cur);
}

// Whether mlock of `bytes` more should be granted here (CUDA's cudaHostRegister ignores the limit).
bool expect_pinned(const Session& session, std::size_t bytes) {
  return session.cuda_workers() > 0 || has_cap_ipc_lock() || memlock_soft_limit() >= 2 * bytes;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Where the pages of [data, data + bytes) are (by hwloc, OS NUMA indexes), and the binding
// policy of the area; "" when the system cannot say.
struct Placement {
  std::string nodes;
  std::string policy;
};
Placement placement_of(const void* data, std::size_t bytes) {
  Placement p;
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return p;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (hwloc_topology_load(topo) == 0 && set) {
    char text[256];
    if (hwloc_get_area_memlocation(topo, data, bytes, set, HWLOC_MEMBIND_BYNODESET) == 0 &&
        hwloc_bitmap_list_snprintf(text, sizeof text, set) >= 0)
      p.nodes = text;
    hwloc_membind_policy_t policy{};
    if (hwloc_get_area_membind(topo, data, bytes, set, &policy, HWLOC_MEMBIND_BYNODESET) == 0 &&
        hwloc_bitmap_list_snprintf(text, sizeof text, set) >= 0)
      p.policy = std::string(policy == HWLOC_MEMBIND_BIND ? "bind:" : "other:") + text;
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return p;
}

SessionOptions cpu_session() {
  SessionOptions options;
  options.cpu_workers = 2;
  options.cuda_workers = 0;
  return options;
}

// Fills a pinned buffer, runs x *= 3 on it as a real StarPU task, reads it back through the
// handle. Returns the number of wrong elements (and whether the view is the buffer itself).
struct TaskResult {
  std::size_t wrong = 0;
  bool view_is_home = false;
};
TaskResult scale_on(Session& session, std::unique_ptr<PinnedHostBuffer> buffer, std::size_t n) {
  float* data = static_cast<float*>(buffer->data());
  for (std::size_t i = 0; i < n; ++i) data[i] = float(i % 1000) - 500.0f;
  const std::uintptr_t home = buffer->address();
  Tensor x = Tensor::with_home(DType::f32, n, "x", std::move(buffer));
  Tensor y = Tensor::host(DType::f32, n, "y");
  {
    auto hy = y.view(Access::write);
    std::fill(hy.as<float>().begin(), hy.as<float>().end(), 0.5f);
  }
  tasks::submit_scale(3.0f, x);    // x = 3 (i%1000 - 500)
  tasks::submit_axpy(2.0f, y, x);  // x += 2 * 0.5
  session.wait_all();
  TaskResult r;
  auto hx = x.view(Access::read);
  r.view_is_home = reinterpret_cast<std::uintptr_t>(hx.as<float>().data()) == home;
  const auto v = hx.as<float>();
  for (std::size_t i = 0; i < n; ++i)
    if (v[i] != 3.0f * (float(i % 1000) - 500.0f) + 1.0f) ++r.wrong;
  return r;
}

// ---- the fallback, in a child process --------------------------------------------------------
// The child drops CAP_IPC_LOCK and lowers RLIMIT_MEMLOCK (irreversibly: it lacks
// CAP_SYS_RESOURCE), so the rest of this binary keeps both. It reports key=value lines on a pipe.
std::string fallback_child() {
  std::ostringstream out;
  const std::size_t bytes = 16 * MiB;
  out << "cap_before=" << has_cap_ipc_lock() << "\n";

  // Positive control: with the capability, mlock of 16 MiB succeeds (more than the usual 8 MiB
  // RLIMIT_MEMLOCK), so what follows is due to the capability and the limit, nothing else.
  {
    void* probe = std::aligned_alloc(4096, bytes);
    if (!probe) throw std::runtime_error("aligned_alloc for the probe failed");
    std::memset(probe, 1, bytes);
    const int rc = mlock(probe, bytes);
    out << "control_mlock=" << (rc == 0 ? 0 : errno) << "\n";
    if (rc == 0) munlock(probe, bytes);
    std::free(probe);
  }

  // Drop the capability, then lower the limit to 64 KiB.
  out << "drop_cap=" << drop_cap_ipc_lock() << "\n";
  out << "cap_after=" << has_cap_ipc_lock() << "\n";
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const rlim_t target = 64 * 1024;
  lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? target : std::min<rlim_t>(target, lim.rlim_max);
  lim.rlim_max = lim.rlim_cur;
  out << "setrlimit=" << (setrlimit(RLIMIT_MEMLOCK, &lim) == 0) << "\n";
  out << "limit=" << memlock_soft_limit() << "\n";
  {
    void* probe = std::aligned_alloc(4096, bytes);
    if (!probe) throw std::runtime_error("aligned_alloc for the probe failed");
    const int rc = mlock(probe, bytes);
    out << "negative_mlock=" << (rc == 0 ? 0 : errno) << "\n";
    if (rc == 0) munlock(probe, bytes);
    std::free(probe);
  }

  // Capture stderr in a file while the buffers are made.
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  if (!capture) throw std::runtime_error("tmpfile failed");
  const int saved_stderr = dup(2);
  dup2(fileno(capture), 2);

  std::string error;
  try {
    Session session(cpu_session());
    const HostMemoryStats before = host_memory_stats();
    auto a = std::make_unique<PinnedHostBuffer>(bytes, 0, "adam_m[3]");
    auto b = std::make_unique<PinnedHostBuffer>(bytes, -1, "adam_v[3]");
    const HostMemoryStats during = host_memory_stats();
    out << "a_pinned=" << a->pinned() << "\nb_pinned=" << b->pinned() << "\n";
    out << "failed_pins_delta=" << during.failed_pins - before.failed_pins << "\n";
    out << "pageable_delta=" << during.pageable_bytes - before.pageable_bytes << "\n";
    out << "pinned_delta=" << during.pinned_bytes - before.pinned_bytes << "\n";
    const auto* bytes_a = static_cast<const unsigned char*>(a->data());
    out << "a_zeroed=" << std::all_of(bytes_a, bytes_a + bytes, [](unsigned char c) { return c == 0; }) << "\n";
    const std::size_t n = bytes / sizeof(float);
    const TaskResult ra = scale_on(session, std::move(a), n);
    const TaskResult rb = scale_on(session, std::move(b), n);
    out << "a_wrong=" << ra.wrong << "\nb_wrong=" << rb.wrong << "\n";
    out << "a_view_is_home=" << ra.view_is_home << "\n";
    const HostMemoryStats after = host_memory_stats();
    out << "pageable_after_delta=" << after.pageable_bytes - before.pageable_bytes << "\n";
  } catch (const std::exception& e) {
    error = e.what();
  }

  std::fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  std::string captured;
  std::rewind(capture);
  char chunk[4096];
  for (std::size_t got; (got = std::fread(chunk, 1, sizeof chunk, capture)) > 0;) captured.append(chunk, got);
  std::fclose(capture);
  if (!error.empty()) throw std::runtime_error(error);
  out << "warnings=" << count_of(captured, "starzero: warning: cannot pin") << "\n";
  // 16 MiB = 16,777,216 bytes: 16.8 MB in the planner's units (format_bytes).
  out << "warning_names_buffer=" << (captured.find("16.8 MB for adam_m[3]") != std::string::npos) << "\n";
  out << "warning_names_limit=" << (captured.find("RLIMIT_MEMLOCK is 64 KiB") != std::string::npos) << "\n";
  out << "warning_says_pageable=" << (captured.find("using pageable memory") != std::string::npos) << "\n";
  // Keep the captured text for the parent's diagnostics, newlines folded.
  std::replace(captured.begin(), captured.end(), '\n', '|');
  out << "stderr=" << captured << "\n";
  return out.str();
}

std::map<std::string, std::string> run_in_child(std::string (*body)()) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string report;
    int status = 0;
    try {
      report = body();
    } catch (const std::exception& e) {
      report = std::string("error=") + e.what() + "\n";
      status = 2;
    } catch (...) {
      report = "error=unknown exception\n";
      status = 2;
    }
    for (std::size_t done = 0; done < report.size();) {
      const ssize_t w = write(fds[1], report.data() + done, report.size() - done);
      if (w <= 0) break;
      done += std::size_t(w);
    }
    close(fds[1]);
    _exit(status);
  }
  close(fds[1]);
  std::string text;
  char chunk[4096];
  for (ssize_t got; (got = read(fds[0], chunk, sizeof chunk)) > 0;) text.append(chunk, std::size_t(got));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child report:\n" << text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return fields;
}

}  // namespace

// First in the file: when the whole binary runs in one process, the fork happens before any
// StarPU (or CUDA) state exists in the parent.
TEST_CASE("without CAP_IPC_LOCK and with RLIMIT_MEMLOCK = 64 KiB, buffers fall back to pageable memory",
          "[host_memory]") {
  auto r = run_in_child(fallback_child);
  INFO("child stderr: " << r["stderr"]);
  REQUIRE(r["error"].empty());
  // The control: before the drop, locking 16 MiB worked (root's CAP_IPC_LOCK bypasses the limit).
  if (r["cap_before"] == "1") {
    CHECK(r["control_mlock"] == "0");
  } else {
    WARN("no CAP_IPC_LOCK in this environment (not root?): control mlock gave errno " << r["control_mlock"]);
  }
  CHECK(r["drop_cap"] == "1");
  CHECK(r["cap_after"] == "0");
  CHECK(r["setrlimit"] == "1");
  CHECK(r["limit"] == std::to_string(64 * 1024));
  CHECK(r["negative_mlock"] != "0");  // the same mlock is now refused
  // The fallback: usable, zeroed, counted, correct under StarPU, one warning for two fallbacks.
  CHECK(r["a_pinned"] == "0");
  CHECK(r["b_pinned"] == "0");
  CHECK(r["failed_pins_delta"] == "2");
  CHECK(r["pageable_delta"] == std::to_string(32 * MiB));
  CHECK(r["pinned_delta"] == "0");
  CHECK(r["a_zeroed"] == "1");
  CHECK(r["a_wrong"] == "0");
  CHECK(r["b_wrong"] == "0");
  CHECK(r["a_view_is_home"] == "1");
  CHECK(r["pageable_after_delta"] == "0");
  CHECK(r["warnings"] == "1");
  CHECK(r["warning_names_buffer"] == "1");
  CHECK(r["warning_names_limit"] == "1");
  CHECK(r["warning_says_pageable"] == "1");
}

TEST_CASE("pinned buffers on NUMA node 0 and unbound are zeroed, pinned, counted and usable by tasks",
          "[host_memory]") {
  Session session(cpu_session());
  for (const int numa : {0, -1}) {
    CAPTURE(numa);
    const std::size_t n = 3 * MiB / sizeof(float) + 7;  // not a whole number of pages
    const std::size_t bytes = n * sizeof(float);
    const HostMemoryStats before = host_memory_stats();
    {
      auto buffer = std::make_unique<PinnedHostBuffer>(bytes, numa, "x");
      CHECK(buffer->node() == STARPU_MAIN_RAM);
      CHECK(buffer->bytes() == bytes);
      CHECK(buffer->numa_node() == numa);
      CHECK(buffer->address() % 4096 == 0);
      const auto* raw = static_cast<const unsigned char*>(buffer->data());
      CHECK(std::all_of(raw, raw + bytes, [](unsigned char c) { return c == 0; }));
      if (numa == 0) {
        // Bound to node 0 and every page is there (the zero-fill placed them).
        const Placement p = placement_of(buffer->data(), bytes);
        if (p.policy.empty() || p.nodes.empty())
          WARN("hwloc cannot report this buffer's placement here");
        else {
          CHECK(p.policy == "bind:0");
          CHECK(p.nodes == "0");
        }
      }
      if (expect_pinned(session, bytes))
        CHECK(buffer->pinned());
      else
        WARN("this environment may refuse mlock (no CAP_IPC_LOCK, small RLIMIT_MEMLOCK); pinned() = "
             << buffer->pinned());
      const HostMemoryStats during = host_memory_stats();
      if (buffer->pinned()) {
        CHECK(during.pinned_bytes - before.pinned_bytes == bytes);
        CHECK(during.pageable_bytes == before.pageable_bytes);
        CHECK(during.failed_pins == before.failed_pins);
      } else {
        CHECK(during.pageable_bytes - before.pageable_bytes == bytes);
      }
      // A real StarPU task works on it in place (the view is the buffer itself).
      const TaskResult r = scale_on(session, std::move(buffer), n);
      CHECK(r.wrong == 0);
      CHECK(r.view_is_home);
    }
    const HostMemoryStats after = host_memory_stats();
    CHECK(after.pinned_bytes == before.pinned_bytes);
    CHECK(after.pageable_bytes == before.pageable_bytes);
  }
}

TEST_CASE("host memory accounting is thread-safe", "[host_memory]") {
  Session session(cpu_session());
  const HostMemoryStats before = host_memory_stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 25; ++i) {
        PinnedHostBuffer buffer(std::size_t(64 + t) * 1024, (i % 2) ? 0 : -1, "t" + std::to_string(t));
        static_cast<unsigned char*>(buffer.data())[0] = 1;
      }
    });
  for (auto& th : threads) th.join();
  const HostMemoryStats after = host_memory_stats();
  CHECK(after.pinned_bytes == before.pinned_bytes);
  CHECK(after.pageable_bytes == before.pageable_bytes);
}

#ifdef STARZERO_WITH_CUDA
// Hidden ([.cuda]): needs a GPU; scripts/gpu-check.sh runs it with `test_host_memory "[cuda]"`.
TEST_CASE("with CUDA workers buffers are pinned by StarPU and tasks on the GPU see them", "[host_memory][.cuda]") {
  SessionOptions options;
  options.cpu_workers = 1;
  Session session(options);
  REQUIRE(session.cuda_workers() > 0);
  const std::size_t n = 8 * MiB / sizeof(float);
  const HostMemoryStats before = host_memory_stats();
  auto buffer = std::make_unique<PinnedHostBuffer>(n * sizeof(float), 0, "gpu_x");
  CHECK(buffer->pinned());
  CHECK(host_memory_stats().pinned_bytes - before.pinned_bytes == n * sizeof(float));
  const TaskResult r = scale_on(session, std::move(buffer), n);
  CHECK(r.wrong == 0);
  CHECK(r.view_is_home);
  CHECK(host_memory_stats().pinned_bytes == before.pinned_bytes);
}
#endif

TEST_CASE("available host memory is positive and at most the total RAM", "[host_memory]") {
  const std::size_t available = available_host_memory_bytes();
  struct sysinfo info {};
  REQUIRE(sysinfo(&info) == 0);
  const std::size_t total = std::size_t(info.totalram) * info.mem_unit;
  CHECK(available > 0);
  CHECK(available <= total);
}

TEST_CASE("a NUMA node that does not exist, a negative one or zero bytes are rejected", "[host_memory]") {
  const HostMemoryStats before = host_memory_stats();
  try {
    PinnedHostBuffer buffer(MiB, 4096, "adam_m[0]");
    FAIL("NUMA node 4096 was accepted");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("NUMA node 4096") != std::string::npos);
    CHECK(message.find("adam_m[0]") != std::string::npos);
  }
  CHECK_THROWS_AS(PinnedHostBuffer(MiB, -2, "x"), std::invalid_argument);
  CHECK_THROWS_AS(PinnedHostBuffer(0, 0, "x"), std::invalid_argument);
  const HostMemoryStats after = host_memory_stats();
  CHECK(after.pinned_bytes == before.pinned_bytes);
  CHECK(after.pageable_bytes == before.pageable_bytes);
  CHECK(after.failed_pins == before.failed_pins);
}

TEST_CASE("messages give bytes in GB from 1e9 up, else in MB (GB = 1e9, MB = 1e6)", "[host_memory]") {
  CHECK(format_bytes(26.25e9) == "26.25 GB");
  CHECK(format_bytes(1e9) == "1.00 GB");
  CHECK(format_bytes(999e6) == "999.0 MB");
  CHECK(format_bytes(double(16 * MiB)) == "16.8 MB");
  CHECK(format_bytes(0) == "0.0 MB");
}

TEST_CASE("an allocation the machine cannot satisfy throws std::runtime_error", "[host_memory]") {
  // 2^62 bytes: no machine maps that; the failure is an error, not a fallback.
  CHECK_THROWS_AS(PinnedHostBuffer(std::size_t(1) << 62, -1, "huge"), std::runtime_error);
  CHECK_THROWS_AS(PinnedHostBuffer(std::size_t(1) << 62, 0, "huge"), std::runtime_error);
}
