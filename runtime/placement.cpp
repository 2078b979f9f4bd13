#include "runtime/placement.hpp"

#include <starpu.h>

#include <atomic>

namespace starzero {

namespace {
// Written by the Session's constructor and destructor, read by every submitting thread.
std::atomic<std::uint32_t> model_where{0};
}  // namespace

std::optional<CpuCompute> parse_cpu_compute(std::string_view text) {
  if (text == "off") return CpuCompute::off;
  if (text == "on") return CpuCompute::on;
  return std::nullopt;
}

std::uint32_t model_task_where(CpuCompute cpu_compute, int cuda_workers) {
  return cuda_workers > 0 && cpu_compute == CpuCompute::off ? STARPU_CUDA : 0;
}

std::uint32_t session_model_where() { return model_where.load(std::memory_order_relaxed); }
void set_session_model_where(std::uint32_t where) { model_where.store(where, std::memory_order_relaxed); }

}  // namespace starzero
