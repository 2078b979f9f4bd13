#include "offload/engine_options.hpp"

#include <stdexcept>
#include <string>

namespace starzero {

void check_zero_options(std::int64_t stage, std::int64_t prefetch_depth, std::int64_t grad_window) {
  if (stage < 0 || stage > 3)
    throw std::invalid_argument("--stage " + std::to_string(stage) + " is not a ZeRO stage (0..3)");
  if (prefetch_depth < 0)
    throw std::invalid_argument("--prefetch-depth must be >= 0, got " + std::to_string(prefetch_depth));
  if (grad_window < 1) throw std::invalid_argument("--grad-window must be >= 1, got " + std::to_string(grad_window));
}

void check_param_offload_stage(const OffloadOptions& offload, int stage, std::int64_t ranks) {
  if (offload.params != ParamOffload::none && stage != 3 && ranks > 1)
    throw std::invalid_argument(
        "--offload-params cpu needs --stage 3 with several ranks (stages 0-2 keep full parameters on the device)");
}

void check_engine_options(const EngineOptions& options, int ranks) {
  validate(options.offload);
  check_zero_options(options.zero);
  check_param_offload_stage(options.offload, options.zero.stage, ranks);
  if (options.offload.speculative_update && options.grad_clip <= 0)
    throw std::invalid_argument(
        "--speculative-update needs clipping (--grad-clip > 0): without it every AdamW already starts as soon as its "
        "own gradient is reduced");
}

}  // namespace starzero
