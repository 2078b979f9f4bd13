#pragma once
// The numbers of `starzero trace` for one traced run (one rank): wall time per step and for the
// run, each step's critical path, per-worker busy/overhead/idle time, time per task kind, data
// transfers per link and how much of them compute hides, how much AdamW and collective time
// runs beside forward/backward compute, and the steady steps' bound. All times in seconds. The
// definitions (what counts as busy, overhead, compute, hidden; what the critical path leaves out)
// are in docs/trace-report.md.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profile/trace_data.hpp"
#include "sim/step_bound.hpp"

namespace starzero::profile {

struct ReportOptions {
  // Steady steps are the steps >= steady_from; unset: every step but the first.
  std::optional<long> steady_from;
  // What the run left beside its trace (sim::kRunBoundFile): the rates of its step bound and its
  // plan's work per step. Unset: the report has no bound.
  std::optional<sim::RunBoundFigures> run_bound{};
};

struct StepReport {
  long step = 0;                           // the Iteration value of its tasks
  std::size_t tasks = 0;                   // its tasks in tasks.rec, run or not
  std::size_t executed = 0;                // those that ran
  double wall_s = 0;                       // last end - first start of the tasks that ran
  double critical_path_s = 0;              // the longest dependency chain of its tasks, by duration
  std::vector<std::size_t> critical_path;  // indexes into TraceData::tasks, first to last, tasks that ran
};

// A worker's time within a window: busy + overhead + idle = window; sleeping is part of idle.
struct TimeSplit {
  double window_s = 0;
  double busy_s = 0;      // its task durations (clipped to the window)
  double overhead_s = 0;  // in a runtime state (is_overhead_state), outside its tasks
  double idle_s = 0;      // the rest
  double sleeping_s = 0;  // the part of idle it slept
  double fraction(double part_s) const { return window_s > 0 ? part_s / window_s : 0.0; }
};

struct WorkerReport {
  int id = -1;
  std::string name;  // StarPU's: CPU0, CUDA0_0
  std::string kind;  // cpu, cuda, opencl, other
  std::size_t tasks = 0;
  TimeSplit total;                  // over the run's window
  std::optional<TimeSplit> steady;  // over the steady steps' window; unset without steady steps
};

struct TaskKindReport {
  std::string name;
  std::size_t count = 0;
  double total_s = 0;
  double share = 0;  // of the busy time of all workers
  double mean_s = 0;
};

struct TransferReport {
  std::string src;  // RAM, GPU<n>, DISK<n>
  std::string dst;
  std::uint64_t bytes = 0;
  std::size_t count = 0;
  double time_s = 0;                      // summed transfer durations
  std::optional<double> hidden_fraction;  // of time_s, while some worker ran a non-collective task
};

// The most memory StarPU had allocated on one memory node at once.
struct MemoryUseReport {
  std::string node;  // RAM, GPU<n>, DISK<n>
  double peak_bytes = 0;
};

struct OverlapReport {
  std::size_t adam_tasks = 0;
  double adam_s = 0;
  std::optional<double> adam_concurrent_fraction;  // of adam_s, beside compute on another worker
  // The steady steps' AdamW tasks on CPU workers (ZeRO-Offload's CPU AdamW), their time, and the
  // share of it during which a CUDA worker ran a task: the CPU AdamW hidden under the GPU's work.
  // Unset without steady steps, a CUDA worker or a CPU AdamW.
  double steady_cpu_adam_s = 0;
  std::optional<double> cpu_adam_hidden_fraction;
  std::size_t collective_tasks = 0;
  double collective_s = 0;
  std::optional<double> collective_concurrent_fraction;
};

// Simulated runs: tasks whose traced duration is longer than what the simulation executed them
// for (durations.rec). The excess was spent inside the task on something other than its work:
// allocating or pinning memory, evicting to make room, waiting. A task counts when the excess is
// over kStretchToleranceUs + kStretchToleranceShare of its execution: StarPU's simulation itself
// adds 10 us to some CUDA tasks (measured: forward tasks of a 13B model on h200x1, every step).
constexpr double kStretchToleranceUs = 20.0;
constexpr double kStretchToleranceShare = 1e-2;
struct StretchedKindReport {
  std::string name;  // task kind, as task_kinds
  std::size_t count = 0;
  double excess_s = 0;      // summed traced − executed
  double max_excess_s = 0;  // of one task
};
struct StretchReport {
  std::size_t predicted_tasks = 0;  // tasks that ran and have an executed duration
  std::size_t stretched_tasks = 0;
  double excess_s = 0;
  std::vector<StretchedKindReport> kinds;  // by excess, largest first
};

// The step bound of the steady steps (docs/trace-report.md, "Bound"): what one steady step asked
// of each resource in the trace, at the rates the run used.
struct BoundReport {
  sim::StepWork work;  // per steady step
  sim::ResourceRates rates;
  sim::StepBound bound;
  double steady_step_s = 0;  // the steady window over the steady steps
  std::size_t steady_steps = 0;
  std::string compute_from;  // "trace": the compute workers' tasks' GFlop; "plan": none carried one
  std::string adam_from;     // "trace": the CPU AdamW tasks' Sizes and Modes; "plan": none carried them
};

struct TraceReport {
  std::filesystem::path dir;
  std::optional<int> rank;  // set when the trace is one rank of several
  double origin_ms = 0;     // the run's first task start: time 0 of the chart
  double wall_s = 0;        // first task start to last task end
  std::size_t tasks_executed = 0;
  std::optional<long> steady_from;         // the first steady step; unset: no steady steps
  std::vector<StepReport> steps;           // by step
  std::vector<WorkerReport> workers;       // by id
  std::vector<TaskKindReport> task_kinds;  // by total time, longest first
  std::vector<TransferReport> transfers;   // by source, then destination
  std::vector<MemoryUseReport> memory;     // by node id, nodes the trace records
  OverlapReport overlap;
  std::optional<StretchReport> stretched;  // unset: no durations.rec (a real run)
  std::optional<BoundReport> bound;  // unset: see bound_missing
  std::string bound_missing;         // why there is no bound ("" when there is one)
};

// The memory node names of a trace: GPU<device> for a node holding a CUDA worker, RAM for node 0
// and nodes holding CPU workers, DISK<k> for the others (StarPU's disk nodes, numbered from 0 in
// node order). Indexed by node id.
std::vector<std::string> memory_node_names(const PajeTrace& paje);

// The report of one run. Throws FileFormatError when no task ran, std::invalid_argument when
// options.steady_from names no step of the trace, FileFormatError for a dependency cycle.
TraceReport analyze_trace(const TraceData& data, const ReportOptions& options = {});
// The stretched tasks of a simulated run's trace (unset without durations.rec).
std::optional<StretchReport> stretched_tasks(const TraceData& data);

}  // namespace starzero::profile
