#include "runtime/host_memory.hpp"

#include "runtime/hwloc_topology.hpp"
#include "runtime/sim.hpp"

#include <hwloc.h>
#include <starpu.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace starzero {

namespace {

// ---- accounting ------------------------------------------------------------------------------
std::atomic<std::size_t> live_pinned_bytes{0};
std::atomic<std::size_t> live_pageable_bytes{0};
std::atomic<std::size_t> pin_failures{0};
std::atomic<bool> warned{false};

// ---- hwloc -----------------------------------------------------------------------------------
using detail::HwlocTopology;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using HwlocBitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

// Loaded on first use, shared by every buffer (hwloc allows concurrent read-only use of a loaded
// topology), destroyed at exit.
hwloc_topology_t topology() {
  static const HwlocTopology topo = detail::load_hwloc_topology(false);
  return topo.get();
}

std::string numa_nodes_here(hwloc_topology_t topo) {
  std::string out;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n))
    out += (out.empty() ? "" : ", ") + std::to_string(n->os_index);
  return out.empty() ? "none" : out;
}

// ---- messages --------------------------------------------------------------------------------

std::string format_limit(rlim_t limit) {
  if (limit == RLIM_INFINITY) return "unlimited";
  if (limit != 0 && limit % 1024 == 0) {
    if (limit % (1024 * 1024) == 0) return std::to_string(limit / (1024 * 1024)) + " MiB";
    return std::to_string(limit / 1024) + " KiB";
  }
  return std::to_string(limit) + " bytes";
}

std::string memlock_limit_text() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return "unknown";
  return format_limit(lim.rlim_cur);
}

// Counts the fallback and, the first time in this process, says so on stderr. `what` names the
// refused call; `err` is its errno (0: none). Never throws: it runs while the buffer already owns
// its memory.
void report_pin_failure(std::size_t bytes, const std::string& name, const char* what, int err) noexcept {
  pin_failures.fetch_add(1, std::memory_order_relaxed);
  if (warned.exchange(true)) return;
  try {
    std::string reason = what;
    if (err != 0)
      reason += ": " + std::error_code(err, std::generic_category()).message() + "; RLIMIT_MEMLOCK is " +
                memlock_limit_text();
    const std::string line = "starzero: warning: cannot pin " + format_bytes(double(bytes)) + " for " + name + " (" +
                             reason + "); using pageable memory (slower host-device transfers)\n";
    std::fputs(line.c_str(), stderr);
  } catch (...) {
    std::fputs("starzero: warning: cannot pin host memory; using pageable memory (slower host-device transfers)\n",
               stderr);
  }
  std::fflush(stderr);
}

std::size_t page_size() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? std::size_t(p) : 4096;
}

// StarPU's starpu_memory_pin silently does nothing when pinning is switched off.
bool starpu_pinning_disabled() {
  const char* v = std::getenv("STARPU_DISABLE_PINNING");
  return v && std::atoi(v) > 0;
}

// StarPU maps the fold once per STARPU_MALLOC_SIMULATION_FOLD MiB of a folded buffer, each a
// mapping of its own: with its default of 1 MiB an 8B model's 128 GB of host state would need
// 131072 mappings, over Linux's default vm.max_map_count (65530); 64 MiB needs 2048 (a 70B model
// with CPU offload about 17000). starpu_init reads it, so it is set before main; the environment
// may set another size.
[[maybe_unused]] const bool fold_size_set = [] {
  if constexpr (!sim::host_is_this_machine) setenv("STARPU_MALLOC_SIMULATION_FOLD", "64", 0);
  return true;
}();

int malloc_flags(std::size_t bytes, bool pinned) {
  int flags = pinned ? STARPU_MALLOC_PINNED : 0;
  if (folded_host_allocation(bytes)) flags |= STARPU_MALLOC_SIMULATION_FOLDED;
  return flags;
}

}  // namespace

bool folded_host_allocation(std::size_t bytes) { return !sim::host_is_this_machine && bytes >= kFoldedHostBytes; }

void* allocate_host(std::size_t bytes, bool pinned) {
  void* data = nullptr;
  if (starpu_malloc_flags(&data, bytes, malloc_flags(bytes, pinned)) != 0) return nullptr;
  return data;
}

void free_host(void* data, std::size_t bytes, bool pinned) noexcept {
  if (data) starpu_free_flags(data, bytes, malloc_flags(bytes, pinned));
}

