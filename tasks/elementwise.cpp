#include "tasks/elementwise.hpp"

#include <starpu.h>

#include <cstring>
#include <stdexcept>

#include "runtime/codelet.hpp"
#include "runtime/task_name.hpp"

namespace starzero::tasks {

void axpy_cpu(std::size_t n, float alpha, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale_cpu(std::size_t n, float alpha, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

void accumulate_cpu(std::size_t n, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void accumulate_cpu(std::size_t n, const bf16* x, bf16* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = from_float<bf16>(to_float(y[i]) + to_float(x[i]));
}

void accumulate_widen_cpu(std::size_t n, const bf16* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += to_float(x[i]);
}

void narrow_cpu(std::size_t n, const float* x, bf16* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = from_float<bf16>(x[i]);
}

namespace {

float unpack_alpha(void* cl_arg) {
  float alpha = 0;
  starpu_codelet_unpack_args(cl_arg, &alpha);
  return alpha;
}

void axpy_cpu_func(void* buffers[], void* cl_arg) {
  const std::size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
  axpy_cpu(n, unpack_alpha(cl_arg), reinterpret_cast<const float*>(STARPU_VECTOR_GET_PTR(buffers[0])),
           reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[1])));
}

void scale_cpu_func(void* buffers[], void* cl_arg) {
  scale_cpu(STARPU_VECTOR_GET_NX(buffers[0]), unpack_alpha(cl_arg),
            reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[0])));
}

#ifdef STARZERO_WITH_CUDA
void axpy_cuda_func(void* buffers[], void* cl_arg) {
  axpy_cuda(STARPU_VECTOR_GET_NX(buffers[0]), unpack_alpha(cl_arg),
            reinterpret_cast<const float*>(STARPU_VECTOR_GET_PTR(buffers[0])),
            reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[1])), starpu_cuda_get_local_stream());
}

void scale_cuda_func(void* buffers[], void* cl_arg) {
  scale_cuda(STARPU_VECTOR_GET_NX(buffers[0]), unpack_alpha(cl_arg),
             reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[0])), starpu_cuda_get_local_stream());
}
#endif

void zero_cpu_func(void* buffers[], void*) {
  std::memset(reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers[0])), 0,
              STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]));
}

#ifdef STARZERO_WITH_CUDA
void zero_cuda_func(void* buffers[], void*) {
  cudaMemsetAsync(reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers[0])), 0,
                  STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]),
                  starpu_cuda_get_local_stream());
}
#endif

std::size_t vector_bytes(void* buffer) { return STARPU_VECTOR_GET_NX(buffer) * STARPU_VECTOR_GET_ELEMSIZE(buffer); }

void copy_cpu_func(void* buffers[], void*) {
  std::memcpy(reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers[1])),
              reinterpret_cast<const void*>(STARPU_VECTOR_GET_PTR(buffers[0])), vector_bytes(buffers[0]));
}

#ifdef STARZERO_WITH_CUDA
void copy_cuda_func(void* buffers[], void*) {
  cudaMemcpyAsync(reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers[1])),
                  reinterpret_cast<const void*>(STARPU_VECTOR_GET_PTR(buffers[0])), vector_bytes(buffers[0]),
                  cudaMemcpyDeviceToDevice, starpu_cuda_get_local_stream());
}
#endif

template <class T>
T* vector_ptr(void* buffer) {
  return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buffer));
}

void accumulate_widen_cpu_func(void* buffers[], void*) {
  accumulate_widen_cpu(STARPU_VECTOR_GET_NX(buffers[0]), vector_ptr<const bf16>(buffers[0]), vector_ptr<float>(buffers[1]));
}

void narrow_cpu_func(void* buffers[], void*) {
  narrow_cpu(STARPU_VECTOR_GET_NX(buffers[0]), vector_ptr<const float>(buffers[0]), vector_ptr<bf16>(buffers[1]));
}

#ifdef STARZERO_WITH_CUDA
void accumulate_widen_cuda_func(void* buffers[], void*) {
  accumulate_widen_cuda(STARPU_VECTOR_GET_NX(buffers[0]), vector_ptr<const bf16>(buffers[0]),
                        vector_ptr<float>(buffers[1]), starpu_cuda_get_local_stream());
}

void narrow_cuda_func(void* buffers[], void*) {
  narrow_cuda(STARPU_VECTOR_GET_NX(buffers[0]), vector_ptr<const float>(buffers[0]), vector_ptr<bf16>(buffers[1]),
              starpu_cuda_get_local_stream());
}
#endif

void accumulate_cpu_func(void* buffers[], void* cl_arg) {
  DType dtype;
  starpu_codelet_unpack_args(cl_arg, &dtype);
  const std::size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
  if (dtype == DType::f32)
    accumulate_cpu(n, reinterpret_cast<const float*>(STARPU_VECTOR_GET_PTR(buffers[0])),
                   reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[1])));
  else
    accumulate_cpu(n, reinterpret_cast<const bf16*>(STARPU_VECTOR_GET_PTR(buffers[0])),
                   reinterpret_cast<bf16*>(STARPU_VECTOR_GET_PTR(buffers[1])));
}

