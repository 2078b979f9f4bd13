#include "sim/platform.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <type_traits>

namespace starzero::sim {
namespace {

// ---- the named machines -----------------------------------------------------------------------
// GPU figures: NVIDIA H200 Tensor Core GPU data sheet (H200 SXM column) and NVIDIA A100 Tensor
// Core GPU data sheet (A100 80GB SXM column). The data sheets give tensor-core rates "with
// sparsity"; the dense rate is half of it. PCIe copy rates are typical measured pinned-memory
// cudaMemcpy figures (bandwidthTest / nvbandwidth), below the link's raw rate. CPU, host memory,
// disk figures and latencies are assumptions, stated at each machine.

MachineSpec h200(std::string name, int gpus) {
  MachineSpec m;
  m.name = std::move(name);
  m.gpus = gpus;
  m.gpu_memory_bytes = 141e9;  // data sheet: 141 GB HBM3e
  m.gpu_memory_Bps = 4.8e12;   // data sheet: 4.8 TB/s
  m.gpu_bf16_flops = 989e12;   // data sheet: BF16 Tensor Core 1,979 TFLOPS with sparsity, 989 dense
  // data sheet: FP32 67 TFLOPS on the CUDA cores. The fp32 kernels do not use TF32 tensor cores
  // (494 TFLOPS dense), so the CUDA-core figure is the one they can reach.
  m.gpu_fp32_flops = 67e12;
  // H100/H200 SXM5: 132 SMs at a 1.98 GHz boost clock (NVIDIA's Hopper architecture whitepaper
  // and the H100 SXM5 specifications); 132 x 128 FP32 lanes x 2 x 1.98e9 = 66.9 TFLOP/s.
  m.gpu_sm_count = 132;
  m.gpu_clock_hz = 1.98e9;
  // PCIe Gen5 x16: 64 GB/s per direction raw (data sheet: 128 GB/s both ways); pinned copies
  // measure about 55 GB/s each way.
  m.host_to_gpu_Bps = 55e9;
  m.gpu_to_host_Bps = 55e9;
  m.pcie_latency_s = 10e-6;  // assumption: one small cudaMemcpyAsync, launch to completion
  // NVLink 4 through NVSwitch: data sheet 900 GB/s per GPU, both directions together.
  m.gpu_to_gpu_Bps = 450e9;
  m.gpu_to_gpu_latency_s = 5e-6;  // assumption: one small peer copy
  // Assumption: Sapphire Rapids-class cores, two 512-bit FMA units at 2.0 GHz:
  // 2 units x 16 fp32 lanes x 2 flops x 2.0e9 = 128 GFLOP/s per core, peak.
  m.cpu_core_flops = 128e9;
  // Assumption: one PCIe Gen4 NVMe SSD (enterprise U.2 class), sustained sequential rates.
  m.disk_read_Bps = 6.5e9;
  m.disk_write_Bps = 3.5e9;
  m.disk_latency_s = 100e-6;
  return m;
}

MachineSpec h200x1() {
  MachineSpec m = h200("h200x1", 1);
  m.cpus = 64;  // assumption: a 64-core host for one GPU (StarPU's limit, kMaxCpus)
  // Assumption: one socket, 8 channels of DDR5-4800 (8 x 38.4 GB/s).
  m.host_memory_Bps = 307.2e9;
  return m;
}

MachineSpec h200x8() {
  MachineSpec m = h200("h200x8", 8);
  // A DGX H200 has 112 cores (2x Xeon Platinum 8480C, 56 each); StarPU built with
  // --enable-maxcpus=64 drives at most 64, so the platform has 64 (56 CPU workers + 8 GPU drivers).
  m.cpus = 64;
  // Two sockets, 8 channels of DDR5-4800 each (16 x 38.4 GB/s).
  m.host_memory_Bps = 614.4e9;
  return m;
}

MachineSpec a100x1() {
  MachineSpec m;
  m.name = "a100x1";
  m.cpus = 32;  // assumption: a 32-core host for one GPU
  m.gpus = 1;
  m.gpu_memory_bytes = 80e9;    // data sheet: 80 GB HBM2e
  m.gpu_memory_Bps = 2.039e12;  // data sheet: 2,039 GB/s (A100 80GB SXM)
  m.gpu_bf16_flops = 312e12;    // data sheet: BF16 Tensor Core 312 TFLOPS dense (624 with sparsity)
  m.gpu_fp32_flops = 19.5e12;   // data sheet: FP32 19.5 TFLOPS (CUDA cores; TF32 not used)
  // A100: 108 SMs at 1.41 GHz (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
  m.gpu_sm_count = 108;
  m.gpu_clock_hz = 1.41e9;
  // PCIe Gen4 x16: 32 GB/s per direction raw (data sheet: 64 GB/s both ways); pinned copies
  // measure about 25 GB/s each way.
  m.host_to_gpu_Bps = 25e9;
  m.gpu_to_host_Bps = 25e9;
  m.pcie_latency_s = 10e-6;  // assumption, as for the H200
  // NVLink 3: data sheet 600 GB/s per GPU both directions together (used with --gpus > 1).
  m.gpu_to_gpu_Bps = 300e9;
  m.gpu_to_gpu_latency_s = 5e-6;  // assumption
  // Assumption: EPYC 7742-class (Zen 2) cores, two 256-bit FMA units at 2.25 GHz:
  // 2 x 8 x 2 x 2.25e9 = 72 GFLOP/s per core, peak.
  m.cpu_core_flops = 72e9;
  m.host_memory_Bps = 204.8e9;  // assumption: 8 channels of DDR4-3200 (8 x 25.6 GB/s)
  m.disk_read_Bps = 6.5e9;      // assumption: as for the H200 machines
  m.disk_write_Bps = 3.5e9;
  m.disk_latency_s = 100e-6;
  return m;
}

// ---- checks ------------------------------------------------------------------------------------

bool name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

std::string number_text(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

void require_positive(const char* field, double value) {
  if (!(value > 0) || !std::isfinite(value))
    throw std::invalid_argument(std::string("machine ") + field + " must be > 0, got " + number_text(value));
}

void require_non_negative(const char* field, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    throw std::invalid_argument(std::string("machine ") + field + " must be >= 0, got " + number_text(value));
}

// ---- formatting --------------------------------------------------------------------------------

std::string fixed(double x, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, x);
  return text;
}

// StarPU writes the matrices with "%e"; "nan" pads the nodes a machine does not have.
std::string matrix_value(double x) {
  if (std::isnan(x)) return "nan";
  char text[64];
  std::snprintf(text, sizeof text, "%e", x);
  return text;
}

std::string bps(double x) { return fixed(x, 0) + "Bps"; }
std::string seconds(double x) { return fixed(x, 9) + "s"; }

std::string cuda(int i) { return "CUDA" + std::to_string(i); }

// Memory nodes in StarPU's order in a simulation without OpenCL: 0 = RAM, 1 + i = CUDAi.
// Link figures along the route from node `src` to node `dst` (src != dst): the bottleneck
// bandwidth (Bps) and the summed latency (s), as the platform file routes them.
struct Hop {
  double bandwidth;
  double latency;
};

Hop host_to_gpu(const MachineSpec& m) { return {std::min(m.host_to_gpu_Bps, m.host_memory_Bps), m.pcie_latency_s}; }
Hop gpu_to_host(const MachineSpec& m) { return {std::min(m.gpu_to_host_Bps, m.host_memory_Bps), m.pcie_latency_s}; }

// The matrices hold what StarPU's own calibration would: a direct route's bottleneck bandwidth
// and latency; between GPUs without peer copies, the two hops through RAM one after the other
// (harmonic sum of the bandwidths, sum of the latencies).
Hop node_to_node(const MachineSpec& m, int src, int dst) {
  if (src == 0) return host_to_gpu(m);
  if (dst == 0) return gpu_to_host(m);
  if (m.gpu_to_gpu_Bps > 0) return {m.gpu_to_gpu_Bps, m.gpu_to_gpu_latency_s};
  const Hop down = gpu_to_host(m), up = host_to_gpu(m);
  return {1.0 / (1.0 / down.bandwidth + 1.0 / up.bandwidth), down.latency + up.latency};
}

template <typename Value>
std::string matrix(const MachineSpec& m, Value value) {
  std::string out = "# ";
  for (int dst = 0; dst < kStarpuMaxNodes; ++dst) out += "to " + std::to_string(dst) + "\t\t";
  out += "\n";
  const int nodes = 1 + m.gpus;
  for (int src = 0; src < kStarpuMaxNodes; ++src) {
    for (int dst = 0; dst < kStarpuMaxNodes; ++dst) {
      double x = NAN;
      if (src < nodes && dst < nodes) x = src == dst ? 0.0 : value(node_to_node(m, src, dst));
      if (dst > 0) out += '\t';
      out += matrix_value(x);
    }
    out += '\n';
  }
  return out;
}

void write_file(const std::filesystem::path& path, const std::string& content) {
  const std::filesystem::path temp =
      path.parent_path() / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create " + temp.string());
    out << content;
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      throw std::runtime_error("cannot write " + temp.string());
    }
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw std::filesystem::filesystem_error("cannot rename into place", temp, path, error);
  }
}

}  // namespace

