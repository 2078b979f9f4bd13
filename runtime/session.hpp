#pragma once
// RAII around starpu_init / starpu_shutdown. One Session may be alive per process at a time.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "runtime/placement.hpp"
#include "runtime/priorities.hpp"

namespace starzero {

struct SessionOptions {
  // Scheduling policy by StarPU name (see scheduling_policies()); empty: $STARPU_SCHED or lws.
  std::string policy;
  // A shared library of scheduling policies (register_policy_plugin); "" for none.
  std::string policy_plugin;
  PriorityScheme priorities = PriorityScheme::none;
  // The dmda family's weights of expected compute time, transfer time and energy in its cost
  // (STARPU_SCHED_ALPHA / BETA / GAMMA); unset: StarPU's defaults (1, 1, 1000).
  std::optional<double> sched_alpha, sched_beta, sched_gamma;
  // Whether CPU workers may run the model's compute tasks when the session has CUDA workers
  // (runtime/placement.hpp; docs/scheduling.md). Without CUDA workers they run on CPU workers.
  CpuCompute cpu_compute = CpuCompute::off;
  int cpu_workers = -1;   // -1: StarPU's default (one per core, minus one per CUDA worker)
  int cuda_workers = -1;  // -1: one per visible GPU; 0: none
  int cuda_device = -1;   // >= 0: one CUDA worker, on this device (one GPU per rank); -1: StarPU's choice
  std::size_t cpu_memory_limit_mib = 0;   // 0: no limit (STARPU_LIMIT_CPU_MEM)
  std::size_t cuda_memory_limit_mib = 0;  // 0: no limit (STARPU_LIMIT_CUDA_MEM)
  // StarPU writes dirty buffers back to their home in the background when few are clean
  // ("tidying"). Off by default (STARPU_MINIMUM_CLEAN_BUFFERS=0; eviction then writes back on
  // demand only): the plan keeps its buffers on the GPU for good, so tidying is traffic the design
  // does not have (17 GB in step 1 of a simulated 7B without offload), and a buffer without a home
  // got a host copy pinned for it inside a task (0.5 s for `probs` at T=4096). With a disk node it
  // must stay off: StarPU 1.3.10 can leave idle write-back requests queued at shutdown and abort
  // (data_request.h:106, measured: 3 of 4 runs under load).
  bool background_writeback = false;
  // StarPU 1.3 frees a main-memory buffer as soon as its data dies (its allocation cache is for
  // GPUs and disks) and the next step allocates it again; glibc hands big blocks back to the
  // kernel (munmap) and every step then faults fresh pages in. true: glibc keeps freed blocks up
  // to 32 MiB (its maximum mmap threshold) mapped for reuse: on the tiny preset 4.8x fewer page
  // faults and +31 % tokens/s (perf stat, 60 steps). The resident size stays at its peak.
  bool keep_freed_memory = true;
  // FxT trace: off unless a directory is given. StarPU 1.3.10 traces by default and writes a
  // 64 MiB file to /tmp; we switch that off. Only one traced session per process (StarPU
  // writes its trace file once per process).
  std::string trace_dir;
  int trace_rank = 0;  // names the trace file: <trace_dir>/starzero_r<rank>_0
  // StarPU's profiling from the start (every task records its timings; a few us per task):
  // what measuring the per-task overhead needs (runtime/task_overhead.hpp).
  bool profile_workers = false;
};

// StarPU's workers asleep while the application thread does host-only work (initialising
// parameters, converting a checkpoint): an idle StarPU 1.3 worker keeps polling for tasks (the
// last awake worker of a context never sleeps), which on a machine with as many workers as
// cores takes a core from the application thread. starpu_pause on construction, starpu_resume on
// destruction. Tasks may be submitted meanwhile but none runs: nothing inside may wait for one
// (no Tensor::view, no wait_all).
class PausedWorkers {
 public:
  PausedWorkers();
  ~PausedWorkers();
  PausedWorkers(const PausedWorkers&) = delete;
  PausedWorkers& operator=(const PausedWorkers&) = delete;
};

// The tasks submitted while it lives form training step `step` (starpu_iteration_push/pop):
// tasks.rec gives each an "Iteration: <step>" line, ViTE shows the step, and `starzero trace`
// and the critical-path priorities separate steps by it.
class StepMark {
 public:
  explicit StepMark(long step);
  ~StepMark();
  StepMark(const StepMark&) = delete;
  StepMark& operator=(const StepMark&) = delete;
};

// The scheduling policies a Session accepts, by name: StarPU's own (from StarPU itself), its
// alias `heft` (= dmda), then those registered by plugins.
std::vector<std::string> scheduling_policies();
// One line per policy: name and StarPU's description, and whether it orders ready tasks by
// priority (docs/scheduling.md).
std::string scheduling_policies_help();
// Whether the named policy looks at task priorities at all.
bool policy_uses_priorities(const std::string& policy);

// Loads a scheduling-policy plugin: a shared library exporting
//   extern "C" starpu_sched_policy** starzero_scheduling_policies();
// (a null-terminated array; examples/central_priority_policy.cpp). Its policies become valid
// `--sched` names for the rest of the process. Throws std::invalid_argument if the file cannot
// be loaded or lacks the function; loading the same file twice is a no-op.
void register_policy_plugin(const std::string& path);

class Session {
 public:
  explicit Session(const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& policy() const { return policy_; }
  int cpu_workers() const;
  int cuda_workers() const;
  // Whether the model's compute tasks run on CUDA workers only (CUDA workers and cpu_compute off).
  bool model_on_cuda_only() const { return session_model_where() != 0; }
  // "2 CPU + 1 CUDA workers", and with CUDA workers where the model's tasks run.
  std::string workers_summary() const;
  // The memory StarPU may use on the smallest GPU of the session (after --cuda-mem-limit; the
  // simulated device's in simulation); 0 without CUDA workers.
  std::size_t cuda_memory_bytes() const;
  // The FxT file this session writes at shutdown ("" when tracing is off).
  const std::string& trace_file() const { return trace_file_; }

  // Blocks until every submitted task has completed.
  void wait_all() const;

 private:
  std::string policy_;
  std::string trace_file_;
};

}  // namespace starzero
