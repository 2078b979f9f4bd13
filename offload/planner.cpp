#include "offload/planner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "offload/engine_options.hpp"
#include "offload/layer_plan.hpp"
#include "tasks/attention_cudnn.hpp"

namespace starzero {
namespace {

// Shard divisors per stage: what each stage shards (seeds' table).
std::int64_t param_divisor(int stage, std::int64_t dp) { return stage >= 3 ? dp : 1; }
std::int64_t grad_divisor(int stage, std::int64_t dp) { return stage >= 2 ? dp : 1; }
std::int64_t optimizer_divisor(int stage, std::int64_t dp) { return stage >= 1 ? dp : 1; }

// Seeds' static bytes, before placement. Each term is (whole bytes) / divisor.
ByteSplit seeds_bytes(double psi, std::int64_t dp, int stage, double k, bool fp32_grad_accum, int prec) {
  ByteSplit s;
  s.params = prec * psi / double(param_divisor(stage, dp));
  const double grad_div = double(grad_divisor(stage, dp));
  s.grads = prec * psi / grad_div + (fp32_grad_accum ? 4.0 * psi / grad_div : 0.0);
  s.optimizer = k * psi / double(optimizer_divisor(stage, dp));
  return s;
}

}  // namespace

// ---- One configuration ---------------------------------------------------------------------

void validate(const PlanInput& in) {
  if (in.model) {
    if (in.model->params <= 0)
      throw PlanError("the model footprint's parameter count must be > 0, got " + std::to_string(in.model->params));
    if (in.params != 0 && in.params != in.model->params) {
      throw PlanError("params (" + std::to_string(in.params) + ") disagrees with the model footprint (" +
                      std::to_string(in.model->params) + "); give one or the other");
    }
  } else if (in.params <= 0) {
    throw PlanError("params must be > 0, got " + std::to_string(in.params));
  }
  if (in.dp <= 0) throw PlanError("dp must be > 0, got " + std::to_string(in.dp));
  if (!(in.k >= 0) || !std::isfinite(in.k)) {
    throw PlanError("k (optimizer bytes per parameter) must be >= 0, got " + std::to_string(in.k));
  }
  // The run's rules on the stage and the windows, from their one home, as the planner's errors.
  try {
    check_zero_options(in.stage, in.prefetch_depth, in.grad_window);
    check_param_offload_stage(in.offload, in.stage, in.dp);
  } catch (const std::invalid_argument& e) {
    throw PlanError(e.what());
  }
  if (!(in.offload.optimizer_fraction.value >= 0 && in.offload.optimizer_fraction.value <= 1))
    throw PlanError("the offloaded fraction of the optimizer state must be in [0, 1], got " +
                    std::to_string(in.offload.optimizer_fraction.value));
  if (!(in.offload.speculative_fraction.value >= 0 && in.offload.speculative_fraction.value <= 1))
    throw PlanError("the speculative fraction must be in [0, 1], got " +
                    std::to_string(in.offload.speculative_fraction.value));
  if (in.model && !in.model->layer_params.empty()) {
    std::int64_t sum = 0;
    for (std::int64_t count : in.model->layer_params) sum += count;
    if (sum != in.model->params)
      throw PlanError("the model footprint's layers hold " + std::to_string(sum) + " parameters, not its " +
                      std::to_string(in.model->params));
  }
}

std::int64_t model_params(const PlanInput& in) {
  validate(in);
  return in.model ? in.model->params : in.params;
}

double MemoryPlan::gpu_total() const {
  return gpu.total() + activations.value_or(0.0) + temporaries.value_or(0.0) + grads_in_flight.value_or(0.0) +
         attention_workspace;
}

namespace {

// The plan of one layer holding `psi` parameters on rank 0 of N, its optimizer state offloaded
// as `offload` says (`speculative`: with the second set of optimizer state): with all Ψ
// parameters its held buffers, unpadded, are the seeds' figures placed; a split optimizer state is
// two or three such layers: the offloaded share (speculative or not) and the rest.
LayerPlan whole_model_layer(const PlanInput& in, std::int64_t psi, OptimizerOffload offload, bool speculative) {
  LayerPlanInput layer;
  layer.stage = in.stage;
  layer.ranks = in.dp;
  layer.rank = 0;
  layer.offload_optimizer = offload;
  layer.offload_params = in.offload.params;
  layer.fp32_grad_accum = in.fp32_grad_accum;
  // Its second set of optimizer state exists where a speculative CPU AdamW runs.
  layer.speculative_update = speculative;
  layer.dtype = storage_dtype(in.precision);
  layer.params = std::size_t(psi);
  layer.optimizer_bytes_per_param = in.k;
  return LayerPlan(layer);
}

std::optional<double> zero3_temporaries(const PlanInput& in, int prec) {
  const bool fetched = in.dp == 1 && in.offload.params == ParamOffload::cpu;  // from host memory, any stage
  if (in.stage < 3 && !fetched) return 0.0;
  if (in.dp == 1 && !fetched) return 0.0;  // the "shard" is the whole model
  if (!in.model) return std::nullopt;
  return double(in.prefetch_depth + 1) * double(in.model->largest_layer().count) * prec;
}

// The full gradients on the GPU when they are streamed (the layer plan's GradAccess::streamed):
// the gradient window's G groups at most, each no larger than the largest layer.
std::optional<double> streamed_gradients(const PlanInput& in, const LayerPlan& plan, int prec) {
  if (plan.grad_access() != GradAccess::streamed) return 0.0;
  if (!in.model) return std::nullopt;
  return double(in.grad_window) * double(in.model->largest_layer().count) * prec;
}

}  // namespace

void add_placed_bytes(const LayerPlan& plan, bool padded, PlacedBytes& sum) {
  for (const LayerPlan::HeldCopy& copy : plan.held_copies()) {
    ByteSplit& place = copy.place == MemoryPlace::device ? sum.gpu
                       : copy.place == MemoryPlace::host ? sum.host
                                                         : sum.nvme;
    double& category = copy.buffer->category == MemoryCategory::params  ? place.params
                       : copy.buffer->category == MemoryCategory::grads ? place.grads
                                                                        : place.optimizer;
    category += padded ? double(plan.bytes(*copy.buffer)) : plan.unpadded_bytes(*copy.buffer);
  }
}

OptimizerSplit optimizer_split_of(const PlanInput& in) {
  const std::int64_t psi = model_params(in);
  const bool offloaded = in.offload.optimizer != OptimizerOffload::none;
  if (offloaded && in.offload.optimizer_fraction.automatic)
    throw PlanError("--offload-optimizer-fraction auto must be resolved against the GPU's memory first");
  const double fraction = offloaded ? in.offload.optimizer_fraction.value : 0.0;
  if (in.model && !in.model->layer_params.empty()) return split_optimizer_state(in.model->layer_params, fraction);
  return split_optimizer_state(psi, fraction);
}

MemoryPlan plan_memory(const PlanInput& in) {
  const std::int64_t psi_count = model_params(in);
  const double psi = double(psi_count);
  const int prec = precision_bytes(in.precision);

  MemoryPlan p;
  p.params = psi_count;
  p.dp = in.dp;
  p.stage = in.stage;
  p.seeds = seeds_bytes(psi, in.dp, in.stage, in.k, in.fp32_grad_accum, prec);
  p.optimizer_split = optimizer_split_of(in);
  p.speculative_split = speculative_split_of(in);
  const std::int64_t offloaded = p.optimizer_split.offloaded_params;
  const std::int64_t speculative = p.speculative_split.offloaded_params;
  PlacedBytes placed;
  // All or nothing offloaded: one layer of Ψ, the seeds' figures exactly; else the shares:
  // offloaded and speculative, offloaded and synchronous, kept on the device.
  std::optional<LayerPlan> speculative_share, offloaded_share, kept_share;
  if (speculative > 0) {
    speculative_share.emplace(whole_model_layer(in, speculative, in.offload.optimizer, true));
    add_placed_bytes(*speculative_share, false, placed);
  }
  if (offloaded > speculative) {
    offloaded_share.emplace(whole_model_layer(in, offloaded - speculative, in.offload.optimizer, false));
    add_placed_bytes(*offloaded_share, false, placed);
  }
  if (offloaded < psi_count) {
    kept_share.emplace(whole_model_layer(in, psi_count - offloaded, OptimizerOffload::none, false));
    add_placed_bytes(*kept_share, false, placed);
  }
  const LayerPlan& whole = speculative_share ? *speculative_share : offloaded_share ? *offloaded_share : *kept_share;
  p.gpu = placed.gpu;
  p.host = placed.host;
  p.nvme = placed.nvme;

  if (offloaded > 0) {
    // This rank's gradient shard of the offloaded share comes down, its updated parameter shard
    // goes up (at dp 1 with the parameters on the host, the next forward's fetch below brings them).
    const double shard = prec * double(offloaded) / double(optimizer_divisor(in.stage, in.dp));
    const bool params_fetched = in.dp == 1 && in.offload.params == ParamOffload::cpu;
    p.offload_transfer_bytes += params_fetched ? shard : 2 * shard;
  }
  if (in.offload.params == ParamOffload::cpu) {
    // Each layer's shard goes up for the forward and again for the backward all-gather.
    p.offload_transfer_bytes += 2 * p.seeds.params;
  }
  // Streamed gradients also come back up for every later micro-batch's backward (not counted here:
  // this is one micro-batch's traffic, as the step bound's).
  p.grads_in_flight = streamed_gradients(in, whole, prec);
  if (in.model) {
    const std::int64_t buffers = prec == 4 ? in.model->activation_bytes_4 : in.model->activation_bytes_2;
    p.activations = buffers > 0 ? double(buffers) : double(in.model->activation_elements()) * prec;
    p.host_activations =
        double(prec == 4 ? in.model->offloaded_activation_bytes_4 : in.model->offloaded_activation_bytes_2);
    p.offload_transfer_bytes += 2 * p.host_activations;  // down after the forward, up before the backward
    const ModelFootprint::AttentionShape& a = in.model->attention;
    if (in.cudnn_attention && a.heads > 0 && a.kv_heads > 0) {
      const tasks::cudnn_attention::CudnnAttentionShape whole{.B = a.batch, .T = a.seq, .NH = a.heads,
                                                              .NKV = a.kv_heads, .hs = a.head_size, .nh = a.heads,
                                                              .ld_lse = a.heads * a.seq,
                                                              .ld_dinp = (a.heads + 2 * a.kv_heads) * a.head_size,
                                                              .backward = true};
      p.attention_workspace = double(tasks::cudnn_attention::estimated_workspace_bytes(whole));
    }
  }
  p.temporaries = zero3_temporaries(in, prec);
  return p;
}

OptimizerSplit speculative_split_of(const PlanInput& in) {
  const std::int64_t psi = model_params(in);
  const bool cpu_adamw = in.offload.speculative_update && in.offload.optimizer == OptimizerOffload::cpu;
  if (cpu_adamw && in.offload.speculative_fraction.automatic)
    throw PlanError("--speculative-fraction auto must be resolved against the host's memory first");
  const double fraction =
      cpu_adamw ? speculative_share(optimizer_split_of(in), in.offload.speculative_fraction.value) : 0.0;
  if (in.model && !in.model->layer_params.empty()) return split_optimizer_state(in.model->layer_params, fraction);
  return split_optimizer_state(psi, fraction);
}

double auto_speculative_fraction(const PlanInput& input, double host_bytes) {
  if (!(host_bytes > 0) || !std::isfinite(host_bytes)) throw PlanError("the host's memory must be > 0 bytes");
  PlanInput probe = input;
  const auto fits = [&](double fraction) {
    probe.offload.speculative_fraction = {fraction, false};
    return plan_memory(probe).host_total() <= host_bytes;
  };
  if (fits(1.0)) return 1.0;
  const std::int64_t psi = model_params(input);
  double best = 0.0;
  if (input.model && !input.model->layer_params.empty()) {
    // Whole layers from the last one down, as long as they fit.
    std::int64_t taken = 0;
    const std::vector<std::int64_t>& layers = input.model->layer_params;
    for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
      taken += *layer;
      const double fraction = double(taken) / double(psi);
      if (!fits(fraction)) break;
      best = fraction;
    }
    return best;
  }
  // F·Ψ continuous: the host total grows linearly in F.
  if (!fits(0.0)) return 0.0;
  probe.offload.speculative_fraction = {0.0, false};
  const double without = plan_memory(probe).host_total();
  probe.offload.speculative_fraction = {1.0, false};
  const double per_param = (plan_memory(probe).host_total() - without) / double(psi);
  if (!(per_param > 0)) return 1.0;
  best = std::floor((host_bytes - without) / per_param) / double(psi);
  return std::clamp(best, 0.0, 1.0);
}

