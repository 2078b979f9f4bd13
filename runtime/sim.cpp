#include "runtime/sim.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <vector>

#include "runtime/files.hpp"

namespace starzero::sim {

namespace {

Roofline& figures() {
  static Roofline r;
  return r;
}

std::string& description() {
  static std::string line;
  return line;
}

MachineSize& size_of_machine() {
  static MachineSize size;
  return size;
}

CollectiveLink& link_of_collectives() {
  static CollectiveLink link;
  return link;
}

}  // namespace

void set_roofline(const Roofline& r) { figures() = r; }
const Roofline& roofline() { return figures(); }

void set_machine_size(MachineSize size) { size_of_machine() = size; }
MachineSize machine_size() { return size_of_machine(); }

void set_collective_link(CollectiveLink link) { link_of_collectives() = std::move(link); }
const CollectiveLink& collective_link() { return link_of_collectives(); }

double ring_us(double bytes_sent, int steps) {
  const CollectiveLink& link = link_of_collectives();
  double seconds = double(std::max(0, steps)) * link.step_latency_s;
  if (bytes_sent > 0 && link.Bps > 0) seconds += bytes_sent / link.Bps;
  return seconds * 1e6;
}

void set_machine_description(std::string line) { description() = std::move(line); }
const std::string& machine_description() { return description(); }

// StarPU's simulation refuses a zero duration (a task that moves and computes nothing).
constexpr double kShortestTaskUs = 0.1;

bool is_gpu(const starpu_perfmodel_arch* arch) {
  return arch && arch->ndevices > 0 && arch->devices[0].type == STARPU_CUDA_WORKER;
}

GpuFigures gpu_figures() {
  const Roofline& r = figures();
  return {.bf16_tensor_flops = r.gpu_bf16_flops,
          .fp32_flops = r.gpu_fp32_flops,
          .memory_Bps = r.gpu_memory_Bps,
          .sm_count = r.gpu_sm_count,
          .clock_hz = r.gpu_clock_hz,
          .launch_s = r.kernel_launch_s,
          .measured_attention = r.gpu_measured_attention};
}

double roofline_us(const starpu_perfmodel_arch* arch, double flops, double bytes, int cores) {
  if (is_gpu(arch))
    return std::max(gpu_work_us({.kind = GpuCostClass::streaming, .bytes = bytes}, gpu_figures()), kShortestTaskUs);
  const Roofline& r = figures();
  const double n = double(std::max(1, cores));
  const double peak = n * r.cpu_core_flops;
  const double bandwidth = n * r.cpu_core_memory_Bps;
  double seconds = 0;
  if (flops > 0 && peak > 0) seconds = std::max(seconds, flops / (peak * r.gemm_efficiency));
  if (bytes > 0 && bandwidth > 0) seconds = std::max(seconds, bytes / (bandwidth * r.elementwise_efficiency));
  return std::max(seconds * 1e6, kShortestTaskUs);
}

namespace {

std::atomic<std::uint64_t> calibrated_count{0}, roofline_count{0};

std::vector<std::string>& codelet_names() {
  static std::vector<std::string> names;
  return names;
}

// Each codelet's recorded model (absent: no file for it). Written once by load_calibration.
std::map<std::string, std::unique_ptr<starpu_perfmodel>, std::less<>>& recorded_models() {
  static std::map<std::string, std::unique_ptr<starpu_perfmodel>, std::less<>> models;
  return models;
}

// The platform's per-task overheads, and the one the session's policy is charged.
std::map<std::string, TaskOverheadUs>& overheads_by_policy() {
  static std::map<std::string, TaskOverheadUs> overheads;
  return overheads;
}

ChargedOverhead& charged() {
  static ChargedOverhead overhead;
  return overhead;
}

void pick_task_overhead(const std::string& policy) {
  const auto& overheads = overheads_by_policy();
  // heft is StarPU's other name for dmda.
  const std::string measured = policy == "heft" ? "dmda" : policy;
  if (const auto it = overheads.find(measured); it != overheads.end())
    charged() = {it->second, measured};
  else if (const auto any = overheads.find(""); any != overheads.end())
    charged() = {any->second, "the other policies"};
  else
    charged() = {};
}

// When each worker's last simulated execution ends (microseconds of simulated time). SimGrid
// runs the workers one at a time: no lock.
std::vector<double>& busy_until() {
  static std::vector<double> until(STARPU_NMAXWORKERS, 0.0);
  return until;
}

// A task pushed later than this after its worker's last task ended found the worker idle (the
// simulated clock's times print to the ns: a task released by the worker's own last task is
// pushed at that task's end).
constexpr double kIdleAfterUs = 0.5;

// executed_us's answer for each task as it ran, by job id (StarPU's workers are threads, also
// under SimGrid).
struct ExecutedDurations {
  std::mutex mutex;
  std::map<unsigned long, double> us_by_job;
};
ExecutedDurations& executed_durations() {
  static ExecutedDurations durations;
  return durations;
}
void record_execution(const starpu_task* task, double us) {
  ExecutedDurations& d = executed_durations();
  const std::lock_guard lock(d.mutex);
  d.us_by_job[starpu_task_get_job_id(const_cast<starpu_task*>(task))] = us;
}

}  // namespace

void set_cpu_task_overheads(std::map<std::string, TaskOverheadUs> by_policy) {
  overheads_by_policy() = std::move(by_policy);
}

const ChargedOverhead& charged_task_overhead() { return charged(); }

namespace {

// A CPU worker's execution of `task`: its duration, StarPU's per-task overhead and, after the
// worker idled, its wake-up.
double charged_cpu_execution(const starpu_task* task, double duration_us) {
  const TaskOverheadUs& overhead = charged().us;
  const int worker = starpu_worker_get_id();
  if (worker < 0 || worker >= STARPU_NMAXWORKERS) return duration_us + overhead.per_task;
  const double now = starpu_timing_now();
  double& until = busy_until()[std::size_t(worker)];
  // The worker sat idle if the task reached the scheduler after the worker's last task ended
  // (StarPU profiles every task in simulation; its clock is the simulated one).
  bool was_idle = false;
  if (const starpu_profiling_task_info* info = task->profiling_info) {
    timespec pushed = info->push_end_time;
    was_idle = starpu_timing_timespec_to_us(&pushed) > until + kIdleAfterUs;
  }
  const double executed = duration_us + overhead.per_task + (was_idle ? overhead.wake : 0.0);
  until = now + executed;
  return executed;
}

}  // namespace

double executed_us(const starpu_task* task, const starpu_perfmodel_arch* arch, double duration_us) {
  if (starpu_task_get_current() != task) return duration_us;  // a scheduler's estimate
  const bool cpu = arch && arch->ndevices > 0 && arch->devices[0].type == STARPU_CPU_WORKER;
  const double executed = cpu ? charged_cpu_execution(task, duration_us) : duration_us;
  record_execution(task, executed);
  return executed;
}

namespace {
// Executed GPU time by cost class, in microseconds (SimGrid runs one actor at a time, but StarPU's
// workers are threads: a lock).
struct GpuClassTotals {
  std::mutex mutex;
  std::array<double, kGpuCostClasses.size()> us{};
};
GpuClassTotals& gpu_class_totals() {
  static GpuClassTotals totals;
  return totals;
}
}  // namespace

double executed_gpu_us(const starpu_task* task, const starpu_perfmodel_arch* arch, GpuCostClass kind,
                       double duration_us) {
  duration_us = std::max(duration_us, kShortestTaskUs);
  if (starpu_task_get_current() != task) return duration_us;  // a scheduler's estimate
  const double executed = executed_us(task, arch, duration_us);
  GpuClassTotals& totals = gpu_class_totals();
  const std::lock_guard lock(totals.mutex);
  totals.us[std::size_t(kind)] += executed;
  return executed;
}

std::array<double, kGpuCostClasses.size()> gpu_class_seconds() {
  GpuClassTotals& totals = gpu_class_totals();
  const std::lock_guard lock(totals.mutex);
  std::array<double, kGpuCostClasses.size()> seconds{};
  for (std::size_t i = 0; i < seconds.size(); ++i) seconds[i] = totals.us[i] * 1e-6;
  return seconds;
}

void write_executed_durations(const std::string& dir) {
  ExecutedDurations& d = executed_durations();
  const std::lock_guard lock(d.mutex);
  if (d.us_by_job.empty()) return;
  std::ostringstream text;
  for (const auto& [job, us] : d.us_by_job) text << "JobId: " << job << "\nExecutedUs: " << us << "\n\n";
  write_text_atomically(std::filesystem::path(dir) / "durations.rec", text.str());
}

void register_codelet(const char* symbol) { codelet_names().emplace_back(symbol); }

void load_calibration(const std::string& policy) {
  pick_task_overhead(policy);
  auto& models = recorded_models();
  for (const std::string& symbol : codelet_names()) {
    if (models.contains(symbol)) continue;
    char path[1024];
    starpu_perfmodel_get_model_path(symbol.c_str(), path, sizeof path);
    if (access(path, R_OK) != 0) continue;
    auto model = std::make_unique<starpu_perfmodel>();  // zeroed, as StarPU wants it
    if (starpu_perfmodel_load_symbol(symbol.c_str(), model.get()) == 0) models.emplace(symbol, std::move(model));
  }
}

double calibrated_us(const char* symbol, starpu_perfmodel_arch* arch, std::uint32_t footprint) {
  const auto& models = recorded_models();
  const auto it = models.find(std::string_view(symbol));
  if (it == models.end()) return NAN;
  starpu_perfmodel* model = it->second.get();
  const double us = starpu_perfmodel_history_based_expected_perf(model, arch, footprint);
  // StarPU's simulation refuses a zero duration: a mean recorded as 0 us (a task shorter than
  // the clock's resolution) counts as missing.
  return std::isfinite(us) && us > 0 ? us : NAN;
}

void count_duration_source(bool calibrated) { ++(calibrated ? calibrated_count : roofline_count); }

DurationSources duration_sources() { return {calibrated_count.load(), roofline_count.load()}; }

double now_seconds() {
  if constexpr (enabled) return starpu_timing_now() * 1e-6;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace starzero::sim
