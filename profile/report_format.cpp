#include "profile/report_format.hpp"

#include <cstdio>
#include <optional>

namespace starzero::profile {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kKindsShown = 25;      // task kinds listed in markdown (JSON has all)
constexpr std::size_t kPathTasksShown = 12;  // critical-path tasks listed per step in markdown

template <class... Values>
std::string printf_string(const char* format, Values... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, format, values...);
  return buffer;
}

// "1 step", "3 steps".
std::string counted(std::size_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string seconds(double s) { return printf_string("%.4f", s); }
std::string percent(double fraction) { return printf_string("%.1f %%", 100.0 * fraction); }
std::string percent_or_dash(const std::optional<double>& fraction) { return fraction ? percent(*fraction) : "—"; }

std::string bytes_text(std::uint64_t bytes) {
  if (bytes >= 1000000000) return printf_string("%.2f GB", double(bytes) * 1e-9);
  if (bytes >= 1000000) return printf_string("%.2f MB", double(bytes) * 1e-6);
  if (bytes >= 1000) return printf_string("%.1f kB", double(bytes) * 1e-3);
  return std::to_string(bytes) + " B";
}

Json optional_number(const std::optional<double>& value) { return value ? Json(*value) : Json(nullptr); }

Json steps_json(const RankReport& rank) {
  Json steps = Json::array();
  for (const StepReport& s : rank.report.steps) {
    Json path = Json::array();
    for (std::size_t i : s.critical_path) path.push_back(rank.data.tasks[i].name);
    steps.push_back({{"step", s.step},
                     {"tasks", s.tasks},
                     {"tasks_executed", s.executed},
                     {"wall_s", s.wall_s},
                     {"critical_path_s", s.critical_path_s},
                     {"critical_path", std::move(path)}});
  }
  return steps;
}

Json worker_json(const WorkerReport& w) {
  Json worker = {{"id", w.id},
                 {"name", w.name},
                 {"kind", w.kind},
                 {"tasks", w.tasks},
                 {"window_s", w.total.window_s},
                 {"busy_s", w.total.busy_s},
                 {"overhead_s", w.total.overhead_s},
                 {"idle_s", w.total.idle_s},
                 {"sleeping_s", w.total.sleeping_s},
                 {"busy_fraction", w.total.fraction(w.total.busy_s)},
                 {"overhead_fraction", w.total.fraction(w.total.overhead_s)},
                 {"idle_fraction", w.total.fraction(w.total.idle_s)}};
  const std::optional<TimeSplit>& steady = w.steady;
  const auto steady_value = [&](double TimeSplit::*field) { return steady ? Json((*steady).*field) : Json(nullptr); };
  const auto steady_fraction = [&](double TimeSplit::*field) {
    return steady ? Json(steady->fraction((*steady).*field)) : Json(nullptr);
  };
  worker["steady_window_s"] = steady_value(&TimeSplit::window_s);
  worker["steady_busy_s"] = steady_value(&TimeSplit::busy_s);
  worker["steady_overhead_s"] = steady_value(&TimeSplit::overhead_s);
  worker["steady_idle_s"] = steady_value(&TimeSplit::idle_s);
  worker["steady_busy_fraction"] = steady_fraction(&TimeSplit::busy_s);
  worker["steady_overhead_fraction"] = steady_fraction(&TimeSplit::overhead_s);
  worker["steady_idle_fraction"] = steady_fraction(&TimeSplit::idle_s);
  return worker;
}

Json transfers_json(const std::vector<TransferReport>& transfers) {
  Json out = Json::array();
  for (const TransferReport& t : transfers)
    out.push_back({{"src", t.src},
                   {"dst", t.dst},
                   {"bytes", t.bytes},
                   {"count", t.count},
                   {"time_s", t.time_s},
                   {"hidden_fraction", optional_number(t.hidden_fraction)}});
  return out;
}

Json stretched_json(const std::optional<StretchReport>& stretched) {
  if (!stretched) return nullptr;
  Json kinds = Json::array();
  for (const StretchedKindReport& k : stretched->kinds)
    kinds.push_back({{"name", k.name}, {"count", k.count}, {"excess_s", k.excess_s}, {"max_excess_s", k.max_excess_s}});
  return {{"predicted_tasks", stretched->predicted_tasks},
          {"stretched_tasks", stretched->stretched_tasks},
          {"excess_s", stretched->excess_s},
          {"kinds", std::move(kinds)}};
}

Json overlap_json(const OverlapReport& o) {
  return {{"adam_tasks", o.adam_tasks},
          {"adam_s", o.adam_s},
          {"adam_concurrent_fraction", optional_number(o.adam_concurrent_fraction)},
          {"steady_cpu_adam_s", o.steady_cpu_adam_s},
          {"cpu_adam_hidden_fraction", optional_number(o.cpu_adam_hidden_fraction)},
          {"collective_tasks", o.collective_tasks},
          {"collective_s", o.collective_s},
          {"collective_concurrent_fraction", optional_number(o.collective_concurrent_fraction)}};
}

Json bound_json(const std::optional<BoundReport>& b) {
  if (!b) return nullptr;
  Json bound;
  for (const auto& [key, value] : sim::bound_json_fields(b->bound, b->work, b->rates, b->steady_step_s))
    bound[key] = Json::parse(value);
  bound["steady_steps"] = b->steady_steps;
  bound["compute_from"] = b->compute_from;
  bound["adam_from"] = b->adam_from;
  return bound;
}

Json rank_json(const RankReport& rank) {
  const TraceReport& r = rank.report;
  Json out;
  if (r.rank) out["rank"] = *r.rank;
  out["dir"] = r.dir.string();
  out["wall_s"] = r.wall_s;
  out["tasks_executed"] = r.tasks_executed;
  out["steady_from"] = r.steady_from ? Json(*r.steady_from) : Json(nullptr);
  out["steps"] = steps_json(rank);
  Json workers = Json::array();
  for (const WorkerReport& w : r.workers) workers.push_back(worker_json(w));
  out["workers"] = std::move(workers);
  Json kinds = Json::array();
  for (const TaskKindReport& k : r.task_kinds)
    kinds.push_back(
        {{"name", k.name}, {"count", k.count}, {"total_s", k.total_s}, {"share", k.share}, {"mean_s", k.mean_s}});
  out["task_kinds"] = std::move(kinds);
  out["transfers"] = transfers_json(r.transfers);
  Json memory = Json::array();
  for (const MemoryUseReport& m : r.memory) memory.push_back({{"node", m.node}, {"peak_bytes", m.peak_bytes}});
  out["memory"] = std::move(memory);
  out["stretched"] = stretched_json(r.stretched);
  out["overlap"] = overlap_json(r.overlap);
  out["bound"] = bound_json(r.bound);
  return out;
}

void append_steps_markdown(const TraceReport& r, const std::string& heading, std::string& md) {
  md += heading + " Steps\n\n";
  if (r.steps.empty()) {
    md += "No task carries an Iteration: the run marked no steps.\n\n";
    return;
  }
  md += "| step | wall s | critical path s | path / wall | tasks run |\n|---:|---:|---:|---:|---:|\n";
  for (const StepReport& s : r.steps)
    md += printf_string("| %ld | ", s.step) + seconds(s.wall_s) + " | " + seconds(s.critical_path_s) + " | " +
          (s.wall_s > 0 ? percent(s.critical_path_s / s.wall_s) : "—") + printf_string(" | %zu |\n", s.executed);
  md += "\n";
}

// `steady_steps`: "steps A..B", empty when there are none.
void append_workers_markdown(const TraceReport& r, const std::string& heading, const std::string& steady_steps,
                             std::string& md) {
  md += heading + " Workers\n\n";
  md += "Busy: running tasks; overhead: StarPU runtime states outside tasks; idle: the rest (sleeping included)";
  md += r.steady_from ? "; steady: " + steady_steps + ".\n\n" : ".\n\n";
  md +=
      "| id | worker | kind | tasks | busy s | overhead s | idle s | busy | overhead | idle | steady busy | steady "
      "overhead | steady idle |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const WorkerReport& w : r.workers) {
    const TimeSplit& t = w.total;
    const auto steady = [&](double TimeSplit::*part) {
      return w.steady ? percent(w.steady->fraction((*w.steady).*part)) : std::string("—");
    };
    md += printf_string("| %d | %s | %s | %zu | ", w.id, w.name.c_str(), w.kind.c_str(), w.tasks) + seconds(t.busy_s) +
          " | " + seconds(t.overhead_s) + " | " + seconds(t.idle_s) + " | " + percent(t.fraction(t.busy_s)) + " | " +
          percent(t.fraction(t.overhead_s)) + " | " + percent(t.fraction(t.idle_s)) + " | " +
          steady(&TimeSplit::busy_s) + " | " + steady(&TimeSplit::overhead_s) + " | " + steady(&TimeSplit::idle_s) +
          " |\n";
  }
  md += "\n";
}

