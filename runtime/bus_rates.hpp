#pragma once
// What StarPU's bus calibration measured on this machine (it samples every link at its first start
// on a machine and keeps the figures in $STARPU_HOME), for the step bound of a real run
// (train/peak_probes.hpp): bytes per second from main memory to the first CUDA worker's memory
// node and back, and to and from the first disk node (the NVMe tier). Needs a running session.
namespace starzero {

struct BusRates {
  double host_to_gpu_Bps = 0;  // 0: no CUDA worker
  double gpu_to_host_Bps = 0;
  double disk_write_Bps = 0;  // main memory -> disk; 0: no disk node
  double disk_read_Bps = 0;
};

BusRates calibrated_bus_rates();

}  // namespace starzero
