#pragma once
// The host side of an offload run, decided before StarPU starts: how many threads the CPU AdamW
// gets and how many CPU workers StarPU keeps, which NUMA node the pinned buffers go to (the one
// nearest the rank's GPU), how large the NVMe disk node is, and whether the plan's host memory
// and disk space are there for every rank on this machine. See docs/architecture.md.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "offload/placement.hpp"
#include "offload/planner.hpp"
#include "runtime/topology.hpp"

namespace starzero {

struct HostPlanInput {
  // The run's offload options (checked by the run): where the state goes, the CPU AdamW's
  // threads asked for (default: the cores the GPU worker leaves), the NVMe folder and host-memory
  // limit, and whether the speculative update's second state is in `memory` (named when short).
  OffloadOptions offload;
  int gpu = -1;          // this rank's GPU in the topology; -1: none
  int ranks_here = 1;    // ranks on this machine (they share its cores and memory)
  int cpu_workers = -1;  // StarPU CPU workers asked for; < 0: chosen here
  MemoryPlan memory;     // plan_memory of this run: host and NVMe bytes per rank
};

struct HostPlan {
  int adam_threads = 1;        // CPU AdamW threads (1 when the optimizer is not offloaded)
  int cpu_workers = -1;        // for SessionOptions::cpu_workers (the input's when not offloading)
  int numa_node = -1;          // where pinned host buffers go; -1: not bound
  std::size_t disk_bytes = 0;  // the NVMe disk node's capacity (offload_optimizer nvme)
};

// Without any offload the input's CPU workers come back unchanged and nothing is checked.
// Cores per rank are topology.cores / ranks_here; with a GPU the CPU AdamW gets the cores the GPU
// worker leaves minus one CPU worker for collectives and small tasks; without a GPU the compute
// needs the cores and AdamW gets 1 thread. StarPU's CPU workers (when chosen here) leave the
// extra AdamW threads their cores. Under nvme offload the path is created and its free space
// checked. Throws std::invalid_argument (one line) when memory or disk space is short, the path
// cannot be created or queried, or the input is invalid.
HostPlan plan_host(const HostPlanInput& input, const Topology& topology);

// The CPU AdamW's threads when none are asked for, for a rank with `cores_per_rank` cores: with a
// GPU, the cores its worker leaves minus one CPU worker for collectives and small tasks (at least
// 1); without a GPU, 1.
int default_adam_threads(int cores_per_rank, bool gpu);
// StarPU's CPU workers when none are asked for: the rank's cores minus the GPU worker's and the
// AdamW's extra threads (adam_threads - 1), at least 1.
int default_cpu_workers(int cores_per_rank, bool gpu, int adam_threads);

}  // namespace starzero