std::optional<MachineSpec> named_machine(std::string_view name) {
  if (name == "h200x1") return h200x1();
  if (name == "h200x8") return h200x8();
  if (name == "a100x1") return a100x1();
  return std::nullopt;
}

std::vector<std::string> named_machines() { return {"h200x1", "h200x8", "a100x1"}; }

MachineSpec this_machine(std::string name) {
  MachineSpec m;
  m.name = std::move(name);
  long cores = long(std::thread::hardware_concurrency());
  if (cores <= 0) cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  m.cpus = int(std::clamp(cores, 1L, long(kMaxCpus)));
  m.gpus = 0;
  // For GPUs a user adds: the named machines' latencies; no NVLink unless given.
  m.pcie_latency_s = 10e-6;
  m.gpu_to_gpu_latency_s = 5e-6;
  // Assumptions until calibrated: an AVX2 core (2 x 8 x 2 x 2.0e9), dual-channel-class memory,
  // a PCIe Gen4 NVMe SSD.
  m.cpu_core_flops = 64e9;
  m.host_memory_Bps = 50e9;
  m.disk_read_Bps = 6.5e9;
  m.disk_write_Bps = 3.5e9;
  m.disk_latency_s = 100e-6;
  return m;
}

MachineSpec with_overrides(MachineSpec m, const MachineOverrides& o) {
  if (o.name) m.name = *o.name;
  if (o.cpus) m.cpus = *o.cpus;
  if (o.gpus) m.gpus = *o.gpus;
  if (o.gpu_memory_bytes) m.gpu_memory_bytes = *o.gpu_memory_bytes;
  if (o.pcie_Bps) m.host_to_gpu_Bps = m.gpu_to_host_Bps = *o.pcie_Bps;
  if (o.pcie_latency_s) m.pcie_latency_s = *o.pcie_latency_s;
  if (o.gpu_to_gpu_Bps) m.gpu_to_gpu_Bps = *o.gpu_to_gpu_Bps;
  if (o.gpu_to_gpu_latency_s) m.gpu_to_gpu_latency_s = *o.gpu_to_gpu_latency_s;
  return m;
}

