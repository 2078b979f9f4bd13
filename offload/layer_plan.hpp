#pragma once
// One layer's plan: which buffers exist for a ZeRO stage, rank count and offload placement, how
// large they are, where they live and what a step does with them. Derived once per layer from
// its inputs; the engine allocates, submits and accounts memory from it (offload/engine.hpp),
// and the planner sums the bytes of one layer of Ψ parameters (offload/planner.hpp), so both
// count the same buffers by construction. See docs/architecture.md and docs/zero-formulas.md.
//
// Sizes: a layer of `count` parameters on N ranks has shards of s = ceil(count/N) elements and
// full buffers of N·s (the collectives' padding, < N elements). The planner's unpadded figures
// use count/N and count instead (the seeds' formulas).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "offload/placement.hpp"
#include "runtime/dtype.hpp"
#include "runtime/ledger.hpp"

namespace starzero {

// What ZeRO shards, decided once from the stage and the number of ranks. With one rank every
// stage is the same: nothing is sharded and there are no collectives.
struct ZeroState {
  int stage = 0;
  std::int64_t ranks = 1;
  bool collectives = false;   // ranks > 1
  bool sharded = false;       // ranks > 1, stage >= 1: the optimizer state and its update are this
                              // rank's shard
  bool shard_grads = false;   // ranks > 1, stage >= 2: gradients reduce-scattered every micro-batch,
                              // full gradients only while a layer's backward needs them
  bool shard_params = false;  // ranks > 1, stage 3: only the parameter shard is held; full
                              // parameters are gathered for each use

  static ZeroState of(int stage, std::int64_t ranks);  // std::invalid_argument outside 0..3, < 1
};

struct LayerPlanInput {
  int stage = 0;
  std::int64_t ranks = 1;
  std::int64_t rank = 0;
  // This layer's: with --offload-optimizer-fraction some layers offload and others do not
  // (offload/optimizer_split.hpp); the planner plans the two shares as two layers.
  OptimizerOffload offload_optimizer = OptimizerOffload::none;
  ParamOffload offload_params = ParamOffload::none;  // cpu: stage 3 with several ranks; any stage with one
  bool delayed_update = false;
  // --speculative-update: a CPU AdamW runs before the global norm is known, from one set of
  // optimizer state into a second one (optimizer_state_next), and a commit fixes it up after.
  bool speculative_update = false;
  bool fp32_grad_accum = false;
  DType dtype = DType::f32;               // the model's: parameters and gradients
  std::size_t params = 0;                 // this layer's parameters
  double optimizer_bytes_per_param = 12;  // k; AdamW's fp32 master, m and v
  // The model cuts the full gradient into pieces (Model::gradient_pieces) and no GPU runs the
  // layer: a gradient held at stages 0-1 gets a home in main memory (BufferHome::device, which
  // is main memory then) instead of being transient, since StarPU gathers pieces at the home.
  bool split_gradient = false;
};

enum class LayerBuffer : std::uint8_t {
  param,            // full parameters: what forward and backward read
  param_shard,      // this rank's shard of them: ZeRO-3, and ZeRO-1/2 when AdamW cannot update
                    // the full buffer in place (CPU AdamW, delayed update)
  param_next,       // a delayed update's output until it is published
  grad,             // full gradient: backward accumulates into it
  grad_shard,       // this rank's reduced shard: ZeRO-2/3, and ZeRO-1 under optimizer offload
  grad_partial,     // ZeRO-2/3: a later micro-batch's reduced shard, then added to grad_shard
  grad_accum,       // fp32 gradient accumulation: full at stages 0-1, the shard at 2-3
  optimizer_state,  // AdamW's master, m and v: three f32 tensors of `elements` each
  optimizer_state_next,  // the speculative update's second set of them (steps alternate)
};
std::string_view layer_buffer_name(LayerBuffer buffer);  // "param", "param_shard", ...

enum class Extent : std::uint8_t { full, shard };

enum class BufferHome : std::uint8_t {
  device,       // a StarPU home in main memory that the compute device works on (Tensor::host)
  pinned_host,  // pinned host memory on the chosen NUMA node (offload)
  disk,         // the NVMe disk node (optimizer offload nvme)
  transient,    // no home: StarPU allocates it where it is first written (Tensor::transient)
};

enum class Lifetime : std::uint8_t {
  held,     // for the whole run
  per_use,  // allocated and freed within a step (the ledger follows it as the graph runs)
};

struct PlannedBuffer {
  LayerBuffer role = LayerBuffer::param;
  Extent extent = Extent::full;
  std::size_t elements = 0;  // full: N·s, shard: s
  DType dtype = DType::f32;
  double bytes_per_element = 4;  // the dtype's size; optimizer_state: master, m and v together (k)
  BufferHome home = BufferHome::device;
  Lifetime lifetime = Lifetime::held;
  MemoryCategory category = MemoryCategory::params;
  // Where a copy is held for good, as the ledger and the planner count it. It can differ from
  // the home: e.g. ZeRO-3's parameter shard homed on the host keeps a device copy for the
  // all-gathers, and a transient gradient shard has a host copy the CPU AdamW reads.
  std::vector<MemoryPlace> held_at;
};

// A buffer and the part of it an operation uses.
struct BufferSlice {
  LayerBuffer buffer = LayerBuffer::param;
  std::size_t offset = 0;
  std::size_t count = 0;
};

// How a layer's full parameters are there when its forward and backward run.
enum class ParamAccess : std::uint8_t {
  resident,          // held in full on the device
  gathered_per_use,  // ZeRO-3: all-gathered from the shards before each forward and backward,
                     // freed after (inside the prefetch window)
  fetched_per_use,   // one rank with the parameters in pinned host memory: fetched for each use
                     // inside the prefetch window, the device copy dropped after
};

// Where the full gradient is while the backward accumulates into it.
enum class GradAccess : std::uint8_t {
  resident,  // held on the device for the whole run (stages 0-1, one rank)
  per_use,   // ZeRO-2/3: allocated before the layer's backward, freed after its reduce-scatter
  streamed,  // one rank with parameters and optimizer offloaded: homed in pinned host memory;
             // on the device only around each micro-batch's backward of the layer (fetched back
             // for a later micro-batch), inside the gradient window, then written home
};

// How the full gradient becomes the reduced gradient the update reads.
enum class GradReduction : std::uint8_t {
  none,                       // one rank
  all_reduce,                 // ZeRO-0: the full gradient, in place
  reduce_scatter_in_place,    // ZeRO-1: into this rank's slice of the full gradient
  reduce_scatter_into_shard,  // ZeRO-1 under optimizer offload, ZeRO-2/3: into grad_shard
};

enum class Fp32Accumulation : std::uint8_t {
  none,
  full_before_reduction,  // stages 0-1: each micro-batch's full gradient added in fp32, rounded
                          // once, reduced once
  shard_after_reduction,  // stages 2-3: each reduced shard added in fp32, rounded once
};

enum class UpdateKernel : std::uint8_t {
  device,  // AdamW's kernel on the device, at offsets into the buffers
  cpu,     // optimizer offload: a CPU task that reads and writes whole buffers
};

struct UpdatePlan {
  UpdateKernel kernel = UpdateKernel::device;
  BufferSlice grad;            // the reduced gradient this rank updates with (also its norm's part)
  BufferSlice target;          // where the updated parameters go
  BufferSlice delayed_target;  // where a delayed update puts them (param_next where it exists)
};

// How the updated parameters become the ones the model reads.
enum class Publish : std::uint8_t {
  none,                   // the update wrote where the model reads (one rank, ZeRO-0, ZeRO-3)
  all_gather_in_place,    // ZeRO-1/2: every rank's slice of the full parameters
  all_gather_from_shard,  // ZeRO-1/2 with a separate param_shard
  copy_next,              // a delayed update: param_next into `destination`
};

struct PublishPlan {
  Publish how = Publish::none;
  LayerBuffer destination = LayerBuffer::param;  // copy_next: param_shard or param
  bool drop_device_shard = false;                // after the all-gather the shard's device copy may go (offload
                                                 // keeps it on the host)
};

class LayerPlan {
 public:
  explicit LayerPlan(const LayerPlanInput& input);  // std::invalid_argument for invalid input

