#include "optimizers/adamw_codelet.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "optimizers/adamw_simd.hpp"
#include "runtime/codelet.hpp"
#include "runtime/task_name.hpp"

namespace starzero::optim {

namespace {

template <class T>
T* ptr(void* buffer) {
  return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buffer));
}
std::size_t count(void* buffer) { return STARPU_VECTOR_GET_NX(buffer); }

struct AdamArgs {
  AdamWHyper hyper;
  DType dtype;
  std::size_t grad_offset, param_offset;
};

struct SumArgs {
  DType dtype;
  Slice slice;
};

std::size_t slice_count(void* buffer, const Slice& slice) {
  return slice.count ? slice.count : count(buffer) - slice.offset;
}

void sum_of_squares_cpu(void* buffers[], void* cl_arg) {
  SumArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  double sum = 0;  // double: the norm of millions of small gradients
  const std::size_t n = slice_count(buffers[0], a.slice);
  if (a.dtype == DType::f32) {
    const float* g = ptr<float>(buffers[0]) + a.slice.offset;
    for (std::size_t i = 0; i < n; ++i) sum += double(g[i]) * g[i];
  } else {
    const bf16* g = ptr<bf16>(buffers[0]) + a.slice.offset;
    for (std::size_t i = 0; i < n; ++i) sum += double(to_float(g[i])) * to_float(g[i]);
  }
  *ptr<float>(buffers[1]) = float(sum);
}

void clip_scale_cpu(void* buffers[], void* cl_arg) {
  float max_norm, divisor;
  int nparts;
  starpu_codelet_unpack_args(cl_arg, &max_norm, &divisor, &nparts);
  double sum = 0;
  for (int i = 0; i < nparts; ++i) sum += *ptr<float>(buffers[2 + i]);
  const float norm = float(std::sqrt(sum) / divisor);
  const float clip = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1.0f;
  *ptr<float>(buffers[0]) = clip / divisor;
  *ptr<float>(buffers[1]) = norm;
}

void sum_scalars_cpu(void* buffers[], void* cl_arg) {
  int nparts;
  starpu_codelet_unpack_args(cl_arg, &nparts);
  double sum = 0;
  for (int i = 0; i < nparts; ++i) sum += *ptr<float>(buffers[1 + i]);
  *ptr<float>(buffers[0]) = float(sum);
}

// The fused kernel, bit-identical to adamw_cpu on every path (optimizers/adamw_simd.hpp).
void adamw_cpu_func(void* buffers[], void* cl_arg) {
  AdamArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  const std::size_t n = count(buffers[1]);
  const float scale = *ptr<float>(buffers[5]);
  static const SimdPath path = best_simd_path();
  if (a.dtype == DType::f32)
    adamw_fused(path, n, ptr<float>(buffers[0]) + a.grad_offset, scale, ptr<float>(buffers[1]),
                ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<float>(buffers[4]) + a.param_offset, a.hyper);
  else
    adamw_fused(path, n, ptr<bf16>(buffers[0]) + a.grad_offset, scale, ptr<float>(buffers[1]),
                ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<bf16>(buffers[4]) + a.param_offset, a.hyper);
}

struct CpuAdamArgs {
  AdamWHyper hyper;
  DType dtype;
  int threads;
  int numa_node;
};

// Buffers: grad, master, m, v, param_out, scale, token.
void adamw_offload_cpu_func(void* buffers[], void* cl_arg) {
  CpuAdamArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  const std::size_t n = count(buffers[1]);
  const float scale = *ptr<float>(buffers[5]);
  static const SimdPath path = best_simd_path();
  constexpr std::size_t chunk = 1 << 16;  // 64 Ki elements: ~1.8 MB of traffic per chunk
  if (a.dtype == DType::f32)
    adamw_fused_parallel(path, a.threads, chunk, n, ptr<float>(buffers[0]), scale, ptr<float>(buffers[1]),
                         ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<float>(buffers[4]), a.hyper,
                         a.numa_node);
  else
    adamw_fused_parallel(path, a.threads, chunk, n, ptr<bf16>(buffers[0]), scale, ptr<float>(buffers[1]),
                         ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<bf16>(buffers[4]), a.hyper,
                         a.numa_node);
}

#ifdef STARZERO_WITH_CUDA
void sum_of_squares_cuda_func(void* buffers[], void* cl_arg) {
  SumArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  cudaStream_t stream = starpu_cuda_get_local_stream();
  const std::size_t n = slice_count(buffers[0], a.slice);
  cudaMemsetAsync(ptr<float>(buffers[1]), 0, sizeof(float), stream);
  if (a.dtype == DType::f32)
    sum_of_squares_cuda(n, ptr<float>(buffers[0]) + a.slice.offset, ptr<float>(buffers[1]), stream);
  else
    sum_of_squares_cuda(n, ptr<bf16>(buffers[0]) + a.slice.offset, ptr<float>(buffers[1]), stream);
}

void adamw_cuda_func(void* buffers[], void* cl_arg) {
  AdamArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  const std::size_t n = count(buffers[1]);
  void* stream = starpu_cuda_get_local_stream();
  if (a.dtype == DType::f32)
    adamw_cuda(n, ptr<float>(buffers[0]) + a.grad_offset, ptr<float>(buffers[5]), ptr<float>(buffers[1]),
               ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<float>(buffers[4]) + a.param_offset, a.hyper,
               stream);
  else
    adamw_cuda(n, ptr<bf16>(buffers[0]) + a.grad_offset, ptr<float>(buffers[5]), ptr<float>(buffers[1]),
               ptr<float>(buffers[2]), ptr<float>(buffers[3]), ptr<bf16>(buffers[4]) + a.param_offset, a.hyper,
               stream);
}
#endif