void validate(const MachineSpec& m) {
  if (m.name.empty()) throw std::invalid_argument("machine name is empty");
  if (m.name.size() > kMaxNameLength)
    throw std::invalid_argument("machine name '" + m.name.substr(0, 20) + "...' is longer than " +
                                std::to_string(kMaxNameLength) + " characters");
  for (char c : m.name)
    if (!name_char(c))
      throw std::invalid_argument("machine name may hold only A-Z a-z 0-9 _ . - (got a '" +
                                  std::string(1, std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c) + "')");
  if (m.name.front() == '.' || m.name.front() == '-')
    throw std::invalid_argument("machine name must start with a letter or digit, got '" + m.name + "'");
  if (m.cpus < 1 || m.cpus > kMaxCpus)
    throw std::invalid_argument("machine cpus must be 1.." + std::to_string(kMaxCpus) + " (StarPU's limit), got " +
                                std::to_string(m.cpus));
  if (m.gpus < 0 || m.gpus > kMaxGpus)
    throw std::invalid_argument("machine gpus must be 0.." + std::to_string(kMaxGpus) + " (StarPU's limit), got " +
                                std::to_string(m.gpus));
  require_positive("host memory bandwidth", m.host_memory_Bps);
  require_positive("disk read bandwidth", m.disk_read_Bps);
  require_positive("disk write bandwidth", m.disk_write_Bps);
  require_non_negative("disk latency", m.disk_latency_s);
  if (m.gpus > 0) {
    require_positive("GPU memory", m.gpu_memory_bytes);
    require_positive("host-to-GPU bandwidth", m.host_to_gpu_Bps);
    require_positive("GPU-to-host bandwidth", m.gpu_to_host_Bps);
    require_non_negative("PCIe latency", m.pcie_latency_s);
    require_non_negative("GPU-to-GPU bandwidth", m.gpu_to_gpu_Bps);
    require_non_negative("GPU-to-GPU latency", m.gpu_to_gpu_latency_s);
    if (m.gpu_memory_bytes >= 9.2e18) throw std::invalid_argument("machine GPU memory is out of range");
  }
  for (const auto& [policy, overhead] : m.cpu_task_overhead) {
    if (policy.empty() || !std::all_of(policy.begin(), policy.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        }))
      throw std::invalid_argument("task overhead: a policy name may hold only A-Z a-z 0-9 _ -");
    require_non_negative(("task overhead of " + policy).c_str(), overhead.us_per_task);
    require_non_negative(("wake-up latency of " + policy).c_str(), overhead.wake_us);
    require_non_negative(("task count of the overhead of " + policy).c_str(), overhead.tasks);
    // Bounds that keep the task-weighted means finite (add_task_overhead).
    if (overhead.us_per_task > 1e9 || overhead.wake_us > 1e9 || overhead.tasks > 1e15)
      throw std::invalid_argument("machine task overhead of " + policy +
                                  " is out of range (at most 1e9 us per task and wake-up, 1e15 tasks)");
  }
}

