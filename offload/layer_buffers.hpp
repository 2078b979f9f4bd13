#pragma once
// One layer's buffers as its plan places them (offload/layer_plan.hpp), the handles a model's
// tasks read them through, and the helpers that read and write them whole. The engine holds one
// LayerBuffers per layer; the step's walks (offload/step_walk.hpp), the update policies
// (offload/update_policy.hpp) and the state I/O (offload/engine_state.cpp) work on them.
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "offload/layer_plan.hpp"
#include "offload/model.hpp"
#include "optimizers/adamw_codelet.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

class DiskNode;

// "what[index]": the names of per-layer tensors and tasks (param[3], adamw[3]).
std::string indexed_name(std::string_view what, int index);

// Where the planned buffers of a run are allocated: the NUMA node of pinned host memory and the
// disk node of NVMe-homed state.
struct BufferHomes {
  int host_numa_node = -1;   // -1: not bound
  DiskNode* nvme = nullptr;  // needed only by BufferHome::disk
};

// A tensor for one planned buffer, at its home.
Tensor allocate_planned(const PlannedBuffer& buffer, const std::string& name, const BufferHomes& homes);

// One layer's buffers, as its plan says: param and grad always exist, the optional ones where the
// plan has them.
struct LayerBuffers {
  LayerPlan plan;
  Tensor param, grad;
  std::optional<Tensor> param_shard, grad_shard;
  std::optional<Tensor> grad_partial;  // ZeRO-2/3 with accumulation: a later micro-batch's shard
  std::optional<Tensor> param_next;    // delayed update: AdamW's output until it is published
  std::optional<Tensor> grad_accum;    // fp32 gradient accumulation: full, or the shard at 2-3
  Tensor master, m, v, sum_of_squares;
  // The speculative update's second set of optimizer state. After each step's tasks are
  // submitted the sets are swapped: master, m, v name the latest state.
  std::optional<Tensor> master_next, m_next, v_next;

  LayerBuffers(const LayerPlanInput& input, int layer, const BufferHomes& homes);

  bool speculative() const { return master_next.has_value(); }
  optim::AdamWStateHandles state() const { return {master.handle(), m.handle(), v.handle()}; }
  optim::AdamWStateHandles next_state() const { return {master_next->handle(), m_next->handle(), v_next->handle()}; }
  // The step's result is in the second set now: it becomes the state.
  void adopt_next_state();

  std::size_t count() const { return plan.count(); }
  std::size_t padded() const { return plan.padded(); }
  std::size_t own_offset() const { return plan.own_offset(); }

  // The tensor of a planned buffer (not the optimizer state: master, m and v are three).
  Tensor& tensor(LayerBuffer role);

 private:
  std::optional<Tensor>& optional_tensor(LayerBuffer role);
};

// The full parameters and gradients of each group, as a model's tasks read them.
class LayerGroupHandles final : public GroupHandles {
 public:
  explicit LayerGroupHandles(const std::vector<LayerBuffers>& layers) : layers_(layers) {}
  starpu_data_handle_t param(int group) const override;
  starpu_data_handle_t grad(int group) const override;
  starpu_data_handle_t grad_piece(int group, std::size_t piece) const override;

 private:
  const std::vector<LayerBuffers>& layers_;
};

// A whole fp32 tensor's values (waits for its writers).
std::vector<float> read_f32(const Tensor& tensor);
// Writes the whole tensor from full[offset ...] (a shard of a layer, or all of it), zero past the
// end of full (the padding), straight into the tensor's buffer (fp32, or rounded to bf16).
void write_part(Tensor& tensor, std::span<const float> full, std::size_t offset);

}  // namespace starzero