void append_task_kinds_markdown(const TraceReport& r, const std::string& heading, std::string& md) {
  md += heading + " Task kinds\n\n";
  md += "| kind | count | total s | share of busy | mean ms |\n|---|---:|---:|---:|---:|\n";
  double rest_share = 0;
  for (std::size_t i = 0; i < r.task_kinds.size(); ++i) {
    const TaskKindReport& k = r.task_kinds[i];
    if (i >= kKindsShown) {
      rest_share += k.share;
      continue;
    }
    md += "| " + k.name + printf_string(" | %zu | ", k.count) + seconds(k.total_s) + " | " + percent(k.share) +
          printf_string(" | %.3f |\n", k.mean_s * 1e3);
  }
  if (r.task_kinds.size() > kKindsShown)
    md += printf_string("\n%zu more kinds: ", r.task_kinds.size() - kKindsShown) + percent(rest_share) +
          " of the busy time (all of them in --json).\n";
  md += "\n";
}

// The transfers per link, and the memory nodes' peaks when the trace has them.
void append_transfers_markdown(const TraceReport& r, const std::string& heading, std::string& md) {
  md += heading + " Transfers\n\n";
  if (r.transfers.empty()) {
    md += "No data transfers between memory nodes.\n\n";
  } else {
    md += "Hidden: the part of the transfer time during which some worker ran a task (collectives excepted).\n\n";
    md += "| link | bytes | count | time s | hidden |\n|---|---:|---:|---:|---:|\n";
    for (const TransferReport& t : r.transfers)
      md += "| " + t.src + " → " + t.dst + " | " + bytes_text(t.bytes) + printf_string(" | %zu | ", t.count) +
            seconds(t.time_s) + " | " + percent_or_dash(t.hidden_fraction) + " |\n";
    md += "\n";
  }

  if (!r.memory.empty()) {
    md += heading + " Memory\n\nThe most StarPU had allocated on each memory node at once.\n\n";
    md += "| node | peak allocated |\n|---|---:|\n";
    for (const MemoryUseReport& m : r.memory)
      md += "| " + m.node + " | " + bytes_text(std::uint64_t(m.peak_bytes)) + " |\n";
    md += "\n";
  }
}