namespace {

// Two measurements as one: their means weighted by their task counts.
TaskOverheadRecord merged(const TaskOverheadRecord& a, const TaskOverheadRecord& b) {
  const double tasks = a.tasks + b.tasks;
  return {(a.us_per_task * a.tasks + b.us_per_task * b.tasks) / tasks,
          (a.wake_us * a.tasks + b.wake_us * b.tasks) / tasks, tasks};
}

}  // namespace

void add_task_overhead(MachineSpec& m, const std::string& policy, const TaskOverheadRecord& measured) {
  if (!(measured.tasks > 0)) return;
  TaskOverheadRecord& held = m.cpu_task_overhead[policy];
  held = merged(held, measured);
}

std::map<std::string, TaskOverheadRecord> task_overheads_to_charge(const MachineSpec& m) {
  std::map<std::string, TaskOverheadRecord> charged = m.cpu_task_overhead;
  TaskOverheadRecord mean;
  for (const auto& [policy, overhead] : m.cpu_task_overhead)
    if (overhead.tasks > 0) mean = merged(mean, overhead);
  if (mean.tasks > 0) charged[""] = mean;
  return charged;
}

namespace {

// The SimGrid hosts: the main thread, one per CPU core and GPU (its memory), RAM and the disk.
void add_platform_hosts(const MachineSpec& m, bool nvlink, std::string& x) {
  // Host speeds do not matter: StarPU runs a task for (its predicted us) x speed flops.
  x += "   <host id=\"MAIN\" speed=\"1f\"/>\n";
  for (int i = 0; i < m.cpus; ++i) x += "   <host id=\"CPU" + std::to_string(i) + "\" speed=\"2000000000f\"/>\n";
  for (int i = 0; i < m.gpus; ++i) {
    x += "   <host id=\"" + cuda(i) + "\" speed=\"2000000000f\">\n";
    x += "     <prop id=\"memsize\" value=\"" + fixed(std::floor(m.gpu_memory_bytes), 0) + "\"/>\n";
    x += "     <prop id=\"memcpy_peer\" value=\"" + std::string(nvlink ? "1" : "0") + "\"/>\n";
    x += "   </host>\n";
  }
  x += "   <host id=\"RAM\" speed=\"1f\"/>\n";
  x += "   <host id=\"DISK0\" speed=\"1f\"/>\n\n";
}

// The links: host memory, PCIe per GPU and direction, NVLink through the NVSwitch, the disk.
void add_platform_links(const MachineSpec& m, bool nvlink, std::string& x) {
  // Every PCIe copy also crosses host memory, shared by all of them.
  x += "   <link id=\"Host\" bandwidth=\"" + bps(m.host_memory_Bps) + "\" latency=\"" + seconds(0) + "\"/>\n";
  for (int i = 0; i < m.gpus; ++i) {
    x += "   <link id=\"RAM-" + cuda(i) + "\" bandwidth=\"" + bps(m.host_to_gpu_Bps) + "\" latency=\"" +
         seconds(m.pcie_latency_s) + "\"/>\n";
    x += "   <link id=\"" + cuda(i) + "-RAM\" bandwidth=\"" + bps(m.gpu_to_host_Bps) + "\" latency=\"" +
         seconds(m.pcie_latency_s) + "\"/>\n";
  }
  if (nvlink) {
    // Each GPU's NVLink ports, per direction: all its peer copies share them (NVSwitch), and a
    // link per ordered pair carries the latency.
    for (int i = 0; i < m.gpus; ++i) {
      x += "   <link id=\"" + cuda(i) + "-NVSwitch\" bandwidth=\"" + bps(m.gpu_to_gpu_Bps) + "\" latency=\"" +
           seconds(0) + "\"/>\n";
      x += "   <link id=\"NVSwitch-" + cuda(i) + "\" bandwidth=\"" + bps(m.gpu_to_gpu_Bps) + "\" latency=\"" +
           seconds(0) + "\"/>\n";
    }
    for (int i = 0; i < m.gpus; ++i)
      for (int j = 0; j < m.gpus; ++j)
        if (i != j)
          x += "   <link id=\"" + cuda(i) + "-" + cuda(j) + "\" bandwidth=\"" + bps(m.gpu_to_gpu_Bps) +
               "\" latency=\"" + seconds(m.gpu_to_gpu_latency_s) + "\"/>\n";
  }
  x += "   <link id=\"RAM-DISK0\" bandwidth=\"" + bps(m.disk_write_Bps) + "\" latency=\"" + seconds(m.disk_latency_s) +
       "\"/>\n";
  x += "   <link id=\"DISK0-RAM\" bandwidth=\"" + bps(m.disk_read_Bps) + "\" latency=\"" + seconds(m.disk_latency_s) +
       "\"/>\n\n";

}

// The routes over those links between RAM, the GPUs and the disk.
void add_platform_routes(const MachineSpec& m, bool nvlink, std::string& x) {
  const auto route = [&x](const std::string& src, const std::string& dst, std::initializer_list<std::string> links) {
    x += "   <route src=\"" + src + "\" dst=\"" + dst + "\" symmetrical=\"NO\">";
    for (const std::string& link : links) x += "<link_ctn id=\"" + link + "\"/>";
    x += "</route>\n";
  };
  for (int i = 0; i < m.gpus; ++i) {
    route("RAM", cuda(i), {"RAM-" + cuda(i), "Host"});
    route(cuda(i), "RAM", {cuda(i) + "-RAM", "Host"});
  }
  for (int i = 0; i < m.gpus; ++i)
    for (int j = 0; j < m.gpus; ++j) {
      if (i == j) continue;
      if (nvlink)
        route(cuda(i), cuda(j), {cuda(i) + "-" + cuda(j), cuda(i) + "-NVSwitch", "NVSwitch-" + cuda(j)});
      else
        route(cuda(i), cuda(j), {cuda(i) + "-RAM", "Host", "RAM-" + cuda(j)});
    }
  route("RAM", "DISK0", {"RAM-DISK0", "Host"});
  route("DISK0", "RAM", {"DISK0-RAM", "Host"});
}

}  // namespace

