#pragma once
// Host (main-memory) buffers for ZeRO-Offload state: NUMA-local and page-locked when the system
// allows it, pageable otherwise.
//
// A PinnedHostBuffer is allocated on one NUMA node (hwloc memory binding; in practice the node
// closest to the GPU, Topology::gpus[i].numa_node), zero-filled (which also places its pages)
// and then page-locked (in simulation a large one is folded instead, see allocate_host, unbound
// and not zero-filled):
//  - when StarPU runs CUDA workers, with starpu_memory_pin (cudaHostRegister): host<->device
//    copies of it are then DMA transfers that overlap with compute;
//  - otherwise with mlock(2): its pages are never swapped out.
// If locking is refused (RLIMIT_MEMLOCK without CAP_IPC_LOCK, ENOMEM, EPERM, ...) the buffer stays
// pageable: training still works, host-device transfers are slower. One warning per process goes
// to stderr and host_memory_stats().failed_pins counts every such fallback. Only a failed
// allocation throws.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/tensor.hpp"

namespace starzero {

// Main memory for the host buffer kinds (Tensor::host, PinnedHostBuffer) from StarPU:
// starpu_malloc_flags with STARPU_MALLOC_PINNED when `pinned` (page-locked by StarPU when CUDA
// workers exist). In a simulation build (!sim::host_is_this_machine) a buffer of at least
// kFoldedHostBytes is also STARPU_MALLOC_SIMULATION_FOLDED: StarPU reserves the address range and
// maps one small shared file over it again and again (STARPU_MALLOC_SIMULATION_FOLD MiB per
// mapping, 64 unless the environment says otherwise), so that a model whose host state exceeds
// this machine's memory can be simulated; every page of such a buffer aliases the same bytes
// (no kernel runs, nothing reads them). Returns nullptr when the memory cannot be had. Free with
// free_host and the same `bytes` and `pinned`.
inline constexpr std::size_t kFoldedHostBytes = std::size_t(1) << 20;
void* allocate_host(std::size_t bytes, bool pinned);
void free_host(void* data, std::size_t bytes, bool pinned) noexcept;
// True when allocate_host folds a buffer of `bytes`: simulation builds, at least kFoldedHostBytes.
bool folded_host_allocation(std::size_t bytes);

class PinnedHostBuffer final : public HomeBuffer {
 public:
  // `bytes` > 0; `numa_node` is the OS index of a NUMA node of this machine (as hwloc and
  // /sys/devices/system/node name it), or -1 for no binding. `name` only labels messages.
  // Throws std::invalid_argument for zero bytes or a NUMA node that does not exist here,
  // std::runtime_error when the memory cannot be allocated. Must be destroyed while the StarPU
  // session it was created under (if any) is still alive, like every Tensor.
  PinnedHostBuffer(std::size_t bytes, int numa_node, const std::string& name);
  ~PinnedHostBuffer() override;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  unsigned node() const override;  // STARPU_MAIN_RAM
  std::uintptr_t address() const override { return reinterpret_cast<std::uintptr_t>(data_); }

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  int numa_node() const { return numa_node_; }
  // True when the buffer is page-locked (by starpu_memory_pin or mlock; in simulation, always);
  // false after a fallback to pageable memory.
  bool pinned() const { return lock_ != Lock::none; }

 private:
  enum class Lock : unsigned char { none, mlock, starpu, sim };
  enum class Source : unsigned char { hwloc, aligned, folded };

  void* data_ = nullptr;
  std::size_t bytes_ = 0;         // as requested
  std::size_t mapped_bytes_ = 0;  // rounded up to whole pages: what is allocated and locked
  int numa_node_ = -1;
  Lock lock_ = Lock::none;
  Source source_ = Source::aligned;
};

// Process-wide accounting of the PinnedHostBuffers alive now (bytes as requested, by kind) and
// of the pin fallbacks that ever happened. Safe to call from any thread.
struct HostMemoryStats {
  std::size_t pinned_bytes = 0;
  std::size_t pageable_bytes = 0;
  std::size_t failed_pins = 0;
};
HostMemoryStats host_memory_stats();

// MemAvailable from /proc/meminfo, in bytes: what the plan's host-memory need is checked against
// before training. Throws std::runtime_error when /proc/meminfo cannot be read or lacks it.
std::size_t available_host_memory_bytes();

// Bytes for a message, in the planner's units (GB = 1e9, as `starzero plan` prints them): "1.23 GB"
// from 1e9 bytes up, else "12.3 MB". The pin warnings, the host-memory and disk-space checks
// before a run and its pinned-memory report all use it.
std::string format_bytes(double bytes);

}  // namespace starzero