  const LayerPlanInput& input() const { return input_; }
  const ZeroState& zero() const { return zero_; }
  std::size_t count() const { return input_.params; }
  std::size_t shard() const { return shard_; }                              // s = ceil(count / N)
  std::size_t padded() const { return shard_ * std::size_t(zero_.ranks); }  // N·s
  std::size_t own_offset() const { return shard_ * std::size_t(input_.rank); }

  // The buffers that exist, in the order the engine allocates them.
  std::span<const PlannedBuffer> buffers() const { return buffers_; }
  bool has(LayerBuffer role) const;
  const PlannedBuffer& buffer(LayerBuffer role) const;  // std::logic_error when it does not exist

  // Bytes of one copy: padded (what the engine allocates) and unpadded (the seeds' figures:
  // bytes_per_element · count, divided by N for a shard, in double precision).
  std::int64_t bytes(const PlannedBuffer& buffer) const;
  double unpadded_bytes(const PlannedBuffer& buffer) const;

  // Every copy held for good, buffer by buffer: what the ledger adds up front and the planner sums.
  struct HeldCopy {
    const PlannedBuffer* buffer;
    MemoryPlace place;
  };
  std::vector<HeldCopy> held_copies() const;

  ParamAccess param_access() const { return param_access_; }
  GradAccess grad_access() const { return grad_access_; }
  GradReduction grad_reduction() const { return grad_reduction_; }
  // ZeRO-2/3 reduce after every micro-batch (the full gradient is freed each time); ZeRO-0/1
  // reduce the accumulated gradient once, after the last.
  bool reduce_every_micro_batch() const { return zero_.shard_grads; }
  Fp32Accumulation fp32_accumulation() const { return fp32_accumulation_; }
  const UpdatePlan& update() const { return update_; }
  const PublishPlan& publish(bool delayed) const { return delayed ? delayed_publish_ : publish_; }

 private:
  void plan_buffers();
  void plan_operations();
  PlannedBuffer& add(LayerBuffer role, Extent extent, DType dtype, BufferHome home, Lifetime lifetime,
                     MemoryCategory category);
  BufferSlice whole(LayerBuffer role) const;

  LayerPlanInput input_;
  ZeroState zero_;
  std::size_t shard_ = 0;
  std::vector<PlannedBuffer> buffers_;
  ParamAccess param_access_ = ParamAccess::resident;
  GradAccess grad_access_ = GradAccess::resident;
  GradReduction grad_reduction_ = GradReduction::none;
  Fp32Accumulation fp32_accumulation_ = Fp32Accumulation::none;
  UpdatePlan update_;
  PublishPlan publish_, delayed_publish_;
};

}  // namespace starzero
