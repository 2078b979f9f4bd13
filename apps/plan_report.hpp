#pragma once
// The report of `starzero plan`: the planner's figures (offload/planner.hpp) for each requested
// data-parallel degree and stage, and with a machine their step bound (offload/step_work.hpp,
// sim/step_bound.hpp), as the human tables or as JSON. apps/plan.cpp reads the flags
// into a PlanRequest; this file computes every row before anything is printed, so an error
// leaves stdout empty.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "offload/footprint.hpp"
#include "offload/planner.hpp"
#include "sim/platform.hpp"

namespace starzero {

struct GptArgs {
  std::string preset;  // the --preset that gave the shape; empty: the shape flags did
  std::int64_t layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0, batch = 0;
  ActivationPolicy activations;  // --recompute, --recompute-window
  // Vp: vocab padded to a multiple of 128, like llm.c (50257 -> 50304); too large ones stay.
  std::int64_t padded_vocab() const {
    return vocab > std::numeric_limits<std::int64_t>::max() - 127 ? vocab : (vocab + 127) / 128 * 128;
  }
};

// A Llama 3 preset (models/llama_layout.hpp) and the micro-batch: B sequences of T <= max_seq
// tokens, with the activation policy `starzero train --model llama3` would run.
struct LlamaArgs {
  std::string preset;
  std::int64_t layers = 0, channels = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0, max_seq = 0;
  std::int64_t seq = 0, batch = 0;
  ActivationPolicy activations;  // --recompute, --recompute-window, --offload-activations
  std::int64_t qkv_channels() const { return (heads + 2 * kv_heads) * (channels / heads); }
};

struct PlanRequest {
  std::optional<GptArgs> gpt;      // its footprint is base.model
  std::optional<LlamaArgs> llama;  // its footprint is base.model (never together with gpt)
  PlanInput base;                  // dp and stage are set per row
  std::vector<std::int64_t> dps;
  std::vector<int> stages;
  MemoryLimits limits;
  // --platform: the machine whose step bound each row gets (offload/step_work.hpp), with
  // --adam-threads (default: the host plan's).
  std::optional<sim::MachineSpec> machine;
  std::optional<int> adam_threads;
  // The GPU memory per rank that --offload-optimizer-fraction auto fills: --gpu-mem, else the
  // --platform's GPU; each row resolves auto against it.
  std::optional<double> auto_gpu_bytes;
  int micro_batches = 1;  // --grad-accum: micro-batches per step in the step bound
  bool json = false;
};

// The whole report: tables and notes (human), or one JSON object.
std::string plan_report_text(const PlanRequest& request);
std::string plan_report_json(const PlanRequest& request);

}  // namespace starzero