std::string platform_xml(const MachineSpec& m) {
  validate(m);
  const bool nvlink = m.gpus > 1 && m.gpu_to_gpu_Bps > 0;
  std::string x;
  x += "<?xml version='1.0'?>\n";
  x += "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n";
  x += "<!-- starzero platform '" + m.name + "': " + std::to_string(m.cpus) + " CPU cores, " + std::to_string(m.gpus) +
       " GPUs (sim/platform.cpp, docs/sim.md) -->\n";
  x += "<platform version=\"4.1\">\n";
  // StarPU's own platform files turn SimGrid's TCP corrections off: a transfer takes latency +
  // size / bandwidth on an idle route.
  x += " <config id=\"General\">\n";
  x += "   <prop id=\"network/TCP-gamma\" value=\"-1\"></prop>\n";
  x += "   <prop id=\"network/latency-factor\" value=\"1\"></prop>\n";
  x += "   <prop id=\"network/bandwidth-factor\" value=\"1\"></prop>\n";
  x += "   <prop id=\"network/weight-S\" value=\"0.0\"></prop>\n";
  x += "   <prop id=\"network/crosstraffic\" value=\"0\"></prop>\n";
  x += " </config>\n";
  x += " <zone id=\"AS0\" routing=\"Full\">\n";
  add_platform_hosts(m, nvlink, x);
  add_platform_links(m, nvlink, x);
  add_platform_routes(m, nvlink, x);
  x += " </zone>\n";
  x += "</platform>\n";
  return x;
}


