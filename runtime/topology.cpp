#include "runtime/topology.hpp"

#include "runtime/hwloc_topology.hpp"

#include <hwloc.h>

#include <memory>
#include <sstream>
#include <stdexcept>

#ifdef STARZERO_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace starzero {

namespace {

// The NUMA node whose cpuset covers the given object's locality.
[[maybe_unused]] int closest_numa_node(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!ancestor || !ancestor->nodeset) return -1;
  const int first = hwloc_bitmap_first(ancestor->nodeset);
  return first < 0 ? -1 : first;
}

}  // namespace

Topology Topology::discover() {
  detail::HwlocTopology holder = detail::load_hwloc_topology(true);
  hwloc_topology_t topo = holder.get();
  Topology t;
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.hardware_threads = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  t.numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  if (t.cores <= 0) t.cores = t.hardware_threads;  // some VMs report PUs without cores
  for (int n = 0; n < t.numa_nodes; ++n) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(n));
    std::vector<int> cores;
    const int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE);
    for (int c = 0; c < ncores; ++c) {
      hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE, unsigned(c));
      cores.push_back(hwloc_bitmap_first(core->cpuset));
    }
    t.cores_per_numa.push_back(std::move(cores));
  }

#ifdef STARZERO_WITH_CUDA
  int ndevices = 0;
  if (cudaGetDeviceCount(&ndevices) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: a CPU-only machine, not an error
    ndevices = 0;
  }
  for (int d = 0; d < ndevices; ++d) {
    GpuLocality gpu;
    gpu.cuda_device = d;
    char bus_id[32] = {0};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, d) == cudaSuccess) {
      gpu.pci_bus_id = bus_id;
      if (hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus_id)) gpu.numa_node = closest_numa_node(topo, pci);
    }
    t.gpus.push_back(gpu);
  }
#endif
  return t;
}

std::string Topology::describe() const {
  std::ostringstream out;
  out << cores << " cores, " << hardware_threads << " hardware threads, " << numa_nodes << " NUMA node(s), "
      << gpus.size() << " GPU(s)";
  for (const auto& g : gpus)
    out << "; GPU " << g.cuda_device << " (" << g.pci_bus_id << ") near NUMA node "
        << (g.numa_node < 0 ? std::string("unknown") : std::to_string(g.numa_node));
  return out.str();
}

}  // namespace starzero