void append_stretched_markdown(const StretchReport& s, const std::string& heading, std::string& md) {
  md += heading + " Stretched tasks\n\n";
  md += printf_string("Simulated run: %zu of %zu tasks ran longer than the simulation executed them for", s.stretched_tasks,
                      s.predicted_tasks) +
        (s.stretched_tasks ? ", " + seconds(s.excess_s) +
                                 " s in all: time inside the task spent allocating or pinning memory, evicting or "
                                 "waiting, not computing.\n\n"
                           : ".\n\n");
  if (!s.kinds.empty()) {
    md += "| kind | tasks | excess s | largest excess ms |\n|---|---:|---:|---:|\n";
    for (const StretchedKindReport& k : s.kinds)
      md += "| " + k.name + printf_string(" | %zu | ", k.count) + seconds(k.excess_s) +
            printf_string(" | %.3f |\n", k.max_excess_s * 1e3);
    md += "\n";
  }
}

void append_overlap_markdown(const OverlapReport& o, const std::string& heading, std::string& md) {
  md += heading + " Overlap\n\n";
  md +=
      "Beside forward/backward compute (`*_fwd`, `*_bwd`, `*_bwd_input`, `*_bwd_weight`, `*_bwd_bias`, `*_bwd_params`) "
      "on "
      "another worker:\n\n";
  md += o.adam_concurrent_fraction ? "- AdamW (`adamw*`): " + percent(*o.adam_concurrent_fraction) + " of " +
                                         seconds(o.adam_s) + printf_string(" s (%zu tasks)\n", o.adam_tasks)
                                   : std::string("- AdamW (`adamw*`): no AdamW task ran\n");
  md += o.collective_concurrent_fraction
            ? "- collectives (`all_gather*`, `reduce_scatter*`, `all_reduce*`): " +
                  percent(*o.collective_concurrent_fraction) + " of " + seconds(o.collective_s) +
                  printf_string(" s (%zu tasks)\n", o.collective_tasks)
            : std::string("- collectives: no collective task ran\n");
  if (o.cpu_adam_hidden_fraction)
    md += "- CPU AdamW of the steady steps under a GPU's tasks: " + percent(*o.cpu_adam_hidden_fraction) + " of " +
          seconds(o.steady_cpu_adam_s) + " s\n";
  md += "\n";
}

