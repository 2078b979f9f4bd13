#pragma once
// The rates this machine reaches, measured in the running process: the step bound of a real run's
// summary (sim/step_bound.hpp; docs/sim.md, "Step bound") and `starzero bench step`.
//   compute    a GEMM probe: independent square GEMMs of the matmul codelet (tasks/nn.hpp), enough
//              to keep every worker of the compute device busy, from submission to completion, the
//              fastest of a few runs (the model's own kernels, so the peak they reach);
//   CPU AdamW  Adam's access pattern on its threads (optimizers/adam_traffic.hpp);
//   PCIe, disk what StarPU's bus calibration measured (runtime/bus_rates.hpp).
#include "runtime/dtype.hpp"
#include "runtime/session.hpp"
#include "sim/step_bound.hpp"

namespace starzero {

struct GemmProbe {
  double flops_per_second = 0;
  int tasks = 0;
  double seconds = 0;  // of the fastest run
};

// `tasks_per_worker` × workers (the CUDA workers when there are, else the CPU workers) GEMMs of
// size³ in `dtype`, one warm-up run then the fastest of `repeats`. Needs a running session; waits
// for every task before it starts.
GemmProbe gemm_probe(const Session& session, DType dtype, int size, int tasks_per_worker, int repeats);

// The rates of a real run's step bound: compute from gemm_probe (size 4096 on a GPU, 384 on CPU
// workers; 4 GEMMs per worker, fastest of 3), the CPU AdamW from optim::adam_traffic_Bps on
// adam_threads threads (0: no CPU AdamW, not measured) over the parameters the run's AdamW updates
// per step, at least 1 Mi and at most 64 Mi (the same working set, as far as caches go, without
// allocating the run's whole state again), with StarPU's workers paused (an idle worker polls and
// would take a core), PCIe and disk from calibrated_bus_rates. The AdamW's FLOP rate is left 0:
// the probe measures its bytes, which bound it.
sim::ResourceRates measured_rates(const Session& session, DType dtype, int adam_threads, double adam_params);

}  // namespace starzero
