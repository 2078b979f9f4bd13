#include "profile/trace_report.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "profile/intervals.hpp"
#include "profile/task_kinds.hpp"
#include "runtime/files.hpp"

namespace starzero::profile {
namespace {

constexpr double kSecondsPerMs = 1e-3;

Interval interval_of(const TaskRecord& task) { return {task.start_ms, task.end_ms}; }

// The first start and last end of the tasks that ran among `indexes`; empty when none ran.
std::optional<Interval> span_of(const std::vector<TaskRecord>& tasks, const std::vector<std::size_t>& indexes) {
  std::optional<Interval> span;
  for (std::size_t i : indexes) {
    const TaskRecord& t = tasks[i];
    if (!t.executed()) continue;
    if (!span)
      span = interval_of(t);
    else
      span = Interval{std::min(span->begin, t.start_ms), std::max(span->end, t.end_ms)};
  }
  return span;
}

std::string worker_kind(const std::string& name) {
  if (name.find("CUDA") != std::string::npos) return "cuda";
  if (name.find("CPU") != std::string::npos) return "cpu";
  if (name.find("OPENCL") != std::string::npos) return "opencl";
  return "other";
}

// The longest chain of `step_tasks` along their DependsOn edges (edges to tasks outside the
// step are ignored), each task weighing its duration (0 if it did not run). Kahn's algorithm:
// job ids do not follow submission order, so the order comes from the edges themselves.
void compute_critical_path(const std::vector<TaskRecord>& tasks, const std::vector<std::size_t>& step_tasks,
                           const std::unordered_map<std::string_view, std::size_t>& index_of_job, StepReport& out,
                           const std::filesystem::path& tasks_file) {
  const std::size_t n = step_tasks.size();
  std::unordered_map<std::size_t, std::size_t> local;  // task index -> position in step_tasks
  local.reserve(n);
  for (std::size_t k = 0; k < n; ++k) local.emplace(step_tasks[k], k);
  std::vector<std::vector<std::size_t>> successors(n);
  std::vector<std::size_t> pending(n, 0);  // unresolved predecessors
  for (std::size_t k = 0; k < n; ++k) {
    for (const std::string& dep : tasks[step_tasks[k]].depends_on) {
      const auto job = index_of_job.find(dep);
      if (job == index_of_job.end()) continue;
      const auto pred = local.find(job->second);
      if (pred == local.end() || pred->second == k) continue;
      successors[pred->second].push_back(k);
      ++pending[k];
    }
  }
  std::vector<double> finish(n, 0.0);  // longest chain ending with this task, ms
  std::vector<std::size_t> previous(n, n);
  std::vector<double> start(n, 0.0);  // longest chain before this task, ms
  std::vector<std::size_t> ready;
  for (std::size_t k = 0; k < n; ++k)
    if (pending[k] == 0) ready.push_back(k);
  std::size_t visited = 0;
  while (!ready.empty()) {
    const std::size_t k = ready.back();
    ready.pop_back();
    ++visited;
    finish[k] = start[k] + tasks[step_tasks[k]].duration_ms();
    for (std::size_t s : successors[k]) {
      if (previous[s] == n || finish[k] > start[s]) {
        start[s] = finish[k];
        previous[s] = k;
      }
      if (--pending[s] == 0) ready.push_back(s);
    }
  }
  if (visited != n)
    throw_format_error(tasks_file, "the DependsOn edges of step " + std::to_string(out.step) + " form a cycle");
  std::size_t last = n;
  double longest = -1;
  for (std::size_t k = 0; k < n; ++k) {
    if (finish[k] > longest) {
      longest = finish[k];
      last = k;
    }
  }
  out.critical_path_s = std::max(0.0, longest) * kSecondsPerMs;
  for (std::size_t k = last; k != n; k = previous[k])
    if (tasks[step_tasks[k]].executed()) out.critical_path.push_back(step_tasks[k]);
  std::reverse(out.critical_path.begin(), out.critical_path.end());
}

// The length of each of `measured` (task intervals) that `covered_for(task)` covers, summed.
template <class CoveredFor>
double concurrent_time(const std::vector<TaskRecord>& tasks, const std::vector<std::size_t>& measured,
                       CoveredFor covered_for) {
  double total = 0;
  for (std::size_t i : measured) total += covered_length(interval_of(tasks[i]), covered_for(tasks[i]));
  return total;
}

TimeSplit split_time(const Interval& window, const std::vector<Interval>& task_intervals,
                     const IntervalUnion& busy_union, const IntervalUnion& overhead, const IntervalUnion& sleeping) {
  TimeSplit split;
  split.window_s = window.length() * kSecondsPerMs;
  double busy_ms = 0;  // a task inside the window counts end - start exactly
  for (const Interval& t : task_intervals)
    busy_ms += Interval{std::max(t.begin, window.begin), std::min(t.end, window.end)}.length();
  split.busy_s = busy_ms * kSecondsPerMs;
  split.overhead_s = length_within(subtract_intervals(overhead, busy_union), window) * kSecondsPerMs;
  // Sleeping is the part of idle time asleep: outside tasks and outside runtime states (a worker's
  // two state streams can overlap).
  split.sleeping_s =
      length_within(subtract_intervals(subtract_intervals(sleeping, busy_union), overhead), window) * kSecondsPerMs;
  split.idle_s = std::max(0.0, split.window_s - split.busy_s - split.overhead_s);
  split.sleeping_s = std::min(split.sleeping_s, split.idle_s);
  return split;
}

// The steady steps' bound: what they asked of each resource, per step, in the trace (the tasks'
// declared FLOPs and buffer sizes, the transfers), at the rates the run left (docs/trace-report.md).
BoundReport bound_of_steady_steps(const std::vector<TaskRecord>& tasks, const std::vector<std::size_t>& steady_tasks,
                                  const Interval& steady_window, std::size_t steady_steps,
                                  const std::map<int, WorkerReport>& workers, const std::vector<Transfer>& transfers,
                                  const std::vector<std::string>& node_names, const sim::RunBoundFigures& run) {
  BoundReport b;
  b.rates = run.rates;
  b.steady_steps = steady_steps;
  b.steady_step_s = steady_window.length() * kSecondsPerMs / double(steady_steps);
  const std::string compute_kind = run.rates.compute_device == "GPU" ? "cuda" : "cpu";
  double compute_flops = 0, adam_bytes = 0, adam_flops = 0;
  bool compute_declared = false, adam_sized = false;
  for (std::size_t i : steady_tasks) {
    const TaskRecord& t = tasks[i];
    if (!t.executed()) continue;
    if (is_cpu_adamw_model(t.model)) {
      if (t.data_bytes) {
        adam_sized = true;
        adam_bytes += *t.data_bytes;
        adam_flops += t.flops.value_or(0.0);
      }
      continue;
    }
    const auto worker = workers.find(t.worker);
    if (worker == workers.end() || worker->second.kind != compute_kind || !t.flops) continue;
    compute_declared = true;
    compute_flops += *t.flops;
  }
  const double per_step = 1.0 / double(steady_steps);
  b.compute_from = compute_declared ? "trace" : "plan";
  b.work.compute_flops = compute_declared ? std::optional<double>(compute_flops * per_step) : run.planned.compute_flops;
  // On a GPU the plan's kernels charged by their cost classes (runtime/gpu_cost.hpp), as the run's
  // own bound: a trace's FLOPs at one rate would charge a scalar kernel at tensor-core speed.
  if (run.rates.compute_device == "GPU" && run.planned.gpu_kernel_seconds) {
    b.compute_from = "plan";
    b.work.gpu_kernel_seconds = run.planned.gpu_kernel_seconds;
  }
  b.adam_from = adam_sized ? "trace" : "plan";
  b.work.adam_bytes = adam_sized ? adam_bytes * per_step : run.planned.adam_bytes;
  b.work.adam_flops = adam_sized ? adam_flops * per_step : run.planned.adam_flops;
  const auto name_of = [&](int node) {
    return node >= 0 && std::size_t(node) < node_names.size() ? node_names[std::size_t(node)] : std::string();
  };
  for (const Transfer& t : transfers) {
    if (t.start_ms < steady_window.begin || t.start_ms >= steady_window.end) continue;
    const std::string src = name_of(t.src_node), dst = name_of(t.dst_node);
    const double bytes = double(t.bytes) * per_step;
    if (src == "RAM" && dst.starts_with("GPU")) b.work.host_to_gpu_bytes += bytes;
    if (src.starts_with("GPU") && dst == "RAM") b.work.gpu_to_host_bytes += bytes;
    if (src == "RAM" && dst.starts_with("DISK")) b.work.disk_write_bytes += bytes;
    if (src.starts_with("DISK") && dst == "RAM") b.work.disk_read_bytes += bytes;
  }
  b.bound = sim::step_bound(b.work, b.rates);
  return b;
}

// The tasks by what the report groups them by: by job id, step and worker (those that ran).
struct TaskIndex {
  std::vector<std::size_t> executed;
  std::map<int, std::vector<std::size_t>> tasks_of_worker;
  std::map<long, std::vector<std::size_t>> tasks_of_step;
  std::unordered_map<std::string_view, std::size_t> index_of_job;
};

TaskIndex index_tasks(const std::vector<TaskRecord>& tasks) {
  TaskIndex index;
  index.index_of_job.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    index.index_of_job.emplace(tasks[i].job_id, i);
    if (tasks[i].step) index.tasks_of_step[*tasks[i].step].push_back(i);
    if (!tasks[i].executed()) continue;
    index.executed.push_back(i);
    index.tasks_of_worker[tasks[i].worker].push_back(i);
  }
  return index;
}

// Each step's tasks, wall time and critical path, by step.
std::vector<StepReport> step_reports(const std::vector<TaskRecord>& tasks, const TaskIndex& index,
                                     const std::filesystem::path& tasks_file) {
  std::vector<StepReport> steps;
  for (const auto& [step, members] : index.tasks_of_step) {
    StepReport s;
    s.step = step;
    s.tasks = members.size();
    const std::optional<Interval> span = span_of(tasks, members);
    s.executed =
        std::size_t(std::count_if(members.begin(), members.end(), [&](std::size_t i) { return tasks[i].executed(); }));
    s.wall_s = span ? span->length() * kSecondsPerMs : 0.0;
    compute_critical_path(tasks, members, index.index_of_job, s, tasks_file);
    steps.push_back(std::move(s));
  }
  return steps;
}

// The steady steps: every step but the first, or those from --steady-from on.
struct SteadySteps {
  std::optional<long> from;  // unset: no steady steps
  std::optional<Interval> window;
  std::vector<std::size_t> tasks;
  std::size_t count = 0;
};

SteadySteps steady_steps_of(const std::vector<TaskRecord>& tasks, const TaskIndex& index,
                            const std::vector<StepReport>& steps, const ReportOptions& options) {
  SteadySteps steady;
  if (steps.empty()) return steady;
  long first_steady = steps.front().step + 1;
  if (options.steady_from) {
    first_steady = *options.steady_from;
    if (first_steady > steps.back().step)
      throw std::invalid_argument("--steady-from " + std::to_string(first_steady) + ": the trace's steps are " +
                                  std::to_string(steps.front().step) + ".." + std::to_string(steps.back().step));
  }
  for (const auto& [step, members] : index.tasks_of_step) {
    if (step < first_steady) continue;
    steady.tasks.insert(steady.tasks.end(), members.begin(), members.end());
    ++steady.count;
  }
  steady.window = span_of(tasks, steady.tasks);
  if (steady.window) steady.from = std::max(first_steady, steps.front().step);
  return steady;
}

// Every worker the trace names, and any that ran a task, by id: its time split over the run's
// window and over the steady one.
std::map<int, WorkerReport> worker_reports(const TraceData& data, const TaskIndex& index, const Interval& run,
                                           const std::optional<Interval>& steady_window) {
  std::map<int, WorkerReport> workers;
  const auto add_worker = [&](int id, const std::string& name) {
    WorkerReport& w = workers[id];
    w.id = id;
    w.name = name;
    w.kind = worker_kind(name);
  };
  for (const PajeWorker& w : data.paje.workers) add_worker(w.id, w.name);
  for (const auto& [id, states] : data.worker_states)
    if (!workers.contains(id)) add_worker(id, "worker" + std::to_string(id));
  for (const auto& [id, indexes] : index.tasks_of_worker)
    if (!workers.contains(id)) add_worker(id, "worker" + std::to_string(id));
  const WorkerStateIntervals no_states;
  for (auto& [id, worker] : workers) {
    std::vector<Interval> task_intervals;
    if (const auto it = index.tasks_of_worker.find(id); it != index.tasks_of_worker.end())
      for (std::size_t i : it->second) task_intervals.push_back(interval_of(data.tasks[i]));
    worker.tasks = task_intervals.size();
    const auto states_it = data.worker_states.find(id);
    const WorkerStateIntervals& states = states_it == data.worker_states.end() ? no_states : states_it->second;
    const IntervalUnion busy = merge_intervals(task_intervals);
    const IntervalUnion overhead = merge_intervals(states.overhead);
    const IntervalUnion sleeping = merge_intervals(states.sleeping);
    // Every task lies inside the run's window: there the busy time is the sum of the durations.
    worker.total = split_time(run, task_intervals, busy, overhead, sleeping);
    if (steady_window) worker.steady = split_time(*steady_window, task_intervals, busy, overhead, sleeping);
  }
  return workers;
}

// The task kinds' table, and the tasks that the overlap and transfer figures single out.
struct KindSplit {
  std::vector<TaskKindReport> kinds;  // the most total time first
  std::vector<std::size_t> adamw_tasks, collective_tasks;
  std::map<int, std::vector<Interval>> compute_of_worker;
  std::vector<Interval> non_collective;
};

KindSplit split_by_kind(const std::vector<TaskRecord>& tasks, const std::vector<std::size_t>& executed) {
  KindSplit split;
  std::map<std::string, TaskKindReport> kinds;
  double all_busy_ms = 0;
  for (std::size_t i : executed) {
    const std::string kind = task_kind(tasks[i].name);
    TaskKindReport& k = kinds[kind];
    k.name = kind;
    ++k.count;
    k.total_s += tasks[i].duration_ms();
    all_busy_ms += tasks[i].duration_ms();
    if (is_adamw_kind(kind)) split.adamw_tasks.push_back(i);
    if (is_compute_kind(kind)) split.compute_of_worker[tasks[i].worker].push_back(interval_of(tasks[i]));
    if (is_collective_kind(kind))
      split.collective_tasks.push_back(i);
    else
      split.non_collective.push_back(interval_of(tasks[i]));
  }
  for (auto& [name, k] : kinds) {
    k.share = all_busy_ms > 0 ? k.total_s / all_busy_ms : 0.0;
    k.mean_s = k.total_s / double(k.count) * kSecondsPerMs;
    k.total_s *= kSecondsPerMs;
    split.kinds.push_back(k);
  }
  std::stable_sort(split.kinds.begin(), split.kinds.end(),
                   [](const TaskKindReport& a, const TaskKindReport& b) { return a.total_s > b.total_s; });
  return split;
}

// AdamW and collectives beside compute on the other workers.
OverlapReport overlap_of(const std::vector<TaskRecord>& tasks, const std::map<int, WorkerReport>& workers,
                         const KindSplit& split) {
  std::map<int, IntervalUnion> compute_elsewhere;  // per worker: compute on every other worker
  for (const auto& [id, worker] : workers) {
    std::vector<Interval> others;
    for (const auto& [other, intervals] : split.compute_of_worker)
      if (other != id) others.insert(others.end(), intervals.begin(), intervals.end());
    compute_elsewhere[id] = merge_intervals(std::move(others));
  }
  const auto elsewhere = [&](const TaskRecord& t) -> const IntervalUnion& { return compute_elsewhere[t.worker]; };
  const auto total_ms = [&](const std::vector<std::size_t>& indexes) {
    double sum = 0;
    for (std::size_t i : indexes) sum += tasks[i].duration_ms();
    return sum;
  };
  OverlapReport overlap;
  overlap.adam_tasks = split.adamw_tasks.size();
  overlap.adam_s = total_ms(split.adamw_tasks) * kSecondsPerMs;
  if (overlap.adam_s > 0)
    overlap.adam_concurrent_fraction =
        concurrent_time(tasks, split.adamw_tasks, elsewhere) * kSecondsPerMs / overlap.adam_s;
  overlap.collective_tasks = split.collective_tasks.size();
  overlap.collective_s = total_ms(split.collective_tasks) * kSecondsPerMs;
  if (overlap.collective_s > 0)
    overlap.collective_concurrent_fraction =
        concurrent_time(tasks, split.collective_tasks, elsewhere) * kSecondsPerMs / overlap.collective_s;
  return overlap;
}

// The steady steps' CPU AdamW under the CUDA workers' tasks (OverlapReport::cpu_adam_hidden_fraction).
void add_cpu_adam_hidden(const std::vector<TaskRecord>& tasks, const std::map<int, WorkerReport>& workers,
                         const std::vector<std::size_t>& executed, const std::vector<std::size_t>& adamw_tasks,
                         const std::vector<std::size_t>& steady_tasks, OverlapReport& overlap) {
  const auto on_cuda = [&](const TaskRecord& t) {
    const auto w = workers.find(t.worker);
    return w != workers.end() && w->second.kind == "cuda";
  };
  std::vector<Interval> gpu;
  for (std::size_t i : executed)
    if (on_cuda(tasks[i])) gpu.push_back(interval_of(tasks[i]));
  if (gpu.empty()) return;
  const IntervalUnion gpu_busy = merge_intervals(std::move(gpu));
  const std::set<std::size_t> steady(steady_tasks.begin(), steady_tasks.end());
  double adam_ms = 0, hidden_ms = 0;
  for (std::size_t i : adamw_tasks) {
    if (!steady.count(i) || on_cuda(tasks[i])) continue;
    adam_ms += tasks[i].duration_ms();
    hidden_ms += covered_length(interval_of(tasks[i]), gpu_busy);
  }
  overlap.steady_cpu_adam_s = adam_ms * kSecondsPerMs;
  if (adam_ms > 0) overlap.cpu_adam_hidden_fraction = hidden_ms / adam_ms;
}

// A memory node's name; NODE<n> for a node the trace did not name.
std::string node_name_or_number(const std::vector<std::string>& node_names, int node) {
  return node >= 0 && std::size_t(node) < node_names.size() ? node_names[std::size_t(node)]
                                                            : "NODE" + std::to_string(node);
}

// Per link (source, destination node): bytes, count, time, and the part of that time `computing`
// covers.
std::vector<TransferReport> transfer_reports(const std::vector<Transfer>& transfers,
                                             const std::vector<std::string>& node_names,
                                             const IntervalUnion& computing) {
  std::map<std::pair<int, int>, std::pair<TransferReport, double>> links;  // report, hidden ms
  for (const Transfer& t : transfers) {
    auto& [link, hidden_ms] = links[{t.src_node, t.dst_node}];
    link.src = node_name_or_number(node_names, t.src_node);
    link.dst = node_name_or_number(node_names, t.dst_node);
    link.bytes += t.bytes;
    ++link.count;
    const Interval during{t.start_ms, t.end_ms};
    link.time_s += during.length();
    hidden_ms += covered_length(during, computing);
  }
  std::vector<TransferReport> reports;
  for (auto& [nodes, entry] : links) {
    auto& [link, hidden_ms] = entry;
    if (link.time_s > 0) link.hidden_fraction = hidden_ms / link.time_s;
    link.time_s *= kSecondsPerMs;
    reports.push_back(link);
  }
  return reports;
}

}  // namespace

