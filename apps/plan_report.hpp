#pragma once
// The report of `starzero plan`: the planner's figures (offload/planner.hpp) for each requested
// data-parallel degree and stage, as the human tables or as JSON. apps/plan.cpp reads the flags
// into a PlanRequest; this file computes every row before anything is printed, so an error
// leaves stdout empty.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "offload/footprint.hpp"
#include "offload/planner.hpp"

namespace starzero {

struct GptArgs {
  std::int64_t layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0, batch = 0;
  ActivationPolicy activations;  // --recompute, --recompute-window
  // Vp: vocab padded to a multiple of 128, like llm.c (50257 -> 50304); too large ones stay.
  std::int64_t padded_vocab() const {
    return vocab > std::numeric_limits<std::int64_t>::max() - 127 ? vocab : (vocab + 127) / 128 * 128;
  }
};

struct PlanRequest {
  std::optional<GptArgs> gpt;  // its footprint is base.model
  PlanInput base;              // dp and stage are set per row
  std::vector<std::int64_t> dps;
  std::vector<int> stages;
  MemoryLimits limits;
  bool json = false;
};

// The whole report: tables and notes (human), or one JSON object.
std::string plan_report_text(const PlanRequest& request);
std::string plan_report_json(const PlanRequest& request);

}  // namespace starzero