PlanInput resolve_speculative_fraction(PlanInput input, std::optional<double> host_bytes) {
  if (!input.offload.speculative_fraction.automatic) return input;
  if (!input.offload.speculative_update || input.offload.optimizer != OptimizerOffload::cpu) {
    input.offload.speculative_fraction = {1.0, false};
    return input;
  }
  if (!host_bytes) throw PlanError("--speculative-fraction auto needs the host's memory (--host-mem)");
  input.offload.speculative_fraction = {auto_speculative_fraction(input, *host_bytes), false};
  return input;
}

double auto_offload_fraction(const PlanInput& input, double gpu_bytes) {
  if (!(gpu_bytes > 0) || !std::isfinite(gpu_bytes)) throw PlanError("the GPU's memory must be > 0 bytes");
  PlanInput all = input, none = input;
  all.offload.optimizer_fraction = {1.0, false};
  none.offload.optimizer_fraction = {0.0, false};
  const MemoryPlan with_all = plan_memory(all), with_none = plan_memory(none);
  const double psi = double(with_all.params);
  // The state's GPU bytes per parameter: k, or k/N once sharded (the two plans differ by it alone).
  const double per_param = (with_none.gpu_total() - with_all.gpu_total()) / psi;
  if (!(per_param > 0)) return 1.0;  // no state on the GPU to place (k = 0)
  double windows = 0;
  if (input.stage >= 2 && input.dp > 1 && input.model)
    windows = double(input.grad_window + 1) * double(input.model->largest_layer().count) *
              precision_bytes(input.precision);
  const double left = gpu_bytes * (1.0 - kAutoGpuMargin) - with_all.gpu_total() - windows;
  const double on_gpu = std::clamp(std::floor(left / per_param), 0.0, psi);
  return std::clamp(1.0 - on_gpu / psi, 0.0, 1.0);
}