std::vector<std::string> memory_node_names(const PajeTrace& paje) {
  int max_node = 0;
  for (int node : paje.memory_nodes) max_node = std::max(max_node, node);
  for (const PajeWorker& w : paje.workers) max_node = std::max(max_node, w.memory_node);
  std::vector<std::string> names(std::size_t(max_node) + 1);
  for (const PajeWorker& w : paje.workers) {
    if (w.memory_node < 0) continue;
    std::string& name = names[std::size_t(w.memory_node)];
    const std::size_t cuda = w.name.find("CUDA");
    if (cuda != std::string::npos) {
      // StarPU names a CUDA worker CUDA<device>_<stream>.
      std::size_t digits = cuda + 4;
      while (digits < w.name.size() && w.name[digits] >= '0' && w.name[digits] <= '9') ++digits;
      name = "GPU" + w.name.substr(cuda + 4, digits - cuda - 4);
    } else if (name.empty()) {
      name = "RAM";
    }
  }
  if (names[0].empty()) names[0] = "RAM";
  int disks = 0;
  for (int node : paje.memory_nodes)
    if (names[std::size_t(node)].empty()) names[std::size_t(node)] = "DISK" + std::to_string(disks++);
  for (std::size_t node = 0; node < names.size(); ++node)
    if (names[node].empty()) names[node] = "NODE" + std::to_string(node);
  return names;
}

