// `starzero platform`: writes the files StarPU in SimGrid mode reads to simulate a machine
// (sim/platform.hpp), for a named machine or this host's CPUs with the user's numbers, and prints
// the environment that selects them; `--list` prints the named machines' figures.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "sim/platform.hpp"

namespace starzero {
namespace {

cli::ArgParser make_parser() {
  cli::ArgParser p("starzero platform");
  p.option("out", "DIR", "folder to write DIR/bus/NAME.* in (the STARPU_PERF_MODEL_DIR); required")
      .option("cpus", "N", "CPU cores, 1..64 (StarPU makes N - G CPU workers)")
      .option("gpus", "G", "GPUs, 0..8")
      .option("gpu-mem", "SIZE", "memory per GPU: 141GB, 80GB, 24GiB")
      .option("pcie", "RATE", "host<->GPU copy rate per GPU and direction: 55GB/s, 25GB/s")
      .option("nvlink", "RATE", "GPU<->GPU rate per GPU and direction: 450GB/s; 0 = through the host")
      .option("name", "H", "the STARPU_HOSTNAME of the files: [A-Za-z0-9_.-] (default: the machine's name)")
      .option("attention-calibration", "FILE",
              "attention rates measured on this GPU (scripts/gpu-check.sh's attention_calibration.json): they "
              "replace the published cuDNN table and our kernel's counted model (docs/sim.md)")
      .flag("list", "print the named machines and their figures, and stop")
      .flag("help", "show this help");
  return p;
}

const CommandHelp kHelp = {
    "starzero platform",
    "starzero platform (NAME | custom) --out DIR [--cpus N] [--gpus G] [--gpu-mem SIZE]\n"
    "                         [--pcie RATE] [--nvlink RATE] [--name H]\n"
    "       starzero platform --list",
    "Writes the platform files StarPU's SimGrid mode reads to simulate a machine:\n"
    "DIR/bus/H.platform.v4.xml (hosts, links and routes), H.bandwidth (MB/s) and H.latency (us)\n"
    "between memory nodes, H.config and H.affinity. NAME is a named machine (see --list), whose\n"
    "figures the flags override; `custom` starts from this host's CPU cores and no GPUs, and then\n"
    "needs --gpu-mem and --pcie when --gpus is given. Run the simulated program with\n"
    "STARPU_PERF_MODEL_DIR=DIR STARPU_HOSTNAME=H (docs/sim.md, \"Platforms\").\n"
    "\n"
    "Sizes take KB MB GB TB or KiB MiB GiB TiB, rates the same with an optional /s (GB = 1e9).\n"
    "Bad input: one error line, exit code 2.\n",
    "  starzero platform h200x8 --out sim-platforms\n"
    "  starzero platform h200x1 --out sim-platforms --gpus 2 --name h200x2\n"
    "  starzero platform custom --out sim-platforms --cpus 16 --gpus 2 --gpu-mem 24GiB --pcie 12GB/s\n"
    "  starzero platform --list\n"};

// A byte rate: a size (cli::parse_bytes) with an optional "/s".
double parse_rate(std::string_view flag, std::string_view text) {
  std::string_view size = text;
  if (size.size() >= 2 && size[size.size() - 2] == '/' && (size.back() == 's' || size.back() == 'S'))
    size.remove_suffix(2);
  if (size.empty())
    throw UsageError(std::string(flag) + ": '" + cli::printable(text) + "' is not a rate (e.g. 55GB/s)");
  return cli::parse_bytes(flag, size);
}

// "141 GB", "4.8 TB/s", "989 TFLOP/s": three significant digits with a decimal prefix.
std::string si(double x, const char* unit) {
  static constexpr std::pair<double, const char*> kPrefixes[] = {
      {1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  double scale = 1;
  const char* prefix = "";
  for (const auto& [s, p] : kPrefixes) {
    if (std::fabs(x) >= s) {
      scale = s;
      prefix = p;
      break;
    }
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.3g %s%s", x / scale, prefix, unit);
  return text;
}

std::string us(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  return text;
}

void print_machine(const sim::MachineSpec& m) {
  std::printf("%s\n", m.name.c_str());
  std::printf("  cpus %d, gpus %d, GPU memory %s\n", m.cpus, m.gpus, si(m.gpu_memory_bytes, "B").c_str());
  std::printf("  PCIe %s host->GPU, %s GPU->host, latency %s\n", si(m.host_to_gpu_Bps, "B/s").c_str(),
              si(m.gpu_to_host_Bps, "B/s").c_str(), us(m.pcie_latency_s).c_str());
  std::printf("  GPU<->GPU %s per direction, latency %s\n",
              m.gpu_to_gpu_Bps > 0 ? si(m.gpu_to_gpu_Bps, "B/s").c_str() : "through the host",
              us(m.gpu_to_gpu_latency_s).c_str());
  std::printf("  GPU peaks: bf16 %s, fp32 %s, HBM %s\n", si(m.gpu_bf16_flops, "FLOP/s").c_str(),
              si(m.gpu_fp32_flops, "FLOP/s").c_str(), si(m.gpu_memory_Bps, "B/s").c_str());
  std::printf("  CPU: fp32 %s per core, host memory %s\n", si(m.cpu_core_flops, "FLOP/s").c_str(),
              si(m.host_memory_Bps, "B/s").c_str());
  std::printf("  disk (DISK0): read %s, write %s, latency %s\n", si(m.disk_read_Bps, "B/s").c_str(),
              si(m.disk_write_Bps, "B/s").c_str(), us(m.disk_latency_s).c_str());
  std::printf("  efficiency: GEMM %.2f, elementwise %.2f, kernel launch %s\n", m.gemm_efficiency,
              m.elementwise_efficiency, us(m.kernel_launch_s).c_str());
}

int run_list(const cli::ArgParser& p, const cli::Positionals& args) {
  if (!args.words.empty())
    throw UsageError("--list takes no machine name, got '" + cli::printable(args.words[0]) + "'");
  for (const char* flag : {"out", "cpus", "gpus", "gpu-mem", "pcie", "nvlink", "name", "attention-calibration"})
    if (p.given(flag)) throw UsageError(std::string("--list takes no --") + flag);
  for (const std::string& name : sim::named_machines()) print_machine(*sim::named_machine(name));
  std::printf(
      "(sources: NVIDIA H200 and A100 80GB SXM data sheets, dense rates; PCIe as typical measured\n"
      " pinned copies; CPU, host memory, disk and latencies are assumptions; docs/sim.md)\n");
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_platform(const cli::ArgParser& p, const cli::Positionals& args) {
  if (p.flag_set("list")) return run_list(p, args);
  const std::string which =
      args.single("NAME (a named machine or custom)", "starzero platform (NAME | custom) --out DIR");
  std::optional<sim::MachineSpec> base;
  if (which == "custom") {
    base = sim::this_machine("custom");
  } else {
    base = sim::named_machine(which);
    if (!base) {
      std::string known;
      for (const std::string& name : sim::named_machines()) known += (known.empty() ? "" : ", ") + name;
      throw UsageError("unknown machine '" + cli::printable(which) + "' (known: " + known + ", or custom)");
    }
  }
  if (!p.given("out")) throw UsageError("--out DIR is required");
  const std::string out = *p.value("out");
  if (out.empty()) throw UsageError("--out: the folder name is empty");

  sim::MachineOverrides o;
  if (auto v = p.value("name")) o.name = *v;
  if (p.given("cpus")) o.cpus = cli::int_option(p, "cpus", 1, 1, sim::kMaxCpus);
  if (p.given("gpus")) o.gpus = cli::int_option(p, "gpus", 0, 0, sim::kMaxGpus);
  if (auto v = p.value("gpu-mem")) {
    o.gpu_memory_bytes = cli::parse_bytes("--gpu-mem", *v);
    if (!(*o.gpu_memory_bytes > 0)) throw UsageError("--gpu-mem: '" + cli::printable(*v) + "' must be > 0");
  }
  if (auto v = p.value("pcie")) {
    o.pcie_Bps = parse_rate("--pcie", *v);
    if (!(*o.pcie_Bps > 0)) throw UsageError("--pcie: '" + cli::printable(*v) + "' must be > 0");
  }
  if (auto v = p.value("nvlink")) o.gpu_to_gpu_Bps = parse_rate("--nvlink", *v);
  if (which == "custom" && o.gpus.value_or(0) > 0 && (!o.gpu_memory_bytes || !o.pcie_Bps))
    throw UsageError("custom with --gpus needs --gpu-mem and --pcie");
  sim::MachineSpec machine = sim::with_overrides(*base, o);
  if (auto v = p.value("attention-calibration")) {
    std::ifstream in(*v, std::ios::binary);
    if (!in) throw UsageError("--attention-calibration: cannot read '" + cli::printable(*v) + "'");
    std::stringstream text;
    text << in.rdbuf();
    try {
      machine.attention_rates = sim::attention_rates_from_calibration(text.str());
    } catch (const std::invalid_argument& e) {
      throw UsageError("--attention-calibration " + cli::printable(*v) + ": " + e.what());
    }
  }

  const std::vector<std::filesystem::path> files = sim::write_platform(machine, out);
  const std::filesystem::path dir = std::filesystem::absolute(out);
  std::printf("platform '%s': %d CPU cores, %d GPUs", machine.name.c_str(), machine.cpus, machine.gpus);
  if (machine.gpus > 0)
    std::printf(" of %s, PCIe %s, GPU<->GPU %s", si(machine.gpu_memory_bytes, "B").c_str(),
                si(machine.host_to_gpu_Bps, "B/s").c_str(),
                machine.gpu_to_gpu_Bps > 0 && machine.gpus > 1 ? si(machine.gpu_to_gpu_Bps, "B/s").c_str()
                                                               : "through the host");
  std::printf("\n");
  if (!machine.attention_rates.empty())
    std::printf("attention: %zu rates measured on the GPU replace the published and counted ones (docs/sim.md)\n",
                machine.attention_rates.size());
  for (const std::filesystem::path& f : files) std::printf("wrote %s\n", f.c_str());
  std::printf("simulate it with:\n  export STARPU_PERF_MODEL_DIR=%s\n  export STARPU_HOSTNAME=%s\n", dir.c_str(),
              machine.name.c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int platform_main(int argc, char** argv) {
  cli::ArgParser parser = make_parser();
  // NAME is the one argument that is neither a flag nor the value of one.
  cli::Positionals args =
      cli::split_positionals(argc, argv, {"--out", "--cpus", "--gpus", "--gpu-mem", "--pcie", "--nvlink", "--name",
                                          "--attention-calibration"});
  return run_command(kHelp, parser, int(args.flags.size()), args.flags.data(),
                     [&](const cli::ArgParser& p) { return run_platform(p, args); });
}

}  // namespace starzero
