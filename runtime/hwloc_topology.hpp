#pragma once
// An owned, loaded hwloc topology (runtime/ internal: Topology and PinnedHostBuffer use it).
#include <hwloc.h>

#include <memory>
#include <stdexcept>

namespace starzero::detail {

struct HwlocTopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, HwlocTopologyDeleter>;

// with_io: keep PCI devices (needed to place GPUs; hwloc leaves them out by default).
inline HwlocTopology load_hwloc_topology(bool with_io) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw std::runtime_error("hwloc_topology_init failed");
  HwlocTopology topo(raw);
  if (with_io) hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) throw std::runtime_error("hwloc_topology_load failed");
  return topo;
}

}  // namespace starzero::detail