#ifdef STARZERO_WITH_CUDA
void accumulate_cuda_func(void* buffers[], void* cl_arg) {
  DType dtype;
  starpu_codelet_unpack_args(cl_arg, &dtype);
  const std::size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
  if (dtype == DType::f32)
    accumulate_cuda(n, reinterpret_cast<const float*>(STARPU_VECTOR_GET_PTR(buffers[0])),
                    reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buffers[1])), starpu_cuda_get_local_stream());
  else
    accumulate_cuda(n, reinterpret_cast<const bf16*>(STARPU_VECTOR_GET_PTR(buffers[0])),
                    reinterpret_cast<bf16*>(STARPU_VECTOR_GET_PTR(buffers[1])), starpu_cuda_get_local_stream());
}
#endif

Codelet axpy_codelet("axpy", axpy_cpu_func, STARZERO_CUDA_FUNC(axpy_cuda_func), {STARPU_R, STARPU_RW});
Codelet scale_codelet("scale", scale_cpu_func, STARZERO_CUDA_FUNC(scale_cuda_func), {STARPU_RW});
Codelet accumulate_codelet("accumulate", accumulate_cpu_func, STARZERO_CUDA_FUNC(accumulate_cuda_func),
                           {STARPU_R, STARPU_RW});
Codelet accumulate_widen_codelet("accumulate_widen", accumulate_widen_cpu_func,
                                 STARZERO_CUDA_FUNC(accumulate_widen_cuda_func), {STARPU_R, STARPU_RW});
Codelet narrow_codelet("narrow", narrow_cpu_func, STARZERO_CUDA_FUNC(narrow_cuda_func), {STARPU_R, STARPU_W});
Codelet copy_codelet("copy", copy_cpu_func, STARZERO_CUDA_FUNC(copy_cuda_func), {STARPU_R, STARPU_W});
Codelet zero_codelet("zero", zero_cpu_func, STARZERO_CUDA_FUNC(zero_cuda_func), {STARPU_W});

void check(int ret, const char* what) {
  if (ret != 0) throw std::runtime_error(std::string("starpu_task_insert(") + what + ") failed: " + std::to_string(ret));
}

}  // namespace

void submit_axpy(float alpha, const Tensor& x, const Tensor& y, const std::string& name) {
  if (x.dtype() != DType::f32 || y.dtype() != DType::f32 || x.count() != y.count())
    throw std::invalid_argument("axpy: x and y must be fp32 tensors of one size");
  check(starpu_task_insert(axpy_codelet.get(), STARPU_R, x.handle(), STARPU_RW, y.handle(), STARPU_VALUE, &alpha,
                           sizeof alpha, STARPU_NAME, intern_task_name(name), 0),
        "axpy");
}

void submit_zero(starpu_data_handle_t x, const std::string& name) {
  check(starpu_task_insert(zero_codelet.get(), STARPU_W, x, STARPU_NAME, intern_task_name(name), 0), "zero");
}

void submit_copy(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_data_get_size(src) != starpu_data_get_size(dst))
    throw std::invalid_argument("copy " + name + ": source and destination sizes differ");
  check(starpu_task_insert(copy_codelet.get(), STARPU_R, src, STARPU_W, dst, STARPU_NAME, intern_task_name(name), 0),
        "copy");
}

void submit_accumulate_widen(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_vector_get_nx(src) != starpu_vector_get_nx(dst) || starpu_vector_get_elemsize(src) != 2 ||
      starpu_vector_get_elemsize(dst) != 4)
    throw std::invalid_argument("accumulate_widen " + name + ": needs bf16 src and fp32 dst of one length");
  check(starpu_task_insert(accumulate_widen_codelet.get(), STARPU_R, src, STARPU_RW, dst, STARPU_NAME,
                           intern_task_name(name), 0),
        "accumulate_widen");
}

void submit_narrow(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_vector_get_nx(src) != starpu_vector_get_nx(dst) || starpu_vector_get_elemsize(src) != 4 ||
      starpu_vector_get_elemsize(dst) != 2)
    throw std::invalid_argument("narrow " + name + ": needs fp32 src and bf16 dst of one length");
  check(starpu_task_insert(narrow_codelet.get(), STARPU_R, src, STARPU_W, dst, STARPU_NAME, intern_task_name(name), 0),
        "narrow");
}

void submit_accumulate(starpu_data_handle_t src, starpu_data_handle_t dst, DType dtype, const std::string& name) {
  if (dtype != DType::f32 && dtype != DType::bf16) throw std::invalid_argument("accumulate: fp32 or bf16 only");
  check(starpu_task_insert(accumulate_codelet.get(), STARPU_R, src, STARPU_RW, dst, STARPU_VALUE, &dtype, sizeof dtype,
                           STARPU_NAME, intern_task_name(name), 0),
        "accumulate");
}

void submit_scale(float alpha, const Tensor& x, const std::string& name) {
  if (x.dtype() != DType::f32) throw std::invalid_argument("scale: x must be an fp32 tensor");
  check(starpu_task_insert(scale_codelet.get(), STARPU_RW, x.handle(), STARPU_VALUE, &alpha, sizeof alpha, STARPU_NAME,
                           intern_task_name(name), 0),
        "scale");
}

}  // namespace starzero::tasks
