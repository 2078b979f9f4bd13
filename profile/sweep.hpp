#pragma once
// `starzero sweep`: the same training run under each combination of scheduling policy, priority
// scheme and placement of model tasks (--cpu-compute), repeated, each run traced and read
// through `starzero trace --json` (docs/trace-report.md), summarised per combination. Each run is
// its own process (StarPU traces once per process); with ranks > 1 it runs under mpirun and rank
// 0's trace reports. The table, JSON and chart: docs/scheduling.md.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace starzero::profile {

struct SweepOptions {
  std::filesystem::path program;                // the starzero executable
  std::vector<std::string> policies;            // --sched values
  std::vector<std::string> priorities;          // --priorities values
  std::vector<std::string> cpu_compute{"off"};  // --cpu-compute values
  int repeat = 1;                               // runs per combination
  int ranks = 1;                                // > 1: every run under `mpirun -np ranks`
  std::filesystem::path out_dir;                // runs/, sweep.json, sweep.svg
  std::vector<std::string> train_args;          // the `train` flags after `--`
};

// What one run measured, or (SweepRow::median) the medians over a combination's runs.
struct SweepFigures {
  double step_s = 0;        // median wall time of the steady steps (all but the first)
  double tokens_per_s = 0;  // from the run's summary line
  double steady_busy = 0;   // mean over workers of steady_busy_fraction
  std::optional<double> adam_overlap, collective_overlap;
  double gpu_transfer_bytes = 0;  // transfers to or from a GPU memory node
};

// One training run of a sweep.
struct SweepRun {
  int repeat = 0;
  SweepFigures figures;
  std::filesystem::path trace_dir;
};

// The runs of one combination, their medians and the range of their step times.
struct SweepRow {
  std::string policy, priorities, cpu_compute;
  std::vector<SweepRun> runs;
  SweepFigures median;
  double step_min_s = 0, step_max_s = 0;
};

// Checks the options (throws std::invalid_argument: empty lists, repeat < 1, train flags that
// the sweep sets itself), then runs repeat x policies x priorities x cpu_compute trainings, the
// order of the combinations reversed on every other repeat so that drift on a noisy machine falls
// evenly. `progress` gets one line per run. Throws std::runtime_error naming the run and its log
// when a run fails; the runs before it stay in out_dir.
std::vector<SweepRow> run_sweep(const SweepOptions& options, const std::function<void(const std::string&)>& progress);

std::string sweep_table(const std::vector<SweepRow>& rows);
nlohmann::json sweep_json(const SweepOptions& options, const std::vector<SweepRow>& rows);
// Step time per combination (median bar, min-max error bars), drawn by gnuplot as SVG.
void write_sweep_chart(const std::vector<SweepRow>& rows, const std::filesystem::path& svg);

}  // namespace starzero::profile
