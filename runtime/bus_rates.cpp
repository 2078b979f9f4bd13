#include "runtime/bus_rates.hpp"

#include <starpu.h>

#include <cmath>

namespace starzero {
namespace {

// StarPU's figure in MB/s as bytes/s; 0 where it has none.
double bandwidth_Bps(unsigned src, unsigned dst) {
  const double mb_per_s = starpu_transfer_bandwidth(src, dst);
  return std::isfinite(mb_per_s) && mb_per_s > 0 ? mb_per_s * 1e6 : 0.0;
}

}  // namespace

BusRates calibrated_bus_rates() {
  BusRates rates;
  constexpr unsigned kMainMemory = STARPU_MAIN_RAM;
  for (unsigned worker = 0; worker < starpu_worker_get_count(); ++worker) {
    if (starpu_worker_get_type(int(worker)) != STARPU_CUDA_WORKER) continue;
    const unsigned gpu = starpu_worker_get_memory_node(worker);
    rates.host_to_gpu_Bps = bandwidth_Bps(kMainMemory, gpu);
    rates.gpu_to_host_Bps = bandwidth_Bps(gpu, kMainMemory);
    break;
  }
  for (unsigned node = 0; node < starpu_memory_nodes_get_count(); ++node) {
    if (starpu_node_get_kind(node) != STARPU_DISK_RAM) continue;
    rates.disk_write_Bps = bandwidth_Bps(kMainMemory, node);
    rates.disk_read_Bps = bandwidth_Bps(node, kMainMemory);
    break;
  }
  return rates;
}

}  // namespace starzero
