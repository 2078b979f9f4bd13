#pragma once
// The training engine: walks a Model's layers and submits one training step as a task graph
// (design.md): forward of every layer, backward in reverse order, then per layer the gradient
// norm and the AdamW update on fp32 master weights. Nothing waits inside a step.
//
// This is the single-rank engine (no collectives); the ZeRO stages add their per-layer
// collective tasks around the same walk.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "offload/model.hpp"
#include "optimizers/adamw.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

struct EngineOptions {
  optim::AdamWHyper adam;     // lr and step are set per step
  float grad_clip = 1.0f;     // global-norm clipping threshold; <= 0: no clipping
  std::uint64_t seed = 1337;  // parameter initialisation
};

// Optimizer state of one layer (fp32), for checkpoints and exact resume.
struct LayerOptimizerState {
  std::vector<float> master, m, v;
};

class Engine {
 public:
  Engine(Model& model, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Forward and backward of the current micro-batch (the model's inputs must be set), the
  // global gradient norm, and AdamW at learning rate `lr` as optimizer step `step` (1-based).
  void submit_step(float lr, int step);
  // Forward only (evaluation): no gradients, no update.
  void submit_forward();
  // Zeroed gradients, forward and backward of the current micro-batch: no update.
  void submit_gradients();
  // Every layer's gradient as fp32 (waits for the backward).
  std::vector<std::vector<float>> gradients() const;

  // Global gradient norm (before clipping) of the last step; waits for it.
  float last_grad_norm() const;

  // fp32 master parameters per layer (waits for pending updates).
  std::vector<std::vector<float>> master_params() const;
  // Replaces master and model parameters (e.g. from a checkpoint); resets nothing else.
  void set_master_params(const std::vector<std::vector<float>>& layers);
  std::vector<LayerOptimizerState> optimizer_state() const;
  void set_optimizer_state(const std::vector<LayerOptimizerState>& state);

  std::size_t parameter_count() const;

 private:
  class Handles;
  struct Layer;
  Model& model_;
  EngineOptions options_;
  std::vector<Layer> layers_;
  std::unique_ptr<Handles> handles_;
  Tensor clip_scale_, grad_norm_;
};

}  // namespace starzero
