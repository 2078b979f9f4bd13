#include "runtime/simulation.hpp"

#include <algorithm>
#include <chrono>

namespace starzero::simulation {

namespace {
Roofline& figures() {
  static Roofline r;
  return r;
}
}  // namespace

void set_roofline(const Roofline& r) { figures() = r; }

namespace {
std::string& description() {
  static std::string line;
  return line;
}
}  // namespace

void set_machine_description(std::string line) { description() = std::move(line); }
const std::string& machine_description() { return description(); }
const Roofline& roofline() { return figures(); }

double roofline_us(const starpu_perfmodel_arch* arch, double flops, double bytes, std::size_t element_size) {
  const Roofline& r = figures();
  const bool gpu = arch && arch->ndevices > 0 && arch->devices[0].type == STARPU_CUDA_WORKER;
  const double peak = gpu ? (element_size == 2 ? r.gpu_bf16_flops : r.gpu_fp32_flops) : r.cpu_core_flops;
  const double bandwidth = gpu ? r.gpu_memory_Bps : r.cpu_core_memory_Bps;
  double seconds = 0;
  if (flops > 0 && peak > 0) seconds = std::max(seconds, flops / (peak * r.gemm_efficiency));
  if (bytes > 0 && bandwidth > 0) seconds = std::max(seconds, bytes / (bandwidth * r.elementwise_efficiency));
  if (gpu) seconds += r.kernel_launch_s;
  return seconds * 1e6;
}

double now_seconds() {
  if constexpr (enabled) return starpu_timing_now() * 1e-6;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace starzero::simulation