std::string bandwidth_matrix(const MachineSpec& m) {
  validate(m);
  return matrix(m, [](Hop h) { return h.bandwidth / 1e6; });
}

std::string latency_matrix(const MachineSpec& m) {
  validate(m);
  return matrix(m, [](Hop h) { return h.latency * 1e6; });
}

std::string config_file(const MachineSpec& m) {
  validate(m);
  std::string out = "# Current configuration\n";
  out += std::to_string(m.cpus) + " # Number of CPUs\n";
  out += "1 # Number of NUMA nodes\n";
  out += std::to_string(m.gpus) + " # Number of CUDA devices\n";
  out += "0 # Number of OpenCL devices\n";
  out += "0 # Number of MIC devices\n";
  out += "0 # Number of MPI devices\n";
  return out;
}

std::string affinity_file(const MachineSpec& m) {
  validate(m);
  std::string out = "# GPU\tNUMA0\t\n";
  for (int i = 0; i < m.gpus; ++i) out += std::to_string(i) + "\t0\t\n";
  return out;
}

std::vector<std::filesystem::path> write_platform(const MachineSpec& m, const std::filesystem::path& dir) {
  validate(m);
  if (dir.empty()) throw std::invalid_argument("platform folder is empty");
  const std::filesystem::path bus = std::filesystem::absolute(dir) / "bus";
  // StarPU builds "<STARPU_PERF_MODEL_DIR>//bus/<name>.<kind>" in 256 characters.
  const std::size_t longest = std::filesystem::absolute(dir).string().size() + 6 + m.name.size() + 16;
  if (longest > 255)
    throw std::invalid_argument("platform folder path is too long for StarPU (" + std::to_string(longest) +
                                " characters with the file name, at most 255)");
  const std::pair<const char*, std::string> files[] = {
      {".platform.v4.xml", platform_xml(m)}, {".bandwidth", bandwidth_matrix(m)}, {".latency", latency_matrix(m)},
      {".config", config_file(m)},           {".affinity", affinity_file(m)},     {".machine.json", machine_json(m)},
  };
  std::filesystem::create_directories(bus);
  std::vector<std::filesystem::path> written;
  for (const auto& [suffix, content] : files) {
    const std::filesystem::path path = bus / (m.name + suffix);
    write_file(path, content);
    written.push_back(path);
  }
  return written;
}

namespace {

// Every field of MachineSpec, by its name in the JSON file.
template <class Visit>
void for_each_field(MachineSpec& m, Visit&& visit) {
  visit("cpus", m.cpus);
  visit("gpus", m.gpus);
  visit("gpu_memory_bytes", m.gpu_memory_bytes);
  visit("host_to_gpu_Bps", m.host_to_gpu_Bps);
  visit("gpu_to_host_Bps", m.gpu_to_host_Bps);
  visit("pcie_latency_s", m.pcie_latency_s);
  visit("gpu_to_gpu_Bps", m.gpu_to_gpu_Bps);
  visit("gpu_to_gpu_latency_s", m.gpu_to_gpu_latency_s);
  visit("gpu_bf16_flops", m.gpu_bf16_flops);
  visit("gpu_fp32_flops", m.gpu_fp32_flops);
  visit("gpu_memory_Bps", m.gpu_memory_Bps);
  visit("cpu_core_flops", m.cpu_core_flops);
  visit("host_memory_Bps", m.host_memory_Bps);
  visit("gemm_efficiency", m.gemm_efficiency);
  visit("elementwise_efficiency", m.elementwise_efficiency);
  visit("kernel_launch_s", m.kernel_launch_s);
  visit("disk_read_Bps", m.disk_read_Bps);
  visit("disk_write_Bps", m.disk_write_Bps);
  visit("disk_latency_s", m.disk_latency_s);
}

}  // namespace

