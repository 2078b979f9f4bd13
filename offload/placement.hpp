#pragma once
// Where ZeRO-Offload puts a rank's model states: the optimizer state (master weights, Adam m
// and v) in host memory or on an NVMe disk node, and under ZeRO-3 the parameter shards in host
// memory. Shared by the engine (offload/engine.hpp), its per-layer plan (offload/layer_plan.hpp)
// and the planner (offload/planner.hpp); see docs/architecture.md.
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
