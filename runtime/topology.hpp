#pragma once
// The machine as hwloc sees it: cores, NUMA nodes, and which NUMA node each GPU sits closest to
// (where ZeRO-Offload's pinned optimizer state should live).
#include <string>
#include <vector>

namespace starzero {

struct GpuLocality {
  int cuda_device = 0;
  std::string pci_bus_id;  // "0000:3b:00.0"
  int numa_node = -1;      // OS index of the closest NUMA node; -1 when hwloc cannot tell
};

struct Topology {
  int cores = 0;
  int hardware_threads = 0;
  int numa_nodes = 0;
  std::vector<std::vector<int>> cores_per_numa;  // OS indexes of the first PU of each core, per NUMA node
  std::vector<GpuLocality> gpus;                 // empty without CUDA, driver or GPU

  static Topology discover();
  std::string describe() const;
};

}  // namespace starzero
