#pragma once
// The memory and communication planner: the seeds' ZeRO formulas (docs/zero-formulas.md),
// generalised to any model's footprint, offload placements and fit checks. Plain structs, no I/O.
//
// Units: parameter counts and elements are integers; bytes are doubles. Every byte figure is
// computed as (whole bytes) / N in double precision, which is exact whenever the result is a
// whole number below 2^53 (e.g. 16 * 7e9 / 64 = 1.75e9 exactly).
//
// What the figures are, per rank:
// - static: the seeds' model states. ZeRO-0: 2Ψ + 2Ψ + kΨ; ZeRO-1: 2Ψ + 2Ψ + kΨ/N;
//   ZeRO-2: 2Ψ + (2Ψ + kΨ)/N; ZeRO-3: (2Ψ + 2Ψ + kΨ)/N, where "2" is the precision's bytes.
//   An fp32 gradient accumulation buffer adds 4Ψ (stages 0-1) or 4Ψ/N (stages 2-3), counted
//   under gradients.
// - placement: where those bytes live (GPU, host, NVMe) given the offload options, summed from
//   the engine's own plan of one layer of Ψ parameters (offload/layer_plan.hpp) without the
//   collectives' padding; the engine's ledger sums the same buffers over its real, padded layers.
//   Offloading the optimizer moves its state (kΨ/N; kΨ at ZeRO-0) to host memory (cpu) or to
//   NVMe (nvme) and adds two host staging buffers of precision·Ψ/N each: the gradient shard that
//   comes down for the CPU Adam step and the updated parameter shard that goes back up
//   (ZeRO-Offload's minimum transfer: 2 + 2 bytes per parameter in bf16). The GPU keeps its own
//   gradient and parameter copies, so the GPU figure is the seeds' figure minus the optimizer
//   state. Offloading parameters (ZeRO-3 only) moves the parameter shard precision·Ψ/N to host
//   memory; with optimizer offload too, that shard and the staging copy are the same buffer.
//   --offload-optimizer-fraction F offloads only the state of the last layers holding F·Ψ
//   (offload/optimizer_split.hpp: whole layers when the footprint lists them, else F·Ψ exactly):
//   the placement is then the sum of two plans, F·Ψ parameters offloaded and (1-F)·Ψ not, and
//   the staging copies and their transfers are those of the offloaded share only.
//   --speculative-update adds a second set of optimizer state (kΨ/N) in host memory for the
//   CPU-updated layers, or with --speculative-fraction F for the last of them holding F·Ψ only
//   (the offloaded share is then planned as two: speculative and synchronous).
//   memory; with optimizer offload too, that shard and the staging copy are the same buffer. At
//   dp = 1 (any stage: nothing is sharded) it moves the whole model's parameters to host memory,
//   and with optimizer offload too the full gradients' home as well: the GPU holds only the
//   parameters of the prefetch window (below) and the gradients in flight, G × largest layer ×
//   precision bytes, G = gradient window (each layer's gradient goes home after its backward and
//   comes back for the next micro-batch's: 2 + 2 bytes per parameter and micro-batch on PCIe).
// - activations (model footprint only): one micro-batch's activation buffers as the model
//   allocates them (ModelFootprint::activation_bytes_2/4, under its recomputation policy), or,
//   when the model does not give them, its activation tensors at the precision's bytes per
//   element. ZeRO does not shard activations: every rank holds its own. With activation offload
//   the blocks' kept activations beyond the window are host bytes instead (host_activations), and
//   cross the bus twice per micro-batch (offload_transfer_bytes).
// - ZeRO-3 temporaries (model footprint only): the full parameters of the layers being computed
//   and prefetched, (W + 1) × largest layer × precision bytes, W = prefetch depth. At dp = 1
//   without parameter offload the shard is the whole model, nothing is gathered: 0; with it, the
//   same window of layers fetched from host memory.
// Not counted anywhere (they remain however large dp is): the transient full gradient of the
// layer being reduce-scattered (stages 2-3), communication buckets, kernel workspaces, CUDA
// context and allocator fragmentation.
#include <array>
#include <functional>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "offload/footprint.hpp"
#include "offload/optimizer_split.hpp"
#include "offload/placement.hpp"
#include "runtime/precision.hpp"