PinnedHostBuffer::PinnedHostBuffer(std::size_t bytes, int numa_node, const std::string& name)
    : bytes_(bytes), numa_node_(numa_node) {
  if (bytes == 0) throw std::invalid_argument("host buffer " + name + ": zero bytes");
  if (numa_node < -1)
    throw std::invalid_argument("host buffer " + name + ": NUMA node " + std::to_string(numa_node) +
                                " is not a node index (use -1 for no binding)");
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - page) throw std::invalid_argument("host buffer " + name + ": size overflows");
  mapped_bytes_ = (bytes + page - 1) / page * page;

  // 1. Allocation, bound to the NUMA node. Everything that can throw happens before or here; the
  //    steps after it cannot fail (a refused lock is a fallback, not an error). Folded in
  //    simulation (allocate_host): the NUMA node is the simulated machine's, not this one's.
  if (folded_host_allocation(mapped_bytes_)) {
    data_ = allocate_host(mapped_bytes_, false);
    source_ = Source::folded;
  } else if (numa_node >= 0) {
    hwloc_topology_t topo = topology();
    if (!hwloc_get_numanode_obj_by_os_index(topo, unsigned(numa_node)))
      throw std::invalid_argument("host buffer " + name + ": NUMA node " + std::to_string(numa_node) +
                                  " does not exist on this machine (NUMA nodes: " + numa_nodes_here(topo) + ")");
    HwlocBitmap nodeset(hwloc_bitmap_alloc());
    if (!nodeset || hwloc_bitmap_only(nodeset.get(), unsigned(numa_node)) != 0)
      throw std::runtime_error("host buffer " + name + ": hwloc_bitmap_alloc failed");
    // Without HWLOC_MEMBIND_STRICT hwloc falls back to an unbound allocation when the system
    // refuses the binding (e.g. mbind forbidden in a container); only a failed allocation is NULL.
    data_ = hwloc_alloc_membind(topo, mapped_bytes_, nodeset.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    source_ = Source::hwloc;
  } else {
    data_ = std::aligned_alloc(page, mapped_bytes_);
    source_ = Source::aligned;
  }
  if (!data_) {
    const std::string why = std::error_code(errno, std::generic_category()).message();
    throw std::runtime_error("host buffer " + name + ": cannot allocate " + format_bytes(double(bytes)) +
                             (numa_node >= 0 ? " on NUMA node " + std::to_string(numa_node) : std::string()) + " (" +
                             why + ")");
  }

  // 2. Zero-fill: first touch under the binding policy places every page on the node (a folded
  //    buffer has no pages of its own to place).
  if (source_ != Source::folded) std::memset(data_, 0, mapped_bytes_);

  // 3. Page-lock. In simulation the buffer is the simulated machine's and counts as pinned there:
  //    this machine has no GPU to register it with (cudaHostRegister would fail) and a folded
  //    buffer's pages are shared.
  const char* refused = nullptr;
  int err = 0;
  if constexpr (!sim::host_is_this_machine) {
    lock_ = Lock::sim;
  } else if (starpu_is_initialized() && starpu_cuda_worker_get_count() > 0) {
    if (starpu_pinning_disabled())
      refused = "STARPU_DISABLE_PINNING is set";
    else if (starpu_memory_pin(data_, mapped_bytes_) == 0)
      lock_ = Lock::starpu;
    else
      refused = "starpu_memory_pin (cudaHostRegister) failed";
  } else if (mlock(data_, mapped_bytes_) == 0) {
    lock_ = Lock::mlock;
  } else {
    refused = "mlock";
    err = errno;
  }
  if (lock_ == Lock::none) report_pin_failure(bytes, name, refused, err);
  (pinned() ? live_pinned_bytes : live_pageable_bytes).fetch_add(bytes_, std::memory_order_relaxed);
}

PinnedHostBuffer::~PinnedHostBuffer() {
  switch (lock_) {
    case Lock::mlock: munlock(data_, mapped_bytes_); break;
    case Lock::starpu: starpu_memory_unpin(data_, mapped_bytes_); break;
    case Lock::sim:
    case Lock::none: break;
  }
  (pinned() ? live_pinned_bytes : live_pageable_bytes).fetch_sub(bytes_, std::memory_order_relaxed);
  switch (source_) {
    case Source::hwloc: hwloc_free(topology(), data_, mapped_bytes_); break;
    case Source::aligned: std::free(data_); break;
    case Source::folded: free_host(data_, mapped_bytes_, false); break;
  }
}

unsigned PinnedHostBuffer::node() const { return STARPU_MAIN_RAM; }

HostMemoryStats host_memory_stats() {
  HostMemoryStats s;
  s.pinned_bytes = live_pinned_bytes.load(std::memory_order_relaxed);
  s.pageable_bytes = live_pageable_bytes.load(std::memory_order_relaxed);
  s.failed_pins = pin_failures.load(std::memory_order_relaxed);
  return s;
}

std::size_t available_host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) throw std::runtime_error("cannot read /proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    unsigned long long value = 0;
    std::string unit;
    if (!(fields >> value)) break;
    fields >> unit;
    if (unit.empty()) return std::size_t(value);
    if (unit == "kB") return std::size_t(value) * 1024;
    throw std::runtime_error("/proc/meminfo: unexpected unit '" + unit + "' for MemAvailable");
  }
  throw std::runtime_error("/proc/meminfo has no readable MemAvailable line");
}

std::string format_bytes(double bytes) {
  char text[32];
  if (bytes >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  else
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

}  // namespace starzero
