#include "offload/placement.hpp"

#include <stdexcept>
#include <string>

namespace starzero {

namespace {

void check_fraction(const OffloadFraction& f, const char* flag) {
  if (!f.automatic && !(f.value >= 0 && f.value <= 1))
    throw std::invalid_argument(std::string(flag) + " must be in [0, 1] or auto");
}

}  // namespace

void validate(const OffloadOptions& o) {
  if (o.optimizer == OptimizerOffload::nvme && o.nvme_path.empty())
    throw std::invalid_argument("--offload-optimizer nvme needs --nvme-path DIR");
  if (o.optimizer != OptimizerOffload::nvme && !o.nvme_path.empty())
    throw std::invalid_argument("--nvme-path is only for --offload-optimizer nvme");
  validate_placement(o);
}

void validate_placement(const OffloadOptions& o) {
  check_fraction(o.optimizer_fraction, "--offload-optimizer-fraction");
  if (!o.optimizer_offloaded() && (o.optimizer_fraction.automatic || o.optimizer_fraction.value != 1))
    throw std::invalid_argument(
        "--offload-optimizer-fraction is for --offload-optimizer cpu|nvme (the share of the state offloaded)");
  if (o.adam_threads && !o.optimizer_offloaded())
    throw std::invalid_argument(
        "--adam-threads is for --offload-optimizer cpu|nvme (on the device AdamW is a GPU kernel)");
  if (o.adam_threads && *o.adam_threads < 1)
    throw std::invalid_argument("CPU Adam threads must be >= 1, got " + std::to_string(*o.adam_threads));
  check_fraction(o.speculative_fraction, "--speculative-fraction");
  if (!o.speculative_update && (o.speculative_fraction.automatic || o.speculative_fraction.value != 1))
    throw std::invalid_argument(
        "--speculative-fraction is for --speculative-update (the share of the CPU AdamW run speculatively)");
  if (!o.speculative_update) return;
  if (o.optimizer != OptimizerOffload::cpu)
    throw std::invalid_argument(
        "--speculative-update is for the CPU AdamW in host memory: it needs --offload-optimizer cpu");
  if (o.delayed_update_warmup >= 0)
    throw std::invalid_argument("--speculative-update and --delayed-update cannot be combined: pick one");
}

}  // namespace starzero