namespace starzero {

// Invalid planner input: params <= 0, dp <= 0, stage outside 0..3, k < 0, parameter offload
// outside ZeRO-3 at dp > 1, a footprint without parameters, ... The message is one line.
class PlanError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Precision of parameters, gradients and activations (runtime/precision.hpp; optimizer state is
// k bytes/param).

// ---- One configuration ---------------------------------------------------------------------
struct PlanInput {
  std::int64_t params = 0;              // Ψ; with a model footprint leave 0 (or equal to its Ψ)
  std::optional<ModelFootprint> model;  // gives Ψ, activations and ZeRO-3 temporaries
  std::int64_t dp = 1;                  // N
  int stage = 0;                        // 0..3
  Precision precision = Precision::bf16;
  double k = 12;  // optimizer state bytes per parameter
  bool fp32_grad_accum = false;
  // The run's offload options (offload/placement.hpp), the same object `starzero train` hands
  // its engine. Read here: where the state goes (optimizer, params), the offloaded share of Ψ
  // (optimizer_fraction, ignored without optimizer offload; an automatic one must be resolved
  // first: resolve_offload_fraction, plan_memory refuses it) and the speculative update's second
  // set of optimizer state, k bytes per parameter in host memory, for the last CPU-updated layers
  // holding speculative_fraction of Ψ (ignored without a CPU AdamW; an automatic one resolved by
  // resolve_speculative_fraction against the host's memory). The paths, threads and delayed
  // update are the run's only.
  OffloadOptions offload;
  std::int64_t prefetch_depth = 1;  // W >= 0: ZeRO-3 layers gathered ahead of the current one
  // G >= 1 (--grad-window): ZeRO-2/3 full gradients alive beyond the one computed (counted by
  // auto_offload_fraction), and at dp 1 with both offloads the gradients streamed at once.
  std::int64_t grad_window = 2;
  // The GPU's attention kernel, for the step's GPU work (offload/step_work.hpp): cuDNN's flash
  // attention (bf16; fp32 stays on our own) or our own scalar kernels (--attention).
  sim::GpuCostClass attention = sim::GpuCostClass::cudnn_attention;
  // Whether the plan counts cuDNN's workspace on the GPU beside the activations (an explicit
  // --attention cudnn; an estimate, tasks/attention_cudnn.hpp).
  bool cudnn_attention = false;
};

void validate(const PlanInput& input);              // throws PlanError
std::int64_t model_params(const PlanInput& input);  // Ψ (validated)

struct ByteSplit {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

struct MemoryPlan {
  std::int64_t params = 0;  // Ψ
  std::int64_t dp = 1;
  int stage = 0;
  ByteSplit seeds;                    // the seeds' static bytes per rank, wherever they are placed
  ByteSplit gpu;                      // placed: GPU
  ByteSplit host;                     // placed: host memory (includes the offload staging copies)
  ByteSplit nvme;                     // placed: NVMe
  std::optional<double> activations;  // GPU bytes of one micro-batch; unknown without a footprint
  double host_activations = 0;        // of them, the blocks' kept ones offloaded to host memory instead
  std::optional<double> temporaries;  // ZeRO-3 full layers on the GPU, or at dp 1 the parameters
                                      // fetched from the host; 0 otherwise; unknown without a footprint
  std::optional<double> grads_in_flight;  // dp 1 with parameters and optimizer on the host: the
                                          // streamed gradients on the GPU; 0 otherwise; unknown
                                          // without a footprint
  // cuDNN attention's workspace during its largest call (the backward of a whole micro-batch):
  // an estimate, 0 with the own kernel or without a footprint.
  double attention_workspace = 0;
  double offload_transfer_bytes = 0;  // host<->GPU bytes per step per rank due to offload
  // Whose optimizer state is offloaded: none without optimizer offload, every layer at F = 1.
  OptimizerSplit optimizer_split;
  // Whose CPU AdamW is speculative (a second set of state on the host): none without
  // --speculative-update or a CPU AdamW; its layers are the last of optimizer_split's.
  OptimizerSplit speculative_split;
  double gpu_static() const { return gpu.total(); }
  double gpu_total() const;  // static + activations + temporaries + gradients in flight + attention workspace
  double host_total() const { return host.total() + host_activations; }
  double nvme_total() const { return nvme.total(); }
};

MemoryPlan plan_memory(const PlanInput& input);

// The layers (or parameters) whose optimizer state `input` offloads (validated; its fraction
// resolved): offload/optimizer_split.hpp's rule over the footprint's layers, or F·Ψ without them.
OptimizerSplit optimizer_split_of(const PlanInput& input);

// --offload-optimizer-fraction auto on a GPU of gpu_bytes per rank: F such that the optimizer
// state left on the GPU fits beside what else the plan puts there. The GPU's memory, less a
// margin of kAutoGpuMargin of it (what no plan counts: the CUDA context, kernel workspaces,
// allocator fragmentation), less the plan with all of the state offloaded (parameters,
// gradients, staging copies on the device, one micro-batch's activations, the ZeRO-3 prefetch
// window) and, at ZeRO-2/3 with N > 1, the gradient window ((grad_window + 1) full gradients of
// the largest layer), is what the state may take; divided by the state's GPU bytes per parameter
// (k, or k/N from ZeRO-1 on) it gives the parameters that keep their state on the GPU, rounded
// down, and F = 1 - those / Ψ (at least 0, at most 1). The layers follow from F as for any F.
inline constexpr double kAutoGpuMargin = 0.05;
double auto_offload_fraction(const PlanInput& input, double gpu_bytes);
// `input` with an automatic fraction replaced by auto_offload_fraction on gpu_bytes; PlanError
// when it is automatic and gpu_bytes is not given. Unchanged otherwise.
PlanInput resolve_offload_fraction(PlanInput input, std::optional<double> gpu_bytes);

// The layers (or parameters) whose CPU AdamW `input` makes speculative (validated; both fractions
// resolved): the last ones holding min(offloaded, speculative fraction) of Ψ.
OptimizerSplit speculative_split_of(const PlanInput& input);

// --speculative-fraction auto on a host of host_bytes per rank: the largest share whose second
// set of optimizer state still fits. Candidates are whole layers from the last one down (F·Ψ
// continuous without the footprint's layers); the plan's host total, as plan_memory counts it,
// must be at most host_bytes. 0 when not even one layer fits (every CPU AdamW synchronous); 1
// when all of them do. Needs a resolved offload fraction.
double auto_speculative_fraction(const PlanInput& input, double host_bytes);
// `input` with an automatic speculative fraction replaced by auto_speculative_fraction on
// host_bytes; PlanError when it is automatic and host_bytes is not given. Unchanged otherwise.
PlanInput resolve_speculative_fraction(PlanInput input, std::optional<double> host_bytes);

// What one layer's plan holds for good, per place (GPU = the device, host, NVMe = the disk node)
// and category, added to `sum`: `padded` as the engine allocates it (its ledger), else the
// seeds' unpadded figures (plan_memory's placement is this for one layer of Ψ parameters).
class LayerPlan;
struct PlacedBytes {
  ByteSplit gpu, host, nvme;
};
void add_placed_bytes(const LayerPlan& plan, bool padded, PlacedBytes& sum);

// GPU bytes per rank that no dp removes (the limit of gpu_total() as dp grows): the model
// states a stage does not shard, plus activations and ZeRO-3 temporaries when known. The
// seeds' point: memory does not go to zero as N grows.
double gpu_floor_bytes(const PlanInput& input);

// The seeds' exercise function: static bytes per GPU, no offload, no activations.
double zero_memory_per_gpu(std::int64_t params, std::int64_t dp, int stage, double k = 12, bool fp32_grad_accum = false,
                           int precision_bytes = 2);

// ---- Communication per training step per rank ------------------------------------------------
struct CommVolume {
  int psi_multiple = 0;      // 2 (stages 0-2) or 3 (stage 3)
  double elements = 0;       // psi_multiple · Ψ
  double bytes = 0;          // elements · precision bytes
  double ring_elements = 0;  // elements · (N-1)/N (exact ring figure; 0 at N = 1)
  double ring_bytes = 0;
};
CommVolume zero_communication_volume(std::int64_t params, std::int64_t dp, int stage,
                                     Precision precision = Precision::bf16);
CommVolume plan_communication(const PlanInput& input);

// ---- Fit check ---------------------------------------------------------------------------------
struct MemoryLimits {
  std::optional<double> gpu_bytes;   // per rank
  std::optional<double> host_bytes;  // per rank
};

struct FitOption {
  int stage = 0;
  OffloadOptions offload;  // the option's optimizer and parameter offload, the base's fractions
  MemoryPlan plan;
  bool fits_gpu = true;
  bool fits_host = true;
  bool fits() const { return fits_gpu && fits_host; }
  bool offloaded() const { return offload.anything_offloaded(); }
};

struct FitReport {
  std::int64_t dp = 1;
  // Every valid combination: stages 0..3 × optimizer none/cpu/nvme, plus parameter offload
  // cpu at stage 3 (at dp 1 every stage is the same, so it stays listed there only); stage-major,
  // least offload first.
  std::vector<FitOption> options;
  // The option to use: among those that fit, the least offload (none < optimizer cpu <
  // parameters cpu < both cpu < optimizer nvme < nvme + parameters cpu), then the least
  // communication (stages 0-2 move 2Ψ, stage 3 3Ψ), then the least GPU memory.
  std::optional<std::size_t> recommended;
  // Smallest dp at which each stage fits without any offload; nullopt: at no dp.
  std::array<std::optional<std::int64_t>, 4> min_dp_without_offload;
};

// Offload cost rank used for the recommendation (0 = nothing offloaded).
int offload_rank(OptimizerOffload optimizer, ParamOffload params);

// Evaluates every combination at base.dp; base's stage and offload fields are ignored, but not
// its offload fraction: every option with optimizer offload offloads that share (an automatic
// one resolved per option against limits.gpu_bytes, which it then needs: PlanError).
// Limits must be positive when given (PlanError otherwise).
FitReport check_fit(const PlanInput& base, const MemoryLimits& limits);

// The largest member of a family of models that fits, for each option of check_fit (in its
// order): the models are model_of_size(1..max_size), their memory growing with the size; size 0
// where not even the first fits. For `starzero plan --max-model`.
struct LargestFit {
  FitOption option;   // stage, offloads, and the plan of the largest that fits
  int size = 0;
};
std::vector<LargestFit> largest_fitting(const PlanInput& base, const MemoryLimits& limits,
                                        const std::function<ModelFootprint(int size)>& model_of_size, int max_size);

// Smallest dp in [1, max_dp] at which `input` (its stage and offloads; dp ignored) fits;
// nullopt if none. Memory per rank never grows with dp (from dp = 2 on): a bisection.
std::optional<std::int64_t> min_dp_to_fit(const PlanInput& input, const MemoryLimits& limits,
                                          std::int64_t max_dp = std::int64_t{1} << 30);

}  // namespace starzero
