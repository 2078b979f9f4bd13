#include "offload/host_plan.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <system_error>

#include "runtime/host_memory.hpp"
#include "runtime/sim.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

constexpr double kMiB = 1048576.0;

// A path fit for a one-line message: control characters replaced, at most 80 characters.
std::string printable(const fs::path& path) {
  const std::string text = path.string();
  std::string out;
  for (char c : text.substr(0, 80)) out += std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c;
  if (text.size() > 80) out += "...";
  return out;
}

// The offload options come checked (check_engine_options, by the run): what is left is the
// machine's side.
void validate(const HostPlanInput& in, const Topology& topology) {
  if (in.ranks_here < 1) throw std::invalid_argument("ranks on this machine must be >= 1");
  if (in.gpu >= int(topology.gpus.size()))
    throw std::invalid_argument("GPU " + std::to_string(in.gpu) + " is not in the topology (" +
                                std::to_string(topology.gpus.size()) + " GPUs)");
  if (in.offload.adam_threads && *in.offload.adam_threads < 1)
    throw std::logic_error("the host plan: unchecked offload options (CPU AdamW threads < 1)");
}

// The plan's host bytes must fit into what this machine has free, for every rank on it. Not in
// simulation: the host memory is the simulated machine's, and its buffers are folded
// (allocate_host), so they take address space here, not memory.
void check_host_memory(const HostPlanInput& in) {
  if constexpr (!sim::host_is_this_machine) return;
  const bool nvme = in.offload.optimizer == OptimizerOffload::nvme;
  const double host_needed =
      nvme ? in.memory.host_total() + double(in.offload.host_mem_limit_mib) * kMiB : in.memory.host_total();
  const double available = double(available_host_memory_bytes());
  if (host_needed * in.ranks_here > available)
    throw std::invalid_argument("too little host memory for this offload plan: " + std::to_string(in.ranks_here) +
                                " rank(s) on this machine need " + format_bytes(host_needed) + " each, " +
                                format_bytes(available) + " is available (MemAvailable); use more ranks, " +
                                (nvme ? "a smaller --host-mem-limit" : "--offload-optimizer nvme") +
                                (in.offload.speculative_update
                                     ? ", --speculative-fraction auto or no --speculative-update (it doubles "
                                       "the optimizer state)"
                                     : "") +
                                ", or a smaller model");
}

// The disk node holds the optimizer state plus room for what StarPU evicts; the path must exist
// (it is created) and hold every rank's optimizer state.
std::size_t plan_disk(const HostPlanInput& in) {
  const double nvme_needed = in.memory.nvme_total();
  const std::size_t disk_bytes =
      std::size_t(nvme_needed) + in.offload.host_mem_limit_mib * std::size_t(kMiB) + (std::size_t(64) << 20);
  std::error_code ec;
  fs::create_directories(in.offload.nvme_path, ec);
  if (ec)
    throw std::invalid_argument("--nvme-path: cannot create '" + printable(in.offload.nvme_path) +
                                "': " + ec.message());
  const auto space = fs::space(in.offload.nvme_path, ec);
  if (ec)
    throw std::invalid_argument("--nvme-path: cannot query '" + printable(in.offload.nvme_path) + "': " + ec.message());
  if (double(space.available) < nvme_needed * in.ranks_here)
    throw std::invalid_argument("--nvme-path: " + format_bytes(double(space.available)) +
                                " free, the optimizer state of " + std::to_string(in.ranks_here) + " rank(s) needs " +
                                format_bytes(nvme_needed * in.ranks_here));
  return disk_bytes;
}

}  // namespace

HostPlan plan_host(const HostPlanInput& in, const Topology& topology) {
  validate(in, topology);
  HostPlan plan;
  plan.cpu_workers = in.cpu_workers;
  if (!in.offload.anything_offloaded()) return plan;
  if (in.gpu >= 0) plan.numa_node = topology.gpus[std::size_t(in.gpu)].numa_node;  // nearest to this rank's GPU
  const int cores = std::max(1, topology.cores / in.ranks_here);
  const bool gpu = in.gpu >= 0;
  if (in.offload.optimizer_offloaded())
    plan.adam_threads = in.offload.adam_threads.value_or(default_adam_threads(cores, gpu));
  if (plan.cpu_workers < 0) plan.cpu_workers = default_cpu_workers(cores, gpu, plan.adam_threads);
  check_host_memory(in);
  if (in.offload.optimizer == OptimizerOffload::nvme) plan.disk_bytes = plan_disk(in);
  return plan;
}

int default_adam_threads(int cores_per_rank, bool gpu) {
  // With a GPU, the cores its worker leaves minus one CPU worker for collectives and small tasks;
  // without one the compute needs the cores: 1 thread.
  return gpu ? std::max(1, cores_per_rank - 2) : 1;
}

int default_cpu_workers(int cores_per_rank, bool gpu, int adam_threads) {
  // The workers leave the GPU's driver core and the AdamW's extra threads their cores.
  return std::max(1, cores_per_rank - (gpu ? 1 : 0) - (adam_threads - 1));
}

}  // namespace starzero
