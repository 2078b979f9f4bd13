#pragma once
// Where ZeRO-Offload puts a rank's model states: the optimizer state (master weights, Adam m
// and v) in host memory or on an NVMe disk node, and under ZeRO-3 the parameter shards in host
// memory. Shared by the engine (offload/engine.hpp), its per-layer plan (offload/layer_plan.hpp)
// and the planner (offload/planner.hpp); see docs/architecture.md.
//
// OffloadOptions is the offload concern's one options object: `starzero train` and `starzero
// plan` fill it from the flags and validate it once (validate below), and the run, the host plan,
// the engine and the planner all read that same object (RunOptions::offload,
// HostPlanInput::offload, EngineOptions::offload, PlanInput::offload) instead of copies of its
// fields.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string_view>

namespace starzero {

enum class OptimizerOffload { none, cpu, nvme };
enum class ParamOffload { none, cpu };  // cpu: ZeRO-3 only

// --offload-optimizer-fraction: under optimizer offload, the share F of the parameters whose
// optimizer state is offloaded (offload/optimizer_split.hpp picks the layers; the others keep it
// on the device and run the device AdamW), or auto: as much state on the GPU as its memory holds
// beside everything else the plan puts there (offload/planner.hpp, auto_offload_fraction).
struct OffloadFraction {
  double value = 1;        // F in [0, 1]; 1: all of it, what --offload-optimizer alone does
  bool automatic = false;  // auto: resolved against the GPU's memory before anything is placed
};

// Where a run keeps its model states, and how its CPU AdamW runs (docs/architecture.md).
struct OffloadOptions {
  OptimizerOffload optimizer = OptimizerOffload::none;  // --offload-optimizer
  // --offload-optimizer-fraction: the share of the optimizer state offloaded
  // (offload/optimizer_split.hpp); auto is resolved before the engine is built (train/run.cpp:
  // from the GPU's memory, all of it without a GPU; the planner: against --gpu-mem).
  OffloadFraction optimizer_fraction;
  ParamOffload params = ParamOffload::none;  // --offload-params: stage 3 with several ranks; any stage with one
  std::filesystem::path nvme_path;           // --nvme-path: where the disk node's files go (optimizer nvme)
  std::size_t host_mem_limit_mib = 1024;     // --host-mem-limit: StarPU's host memory (optimizer nvme)
  std::optional<int> adam_threads;           // --adam-threads (>= 1); default: the host plan's
  int delayed_update_warmup = -1;            // --delayed-update: < 0 none; else synchronous steps before it
  // --speculative-update: exact clipping, the CPU AdamW during the backward (offload/engine.hpp).
  bool speculative_update = false;
  // --speculative-fraction: its share of the parameters (the last CPU-updated layers); auto is
  // resolved once the host plan is known, from the host's memory (all of them in a simulation).
  OffloadFraction speculative_fraction;

  bool optimizer_offloaded() const { return optimizer != OptimizerOffload::none; }
  bool anything_offloaded() const { return optimizer_offloaded() || params != ParamOffload::none; }
};

// The rules of the offload concern on its own, in one place: std::invalid_argument, one line
// naming the flags, for nvme without a path (or a path without nvme), a fraction outside [0, 1]
// or without what it is a share of, --adam-threads without optimizer offload or below 1, and the
// speculative update without the CPU AdamW in host memory or beside the delayed update. The rules
// that join it with another concern (parameter offload and the ZeRO stage, the speculative
// update and clipping) are offload/engine_options.hpp's (check_engine_options, the run's one check).
void validate(const OffloadOptions& options);
// The same rules but the NVMe folder's (a run's: a plan has no --nvme-path): what `starzero plan`
// checks. validate calls it.
void validate_placement(const OffloadOptions& options);

// "none", "cpu", "nvme": the spelling of the command-line flags.
inline std::string_view offload_name(OptimizerOffload o) {
  switch (o) {
    case OptimizerOffload::none: return "none";
    case OptimizerOffload::cpu: return "cpu";
    case OptimizerOffload::nvme: return "nvme";
  }
  return "?";
}

inline std::string_view offload_name(ParamOffload o) { return o == ParamOffload::cpu ? "cpu" : "none"; }

inline std::optional<OptimizerOffload> optimizer_offload_from_name(std::string_view name) {
  if (name == "none") return OptimizerOffload::none;
  if (name == "cpu") return OptimizerOffload::cpu;
  if (name == "nvme") return OptimizerOffload::nvme;
  return std::nullopt;
}

inline std::optional<ParamOffload> param_offload_from_name(std::string_view name) {
  if (name == "none") return ParamOffload::none;
  if (name == "cpu") return ParamOffload::cpu;
  return std::nullopt;
}

}  // namespace starzero