std::string machine_json(const MachineSpec& machine) {
  MachineSpec m = machine;
  nlohmann::ordered_json j;
  j["name"] = m.name;
  for_each_field(m, [&](const char* key, auto& value) { j[key] = value; });
  j["gpu_sm_count"] = m.gpu_sm_count;
  j["gpu_clock_hz"] = m.gpu_clock_hz;
  if (!m.attention_rates.empty()) {
    nlohmann::ordered_json rates = nlohmann::ordered_json::array();
    for (const MeasuredAttentionRate& r : m.attention_rates)
      rates.push_back({{"kernel", r.kernel == GpuCostClass::cudnn_attention ? "cudnn" : "own"},
                       {"direction", r.backward ? "backward" : "forward"},
                       {"T", r.T},
                       {"hs", r.hs},
                       {"tflops", r.flops_per_s / 1e12}});
    j["attention_rates"] = rates;
  }
  if (!m.cpu_task_overhead.empty()) {
    nlohmann::ordered_json overheads = nlohmann::ordered_json::object();
    for (const auto& [policy, overhead] : m.cpu_task_overhead)
      overheads[policy] = {
          {"us_per_task", overhead.us_per_task}, {"wake_us", overhead.wake_us}, {"tasks", overhead.tasks}};
    j["cpu_task_overhead"] = overheads;
  }
  return j.dump(2) + "\n";
}

MachineSpec machine_from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("machine file is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("machine file: not a JSON object");
  MachineSpec m;
  if (!j.contains("name") || !j["name"].is_string()) throw std::invalid_argument("machine file: no \"name\" string");
  m.name = j["name"].get<std::string>();
  for_each_field(m, [&](const char* key, auto& value) {
    using T = std::remove_reference_t<decltype(value)>;
    if (!j.contains(key) || !j[key].is_number())
      throw std::invalid_argument(std::string("machine file: no number \"") + key + "\"");
    if constexpr (std::is_same_v<T, int>) {
      if (!j[key].is_number_integer() || j[key].get<double>() < -2147483648.0 || j[key].get<double>() > 2147483647.0)
        throw std::invalid_argument(std::string("machine file: \"") + key + "\" is not an integer of int range");
    }
    value = j[key].get<T>();
  });
  // Optional: a file written before the GPU's SM count and clock were recorded has none (0: derived
  // from the FP32 peak, runtime/gpu_cost.hpp).
  for (const auto& [key, value] : {std::pair{"gpu_sm_count", &m.gpu_sm_count}, std::pair{"gpu_clock_hz", &m.gpu_clock_hz}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>()) || j[key].get<double>() < 0)
      throw std::invalid_argument(std::string("machine file: \"") + key + "\" is not a number >= 0");
    *value = j[key].get<double>();
  }
  // Optional: attention rates measured on the GPU, as a calibration's entries.
  if (j.contains("attention_rates")) {
    if (!j["attention_rates"].is_array()) throw std::invalid_argument("machine file: \"attention_rates\" is not an array");
    m.attention_rates = attention_rates_from_calibration(nlohmann::json{{"entries", j["attention_rates"]}}.dump());
  }
  // Optional: a file written before the overhead was measured has none.
  if (j.contains("cpu_task_overhead")) {
    const nlohmann::json& overheads = j["cpu_task_overhead"];
    if (!overheads.is_object()) throw std::invalid_argument("machine file: \"cpu_task_overhead\" is not an object");
    for (const auto& [policy, overhead] : overheads.items()) {
      for (const char* key : {"us_per_task", "wake_us", "tasks"})
        if (!overhead.is_object() || !overhead.contains(key) || !overhead[key].is_number())
          throw std::invalid_argument("machine file: cpu_task_overhead \"" + policy + "\" has no number \"" + key +
                                      "\"");
      m.cpu_task_overhead[policy] = {overhead["us_per_task"].get<double>(), overhead["wake_us"].get<double>(),
                                     overhead["tasks"].get<double>()};
    }
  }
  validate(m);
  return m;
}

