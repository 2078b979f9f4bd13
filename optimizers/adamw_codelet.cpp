#include "optimizers/adamw_codelet.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "optimizers/adamw_simd.hpp"
#include "runtime/codelet.hpp"

namespace starzero::optim {

namespace {

struct AdamArgs {
  AdamWHyper hyper;
  DType dtype;  // of the gradient and the parameter copy
  std::size_t grad_offset, param_offset;
};

struct SumArgs {
  DType dtype;
  Slice slice;
};

struct ClipArgs {
  float max_norm;
  float grad_divisor;
};

struct CpuAdamArgs {
  AdamWHyper hyper;
  DType dtype;
  int threads;
  int numa_node;
};

std::size_t slice_count(std::size_t elements, const Slice& slice) {
  return slice.count ? slice.count : elements - slice.offset;
}

// ---- the functions the codelets run: buffers by their declared meaning -------------------------

void sum_of_squares_cpu(const TaskBuffers& b, const SumArgs& a) {
  // In double: the norm of millions of small gradients; on the widest SIMD path of this CPU.
  static const SimdPath path = best_simd_path();
  const std::size_t n = slice_count(b.elements("grad"), a.slice);
  const double sum = a.dtype == DType::f32 ? sum_of_squares(path, b.get<const float>("grad", a.slice.offset), n)
                                           : sum_of_squares(path, b.get<const bf16>("grad", a.slice.offset), n);
  *b.get<float>("sum") = float(sum);
}

void clip_scale_cpu(const TaskBuffers& b, const ClipArgs& a) {
  double sum = 0;
  for (std::size_t i = 0; i < b.repeated_count(); ++i) sum += *b.repeated<const float>(i);
  const float norm = float(std::sqrt(sum) / a.grad_divisor);
  const float clip = (a.max_norm > 0 && norm > a.max_norm) ? a.max_norm / norm : 1.0f;
  *b.get<float>("scale") = std::isfinite(norm) ? clip / a.grad_divisor : std::numeric_limits<float>::quiet_NaN();
  *b.get<float>("norm") = norm;
}

void sum_scalars_cpu(const TaskBuffers& b, const NoArgs&) {
  double sum = 0;
  for (std::size_t i = 0; i < b.repeated_count(); ++i) sum += *b.repeated<const float>(i);
  *b.get<float>("total") = float(sum);
}

// What both CPU AdamW tasks update: n elements of fp32 master weights and moments, with the
// gradient scale; and the widest SIMD path of this CPU.
struct CpuAdamState {
  std::size_t n;
  float scale;
  float *master, *m, *v;
  SimdPath path;
};
CpuAdamState cpu_adam_state(const TaskBuffers& b) {
  static const SimdPath path = best_simd_path();
  return {b.elements("master"),   *b.get<const float>("scale"),
          b.get<float>("master"), b.get<float>("m"),
          b.get<float>("v"),      path};
}

// A skipped step: the parameter copy gets the master weights as they are, as an update would
// write them (a delayed update's buffer and an offloaded W buffer must hold them too).
void write_unchanged_params(const CpuAdamState& s, const TaskBuffers& b, const char* param, std::size_t offset,
                            DType dtype) {
  if (dtype == DType::f32)
    std::copy_n(s.master, s.n, b.get<float>(param, offset));
  else
    std::transform(s.master, s.master + s.n, b.get<bf16>(param, offset), [](float x) { return from_float<bf16>(x); });
}

// The fused kernel, bit-identical to adamw_cpu on every path (optimizers/adamw_simd.hpp).
void adamw_cpu_func(const TaskBuffers& b, const AdamArgs& a) {
  const CpuAdamState s = cpu_adam_state(b);
  if (skips_update(s.scale)) {
    write_unchanged_params(s, b, "param", a.param_offset, a.dtype);
    return;
  }
  if (a.dtype == DType::f32)
    adamw_fused(s.path, s.n, b.get<const float>("grad", a.grad_offset), s.scale, s.master, s.m, s.v,
                b.get<float>("param", a.param_offset), a.hyper);
  else
    adamw_fused(s.path, s.n, b.get<const bf16>("grad", a.grad_offset), s.scale, s.master, s.m, s.v,
                b.get<bf16>("param", a.param_offset), a.hyper);
}

// The CPU step from `from` into the buffers of `s` (the same arrays for the in-place step).
void adamw_from(const CpuAdamState& s, const AdamWStateIn& from, const TaskBuffers& b, const CpuAdamArgs& a) {
  constexpr std::size_t chunk = 1 << 16;  // 64 Ki elements: ~1.8 MB of traffic per chunk
  if (a.dtype == DType::f32)
    adamw_fused_parallel(s.path, a.threads, chunk, s.n, b.get<const float>("grad"), s.scale, from, s.master, s.m, s.v,
                         b.get<float>("param_out"), a.hyper, a.numa_node);
  else
    adamw_fused_parallel(s.path, a.threads, chunk, s.n, b.get<const bf16>("grad"), s.scale, from, s.master, s.m, s.v,
                         b.get<bf16>("param_out"), a.hyper, a.numa_node);
}

void adamw_offload_cpu_func(const TaskBuffers& b, const CpuAdamArgs& a) {
  const CpuAdamState s = cpu_adam_state(b);
  if (skips_update(s.scale)) {
    write_unchanged_params(s, b, "param_out", 0, a.dtype);
    return;
  }
  adamw_from(s, AdamWStateIn{s.master, s.m, s.v}, b, a);
}

// The speculative update (docs/architecture.md, "Exact clipping"): the state is read from the
// "*_from" buffers and written to the others.
AdamWStateIn state_from(const TaskBuffers& b) {
  return {b.get<const float>("master_from"), b.get<const float>("m_from"), b.get<const float>("v_from")};
}

// Before the norm is known: the step with the unclipped scale (the mean over ranks and
// micro-batches only), into the other set of buffers.
void adamw_speculative_func(const TaskBuffers& b, const CpuAdamArgs& a) {
  adamw_from(cpu_adam_state(b), state_from(b), b, a);
}

// Once the clip scale is known. Equal to the unclipped one: the speculative result is the step
// (adopted, nothing to do). Finite: the step again from the old state with it (rolled back).
// Not finite: the step is skipped, so the new set gets the old state and the parameter copy the
// old master weights, as a synchronous AdamW leaves them.
void adamw_commit_func(const TaskBuffers& b, const CpuAdamArgs& a) {
  const CpuAdamState s = cpu_adam_state(b);
  const AdamWStateIn from = state_from(b);
  float* counts = b.get<float>("counts");
  if (s.scale == *b.get<const float>("unclipped_scale")) {
    counts[int(CommitOutcome::adopted)] += 1;
    return;
  }
  if (!skips_update(s.scale)) {
    adamw_from(s, from, b, a);
    counts[int(CommitOutcome::rerun)] += 1;
    return;
  }
  std::copy_n(from.master, s.n, s.master);
  std::copy_n(from.m, s.n, s.m);
  std::copy_n(from.v, s.n, s.v);
  write_unchanged_params(s, b, "param_out", 0, a.dtype);
  counts[int(CommitOutcome::discarded)] += 1;
}

#ifdef STARZERO_WITH_CUDA
void sum_of_squares_cuda_func(const TaskBuffers& b, const SumArgs& a) {
  cudaStream_t stream = starpu_cuda_get_local_stream();
  const std::size_t n = slice_count(b.elements("grad"), a.slice);
  float* sum = b.get<float>("sum");  // written by the kernels (deterministic, adamw.hpp)
  if (a.dtype == DType::f32)
    sum_of_squares_cuda(n, b.get<const float>("grad", a.slice.offset), sum, stream);
  else
    sum_of_squares_cuda(n, b.get<const bf16>("grad", a.slice.offset), sum, stream);
}

void adamw_cuda_func(const TaskBuffers& b, const AdamArgs& a) {
  const std::size_t n = b.elements("master");
  const float* scale = b.get<const float>("scale");
  float* master = b.get<float>("master");
  float* m = b.get<float>("m");
  float* v = b.get<float>("v");
  void* stream = starpu_cuda_get_local_stream();
  if (a.dtype == DType::f32)
    adamw_cuda(n, b.get<const float>("grad", a.grad_offset), scale, master, m, v, b.get<float>("param", a.param_offset),
               a.hyper, stream);
  else
    adamw_cuda(n, b.get<const bf16>("grad", a.grad_offset), scale, master, m, v, b.get<bf16>("param", a.param_offset),
               a.hyper, stream);
}
#endif

// ---- the declarations ------------------------------------------------------------------------------
// n: elements updated or summed; g, p: bytes per gradient / parameter element (4 fp32, 2 bf16).

double partial_sums(Handles h, std::size_t fixed) { return double(h.size() - fixed); }

// FLOPs 2·n; bytes n·g + 4.
Codelet<SumArgs> sum_of_squares_codelet({
    .name = "sum_of_squares",
    .buffers = {{STARPU_R, "grad"}, {STARPU_W, "sum"}},
    .cpu = sum_of_squares_cpu,
    .cuda = STARZERO_CUDA_FUNC(sum_of_squares_cuda_func),
    .work = Work::support,
    .flops = [](const SumArgs& a, Handles h) { return 2.0 * double(slice_count(starpu_vector_get_nx(h[0]), a.slice)); },
    .bytes =
        [](const SumArgs& a, Handles h) {
          return double(slice_count(starpu_vector_get_nx(h[0]), a.slice)) * double(dtype_size(a.dtype)) + 4.0;
        },
    .gpu_class = sim::GpuCostClass::streaming,
});
// Tiny and CPU only; the partial sums come with the task, any number of them.
// FLOPs: one add per partial sum, plus the square root and the clip; bytes 4 per scalar.
Codelet<ClipArgs> clip_scale_codelet({
    .name = "clip_scale",
    .buffers = {{STARPU_W, "scale"}, {STARPU_W, "norm"}},
    .repeated = Buffer{STARPU_R, "partial_sum"},
    .cpu = clip_scale_cpu,
    .work = Work::support,
    .flops = [](const ClipArgs&, Handles h) { return partial_sums(h, 2) + 4.0; },
    .bytes = [](const ClipArgs&, Handles h) { return 4.0 * double(h.size()); },
});
// FLOPs: one add per partial sum; bytes 4 per scalar.
Codelet<NoArgs> sum_scalars_codelet({
    .name = "sum_scalars",
    .buffers = {{STARPU_W, "total"}},
    .repeated = Buffer{STARPU_R, "partial_sum"},
    .cpu = sum_scalars_cpu,
    .work = Work::support,
    .flops = [](const NoArgs&, Handles h) { return partial_sums(h, 1); },
    .bytes = [](const NoArgs&, Handles h) { return 4.0 * double(h.size()); },
});

// AdamW: FLOPs ≈ 12·n (scale the gradient, two moments, two bias corrections, sqrt, divide,
// decay, update); bytes n·(g + 24 + p): gradient read, master/m/v fp32 read and written,
// parameter copy written.
double adamw_flops(std::size_t n) { return 12.0 * double(n); }
double adamw_bytes(std::size_t n, DType dtype) { return double(n) * (2.0 * double(dtype_size(dtype)) + 24.0); }

// The parameter copy is RW: with a shard inside a full buffer only this rank's slice is written.
Codelet<AdamArgs> adamw_codelet({
    .name = "adamw",
    .buffers = {{STARPU_R, "grad"},
                {STARPU_RW, "master"},
                {STARPU_RW, "m"},
                {STARPU_RW, "v"},
                {STARPU_RW, "param"},
                {STARPU_R, "scale"}},
    .cpu = adamw_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(adamw_cuda_func),
    .work = Work::support,
    .flops = [](const AdamArgs&, Handles h) { return adamw_flops(starpu_vector_get_nx(h[1])); },
    .bytes = [](const AdamArgs& a, Handles h) { return adamw_bytes(starpu_vector_get_nx(h[1]), a.dtype); },
    .gpu_class = sim::GpuCostClass::streaming,
});

// The CPU Adam pool's token (one task holding it at a time): COMMUTE, so that the tasks take it in
// priority order (CpuAdamPool::turn) rather than in submission order.
constexpr auto kPoolTurn = starpu_data_access_mode(STARPU_RW | STARPU_COMMUTE);

// ZeRO-Offload's CPU step; "pool" is the CPU Adam pool's token.
Codelet<CpuAdamArgs> adamw_offload_codelet({
    .name = "adamw_cpu",
    .buffers = {{STARPU_R, "grad"},
                {STARPU_RW, "master"},
                {STARPU_RW, "m"},
                {STARPU_RW, "v"},
                {STARPU_W, "param_out"},
                {STARPU_R, "scale"},
                {kPoolTurn, "pool"}},
    .cpu = adamw_offload_cpu_func,
    .work = Work::support,
    .flops = [](const CpuAdamArgs&, Handles h) { return adamw_flops(starpu_vector_get_nx(h[1])); },
    .bytes = [](const CpuAdamArgs& a, Handles h) { return adamw_bytes(starpu_vector_get_nx(h[1]), a.dtype); },
    .cores = [](const CpuAdamArgs& a) { return a.threads; },
});

// The speculative AdamW: the same work as adamw_cpu, its state read from one set of buffers and
// written (W: nothing fetched) to the other.
Codelet<CpuAdamArgs> adamw_speculative_codelet({
    .name = "adamw_cpu_speculative",
    .buffers = {{STARPU_R, "grad"},
                {STARPU_R, "master_from"},
                {STARPU_R, "m_from"},
                {STARPU_R, "v_from"},
                {STARPU_W, "master"},
                {STARPU_W, "m"},
                {STARPU_W, "v"},
                {STARPU_W, "param_out"},
                {STARPU_R, "scale"},
                {kPoolTurn, "pool"}},
    .cpu = adamw_speculative_func,
    .work = Work::support,
    .flops = [](const CpuAdamArgs&, Handles h) { return adamw_flops(starpu_vector_get_nx(h[4])); },
    .bytes = [](const CpuAdamArgs& a, Handles h) { return adamw_bytes(starpu_vector_get_nx(h[4]), a.dtype); },
    .cores = [](const CpuAdamArgs& a) { return a.threads; },
});

// The commit. Its cost is costed as the common case, no clipping: two scalars read. (A rollback
// costs another AdamW; history-based models learn the mix, the roofline cannot know it.)
Codelet<CpuAdamArgs> adamw_commit_codelet({
    .name = "adamw_commit",
    .buffers = {{STARPU_R, "scale"},
                {STARPU_R, "unclipped_scale"},
                {STARPU_R, "grad"},
                {STARPU_R, "master_from"},
                {STARPU_R, "m_from"},
                {STARPU_R, "v_from"},
                {STARPU_RW, "master"},
                {STARPU_RW, "m"},
                {STARPU_RW, "v"},
                {STARPU_RW, "param_out"},
                {kPoolTurn, "pool"},
                {STARPU_RW, "counts"}},
    .cpu = adamw_commit_func,
    .work = Work::support,
    .flops = [](const CpuAdamArgs&, Handles) { return 1.0; },
    .bytes = [](const CpuAdamArgs&, Handles) { return 12.0; },
});

}  // namespace

bool skips_update(float scale) { return std::isnan(scale); }

void submit_sum_of_squares(starpu_data_handle_t grad, Slice slice, DType dtype, starpu_data_handle_t sum_of_squares,
                           const std::string& name) {
  submit(sum_of_squares_codelet, {grad, sum_of_squares}, SumArgs{dtype, slice}, name);
}

void submit_sum_scalars(const std::vector<starpu_data_handle_t>& partial_sums, starpu_data_handle_t total,
                        const std::string& name) {
  std::vector<starpu_data_handle_t> handles{total};
  handles.insert(handles.end(), partial_sums.begin(), partial_sums.end());
  submit(sum_scalars_codelet, handles, NoArgs{}, name);
}

void submit_clip_scale(const std::vector<starpu_data_handle_t>& partial_sums, float max_norm, float grad_divisor,
                       starpu_data_handle_t scale, starpu_data_handle_t norm, const std::string& name) {
  std::vector<starpu_data_handle_t> handles{scale, norm};
  handles.insert(handles.end(), partial_sums.begin(), partial_sums.end());
  submit(clip_scale_codelet, handles, ClipArgs{max_norm, grad_divisor}, name);
}

void submit_adamw(starpu_data_handle_t grad, std::size_t grad_offset, starpu_data_handle_t master,
                  starpu_data_handle_t m, starpu_data_handle_t v, starpu_data_handle_t param, std::size_t param_offset,
                  starpu_data_handle_t scale, DType dtype, const AdamWHyper& hyper, const std::string& name) {
  submit(adamw_codelet, {grad, master, m, v, param, scale}, AdamArgs{hyper, dtype, grad_offset, param_offset}, name);
}

void submit_adamw_cpu(starpu_data_handle_t grad, starpu_data_handle_t master, starpu_data_handle_t m,
                      starpu_data_handle_t v, starpu_data_handle_t param_out, starpu_data_handle_t scale, DType dtype,
                      const AdamWHyper& hyper, const CpuAdamPool& pool, const std::string& name) {
  if (!pool.token || pool.threads < 1) throw std::invalid_argument("submit_adamw_cpu: no CPU Adam pool");
  const std::size_t n = starpu_vector_get_nx(master);
  if (starpu_vector_get_nx(grad) != n || starpu_vector_get_nx(param_out) != n)
    throw std::invalid_argument("submit_adamw_cpu " + name + ": gradient, state and parameter sizes differ");
  submit(adamw_offload_codelet, {grad, master, m, v, param_out, scale, pool.token},
         CpuAdamArgs{hyper, dtype, pool.threads, pool.numa_node}, name, {.priority = pool.turn});
}

void submit_adamw_cpu_speculative(starpu_data_handle_t grad, const AdamWStateHandles& from,
                                  const AdamWStateHandles& to, starpu_data_handle_t param_out,
                                  starpu_data_handle_t unclipped_scale, DType dtype, const AdamWHyper& hyper,
                                  const CpuAdamPool& pool, const std::string& name) {
  if (!pool.token || pool.threads < 1) throw std::invalid_argument("submit_adamw_cpu_speculative: no CPU Adam pool");
  const std::size_t n = starpu_vector_get_nx(to.master);
  for (starpu_data_handle_t h : {grad, param_out, to.m, to.v, from.master, from.m, from.v})
    if (starpu_vector_get_nx(h) != n)
      throw std::invalid_argument("submit_adamw_cpu_speculative " + name + ": gradient, state and parameter sizes differ");
  submit(adamw_speculative_codelet,
         {grad, from.master, from.m, from.v, to.master, to.m, to.v, param_out, unclipped_scale, pool.token},
         CpuAdamArgs{hyper, dtype, pool.threads, pool.numa_node}, name, {.priority = pool.turn});
}

void submit_adamw_commit(starpu_data_handle_t clip_scale, starpu_data_handle_t unclipped_scale,
                         starpu_data_handle_t grad, const AdamWStateHandles& from, const AdamWStateHandles& to,
                         starpu_data_handle_t param_out, starpu_data_handle_t counts, DType dtype,
                         const AdamWHyper& hyper, const CpuAdamPool& pool, const std::string& name) {
  if (!pool.token || pool.threads < 1) throw std::invalid_argument("submit_adamw_commit: no CPU Adam pool");
  if (starpu_vector_get_nx(counts) != 3) throw std::invalid_argument("submit_adamw_commit: counts take 3 values");
  submit(adamw_commit_codelet,
         {clip_scale, unclipped_scale, grad, from.master, from.m, from.v, to.master, to.m, to.v, param_out, pool.token,
          counts},
         CpuAdamArgs{hyper, dtype, pool.threads, pool.numa_node}, name, {.priority = pool.turn});
}

}  // namespace starzero::optim
