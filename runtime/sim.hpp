#pragma once
// Simulation: `starzero-sim` is the same program built against StarPU in SimGrid mode
// (STARZERO_SIMGRID; docs/sim.md). StarPU's real scheduler and data manager then run on
// a simulated machine: the kernels do not run, each task lasts what its performance model says,
// and SimGrid times the transfers over the platform's links. This file holds what the rest of the
// program needs to know of it: whether it is simulating, the simulated clock, and the roofline
// figures that give a task its duration where no calibration exists.
#include <starpu.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/gpu_cost.hpp"

namespace starzero::sim {

#ifdef STARZERO_SIMGRID
inline constexpr bool enabled = true;
#else
inline constexpr bool enabled = false;
#endif

// The seam: what differs on a simulated machine, by name. Only this header asks `enabled`; the
// rest of the program asks the question it has (and, below, for the clock and the machine).
// Kernels run and buffers hold values: losses, norms and clip decisions, samples, checkpoints,
// initial parameters, measured task overheads. In a simulation tasks only take time.
inline constexpr bool kernels_run = !enabled;
// The host the run plans for is this machine: its topology and NUMA nodes, its free memory
// (checked), pinned allocations, cuBLAS, worker profiling. In a simulation it is the simulated
// machine's, whose large host buffers are folded (runtime/host_memory.hpp).
inline constexpr bool host_is_this_machine = !enabled;
// This program predicts times on a simulated machine (starzero-sim): its banner, "predicted" step
// lines and summary, its own flags (--platform, --sim-ranks), the performance models that
// give each task its simulated duration; and what only a real run can do is refused
// (calibration, saves).
inline constexpr bool predicts_times = enabled;

// Peak figures of the simulated machine and how much of them kernels reach (sim/platform.hpp's
// machines fill it in). Per CPU core for the CPU; per device for GPUs.
// GPU tasks are charged by their cost class instead (runtime/gpu_cost.hpp; gpu_figures()).
struct Roofline {
  double cpu_core_flops = 30e9;         // fp32 per core
  double cpu_core_memory_Bps = 10e9;    // memory traffic one core's kernels sustain
  double gpu_bf16_flops = 0;            // dense tensor-core peak (2-byte elements)
  double gpu_fp32_flops = 0;            // CUDA-core peak (4-byte elements; no TF32)
  double gpu_memory_Bps = 0;            // HBM
  double gpu_sm_count = 0;              // 0: unknown (gpu_cost.cpp derives SM clocks from the FP32 peak)
  double gpu_clock_hz = 0;
  std::shared_ptr<const std::vector<MeasuredAttentionRate>> gpu_measured_attention{};  // a calibration's
  double gemm_efficiency = 0.75;        // fraction of the FLOP peak a CPU kernel reaches
  double elementwise_efficiency = 0.8;  // fraction of the memory bandwidth a streaming CPU kernel reaches
  double kernel_launch_s = 5e-6;        // added to every GPU kernel
};

void set_roofline(const Roofline& figures);
const Roofline& roofline();
// The roofline's GPU figures as the cost classes take them.
GpuFigures gpu_figures();

// Whether `arch` is a CUDA worker's.
bool is_gpu(const starpu_perfmodel_arch* arch);

// Microseconds a CPU task of `flops` FLOPs moving `bytes` bytes takes: max(FLOPs / (peak ·
// efficiency), bytes / (bandwidth · efficiency)). A task that runs on `cores` cores (its own
// threads: the CPU AdamW) gets that many cores' peak and memory bandwidth. (A GPU task without a
// cost class, which codelet.hpp refuses, would be charged its bytes at HBM bandwidth.)
double roofline_us(const starpu_perfmodel_arch* arch, double flops, double bytes, int cores = 1);

// The link each collective of simulated ranks crosses (--sim-ranks N): per rank and
// direction, and the latency of one ring step. An approximation (docs/sim.md,
// "Simulated ranks"): NVLink through the NVSwitch on a machine with several GPUs, else the
// platform's PCIe figure standing for one inter-node link per GPU; host memory without GPUs.
struct CollectiveLink {
  double Bps = 0;
  double step_latency_s = 0;
  std::string what;  // "NVLink", "PCIe", "host memory": for the banner
};
void set_collective_link(CollectiveLink link);
const CollectiveLink& collective_link();
// Microseconds a ring collective takes in which each rank sends `bytes_sent` in `steps` steps:
// steps · latency + bytes / bandwidth.
double ring_us(double bytes_sent, int steps);

// Every codelet's name, as each declares itself (runtime/codelet.hpp; static construction).
void register_codelet(const char* symbol);
// Loads the history-based model a real run recorded for each registered codelet (`starzero
// calibrate`: $STARPU_PERF_MODEL_DIR/codelets/45/<symbol>.<STARPU_HOSTNAME>) where there is one,
// and picks the per-task overhead of the session's scheduling `policy` (below). Once, from the
// session's thread after starpu_init and before any task: the simulated workers then only read
// them (SimGrid runs its actors on one thread: no lock may block there).
void load_calibration(const std::string& policy);
// Calibrated duration (microseconds) of a task of codelet `symbol` with data footprint
// `footprint` on a worker of `arch`: the mean the real run recorded, or NaN when it did not
// record it.
double calibrated_us(const char* symbol, starpu_perfmodel_arch* arch, std::uint32_t footprint);

// StarPU's own time per task on a real CPU worker, beyond the kernel, and the time a sleeping
// worker takes to start a task pushed to it (runtime/task_overhead.hpp), in microseconds.
struct TaskOverheadUs {
  double per_task = 0;
  double wake = 0;
};
// By scheduling policy, as the platform carries what `starzero calibrate` measured
// (sim/platform.hpp); the key "" stands for any policy not measured. Set before main (the
// platform); none set: nothing is charged.
void set_cpu_task_overheads(std::map<std::string, TaskOverheadUs> by_policy);
struct ChargedOverhead {
  TaskOverheadUs us;
  std::string measured_under;  // the policy it was measured under; "" = none measured
};
// What load_calibration picked for the session.
const ChargedOverhead& charged_task_overhead();
// The duration to simulate for `task`, whose model gives `duration_us` on a worker of `arch`. A
// simulated worker spends no time in StarPU's code and wakes at once, so when StarPU asks for the
// duration it executes (`task` is the current task of a CPU worker) the charged per-task overhead
// is added, and the wake-up latency too if the task reached the scheduler after that worker's
// last task had ended (a real worker would have gone to sleep). The schedulers'
// estimates (another task current, or none) are left as they are: a real run's models hold
// neither. GPU workers: unchanged (their launch cost is in the roofline).
double executed_us(const starpu_task* task, const starpu_perfmodel_arch* arch, double duration_us);
// What every task executed so far was simulated for (executed_us, by StarPU job id), written as
// `dir/durations.rec` (records "JobId: N" and "ExecutedUs: X", as tasks.rec's keys). `starzero
// trace` compares each task's traced duration with it: a task that took longer spent the rest
// inside the task on something else (allocating or pinning memory, evicting, waiting), which the
// report names. Writes nothing when no task was simulated (a real run); otherwise atomically, as
// write_text_atomically (runtime/files.hpp), which throws when the file cannot be written.
void write_executed_durations(const std::string& dir);

// executed_us for a task on a GPU worker, whose cost class is `kind`: its executed time also adds
// to the class's total (gpu_class_seconds).
double executed_gpu_us(const starpu_task* task, const starpu_perfmodel_arch* arch, GpuCostClass kind,
                       double duration_us);
// The simulated GPU time of the tasks executed so far, by cost class (kGpuCostClasses' order).
std::array<double, kGpuCostClasses.size()> gpu_class_seconds();

// How many duration estimates came from each source since the start (the schedulers ask several
// times per task), for the run's report.
struct DurationSources {
  std::uint64_t calibrated = 0, roofline = 0;
};
void count_duration_source(bool calibrated);
DurationSources duration_sources();

// The simulated machine's CPU cores and GPUs (set with its description), for what the program
// plans from the machine it runs on: workers, CPU Adam threads.
struct MachineSize {
  int cpus = 0, gpus = 0;
};
void set_machine_size(MachineSize size);
MachineSize machine_size();

// One line naming the simulated machine, for the programs' banners ("" outside simulation).
void set_machine_description(std::string line);
const std::string& machine_description();

// Seconds on the clock the program runs on: simulated time in simulation (starpu_timing_now),
// a monotonic wall clock otherwise.
double now_seconds();

}  // namespace starzero::sim
