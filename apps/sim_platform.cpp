// starzero-sim only: which machine StarPU simulates. In SimGrid mode StarPU's own main() loads
// the platform ($STARPU_PERF_MODEL_DIR/bus/$STARPU_HOSTNAME.platform.v4.xml) before the
// program's main runs, so --platform is read here, in a constructor that runs before any main:
// it writes a named machine's files (sim/platform.hpp) into a cache folder, or takes a folder
// `starzero platform --out DIR` wrote, points StarPU at them, and sets the roofline figures of
// the tasks' durations (runtime/sim.hpp). Without --platform: h200x1.
#include <unistd.h>
#include <xbt/log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sim.hpp"
#include "sim/platform.hpp"

namespace starzero {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "starzero-sim: error: --platform: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

// A folder with exactly one bus/NAME.machine.json: that machine, whose files are beside it.
sim::MachineSpec machine_in(const fs::path& dir) {
  try {
    return sim::machine_in_folder(dir);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

sim::Roofline roofline_of(const sim::MachineSpec& m) {
  sim::Roofline r;
  r.cpu_core_flops = m.cpu_core_flops;
  r.cpu_core_memory_Bps = m.host_memory_Bps / double(m.cpus);  // the cores share the memory
  r.gpu_bf16_flops = m.gpu_bf16_flops;
  r.gpu_fp32_flops = m.gpu_fp32_flops;
  r.gpu_memory_Bps = m.gpu_memory_Bps;
  r.gpu_sm_count = m.gpu_sm_count;
  r.gpu_clock_hz = m.gpu_clock_hz;
  if (!m.attention_rates.empty())
    r.gpu_measured_attention = std::make_shared<const std::vector<sim::MeasuredAttentionRate>>(m.attention_rates);
  r.gemm_efficiency = m.gemm_efficiency;
  r.elementwise_efficiency = m.elementwise_efficiency;
  r.kernel_launch_s = m.kernel_launch_s;
  return r;
}

// What the collectives of --sim-ranks cross (runtime/sim.hpp): NVLink between the
// GPUs of one machine; with one GPU, its PCIe figure stands for the link to the next machine
// (about what one 400 Gb/s NIC per GPU gives, 50 GB/s); CPU ranks share host memory.
sim::CollectiveLink collective_link_of(const sim::MachineSpec& m) {
  if (m.gpus > 1 && m.gpu_to_gpu_Bps > 0) return {m.gpu_to_gpu_Bps, m.gpu_to_gpu_latency_s, "NVLink"};
  if (m.gpus > 0) return {std::min(m.host_to_gpu_Bps, m.gpu_to_host_Bps), m.pcie_latency_s, "PCIe"};
  return {m.host_memory_Bps / 2, 1e-6, "host memory"};  // each byte read and written once
}

std::string describe(const sim::MachineSpec& m);

// glibc passes main's arguments to constructors.
__attribute__((constructor)) void select_platform(int argc, char** argv, char** /*envp*/) {
  std::string platform = "h200x1";
  for (int i = 1; i < argc; ++i) {
    // SimGrid answers a bare --help itself (its own options) and exits, before our main runs: the
    // same request in the spellings our parsers also take.
    if (std::string_view(argv[i]) == "--help") argv[i] = const_cast<char*>(i == 1 ? "help" : "--help=true");
    const std::string_view arg = argv[i];
    if (arg == "--platform") {
      if (i + 1 >= argc) fail("needs a value: a machine name or a folder");
      platform = argv[i + 1];
    }
  }
  sim::MachineSpec machine;
  fs::path dir;
  if (platform == "this-machine") {
    // The calibration recorded on the machine the project develops and tests on, committed with
    // the sources (sim/calibrations/README.md says which and how to redo it).
    dir = fs::path(STARZERO_CALIBRATIONS_DIR) / "this-machine";
    if (!fs::is_directory(dir))
      fail("this-machine: no calibration at " + dir.string() +
           " (make one with `starzero calibrate --out DIR` and pass --platform DIR)");
    machine = machine_in(dir);
  } else if (const auto named = sim::named_machine(platform)) {
    machine = *named;
    // Written afresh at each start (atomically): the files follow this build's figures.
    dir = fs::temp_directory_path() / ("starzero-sim-platforms-" + std::to_string(getuid()));
    try {
      sim::write_platform(machine, dir);
    } catch (const std::exception& e) {
      fail(std::string("writing ") + machine.name + "'s files into " + dir.string() + ": " + e.what());
    }
  } else if (fs::is_directory(platform)) {
    dir = fs::absolute(platform);
    machine = machine_in(dir);
  } else {
    std::string names;
    for (const std::string& n : sim::named_machines()) names += (names.empty() ? "" : ", ") + n;
    fail("'" + platform + "' is neither a machine (" + names + ", this-machine) nor a folder");
  }
  setenv("STARPU_PERF_MODEL_DIR", dir.c_str(), 1);
  setenv("STARPU_HOSTNAME", machine.name.c_str(), 1);
  sim::set_sim_machine(machine);
  sim::set_roofline(roofline_of(machine));
  sim::set_machine_description(describe(machine));
  sim::set_machine_size({machine.cpus, machine.gpus});
  sim::set_collective_link(collective_link_of(machine));
  std::map<std::string, sim::TaskOverheadUs> overheads;
  for (const auto& [policy, record] : sim::task_overheads_to_charge(machine))
    overheads[policy] = {record.us_per_task, record.wake_us};
  sim::set_cpu_task_overheads(std::move(overheads));
  // SimGrid reports each setting of the platform's config block: not news to the user.
  xbt_log_control_set("xbt_cfg.thresh:warning");
}

std::string describe(const sim::MachineSpec& m) {
  char line[512];
  std::snprintf(line, sizeof line,
                "simulated machine %s: %d CPU cores, %d GPU(s) of %.0f GB, PCIe %.0f GB/s each way%s; "
                "every time below is predicted (docs/sim.md)",
                m.name.c_str(), m.cpus, m.gpus, m.gpu_memory_bytes / 1e9, m.host_to_gpu_Bps / 1e9,
                m.gpus > 1 && m.gpu_to_gpu_Bps > 0
                    ? (", NVLink " + std::to_string(int(m.gpu_to_gpu_Bps / 1e9)) + " GB/s").c_str()
                    : "");
  return line;
}

}  // namespace

}  // namespace starzero
