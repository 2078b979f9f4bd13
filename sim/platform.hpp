#pragma once
// Simulated machines: what a GPU node is (CPU cores, GPUs, memory, PCIe and NVLink links, peak
// rates) and the five files StarPU 1.3.10 in SimGrid mode reads to simulate it
// (docs/sim.md, "Platforms"). With STARPU_PERF_MODEL_DIR=DIR and STARPU_HOSTNAME=NAME,
// StarPU reads
//   DIR/bus/NAME.platform.v4.xml  the SimGrid platform: hosts MAIN, CPU0.., CUDA0.. (memsize,
//                                 memcpy_peer), RAM, DISK0; links and routes between them
//   DIR/bus/NAME.bandwidth        MB/s between memory nodes (RAM, CUDA0, ..), what the
//   DIR/bus/NAME.latency          schedulers predict transfers with; us for the latency
// and, outside simulation only, DIR/bus/NAME.config and DIR/bus/NAME.affinity (written too, so
// the folder is a complete bus calibration). Knows nothing of StarPU's API: it writes files.
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gpu_cost.hpp"

namespace starzero::sim {

// StarPU's compile-time limits of the SimGrid build (scripts/bootstrap.sh configures it with
// --enable-maxcpus=64 --enable-maxcudadev=8): at most 64 CPU workers and 8 CUDA devices, and
// 32 memory nodes, the width of the .bandwidth and .latency matrices.
inline constexpr int kMaxCpus = 64;
inline constexpr int kMaxGpus = 8;
inline constexpr int kStarpuMaxNodes = 32;
// STARPU_HOSTNAME is cut to 63 characters by StarPU.
inline constexpr std::size_t kMaxNameLength = 63;

// StarPU's own time per task on a real CPU worker beyond the kernel, and the time a sleeping
// worker takes to start a task pushed to it (runtime/task_overhead.hpp), as measured over
// `tasks` tasks.
struct TaskOverheadRecord {
  double us_per_task = 0;
  double wake_us = 0;
  double tasks = 0;
};

struct MachineSpec {
  std::string name;             // the STARPU_HOSTNAME of the files: [A-Za-z0-9_.-], starting with a letter or digit
  int cpus = 1;                 // CPU cores (CPU0..): StarPU makes cpus - gpus CPU workers, one core drives each GPU
  int gpus = 0;                 // CUDA devices (CUDA0..)
  double gpu_memory_bytes = 0;  // per GPU
  // PCIe, per GPU and per direction (pinned host memory), and the latency of one copy.
  double host_to_gpu_Bps = 0;
  double gpu_to_host_Bps = 0;
  double pcie_latency_s = 0;
  // GPU to GPU: NVLink bandwidth per GPU and per direction (through NVSwitch to any peer);
  // 0 = no peer copies, data goes through host memory over PCIe.
  double gpu_to_gpu_Bps = 0;
  double gpu_to_gpu_latency_s = 0;
  // Roofline figures of the simulator's duration estimates (runtime/sim.hpp).
  double gpu_bf16_flops = 0;   // dense tensor-core peak
  double gpu_fp32_flops = 0;   // CUDA-core peak (no TF32)
  double gpu_memory_Bps = 0;   // HBM
  // Streaming multiprocessors and their boost clock, for the issue and L1 rates of our own scalar
  // kernels (runtime/gpu_cost.hpp); 0: unknown, derived from the FP32 peak. Optional in JSON.
  double gpu_sm_count = 0;
  double gpu_clock_hz = 0;
  double cpu_core_flops = 0;   // fp32 peak per core
  double host_memory_Bps = 0;  // DRAM, all cores together; also the shared host link of the platform
  double gemm_efficiency = 0.75;
  double elementwise_efficiency = 0.8;
  double kernel_launch_s = 5e-6;
  // The NVMe disk node (DISK0) StarPU's disk offload attaches to.
  double disk_read_Bps = 0;
  double disk_write_Bps = 0;
  double disk_latency_s = 0;
  // StarPU's per-task overhead on this machine's CPU workers, by scheduling policy, as `starzero
  // calibrate` measured it: the simulation adds it to each task's execution on a CPU worker
  // (docs/sim.md, "Per-task overhead"). Empty (the named machines): not measured, none
  // charged.
  std::map<std::string, TaskOverheadRecord> cpu_task_overhead;
  // Attention rates measured on this machine's GPU (`starzero platform --attention-calibration`,
  // from scripts/gpu-check.sh): they replace the published and counted ones (runtime/gpu_cost.hpp).
  // Empty (the named machines): none measured.
  std::vector<MeasuredAttentionRate> attention_rates;
};

// The rates of an attention calibration (scripts/gpu-check.sh's attention_calibration.json:
// {"gpu": NAME, "entries": [{"kernel": "cudnn"|"own", "direction": "forward"|"backward", "T", "hs",
// "tflops", ...}]}). std::invalid_argument (one line) for a malformed file.
std::vector<MeasuredAttentionRate> attention_rates_from_calibration(std::string_view text);

// Adds a measurement under `policy` to the machine's: the task-weighted mean with what it holds
// (several calibration runs into one folder add up). A measurement of no tasks changes nothing.
void add_task_overhead(MachineSpec& machine, const std::string& policy, const TaskOverheadRecord& measured);
// What the simulation charges, by policy, with "" for any policy not measured: the task-weighted
// mean over the policies measured. Empty when none was.
std::map<std::string, TaskOverheadRecord> task_overheads_to_charge(const MachineSpec& machine);

// The machines known by name: h200x1, h200x8, a100x1 (figures and their sources in platform.cpp).
std::optional<MachineSpec> named_machine(std::string_view name);
std::vector<std::string> named_machines();

// This host as a simulation starting point: its CPU core count (at most kMaxCpus), no GPUs,
// assumed CPU, memory and disk figures (calibrated durations come later), and the named
// machines' PCIe and peer-copy latencies for GPUs a user adds (with_overrides).
MachineSpec this_machine(std::string name = "local");

// Numbers a user gives on top of a machine; an absent one keeps the machine's.
struct MachineOverrides {
  std::optional<std::string> name;
  std::optional<int> cpus;
  std::optional<int> gpus;
  std::optional<double> gpu_memory_bytes;
  std::optional<double> pcie_Bps;  // both directions
  std::optional<double> pcie_latency_s;
  std::optional<double> gpu_to_gpu_Bps;  // 0: through the host
  std::optional<double> gpu_to_gpu_latency_s;
};
MachineSpec with_overrides(MachineSpec machine, const MachineOverrides& overrides);

// Throws std::invalid_argument, naming the field, for a spec StarPU cannot simulate: a name
// outside [A-Za-z0-9_.-] (or empty, or longer than kMaxNameLength), cpus outside 1..kMaxCpus,
// gpus outside 0..kMaxGpus, a size or bandwidth the files use that is not > 0, a negative or
// non-finite latency or per-task overhead, a policy name outside [A-Za-z0-9_-].
void validate(const MachineSpec& machine);

// The contents of the files write_platform writes.
std::string platform_xml(const MachineSpec& machine);
std::string bandwidth_matrix(const MachineSpec& machine);  // MB/s
std::string latency_matrix(const MachineSpec& machine);    // us
std::string config_file(const MachineSpec& machine);
std::string affinity_file(const MachineSpec& machine);
// Every field of the spec as JSON (NAME.machine.json beside the platform files: what
// `starzero-sim --platform DIR` reads for the durations' roofline), and back; machine_from_json
// throws std::invalid_argument for a malformed file or an invalid spec.
std::string machine_json(const MachineSpec& machine);
MachineSpec machine_from_json(std::string_view text);
// machine_from_json of a file's text; std::invalid_argument too for a file that cannot be read.
MachineSpec read_machine_file(const std::filesystem::path& path);
// The machine of a platform folder, as `starzero platform --out DIR` and `starzero calibrate --out
// DIR` write it: DIR/bus holds exactly one NAME.machine.json, of machine NAME, with
// NAME.platform.v4.xml beside it. std::invalid_argument (one line) says what is missing or wrong.
MachineSpec machine_in_folder(const std::filesystem::path& dir);
// A named machine (named_machine), else the machine of the folder `name_or_dir`; std::invalid_argument
// for neither.
MachineSpec named_or_folder_machine(const std::string& name_or_dir);

// The machine this process simulates: starzero-sim sets it from --platform before main runs
// (apps/sim_platform.cpp); unset in a real run. For what reports compute from its figures (the
// step bound of the run's summary).
void set_sim_machine(const MachineSpec& machine);
const std::optional<MachineSpec>& sim_machine();

// Writes dir/bus/<name>.{platform.v4.xml,bandwidth,latency,config,affinity,machine.json}, each through a
// temporary file renamed into place, and returns their paths. Throws std::invalid_argument for
// an invalid spec (validate) or a folder whose path is too long for StarPU (255 characters),
// std::filesystem::filesystem_error or std::runtime_error when a file cannot be written.
std::vector<std::filesystem::path> write_platform(const MachineSpec& machine, const std::filesystem::path& dir);

}  // namespace starzero::sim