void append_bound_markdown(const TraceReport& r, const std::string& heading, std::string& md) {
  md += heading + " Bound\n\n";
  const std::optional<BoundReport>& b = r.bound;
  if (!b) {
    md += "No bound: " + r.bound_missing + ".\n\n";
    return;
  }
  md += "The time each resource needs for one steady step (" + std::to_string(b->steady_steps) +
        (b->steady_steps == 1 ? " step" : " steps") +
        "; the steady window over their count is the step): compute from the " +
        (b->compute_from == "trace"      ? "tasks' declared FLOPs"
         : b->bound.compute_by_class ? "run's plan (its GPU kernels by cost class)"
                                     : "run's plan (no task declared FLOPs)") +
        ", CPU AdamW from " + (b->adam_from == "trace" ? "its tasks' buffers" : "the run's plan") +
        ", PCIe and disk from the transfers; the largest bounds the step.\n\n```\n";
  for (const std::string& line : sim::bound_lines(b->bound, b->rates, b->steady_step_s, "")) md += line + "\n";
  md += "```\n\n";
}

void append_critical_paths_markdown(const RankReport& rank, const std::string& heading, std::string& md) {
  const TraceReport& r = rank.report;
  if (r.steps.empty()) return;
  md += heading + " Critical paths\n\n";
  md += "The longest chain of each step's tasks along their dependencies, by recorded duration.\n\n";
  for (const StepReport& s : r.steps) {
    md += printf_string("- step %ld, ", s.step) + seconds(s.critical_path_s) +
          printf_string(" s, %zu tasks: ", s.critical_path.size());
    for (std::size_t i = 0; i < s.critical_path.size() && i < kPathTasksShown; ++i)
      md += (i ? " → " : "") + ("`" + rank.data.tasks[s.critical_path[i]].name + "`");
    if (s.critical_path.size() > kPathTasksShown)
      md += printf_string(" → … (%zu more)", s.critical_path.size() - kPathTasksShown);
    md += "\n";
  }
  md += "\n";
}

void append_rank_markdown(const RankReport& rank, const std::string& heading, std::string& md) {
  const TraceReport& r = rank.report;
  md += counted(r.steps.size(), "step") + ", " + counted(r.tasks_executed, "task") + " ran on " +
        counted(r.workers.size(), "worker") +
        printf_string(" in %.4f s (first task start to last task end).", r.wall_s);
  const std::string steady_steps =
      r.steady_from ? printf_string("steps %ld..%ld", *r.steady_from, r.steps.back().step) : std::string();
  md += r.steady_from ? " Steady: " + steady_steps + ".\n\n" : " No steady steps.\n\n";

  append_steps_markdown(r, heading, md);
  append_workers_markdown(r, heading, steady_steps, md);
  append_task_kinds_markdown(r, heading, md);
  append_transfers_markdown(r, heading, md);
  if (r.stretched) append_stretched_markdown(*r.stretched, heading, md);
  append_overlap_markdown(r.overlap, heading, md);
  append_bound_markdown(r, heading, md);
  append_critical_paths_markdown(rank, heading, md);
}

}  // namespace

Json report_json(const std::vector<RankReport>& ranks) {
  if (ranks.size() == 1 && !ranks.front().report.rank) return rank_json(ranks.front());
  Json all = Json::array();
  for (const RankReport& rank : ranks) all.push_back(rank_json(rank));
  return Json{{"ranks", std::move(all)}};
}

std::string report_markdown(const std::vector<RankReport>& ranks) {
  std::string md;
  const bool several = ranks.size() > 1 || (ranks.size() == 1 && ranks.front().report.rank);
  if (!several) {
    md += "# Trace report: " + ranks.front().report.dir.string() + "\n\n";
    append_rank_markdown(ranks.front(), "##", md);
    return md;
  }
  md += "# Trace report: " + ranks.front().report.dir.parent_path().string() +
        printf_string(", %zu ranks\n\n", ranks.size());
  for (const RankReport& rank : ranks) {
    md += printf_string("## Rank %d\n\n", rank.report.rank.value_or(0));
    append_rank_markdown(rank, "###", md);
  }
  return md;
}

}  // namespace starzero::profile
