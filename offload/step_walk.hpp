#pragma once
// The step's walks over the layers (docs/architecture.md): the forward from layer 0 up and the
// backward from the last layer down, with the transitions of each layer's parameters and
// gradients between their states (FSDP2's words, offload/engine.hpp has the table):
//   unshard   make a layer's full parameters available: ZeRO-3 all-gathers them; one rank with
//             the parameters on the host fetches them to the device. Inside the prefetch window.
//   reshard   drop them again after the layer's tasks: freed (ZeRO-3), or the device copy dropped.
//   allocate / stream in   a gradient comes to life (or to the device) before its first backward;
//   reduce / stream out    and is reduced (the stage's collective) or written home after its last.
// unshard and reshard are idempotent: unsharding an unsharded layer (or resharding a sharded one)
// submits nothing. What the update does once a gradient is reduced is the caller's
// (`GradientReduced`): the update policies (offload/update_policy.hpp).
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "offload/engine_options.hpp"
#include "offload/layer_buffers.hpp"
#include "offload/model.hpp"
#include "runtime/ledger.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

namespace tasks {
class CollectiveOrder;
}

class StepWalk {
 public:
  // order: the collectives' order (nullptr without collectives). Checks that the gradient window
  // holds every group a layer touches (std::invalid_argument).
  StepWalk(Model& model, std::vector<LayerBuffers>& layers, const ZeroOptions& zero, tasks::CollectiveOrder* order,
           MemoryLedger& ledger);

  // Called once per group when its gradient is reduced for the step (the last micro-batch).
  using GradientReduced = std::function<void(int group)>;

  void forward();
  void backward(bool first_micro_batch, bool last_micro_batch, const GradientReduced& reduced = {});

  void unshard(int layer, const char* pass);
  void reshard(int layer, const char* pass);

 private:
  // The groups a layer's tasks use: its own and those it shares (the tied embedding).
  std::vector<int> uses(int layer) const;
  void submit_window_mark(int layer, int delta, const std::string& name);
  void allocate_gradient(int group, bool first_micro_batch);
  void stream_gradients_in(int layer, bool first_micro_batch);
  void stream_gradients_out(int layer);
  void reduce_gradient(int group, bool first_micro_batch, bool last_micro_batch);
  void reduce_into_shard_each_micro_batch(int group, bool first_micro_batch, bool last_micro_batch);

  Model& model_;
  std::vector<LayerBuffers>& layers_;
  ZeroOptions zero_;
  tasks::CollectiveOrder* order_;
  MemoryLedger& ledger_;
  LayerGroupHandles handles_;
  std::vector<char> unsharded_;                         // per layer: unshard submitted, reshard not yet
  std::vector<Tensor> window_slots_;                    // prefetch window tokens (ZeRO-3, or fetched params)
  std::uint64_t unshards_ = 0;                          // windowed unshards done (selects the window slot)
  std::vector<int> first_toucher_, last_toucher_;       // per group: backward layers touching it
  std::vector<starpu_data_handle_t> recently_reduced_;  // ZeRO-2/3: full gradients just freed
  std::deque<starpu_data_handle_t> streamed_out_;       // streamed gradients: the last grad_window written home
};

}  // namespace starzero
