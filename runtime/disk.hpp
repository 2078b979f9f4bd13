#pragma once
// The NVMe tier of ZeRO-Offload: a StarPU out-of-core disk memory node backed by a directory,
// and tensor homes that are files on it.
//
//   Session session(options);                    // starpu_init
//   DiskNode disk("/nvme/starzero", 8ull << 30);  // registers the disk node
//   Tensor m = Tensor::with_home(DType::f32, n, "m", disk.home(n * 4, "m"));
//
// How StarPU 1.3 uses it. A tensor homed on the disk node has its valid copy in its file; a CPU
// task (or a HostView) that uses it gets a copy in main memory (StarPU allocates it and reads
// the file); the latest value goes back to the file when StarPU evicts that copy or the handle
// is unregistered (the Tensor dies). StarPU evicts main-memory copies only when its own
// allocations in main memory exceed STARPU_LIMIT_CPU_MEM (SessionOptions::cpu_memory_limit_mib:
// read by starpu_init, so it has to be set before the Session starts); without a limit every
// disk-homed tensor that has been touched stays cached in RAM until it is unregistered. Homes
// allocated with starpu_malloc (Tensor::host) do not count against the limit.
// The limit must hold the buffers of the largest single task (and of a HostView) that StarPU
// allocates in main memory: StarPU 1.3 does not fail a task whose buffers cannot fit, a worker
// retries _starpu_allocate_memory_on_node forever (measured: two 4 MiB buffers per task hang at
// 7 MiB and run at 8 MiB; a 4 MiB HostView hangs at 3 MiB).
// StarPU also spills main-memory copies of tensors without a home (Tensor::transient) into the
// directory, as NNN/NNN/STARPU_XXXXXX files that count against the capacity; it keeps freed
// ones cached for reuse and removes them at starpu_shutdown.
// Start the Session with SessionOptions::background_writeback = false (the default): StarPU 1.3.10's background
// write-back to a disk node can leave requests queued at shutdown and abort there.
// A HostView must acquire the handle on STARPU_MAIN_RAM (starpu_data_acquire_on_node):
// starpu_data_acquire acquires on the home node, here the disk, where there is no pointer.
//
// Lifetime. A DiskNode needs a running Session (after starpu_init) and must outlive every tensor
// homed on it and die before the Session. StarPU 1.3 has no starpu_disk_unregister: the disk node
// stays registered until starpu_shutdown, which frees StarPU's own spill files and unplugs it.
// So each DiskNode uses one of StarPU's STARPU_MAXNODES memory nodes (8 in this build, RAM and
// GPUs included) for the rest of the session. When the DiskNode dies it marks the node full, so
// that StarPU spills nothing new into the directory afterwards. (A home that outlives its DiskNode
// still closes and removes its file, as long as the Session is alive.)
//
// Files. The DiskNode creates the directory if it is missing and leaves the directory itself in
// place. Each home is a file named starzero-<pid>-<n>-<name>.bin, created exclusively (an existing
// file is never reused or overwritten), zero-filled, and unlinked when the home dies. Besides those,
// only a probe file (.starzero-probe-XXXXXX, to check that the directory is writable) and StarPU's
// 16 MiB bandwidth-measurement file come and go while the constructor runs; nothing else in the
// directory is touched.
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/tensor.hpp"

namespace starzero {

class DiskNode {
 public:
  // The smallest capacity StarPU 1.3 accepts for a disk node (STARPU_DISK_SIZE_MIN; StarPU asserts
  // below it). starpu_disk_register also writes a file of this size to measure the disk's
  // bandwidth, so the file system needs that much free space.
  static constexpr std::size_t min_capacity_bytes = std::size_t(16) << 20;

  // Registers a disk memory node (StarPU's unistd driver: pread/pwrite, one file per object) on
  // `directory`, created if missing. `capacity_bytes` (>= min_capacity_bytes) bounds the homes
  // plus StarPU's own spills on it. Throws std::logic_error without a running StarPU session,
  // std::invalid_argument for a capacity below the minimum, std::runtime_error (naming the
  // directory) if the directory cannot be created or written or StarPU refuses the node.
  DiskNode(const std::string& directory, std::size_t capacity_bytes);
  ~DiskNode();
  DiskNode(const DiskNode&) = delete;
  DiskNode& operator=(const DiskNode&) = delete;

  // The StarPU memory node (kind STARPU_DISK_RAM).
  unsigned node() const;
  // The directory as given to StarPU (absolute).
  const std::string& directory() const;
  std::size_t capacity_bytes() const;

  // A home of `bytes` bytes on this node: a zero-filled file opened with starpu_disk_open, for
  // Tensor::with_home. `name` (sanitised) goes into the file name. Throws std::runtime_error if
  // the capacity would be exceeded or the file cannot be created at full size (e.g. no space).
  std::unique_ptr<HomeBuffer> home(std::size_t bytes, const std::string& name);

  // The sum of the sizes of the live homes (StarPU's own spills are not included).
  std::size_t bytes_on_disk() const;

  struct State;  // shared with the homes, so a home can outlive the DiskNode object

 private:
  std::shared_ptr<State> state_;
};

}  // namespace starzero