PlanInput resolve_offload_fraction(PlanInput input, std::optional<double> gpu_bytes) {
  if (!input.offload.optimizer_fraction.automatic || input.offload.optimizer == OptimizerOffload::none) return input;
  if (!gpu_bytes)
    throw PlanError("--offload-optimizer-fraction auto needs the GPU's memory (--gpu-mem, or --platform with a GPU)");
  input.offload.optimizer_fraction = {auto_offload_fraction(input, *gpu_bytes), false};
  return input;
}

double gpu_floor_bytes(const PlanInput& input) {
  PlanInput two = input;
  two.dp = 2;  // any dp > 1: sets the ZeRO-3 temporaries; the unsharded terms do not depend on dp
  const MemoryPlan p = plan_memory(two);
  double floor = p.activations.value_or(0.0) + p.temporaries.value_or(0.0);
  if (input.stage < 3) floor += p.gpu.params;
  if (input.stage < 2) floor += p.gpu.grads;
  if (input.stage < 1) floor += p.gpu.optimizer;
  return floor;
}

double zero_memory_per_gpu(std::int64_t params, std::int64_t dp, int stage, double k, bool fp32_grad_accum, int prec) {
  if (prec != 2 && prec != 4) throw PlanError("precision bytes must be 2 or 4, got " + std::to_string(prec));
  PlanInput in;
  in.params = params;
  in.dp = dp;
  in.stage = stage;
  in.k = k;
  in.fp32_grad_accum = fp32_grad_accum;
  validate(in);
  return seeds_bytes(double(params), dp, stage, k, fp32_grad_accum, prec).total();
}