TraceReport analyze_trace(const TraceData& data, const ReportOptions& options) {
  const std::vector<TaskRecord>& tasks = data.tasks;
  const std::filesystem::path tasks_file = data.dir / "tasks.rec";
  TraceReport report;
  report.dir = data.dir;

  const TaskIndex index = index_tasks(tasks);
  const std::optional<Interval> run = span_of(tasks, index.executed);
  if (!run) throw_format_error(tasks_file, "no task ran (no record has a StartTime)");
  report.origin_ms = run->begin;
  report.wall_s = run->length() * kSecondsPerMs;
  report.tasks_executed = index.executed.size();

  report.steps = step_reports(tasks, index, tasks_file);
  const SteadySteps steady = steady_steps_of(tasks, index, report.steps, options);
  report.steady_from = steady.from;

  const std::map<int, WorkerReport> workers = worker_reports(data, index, *run, steady.window);
  for (const auto& [id, worker] : workers) report.workers.push_back(worker);

  KindSplit split = split_by_kind(tasks, index.executed);
  report.task_kinds = std::move(split.kinds);
  report.overlap = overlap_of(tasks, workers, split);
  add_cpu_adam_hidden(tasks, workers, index.executed, split.adamw_tasks, steady.tasks, report.overlap);

  const std::vector<std::string> node_names = memory_node_names(data.paje);
  report.transfers =
      transfer_reports(data.paje.transfers, node_names, merge_intervals(std::move(split.non_collective)));
  for (const auto& [node, peak] : data.paje.peak_used_bytes)
    report.memory.push_back({node_name_or_number(node_names, node), peak});

  // ---- the steady steps' bound
  if (!options.run_bound)
    report.bound_missing = std::string("no ") + sim::kRunBoundFile +
                           " beside the trace (a traced run writes it: the leader's, with a steady step)";
  else if (!steady.window)
    report.bound_missing = "no steady steps";
  else
    report.bound = bound_of_steady_steps(tasks, steady.tasks, *steady.window, steady.count, workers,
                                         data.paje.transfers, node_names, *options.run_bound);
  report.stretched = stretched_tasks(data);
  return report;
}

std::optional<StretchReport> stretched_tasks(const TraceData& data) {
  if (data.executed_ms.empty()) return std::nullopt;
  StretchReport report;
  std::map<std::string, StretchedKindReport> kinds;
  for (const TaskRecord& task : data.tasks) {
    const auto executed = data.executed_ms.find(task.job_id);
    if (!task.executed() || executed == data.executed_ms.end()) continue;
    ++report.predicted_tasks;
    const double excess_ms = task.duration_ms() - executed->second;
    if (excess_ms * 1e3 <= kStretchToleranceUs + kStretchToleranceShare * executed->second * 1e3) continue;
    const std::string kind = task_kind(task.name);
    StretchedKindReport& k = kinds[kind];
    k.name = kind;
    ++k.count;
    k.excess_s += excess_ms * kSecondsPerMs;
    k.max_excess_s = std::max(k.max_excess_s, excess_ms * kSecondsPerMs);
    ++report.stretched_tasks;
    report.excess_s += excess_ms * kSecondsPerMs;
  }
  for (auto& [name, k] : kinds) report.kinds.push_back(k);
  std::ranges::sort(report.kinds, [](const auto& a, const auto& b) { return a.excess_s > b.excess_s; });
  return report;
}

}  // namespace starzero::profile
