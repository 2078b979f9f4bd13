#pragma once
// The files a traced run leaves (runtime/trace.hpp's conversion of the FxT file), read into
// plain records: the tasks of tasks.rec, the worker states of trace.rec turned into overhead and
// sleeping intervals, and the workers, memory nodes and data transfers of paje.trace. Times stay
// in milliseconds, as StarPU writes them. Every reader streams its file line by line and throws
// FileFormatError (runtime/files.hpp) naming the file and the line for a missing, malformed or
// truncated file. What the fields mean: docs/trace-report.md.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "profile/intervals.hpp"

namespace starzero::profile {

// One record of tasks.rec.
struct TaskRecord {
  std::string name;                     // Name (else Model, else "unnamed")
  std::string job_id;                   // JobId, unique in the file
  std::vector<std::string> depends_on;  // DependsOn job ids (data and explicit dependencies)
  std::optional<long> step;             // the first Iteration value: the training step it belongs to
  int worker = -1;                      // WorkerId; -1: the task did not run (marks, partitions)
  double start_ms = 0;                  // StartTime and EndTime, when it ran
  double end_ms = 0;
  std::string model;            // Model: the codelet's performance model ("" without one)
  std::optional<double> flops;  // GFlop × 1e9: the FLOPs the task declared (STARPU_FLOPS)
  // The bytes its buffers move to or from their memory: each of Sizes counted once per R and once
  // per W in its Modes ("RW" twice, scratch "S" not at all); unset without Sizes and Modes.
  std::optional<double> data_bytes;

  bool executed() const { return worker >= 0; }
  double duration_ms() const { return executed() ? end_ms - start_ms : 0.0; }
};

// All records of tasks.rec, in file order. A record with a StartTime must have an EndTime (not
// before it) and a WorkerId.
std::vector<TaskRecord> read_tasks_rec(const std::filesystem::path& path);

// What a worker did besides its tasks, from trace.rec: the intervals it spent in a StarPU runtime
// state (is_overhead_state) and sleeping. They may overlap its task intervals (trace.rec's thread
// stream is in "Overhead" during a task); the report subtracts those.
struct WorkerStateIntervals {
  std::vector<Interval> overhead;
  std::vector<Interval> sleeping;
};

// The runtime states counted as overhead: every state of a worker's thread or worker stream
// except the task itself (category Task), "Overhead" (StarPU's catch-all state, which its thread
// stream also shows while a task runs and while the driver loop spins), "Executing", "Sleeping",
// "Idle", "Nothing" and "End". That leaves FetchingInput, PushingOutput, Progressing, Scheduling,
// Callback, Submitting task, Building task, Initializing, Deinitializing, Unpartitioning, ...
bool is_overhead_state(std::string_view name, std::string_view category);

// Per worker id (trace.rec's W >= 0; application threads, W = -1, are left out).
std::map<int, WorkerStateIntervals> read_trace_rec(const std::filesystem::path& path);

// A StarPU worker, from its Paje container (type W).
struct PajeWorker {
  int id = -1;           // the worker id of tasks.rec's WorkerId
  std::string name;      // "CPU0", "CUDA0_0" (StarPU's name: kind, device, stream)
  int memory_node = -1;  // the memory node its thread container sits in
};

// A data transfer between two memory nodes: a Paje link between memory-manager containers.
struct Transfer {
  int src_node = -1;
  int dst_node = -1;
  double start_ms = 0;
  double end_ms = 0;
  std::uint64_t bytes = 0;
  std::string type;  // StarPU's link type: F (fetch), PF (prefetch), IF (idle fetch)
};

struct PajeTrace {
  std::vector<PajeWorker> workers;  // by id
  std::vector<int> memory_nodes;    // ids, ascending
  std::vector<Transfer> transfers;  // in end order
  // Per memory node id: the most bytes StarPU had allocated there at once (the largest value of
  // its memory manager's "use" variable, which StarPU records in MiB); nodes without one absent.
  std::map<int, double> peak_used_bytes;
};

// The workers, memory nodes and completed transfers of paje.trace. Every event line is checked
// against the field count of its %EventDef; work-stealing links (between workers) are left out.
PajeTrace read_paje_trace(const std::filesystem::path& path);

// durations.rec, which a simulated run writes beside its trace (runtime/sim.hpp,
// write_executed_durations): what each task was simulated for, in ms, by JobId. A missing file is
// an empty map (a real run).
std::map<std::string, double> read_executed_durations(const std::filesystem::path& path);

// The files of one traced run, read from `dir` (tasks.rec, trace.rec, paje.trace, and
// durations.rec where the run was simulated).
struct TraceData {
  std::filesystem::path dir;
  std::vector<TaskRecord> tasks;
  std::map<int, WorkerStateIntervals> worker_states;
  PajeTrace paje;
  std::map<std::string, double> executed_ms;  // by JobId; empty for a real run
};
TraceData read_trace_data(const std::filesystem::path& dir);

}  // namespace starzero::profile