// ---- Communication -------------------------------------------------------------------------

CommVolume zero_communication_volume(std::int64_t params, std::int64_t dp, int stage, Precision precision) {
  PlanInput in;
  in.params = params;
  in.dp = dp;
  in.stage = stage;
  in.precision = precision;
  return plan_communication(in);
}

CommVolume plan_communication(const PlanInput& in) {
  const double psi = double(model_params(in));
  CommVolume v;
  // Stages 0-2: gradients reduced (Ψ) + parameters gathered (Ψ), or one all-reduce (2Ψ).
  // Stage 3: parameters gathered in forward and again in backward, gradients reduce-scattered.
  v.psi_multiple = in.stage == 3 ? 3 : 2;
  v.elements = v.psi_multiple * psi;
  v.bytes = v.elements * precision_bytes(in.precision);
  v.ring_elements = v.elements * double(in.dp - 1) / double(in.dp);
  v.ring_bytes = v.ring_elements * precision_bytes(in.precision);
  return v;
}

// ---- Fit check -----------------------------------------------------------------------------

int offload_rank(OptimizerOffload optimizer, ParamOffload params) {
  const int opt = optimizer == OptimizerOffload::none ? 0 : optimizer == OptimizerOffload::cpu ? 1 : 4;
  return opt + (params == ParamOffload::cpu ? 2 : 0);
}