Codelet sum_of_squares_codelet("sum_of_squares", sum_of_squares_cpu, STARZERO_CUDA_FUNC(sum_of_squares_cuda_func),
                               {STARPU_R, STARPU_W});
// Tiny and CPU only; the variable number of inputs comes with the task.
Codelet clip_scale_codelet("clip_scale", clip_scale_cpu, nullptr, {});
Codelet sum_scalars_codelet("sum_scalars", sum_scalars_cpu, nullptr, {});
// The parameter copy is RW: with a shard inside a full buffer only this rank's slice is written.
Codelet adamw_codelet("adamw", adamw_cpu_func, STARZERO_CUDA_FUNC(adamw_cuda_func),
                      {STARPU_R, STARPU_RW, STARPU_RW, STARPU_RW, STARPU_RW, STARPU_R});

Codelet adamw_offload_codelet("adamw_cpu", adamw_offload_cpu_func, nullptr,
                              {STARPU_R, STARPU_RW, STARPU_RW, STARPU_RW, STARPU_W, STARPU_R, STARPU_RW});

void check(int ret, const std::string& name) {
  if (ret != 0) throw std::runtime_error("submitting task " + name + " failed (StarPU code " + std::to_string(ret) + ")");
}

}  // namespace

void submit_sum_of_squares(starpu_data_handle_t grad, Slice slice, DType dtype, starpu_data_handle_t sum_of_squares,
                           const std::string& name) {
  const SumArgs args{dtype, slice};
  check(starpu_task_insert(sum_of_squares_codelet.get(), STARPU_R, grad, STARPU_W, sum_of_squares, STARPU_VALUE, &args,
                           sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_sum_scalars(const std::vector<starpu_data_handle_t>& partial_sums, starpu_data_handle_t total,
                        const std::string& name) {
  std::vector<starpu_data_descr> buffers{{total, STARPU_W}};
  for (auto h : partial_sums) buffers.push_back({h, STARPU_R});
  const int nparts = int(partial_sums.size());
  check(starpu_task_insert(sum_scalars_codelet.get(), STARPU_DATA_MODE_ARRAY, buffers.data(), int(buffers.size()),
                           STARPU_VALUE, &nparts, sizeof nparts, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_clip_scale(const std::vector<starpu_data_handle_t>& partial_sums, float max_norm, float grad_divisor,
                       starpu_data_handle_t scale, starpu_data_handle_t norm, const std::string& name) {
  std::vector<starpu_data_descr> buffers;
  buffers.push_back({scale, STARPU_W});
  buffers.push_back({norm, STARPU_W});
  for (auto h : partial_sums) buffers.push_back({h, STARPU_R});
  const int nparts = int(partial_sums.size());
  check(starpu_task_insert(clip_scale_codelet.get(), STARPU_DATA_MODE_ARRAY, buffers.data(), int(buffers.size()),
                           STARPU_VALUE, &max_norm, sizeof max_norm, STARPU_VALUE, &grad_divisor, sizeof grad_divisor,
                           STARPU_VALUE, &nparts, sizeof nparts,
                           STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_adamw(starpu_data_handle_t grad, std::size_t grad_offset, starpu_data_handle_t master,
                  starpu_data_handle_t m, starpu_data_handle_t v, starpu_data_handle_t param, std::size_t param_offset,
                  starpu_data_handle_t scale, DType dtype, const AdamWHyper& hyper, const std::string& name) {
  const AdamArgs args{hyper, dtype, grad_offset, param_offset};
  check(starpu_task_insert(adamw_codelet.get(), STARPU_R, grad, STARPU_RW, master, STARPU_RW, m, STARPU_RW, v, STARPU_RW,
                           param, STARPU_R, scale, STARPU_VALUE, &args, sizeof args, STARPU_NAME,
                           intern_task_name(name), 0),
        name);
}

void submit_adamw_cpu(starpu_data_handle_t grad, starpu_data_handle_t master, starpu_data_handle_t m,
                      starpu_data_handle_t v, starpu_data_handle_t param_out, starpu_data_handle_t scale, DType dtype,
                      const AdamWHyper& hyper, const CpuAdamPool& pool, const std::string& name) {
  if (!pool.token || pool.threads < 1) throw std::invalid_argument("submit_adamw_cpu: no CPU Adam pool");
  const std::size_t n = starpu_vector_get_nx(master);
  if (starpu_vector_get_nx(grad) != n || starpu_vector_get_nx(param_out) != n)
    throw std::invalid_argument("submit_adamw_cpu " + name + ": gradient, state and parameter sizes differ");
  const CpuAdamArgs args{hyper, dtype, pool.threads, pool.numa_node};
  check(starpu_task_insert(adamw_offload_codelet.get(), STARPU_R, grad, STARPU_RW, master, STARPU_RW, m, STARPU_RW, v,
                           STARPU_W, param_out, STARPU_R, scale, STARPU_RW, pool.token, STARPU_VALUE, &args,
                           sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

}  // namespace starzero::optim
