#pragma once
// StarPU's own time per task on the CPU workers of a real run, beyond the kernels: popping the
// task, fetching its data, pushing the tasks it releases to the scheduler, callbacks, and the
// time the OS gives the worker's core to other threads (the submitting thread, on a machine
// with no core to spare). A simulated worker spends no time in StarPU's code, so `starzero
// calibrate` measures this and the simulation charges it (docs/sim.md, "Per-task
// overhead"). Read from StarPU's worker profiling: total time minus time executing tasks minus
// time sleeping (idle: no task to pop), over the tasks executed.
#include <cstdint>
#include <limits>

namespace starzero {

struct TaskOverhead {
  double us_per_task = 0;
  std::uint64_t tasks = 0;  // 0: nothing was measured
  // What a sleeping CPU worker takes to start a task pushed to it (measure_wake_latency_us): the
  // profiling counts that wait as sleep, not as overhead. NaN: not measured.
  double wake_us = std::numeric_limits<double>::quiet_NaN();
};

// Starts a measurement: every CPU worker's counters restart now. Needs StarPU's profiling on
// since before the tasks were submitted (SessionOptions::profile_workers): a task submitted
// while it is off records no execution time. Throws std::logic_error when it is off.
void restart_task_overhead_measurement();
// The CPU workers' overhead since the last restart (or read: reading restarts the counters).
// Throws std::logic_error when profiling is off.
TaskOverhead measured_task_overhead();

// Microseconds a sleeping CPU worker takes to start a task that another worker's completion
// released to it: the OS's wake-up of its thread, which a simulated worker does not pay. Measured
// as the time per task of a chain of empty tasks alternating between two CPU workers, minus that
// of the same chain on one worker (the median of `rounds` pairs of `chain_length` tasks). Waits
// for every submitted task first. NaN with fewer than two CPU workers. Throws
// std::runtime_error if StarPU refuses a task.
double measure_wake_latency_us(int chain_length = 400, int rounds = 5);

}  // namespace starzero