namespace {

void check_limits(const MemoryLimits& limits) {
  for (const auto& limit : {limits.gpu_bytes, limits.host_bytes}) {
    if (limit && !(*limit > 0 && std::isfinite(*limit))) {
      throw PlanError("memory limits must be > 0 bytes");
    }
  }
}

FitOption evaluate(const PlanInput& given, const MemoryLimits& limits) {
  const PlanInput input =
      resolve_speculative_fraction(resolve_offload_fraction(given, limits.gpu_bytes), limits.host_bytes);
  FitOption o;
  o.stage = input.stage;
  o.offload = input.offload;
  o.plan = plan_memory(input);
  o.fits_gpu = !limits.gpu_bytes || o.plan.gpu_total() <= *limits.gpu_bytes;
  o.fits_host = !limits.host_bytes || o.plan.host_total() <= *limits.host_bytes;
  return o;
}

}  // namespace

std::optional<std::int64_t> min_dp_to_fit(const PlanInput& input, const MemoryLimits& limits, std::int64_t max_dp) {
  check_limits(limits);
  if (max_dp < 1) throw PlanError("max dp must be >= 1");
  PlanInput probe = input;
  probe.dp = 1;
  if (evaluate(probe, limits).fits()) return 1;
  // From dp = 2 on, every term is nonincreasing in dp (dp = 1 is special: no ZeRO-3
  // temporaries), so the smallest fitting dp is found by bisection.
  probe.dp = max_dp;
  if (max_dp < 2 || !evaluate(probe, limits).fits()) return std::nullopt;
  std::int64_t lo = 2, hi = max_dp;  // hi fits; find the smallest that does
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    probe.dp = mid;
    if (evaluate(probe, limits).fits()) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

std::vector<LargestFit> largest_fitting(const PlanInput& base, const MemoryLimits& limits,
                                        const std::function<ModelFootprint(int size)>& model_of_size, int max_size) {
  const auto option_at = [&](int size, std::size_t i) {
    PlanInput in = base;
    in.model = model_of_size(size);
    return check_fit(in, limits).options.at(i);
  };
  std::vector<LargestFit> out;
  const std::size_t options = check_fit([&] {
    PlanInput in = base;
    in.model = model_of_size(1);
    return in;
  }(), limits).options.size();
  for (std::size_t i = 0; i < options; ++i) {
    LargestFit best{option_at(1, i), 0};
    int lo = 0, hi = max_size;  // size lo fits (0: trivially), hi + 1 does not
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      const FitOption o = option_at(mid, i);
      if (o.fits()) {
        lo = mid;
        best = {o, mid};
      } else {
        hi = mid - 1;
      }
    }
    out.push_back(best);
  }
  return out;
}

FitReport check_fit(const PlanInput& base, const MemoryLimits& limits) {
  check_limits(limits);
  FitReport report;
  report.dp = base.dp;
  PlanInput in = base;
  for (int stage = 0; stage <= 3; ++stage) {
    in.stage = stage;
    for (ParamOffload par : {ParamOffload::none, ParamOffload::cpu}) {
      if (par == ParamOffload::cpu && stage != 3) continue;
      for (OptimizerOffload opt : {OptimizerOffload::none, OptimizerOffload::cpu, OptimizerOffload::nvme}) {
        in.offload.optimizer = opt;
        in.offload.params = par;
        report.options.push_back(evaluate(in, limits));
      }
    }
    in.offload.optimizer = OptimizerOffload::none;
    in.offload.params = ParamOffload::none;
    report.min_dp_without_offload[stage] = min_dp_to_fit(in, limits);
  }
  for (std::size_t i = 0; i < report.options.size(); ++i) {
    const FitOption& o = report.options[i];
    if (!o.fits()) continue;
    const auto key = [](const FitOption& x) {
      return std::make_tuple(offload_rank(x.offload.optimizer, x.offload.params), x.stage == 3 ? 3 : 2,
                             x.plan.gpu_total());
    };
    if (!report.recommended || key(o) < key(report.options[*report.recommended])) report.recommended = i;
  }
  return report;
}

}  // namespace starzero
