// `starzero calibrate --out DIR [--name H] [train options]`: a real training run that records
// StarPU's history-based performance model of every codelet it runs (STARPU_CALIBRATE=1) into
// DIR/codelets/45/<codelet>.<H>, then writes this machine's platform files into DIR/bus/ (its CPU
// cores, no GPUs; with --like M, the named GPU machine M with this machine's cores: sim/platform.hpp). `starzero-sim
// --platform DIR` then simulates this machine with the measured durations (docs/sim.md, "Task durations").
// The run also measures StarPU's own time per task on the CPU workers (runtime/task_overhead.hpp), which the platform
// carries per scheduling policy for the simulation to charge. Several runs into one DIR add up: StarPU keeps each
// data size's history apart, so calibrate every shape you will simulate; the overheads average, weighted by tasks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "runtime/sim.hpp"
#include "runtime/task_overhead.hpp"
#include "sim/platform.hpp"
#include "train/run.hpp"

namespace starzero {

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: starzero calibrate --out DIR [--name H] [--like MACHINE] [train options]\n"
    "\n"
    "Trains as `starzero train [train options]` does (default: the tiny preset, 20 steps, no\n"
    "validation) while StarPU records every codelet's duration per data size and worker kind into\n"
    "DIR/codelets/45/<codelet>.<H>, then writes this machine's platform (its CPU cores; GPUs: --like)\n"
    "into DIR/bus/<H>.*, with StarPU's own time per task on the CPU workers under the run's policy\n"
    "(--sched). Simulate it with `starzero-sim train [same options] --platform DIR`.\n"
    "  --out DIR   where the calibration goes (created; runs into one DIR add up)\n"
    "  --name H    the machine's name in the files (default this-machine)\n"
    "  --like M    a GPU machine: the platform is the named machine M's (h200x1, h200x8, a100x1: its\n"
    "              GPUs, links and peaks) with this machine's CPU cores, so that the calibrated CUDA\n"
    "              durations are used (default: this machine's CPU cores and no GPU)\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "starzero calibrate: error: %s\n", cli::printable(message).c_str());
  return 2;
}

// The machine described by this calibration: this one named `name`, or with --like a named
// machine's GPUs and links and at least this one's cores. std::invalid_argument naming the flag.
sim::MachineSpec machine_to_calibrate(const std::string& name, const std::string& like) {
  sim::MachineSpec machine;
  try {
    machine = sim::this_machine(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--name: ") + e.what());
  }
  if (!like.empty()) {
    const std::optional<sim::MachineSpec> named = sim::named_machine(like);
    if (!named) throw std::invalid_argument("--like: '" + like + "' is not a named machine (h200x1, h200x8, a100x1)");
    const int cpus = machine.cpus;
    machine = *named;
    machine.name = name;
    machine.cpus = std::max(cpus, machine.gpus + 1);  // one core drives each GPU
  }
  try {
    sim::validate(machine);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--name: ") + e.what());
  }
  return machine;
}

// StarPU's per-task overhead the run measured on the CPU workers, into the machine's figures.
void add_measured_overhead(const RunMeasurements& measured, sim::MachineSpec& machine) {
  const TaskOverhead& overhead = measured.cpu_task_overhead;
  if (overhead.tasks == 0 || std::isnan(overhead.wake_us)) {
    std::printf("StarPU's overhead per task: not measured (it needs at least 2 steps and 2 CPU workers)\n");
    return;
  }
  std::printf(
      "StarPU's overhead per task on the CPU workers (steps 2 on, policy %s): %.1f us over %llu tasks; a "
      "sleeping worker's wake-up: %.1f us\n",
      measured.policy.c_str(), overhead.us_per_task, (unsigned long long)overhead.tasks, overhead.wake_us);
  sim::add_task_overhead(machine, measured.policy, {overhead.us_per_task, overhead.wake_us, double(overhead.tasks)});
}

// The codelet models StarPU wrote for `machine_name` into dir/codelets/45.
std::size_t count_models(const fs::path& dir, const std::string& machine_name) {
  std::error_code ec;
  std::size_t models = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "codelets" / "45", ec))
    if (e.path().extension() == "." + machine_name) ++models;
  return models;
}

}  // namespace

int calibrate_main(int argc, char** argv) {
  std::string out, name = "this-machine", like;
  std::vector<char*> train_args{argv[0]};
  bool steps_given = false, val_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--out" || arg == "--name" || arg == "--like") {
      if (i + 1 >= argc) return usage_error(std::string(arg) + " needs a value");
      (arg == "--out" ? out : arg == "--name" ? name : like) = argv[++i];
      continue;
    }
    steps_given = steps_given || arg == "--steps";
    val_given = val_given || arg == "--val-every";
    train_args.push_back(argv[i]);
  }
  if constexpr (sim::predicts_times)
    return usage_error("calibration measures real runs: use starzero, not starzero-sim");
  if (out.empty()) return usage_error("--out DIR is required");
  sim::MachineSpec machine;
  try {
    machine = machine_to_calibrate(name, like);
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  }
  std::error_code ec;
  const fs::path dir = fs::absolute(out, ec);
  if (ec || !(fs::create_directories(dir, ec), !ec)) return usage_error("--out: cannot create '" + out + "'");
  // An earlier calibration of this machine into DIR: its per-task overheads add up with this run's.
  const fs::path earlier = dir / "bus" / (machine.name + ".machine.json");
  if (fs::exists(earlier)) {
    try {
      machine.cpu_task_overhead = sim::read_machine_file(earlier).cpu_task_overhead;
    } catch (const std::invalid_argument& e) {
      return usage_error("--out: " + earlier.string() + ": " + e.what());
    }
  }
  // Enough samples per data size for StarPU to trust its mean (STARPU_CALIBRATE_MINIMUM, 10).
  std::string steps = "--steps", twenty = "20", val = "--val-every", zero = "0";
  if (!steps_given) train_args.insert(train_args.end(), {steps.data(), twenty.data()});
  if (!val_given) train_args.insert(train_args.end(), {val.data(), zero.data()});
  setenv("STARPU_PERF_MODEL_DIR", dir.c_str(), 1);
  setenv("STARPU_HOSTNAME", machine.name.c_str(), 1);
  setenv("STARPU_CALIBRATE", "1", 1);
  RunMeasurements measured;
  const int rc = train_main(int(train_args.size()), train_args.data(), &measured);
  if (rc != 0) return rc;
  add_measured_overhead(measured, machine);
  // After the run: StarPU wrote its own bus calibration for this name; the platform replaces it.
  try {
    sim::write_platform(machine, dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "starzero calibrate: failed: writing the platform into %s: %s\n", dir.c_str(), e.what());
    return 1;
  }
  std::printf(
      "calibrated: %zu codelet models in %s/codelets/45 (*.%s) and this machine's platform in %s/bus; "
      "simulate with starzero-sim train ... --platform %s\n",
      count_models(dir, machine.name), dir.c_str(), machine.name.c_str(), dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace starzero
