#include "runtime/task_overhead.hpp"

#include <starpu.h>
#include <starpu_profiling.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace starzero {

namespace {

std::vector<int> cpu_worker_ids() {
  std::vector<int> ids(starpu_worker_get_count_by_type(STARPU_CPU_WORKER));
  if (!ids.empty()) starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids.data(), int(ids.size()));
  return ids;
}

void require_profiling() {
  if (starpu_profiling_status_get() != STARPU_PROFILING_ENABLE)
    throw std::logic_error("measuring StarPU's per-task overhead needs its profiling (SessionOptions::profile_workers)");
}

}  // namespace

void restart_task_overhead_measurement() {
  require_profiling();
  // Reading a worker's profiling information restarts its counters (StarPU 1.3's contract).
  for (const int worker : cpu_worker_ids()) {
    starpu_profiling_worker_info discarded{};
    starpu_profiling_worker_get_info(worker, &discarded);
  }
}

TaskOverhead measured_task_overhead() {
  require_profiling();
  double overhead_us = 0;
  std::uint64_t tasks = 0;
  for (const int worker : cpu_worker_ids()) {
    starpu_profiling_worker_info info{};
    starpu_profiling_worker_get_info(worker, &info);
    const double outside_tasks_us = starpu_timing_timespec_to_us(&info.total_time) -
                                    starpu_timing_timespec_to_us(&info.executing_time) -
                                    starpu_timing_timespec_to_us(&info.sleeping_time);
    overhead_us += std::max(0.0, outside_tasks_us);
    tasks += std::uint64_t(std::max(0, info.executed_tasks));
  }
  return {tasks > 0 ? overhead_us / double(tasks) : 0, tasks};
}

namespace {

void empty_kernel(void* /*buffers*/[], void* /*arg*/) {}

// The variable every task of a chain updates: each waits for the one before.
class ChainVariable {
 public:
  ChainVariable() { starpu_variable_data_register(&handle_, STARPU_MAIN_RAM, uintptr_t(&value_), sizeof value_); }
  ~ChainVariable() { starpu_data_unregister(handle_); }
  ChainVariable(const ChainVariable&) = delete;
  ChainVariable& operator=(const ChainVariable&) = delete;
  starpu_data_handle_t handle() const { return handle_; }

 private:
  int value_ = 0;
  starpu_data_handle_t handle_ = nullptr;
};

// Microseconds per task of `length` empty tasks in one dependency chain, the i-th on workers[i %
// size]. The main thread holds the variable while it submits, so the chain runs after, on
// workers that do not share their cores with the submission.
double chain_us_per_task(starpu_codelet& codelet, const std::vector<int>& workers, int length) {
  ChainVariable variable;
  starpu_data_acquire(variable.handle(), STARPU_RW);
  for (int i = 0; i < length; ++i) {
    starpu_task* task = starpu_task_create();
    task->cl = &codelet;
    task->handles[0] = variable.handle();
    task->execute_on_a_specific_worker = 1;
    task->workerid = unsigned(workers[std::size_t(i) % workers.size()]);
    if (const int rc = starpu_task_submit(task); rc != 0) {
      starpu_data_release(variable.handle());
      starpu_task_wait_for_all();
      throw std::runtime_error("measuring the wake-up latency: StarPU refused a task (" + std::to_string(rc) + ")");
    }
  }
  const double start = starpu_timing_now();
  starpu_data_release(variable.handle());
  starpu_task_wait_for_all();
  return (starpu_timing_now() - start) / double(length);
}

}  // namespace

double measure_wake_latency_us(int chain_length, int rounds) {
  const std::vector<int> workers = cpu_worker_ids();
  if (workers.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  starpu_codelet codelet{};
  codelet.cpu_funcs[0] = empty_kernel;
  codelet.nbuffers = 1;
  codelet.modes[0] = STARPU_RW;
  codelet.name = "wake_latency_probe";
  starpu_task_wait_for_all();
  std::vector<double> differences;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    const double one = chain_us_per_task(codelet, {workers[0]}, chain_length);
    const double two = chain_us_per_task(codelet, {workers[0], workers[1]}, chain_length);
    differences.push_back(two - one);
  }
  std::sort(differences.begin(), differences.end());
  return std::max(0.0, differences[differences.size() / 2]);
}

}  // namespace starzero