std::vector<MeasuredAttentionRate> attention_rates_from_calibration(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("attention calibration is not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array())
    throw std::invalid_argument("attention calibration: no \"entries\" array");
  std::vector<MeasuredAttentionRate> rates;
  for (const nlohmann::json& e : j["entries"]) {
    const std::string at = "attention calibration: entry " + std::to_string(rates.size() + 1);
    if (!e.is_object()) throw std::invalid_argument(at + " is not an object");
    const auto text_of = [&](const char* key) {
      if (!e.contains(key) || !e[key].is_string()) throw std::invalid_argument(at + " has no \"" + key + "\" string");
      return e[key].get<std::string>();
    };
    const auto positive = [&](const char* key) {
      if (!e.contains(key) || !e[key].is_number() || !(e[key].get<double>() > 0) || !std::isfinite(e[key].get<double>()))
        throw std::invalid_argument(at + " has no \"" + key + "\" number > 0");
      return e[key].get<double>();
    };
    MeasuredAttentionRate r;
    const std::string kernel = text_of("kernel"), direction = text_of("direction");
    if (kernel != "cudnn" && kernel != "own") throw std::invalid_argument(at + ": \"kernel\" must be cudnn or own");
    if (direction != "forward" && direction != "backward")
      throw std::invalid_argument(at + ": \"direction\" must be forward or backward");
    r.kernel = kernel == "cudnn" ? GpuCostClass::cudnn_attention : GpuCostClass::own_attention;
    r.backward = direction == "backward";
    r.T = positive("T");
    r.hs = positive("hs");
    r.flops_per_s = positive("tflops") * 1e12;
    rates.push_back(r);
  }
  return rates;
}

MachineSpec read_machine_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot open the machine file");
  std::stringstream text;
  text << in.rdbuf();  // an empty file leaves text empty: machine_from_json refuses it
  return machine_from_json(text.str());
}

namespace {
std::optional<MachineSpec>& sim_machine_slot() {
  static std::optional<MachineSpec> machine;
  return machine;
}
}  // namespace

void set_sim_machine(const MachineSpec& machine) { sim_machine_slot() = machine; }
const std::optional<MachineSpec>& sim_machine() { return sim_machine_slot(); }

MachineSpec machine_in_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "bus", ec)) {
    const std::string file = e.path().filename().string();
    if (file.size() > 13 && file.ends_with(".machine.json")) found.push_back(e.path());
  }
  if (ec)
    throw std::invalid_argument("'" + dir.string() +
                                "' has no bus/ folder (write one with `starzero platform NAME --out DIR`)");
  if (found.size() != 1)
    throw std::invalid_argument("'" + dir.string() + "/bus' holds " + std::to_string(found.size()) +
                                " machines (*.machine.json); give a folder with one");
  MachineSpec m;
  try {
    m = read_machine_file(found[0]);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(found[0].string() + ": " + e.what());
  }
  if (found[0].filename().string() != m.name + ".machine.json")
    throw std::invalid_argument(found[0].string() + " names machine '" + m.name + "'");
  if (!fs::exists(dir / "bus" / (m.name + ".platform.v4.xml")))
    throw std::invalid_argument("no " + (dir / "bus" / (m.name + ".platform.v4.xml")).string());
  return m;
}

MachineSpec named_or_folder_machine(const std::string& name_or_dir) {
  if (const std::optional<MachineSpec> named = named_machine(name_or_dir)) return *named;
  if (std::filesystem::is_directory(name_or_dir)) return machine_in_folder(name_or_dir);
  std::string names;
  for (const std::string& n : named_machines()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("'" + name_or_dir + "' is neither a machine (" + names + ") nor a folder");
}

}  // namespace starzero::sim
