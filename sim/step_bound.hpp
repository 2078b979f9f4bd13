#pragma once
// The step's bound: what one training step asks of each resource of a machine, the rate the
// machine gives that resource, and so the time the resource needs per step. No schedule makes a
// step shorter than the largest of these times, the bound; efficiency = bound / steady step.
// The resources (docs/sim.md, "Step bound"):
//   compute         the forward, recomputation and backward tasks' FLOPs on the compute device
//                   (the GPU, or the CPU workers on a machine without one);
//   CPU AdamW       under optimizer offload: the bytes the CPU AdamW reads and writes in host
//                   memory, at the bandwidth its threads reach (and its FLOPs, whichever is slower);
//   PCIe host->GPU, PCIe GPU->host   the bytes crossing each direction (full duplex: apart);
//   disk            the NVMe tier's reads plus writes.
// Work comes from the planner (offload/step_work.hpp) or a trace (profile/trace_report.hpp); rates
// from a machine's figures (rates_of_machine: peaks times the simulator's derating) or from
// measured peaks (train/peak_probes.hpp). Plain arithmetic and text: every report that prints a
// bound (`starzero plan`, the run summaries, `starzero trace`) computes it here.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/gpu_cost.hpp"
#include "sim/platform.hpp"

namespace starzero::sim {

// What one step asks of each resource, per rank.
struct StepWork {
  std::optional<double> compute_flops;  // unset: unknown (a model that declares no FLOP count)
  double adam_bytes = 0;                // CPU AdamW: host memory read + written; 0 without optimizer offload
  double adam_flops = 0;
  double host_to_gpu_bytes = 0;
  double gpu_to_host_bytes = 0;
  double disk_read_bytes = 0;
  double disk_write_bytes = 0;
  // On a GPU, the step's kernels by cost class (runtime/gpu_cost.hpp): the compute time is then
  // what the simulator charges them at the machine's GPU figures (ResourceRates::gpu), not the FLOPs
  // at one rate. Or that charge already made, by class (a run's step_bound.json). Neither: the
  // FLOPs at compute_flops_per_s.
  std::vector<CountedGpuWork> gpu_kernels;
  std::optional<GpuSecondsByClass> gpu_kernel_seconds;
};

// The rates one rank gets, as its tasks reach them (not the data-sheet peaks). A rate of 0 is one
// not known or a resource the machine lacks: work there has no time (and never sets the bound).
struct ResourceRates {
  std::string compute_device = "GPU";  // "GPU" or "CPU": where the forward and backward run
  double compute_flops_per_s = 0;
  GpuFigures gpu{};  // the GPU's figures, for StepWork::gpu_kernels (zero without a GPU)
  int adam_threads = 0;  // the CPU AdamW's threads (0: no CPU AdamW)
  double adam_bytes_per_s = 0;
  double adam_flops_per_s = 0;
  double host_to_gpu_Bps = 0;
  double gpu_to_host_Bps = 0;
  double disk_read_Bps = 0;
  double disk_write_Bps = 0;
  std::string source;  // where the rates come from, for the reports ("h200x1's figures", "measured")
};

// The rates of a machine as the simulator charges them (runtime/sim.hpp's roofline):
// compute on a GPU by its kernels' cost classes (its figures in `gpu`; compute_flops_per_s, the
// bf16 (two_byte) or fp32 peak times the GEMM efficiency, only for work given as FLOPs), or without a GPU
// at compute_cores CPU cores' peak times it; the CPU AdamW at adam_threads of the machine's cores'
// share of host memory bandwidth times the element-wise efficiency (FLOPs: their peak times the
// GEMM efficiency); PCIe at the smaller of each direction's rate and host memory (the route's
// bottleneck); the disk's read and write rates. Throws std::invalid_argument for cores or threads
// outside 0..machine.cpus.
ResourceRates rates_of_machine(const MachineSpec& machine, bool two_byte, int compute_cores, int adam_threads);

enum class Resource { compute, cpu_adam, pcie_to_gpu, pcie_to_host, disk };
inline constexpr std::array<Resource, 5> kResources = {Resource::compute, Resource::cpu_adam, Resource::pcie_to_gpu,
                                                       Resource::pcie_to_host, Resource::disk};
// "GPU compute" (or "CPU compute"), "CPU AdamW", "PCIe host->GPU", "PCIe GPU->host", "disk".
std::string resource_label(Resource resource, const std::string& compute_device = "GPU");
// The JSON names: "compute", "cpu_adam", "pcie_to_gpu", "pcie_to_host", "disk".
const char* resource_key(Resource resource);

struct ResourceTime {
  Resource resource = Resource::compute;
  std::optional<double> seconds;  // unset: unknown work, or work at no known rate
  std::string what;               // the work at its rate, in words: "8.00e14 FLOP at 742 TFLOP/s"
};

struct StepBound {
  std::vector<ResourceTime> resources;  // in kResources' order
  std::optional<Resource> binding;      // the slowest resource; unset when no time is known
  std::string compute_device = "GPU";
  // The compute time by GPU cost class, when the work gave its kernels.
  std::optional<GpuSecondsByClass> compute_by_class;
  std::optional<double> bound_s() const;
  const ResourceTime& time_of(Resource resource) const;
};

// "gemm 1.2345 s, cudnn_attention 0.0420 s, ..." (the classes with time, in kGpuCostClasses' order).
std::string gpu_class_text(const GpuSecondsByClass& seconds);

// Each resource's time: work / rate (0 for no work; on a GPU with its kernels given, their charge by class; disk: reads / read rate + writes / write rate;
// CPU AdamW: the slower of its bytes and its FLOPs), and the largest. Throws std::invalid_argument
// for negative or non-finite work or rates.
StepBound step_bound(const StepWork& work, const ResourceRates& rates);

// bound / steady step. Throws std::invalid_argument unless steady_step_s > 0.
double efficiency(double bound_s, double steady_step_s);

// Seconds as the reports print them: "1.0784 s" (4 decimals from 1 ms to 100 s), "unknown" when unset.
std::string seconds_text(std::optional<double> seconds);

// The report's lines: a heading naming the rates' source, one line per resource (seconds, the work
// at its rate, "<- bound" on the binding one), then "steady step X s, bound Y s (resource),
// efficiency Z %" (without a steady step: "bound Y s (resource)"). Each line starts with `indent`.
std::vector<std::string> bound_lines(const StepBound& bound, const ResourceRates& rates,
                                     std::optional<double> steady_step_s, const std::string& indent = "  ");

// The bound as flat JSON fields, in this order (docs/trace-report.md, "bound"): for each resource
// `<key>_s` (null when unknown), then "bound_s", "binding" (a resource key), "steady_step_s",
// "efficiency" (null without a steady step), then the work and the rates: "compute_device",
// "compute_flops", "compute_flops_per_s", "adam_threads", "adam_bytes", "adam_bytes_per_s",
// "host_to_gpu_bytes", "host_to_gpu_Bps", "gpu_to_host_bytes", "gpu_to_host_Bps",
// "disk_read_bytes", "disk_read_Bps", "disk_write_bytes", "disk_write_Bps", "rates_source".
// Values are JSON texts (numbers, null, strings quoted), so that any JSON writer can use them.
std::vector<std::pair<std::string, std::string>> bound_json_fields(const StepBound& bound, const StepWork& work,
                                                                   const ResourceRates& rates,
                                                                   std::optional<double> steady_step_s);

// What a traced run leaves beside its trace files (kRunBoundFile) for `starzero trace`'s bound: the
// rates its summary used, what its plan says one step asks, and its steady step.
inline constexpr const char* kRunBoundFile = "step_bound.json";
struct RunBoundFigures {
  ResourceRates rates;
  StepWork planned;
  std::optional<double> steady_step_s;
};
std::string run_bound_json(const RunBoundFigures& figures);
// std::invalid_argument (one line) for a malformed file: not JSON, a field missing or of the wrong
// type, a negative or non-finite number.
RunBoundFigures run_bound_from_json(std::string_view text);

}  // namespace starzero::sim
