#include "offload/layer_buffers.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>

#include "runtime/disk.hpp"
#include "runtime/host_memory.hpp"

namespace starzero {

std::string indexed_name(std::string_view what, int index) {
  return std::string(what) + "[" + std::to_string(index) + "]";
}

Tensor allocate_planned(const PlannedBuffer& buffer, const std::string& name, const BufferHomes& homes) {
  const std::size_t count = buffer.elements;
  const DType dtype = buffer.dtype;
  switch (buffer.home) {
    case BufferHome::device: return Tensor::host(dtype, count, name);
    case BufferHome::transient: return Tensor::transient(dtype, count, name);
    case BufferHome::pinned_host:
      return Tensor::with_home(dtype, count, name,
                               std::make_unique<PinnedHostBuffer>(count * dtype_size(dtype), homes.host_numa_node, name));
    case BufferHome::disk:
      if (!homes.nvme) throw std::logic_error("an NVMe-homed buffer without a disk node: " + name);
      return Tensor::with_home(dtype, count, name, homes.nvme->home(count * dtype_size(dtype), name));
  }
  throw std::logic_error("unknown buffer home");
}

LayerBuffers::LayerBuffers(const LayerPlanInput& input, int layer, const BufferHomes& homes)
    : plan(input),
      param(allocate_planned(plan.buffer(LayerBuffer::param), indexed_name("param", layer), homes)),
      grad(allocate_planned(plan.buffer(LayerBuffer::grad), indexed_name("grad", layer), homes)),
      master(allocate_planned(plan.buffer(LayerBuffer::optimizer_state), indexed_name("master", layer), homes)),
      m(allocate_planned(plan.buffer(LayerBuffer::optimizer_state), indexed_name("adam_m", layer), homes)),
      v(allocate_planned(plan.buffer(LayerBuffer::optimizer_state), indexed_name("adam_v", layer), homes)),
      sum_of_squares(Tensor::transient(DType::f32, 1, indexed_name("grad_sumsq", layer))) {
  for (LayerBuffer role : {LayerBuffer::param_shard, LayerBuffer::param_next, LayerBuffer::grad_shard,
                           LayerBuffer::grad_partial, LayerBuffer::grad_accum})
    if (plan.has(role))
      optional_tensor(role).emplace(
          allocate_planned(plan.buffer(role), indexed_name(layer_buffer_name(role), layer), homes));
  if (plan.has(LayerBuffer::optimizer_state_next)) {
    const PlannedBuffer& next = plan.buffer(LayerBuffer::optimizer_state_next);
    master_next.emplace(allocate_planned(next, indexed_name("master_next", layer), homes));
    m_next.emplace(allocate_planned(next, indexed_name("adam_m_next", layer), homes));
    v_next.emplace(allocate_planned(next, indexed_name("adam_v_next", layer), homes));
  }
}

void LayerBuffers::adopt_next_state() {
  std::swap(master, *master_next);
  std::swap(m, *m_next);
  std::swap(v, *v_next);
}

Tensor& LayerBuffers::tensor(LayerBuffer role) {
  if (role == LayerBuffer::param) return param;
  if (role == LayerBuffer::grad) return grad;
  std::optional<Tensor>& tensor = optional_tensor(role);
  if (!tensor) throw std::logic_error("layer has no " + std::string(layer_buffer_name(role)));
  return *tensor;
}

std::optional<Tensor>& LayerBuffers::optional_tensor(LayerBuffer role) {
  switch (role) {
    case LayerBuffer::param_shard: return param_shard;
    case LayerBuffer::param_next: return param_next;
    case LayerBuffer::grad_shard: return grad_shard;
    case LayerBuffer::grad_partial: return grad_partial;
    case LayerBuffer::grad_accum: return grad_accum;
    default: throw std::logic_error("not an optional layer buffer: " + std::string(layer_buffer_name(role)));
  }
}

starpu_data_handle_t LayerGroupHandles::param(int group) const { return layers_.at(std::size_t(group)).param.handle(); }

starpu_data_handle_t LayerGroupHandles::grad(int group) const { return layers_.at(std::size_t(group)).grad.handle(); }

starpu_data_handle_t LayerGroupHandles::grad_piece(int group, std::size_t piece) const {
  const Tensor& grad = layers_.at(std::size_t(group)).grad;
  return grad.pieces() > 1 ? grad.piece(piece) : nullptr;
}

std::vector<float> read_f32(const Tensor& tensor) {
  auto view = tensor.view(Access::read);
  return {view.as<float>().begin(), view.as<float>().end()};
}

void write_part(Tensor& tensor, std::span<const float> full, std::size_t offset) {
  const std::size_t n = tensor.count();
  const std::size_t available = offset < full.size() ? std::min(n, full.size() - offset) : 0;
  const std::span<const float> values = full.subspan(offset, available);
  auto view = tensor.view(Access::write);
  if (tensor.dtype() == DType::f32) {
    const std::span<float> out = view.as<float>();
    std::copy(values.begin(), values.end(), out.begin());
    std::fill(out.begin() + std::ptrdiff_t(available), out.end(), 0.0f);
  } else {
    const std::span<bf16> out = view.as<bf16>();
    for (std::size_t i = 0; i < n; ++i) out[i] = from_float<bf16>(i < available ? values[i] : 0.0f);
  }
}

}  // namespace starzero
