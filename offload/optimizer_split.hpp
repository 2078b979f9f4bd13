#pragma once
// Which layers' optimizer state is offloaded under --offload-optimizer cpu|nvme with
// --offload-optimizer-fraction F. The engine (offload/engine.hpp) fills each layer's
// LayerPlanInput::offload_optimizer from it and the planner (offload/planner.hpp) sums the same
// layers, so the run and `starzero plan` split the state alike (docs/architecture.md,
// "Optimizer offload").
//
// The rule: offload the last layers, keep the first ones. An offloaded layer's AdamW runs on the
// CPU and can start only once its gradient is reduced, and the backward reduces the layers from
// the last one down to the first; the first layers' gradients (the embedding's, which the tied
// classifier and the embedding's own backward both add to, comes last of all) are ready only at
// the end of the backward, when a CPU AdamW started then would hold up the next step, while the
// device AdamW updates them in milliseconds. So the CPU's share is the layers whose gradients come
// first: without clipping (or with the delayed update) their CPU AdamW runs beside the GPU's
// backward of the layers below; with exact clipping (every AdamW waits for the global norm) it
// runs beside the next step's forward through the first layers, which were updated on the GPU.
//
// F is a fraction of the parameters Ψ, rounded to whole layers upwards: layers are taken from the
// last one down while the parameters taken are fewer than F·Ψ (to a relative 1e-12, so that an F
// computed as a ratio of parameters is not pushed over a layer by its rounding), so the offloaded
// layers are the shortest run of last layers holding at least F·Ψ parameters. At least F is offloaded, never
// less: the GPU holds no more state than F asks. F = 1 offloads every layer (what
// --offload-optimizer alone does), F = 0 none (every layer runs the device AdamW).
#include <cstdint>
#include <span>
#include <string>

namespace starzero {

struct OptimizerSplit {
  int layers = 0;             // the layers split; 0: none listed (a bare parameter count)
  int first_offloaded = 0;    // layers first_offloaded..layers-1 keep their state offloaded
  std::int64_t params = 0;    // Ψ
  std::int64_t offloaded_params = 0;

  bool offloaded(int layer) const { return layer >= first_offloaded; }
  int offloaded_layers() const { return layers - first_offloaded; }
  std::int64_t device_params() const { return params - offloaded_params; }
  // The share offloaded, offloaded_params / Ψ (F rounded to whole layers); 0 for Ψ = 0.
  double fraction() const { return params > 0 ? double(offloaded_params) / double(params) : 0.0; }
};

// The split of layers of these parameter counts (forward order) for the fraction F, as above.
// std::invalid_argument for F outside [0, 1] (or NaN) and for a negative count.
OptimizerSplit split_optimizer_state(std::span<const std::int64_t> layer_params, double fraction);
// Without a list of layers (the planner given only Ψ): round(F·Ψ) parameters, layers = 0.
OptimizerSplit split_optimizer_state(std::int64_t params, double fraction);

// "layers 21-41 on the host (6,600,000,000 parameters, F = 0.514), 0-20 on the device" and the
// like, for reports; without layers, the parameter counts only. `host` names where the offloaded
// state is ("host", "NVMe").
std::string describe_split(const OptimizerSplit& split, const std::string& host = "host");

// --speculative-fraction F: the share of Ψ whose CPU AdamW is speculative, min(F, what `offloaded`
// offloads): split by the rule above, it gives the last of the offloaded layers.
double speculative_share(const OptimizerSplit& offloaded, double fraction);

// --speculative-fraction: the speculative layers (a split by the same rule, inside `offloaded`'s
// layers) and the offloaded ones left synchronous: "layers 30-41 speculative (…), 1-29
// synchronous"; without layers, the parameter counts only.
std::string describe_speculative_split(const OptimizerSplit& speculative, const OptimizerSplit& offloaded);

}  // namespace starzero
