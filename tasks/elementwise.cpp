#include "tasks/elementwise.hpp"

#include <starpu.h>

#include <cstring>
#include <stdexcept>

#include "runtime/codelet.hpp"

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

// ---- the functions the codelets run: buffers by their declared meaning -------------------------

struct AlphaArgs {
  float alpha;
};
struct StorageArgs {
  DType dtype;  // fp32 or bf16
};

void axpy_cpu_func(const TaskBuffers& b, const AlphaArgs& a) {
  axpy_cpu(b.elements("x"), a.alpha, b.get<const float>("x"), b.get<float>("y"));
}
void scale_cpu_func(const TaskBuffers& b, const AlphaArgs& a) {
  scale_cpu(b.elements("x"), a.alpha, b.get<float>("x"));
}
void zero_cpu_func(const TaskBuffers& b, const NoArgs&) { std::memset(b.data("x"), 0, b.bytes("x")); }
void copy_cpu_func(const TaskBuffers& b, const NoArgs&) { std::memcpy(b.data("dst"), b.data("src"), b.bytes("src")); }
void accumulate_widen_cpu_func(const TaskBuffers& b, const NoArgs&) {
  accumulate_widen_cpu(b.elements("src"), b.get<const bf16>("src"), b.get<float>("dst"));
}
void narrow_cpu_func(const TaskBuffers& b, const NoArgs&) {
  narrow_cpu(b.elements("src"), b.get<const float>("src"), b.get<bf16>("dst"));
}
void accumulate_cpu_func(const TaskBuffers& b, const StorageArgs& a) {
  const std::size_t n = b.elements("src");
  if (a.dtype == DType::f32)
    accumulate_cpu(n, b.get<const float>("src"), b.get<float>("dst"));
  else
    accumulate_cpu(n, b.get<const bf16>("src"), b.get<bf16>("dst"));
}

#ifdef STARZERO_WITH_CUDA
cudaStream_t stream() { return starpu_cuda_get_local_stream(); }

void axpy_cuda_func(const TaskBuffers& b, const AlphaArgs& a) {
  axpy_cuda(b.elements("x"), a.alpha, b.get<const float>("x"), b.get<float>("y"), stream());
}
void scale_cuda_func(const TaskBuffers& b, const AlphaArgs& a) {
  scale_cuda(b.elements("x"), a.alpha, b.get<float>("x"), stream());
}
void zero_cuda_func(const TaskBuffers& b, const NoArgs&) { cudaMemsetAsync(b.data("x"), 0, b.bytes("x"), stream()); }
void copy_cuda_func(const TaskBuffers& b, const NoArgs&) {
  cudaMemcpyAsync(b.data("dst"), b.data("src"), b.bytes("src"), cudaMemcpyDeviceToDevice, stream());
}
void accumulate_widen_cuda_func(const TaskBuffers& b, const NoArgs&) {
  accumulate_widen_cuda(b.elements("src"), b.get<const bf16>("src"), b.get<float>("dst"), stream());
}
void narrow_cuda_func(const TaskBuffers& b, const NoArgs&) {
  narrow_cuda(b.elements("src"), b.get<const float>("src"), b.get<bf16>("dst"), stream());
}
void accumulate_cuda_func(const TaskBuffers& b, const StorageArgs& a) {
  const std::size_t n = b.elements("src");
  if (a.dtype == DType::f32)
    accumulate_cuda(n, b.get<const float>("src"), b.get<float>("dst"), stream());
  else
    accumulate_cuda(n, b.get<const bf16>("src"), b.get<bf16>("dst"), stream());
}
#endif

// ---- the declarations: n elements of the first handle; FLOPs and bytes (read + written) -------

double elements(Handles h) { return double(starpu_vector_get_nx(h[0])); }
double size_of(starpu_data_handle_t h) { return double(starpu_data_get_size(h)); }

// FLOPs 2·n; bytes 12·n (fp32 x read, y read and written).
Codelet<AlphaArgs> axpy_codelet({
    .name = "axpy",
    .buffers = {{STARPU_R, "x"}, {STARPU_RW, "y"}},
    .cpu = axpy_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(axpy_cuda_func),
    .work = Work::support,
    .flops = [](const AlphaArgs&, Handles h) { return 2.0 * elements(h); },
    .bytes = [](const AlphaArgs&, Handles h) { return 12.0 * elements(h); },
    .gpu_class = sim::GpuCostClass::streaming,
});
// FLOPs n; bytes 8·n.
Codelet<AlphaArgs> scale_codelet({
    .name = "scale",
    .buffers = {{STARPU_RW, "x"}},
    .cpu = scale_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(scale_cuda_func),
    .work = Work::support,
    .flops = [](const AlphaArgs&, Handles h) { return elements(h); },
    .bytes = [](const AlphaArgs&, Handles h) { return 8.0 * elements(h); },
    .gpu_class = sim::GpuCostClass::streaming,
});
// FLOPs n; bytes 3·n·s (src read, dst read and written).
Codelet<StorageArgs> accumulate_codelet({
    .name = "accumulate",
    .buffers = {{STARPU_R, "src"}, {STARPU_RW, "dst"}},
    .cpu = accumulate_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(accumulate_cuda_func),
    .work = Work::support,
    .flops = [](const StorageArgs&, Handles h) { return elements(h); },
    .bytes = [](const StorageArgs& a, Handles h) { return 3.0 * elements(h) * double(dtype_size(a.dtype)); },
    .gpu_class = sim::GpuCostClass::streaming,
});
// FLOPs n; bytes 10·n (bf16 src read, fp32 dst read and written).
Codelet<NoArgs> accumulate_widen_codelet({
    .name = "accumulate_widen",
    .buffers = {{STARPU_R, "src"}, {STARPU_RW, "dst"}},
    .cpu = accumulate_widen_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(accumulate_widen_cuda_func),
    .work = Work::support,
    .flops = [](const NoArgs&, Handles h) { return elements(h); },
    .bytes = [](const NoArgs&, Handles h) { return 10.0 * elements(h); },
    .gpu_class = sim::GpuCostClass::streaming,
});
// FLOPs 0 (a rounding per element); bytes 6·n (fp32 read, bf16 written).
Codelet<NoArgs> narrow_codelet({
    .name = "narrow",
    .buffers = {{STARPU_R, "src"}, {STARPU_W, "dst"}},
    .cpu = narrow_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(narrow_cuda_func),
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles h) { return 6.0 * elements(h); },
    .gpu_class = sim::GpuCostClass::streaming,
});
// FLOPs 0; bytes twice the size (read, written).
Codelet<NoArgs> copy_codelet({
    .name = "copy",
    .buffers = {{STARPU_R, "src"}, {STARPU_W, "dst"}},
    .cpu = copy_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(copy_cuda_func),
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles h) { return 2.0 * size_of(h[0]); },
    .gpu_class = sim::GpuCostClass::copy,
});
// FLOPs 0; bytes the size (written).
Codelet<NoArgs> zero_codelet({
    .name = "zero",
    .buffers = {{STARPU_W, "x"}},
    .cpu = zero_cpu_func,
    .cuda = STARZERO_CUDA_FUNC(zero_cuda_func),
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles h) { return size_of(h[0]); },
    .gpu_class = sim::GpuCostClass::copy,
});
// The same on CPU workers only: for a buffer whose home is host memory and stays there (the
// offloaded optimizer state), which a GPU zeroing it would first allocate on the device and then
// write back.
Codelet<NoArgs> zero_on_host_codelet({
    .name = "zero_on_host",
    .buffers = {{STARPU_W, "x"}},
    .cpu = zero_cpu_func,
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles h) { return size_of(h[0]); },
});

}  // namespace

void submit_axpy(float alpha, const Tensor& x, const Tensor& y, const std::string& name) {
  if (x.dtype() != DType::f32 || y.dtype() != DType::f32 || x.count() != y.count())
    throw std::invalid_argument("axpy: x and y must be fp32 tensors of one size");
  submit(axpy_codelet, {x.handle(), y.handle()}, AlphaArgs{alpha}, name);
}

void submit_zero(starpu_data_handle_t x, const std::string& name) { submit(zero_codelet, {x}, NoArgs{}, name); }

void submit_zero_on_host(starpu_data_handle_t x, const std::string& name) {
  submit(zero_on_host_codelet, {x}, NoArgs{}, name);
}

void submit_copy(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_data_get_size(src) != starpu_data_get_size(dst))
    throw std::invalid_argument("copy " + name + ": source and destination sizes differ");
  submit(copy_codelet, {src, dst}, NoArgs{}, name);
}

void submit_accumulate_widen(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_vector_get_nx(src) != starpu_vector_get_nx(dst) || starpu_vector_get_elemsize(src) != 2 ||
      starpu_vector_get_elemsize(dst) != 4)
    throw std::invalid_argument("accumulate_widen " + name + ": needs bf16 src and fp32 dst of one length");
  submit(accumulate_widen_codelet, {src, dst}, NoArgs{}, name);
}

void submit_narrow(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name) {
  if (starpu_vector_get_nx(src) != starpu_vector_get_nx(dst) || starpu_vector_get_elemsize(src) != 4 ||
      starpu_vector_get_elemsize(dst) != 2)
    throw std::invalid_argument("narrow " + name + ": needs fp32 src and bf16 dst of one length");
  submit(narrow_codelet, {src, dst}, NoArgs{}, name);
}

void submit_accumulate(starpu_data_handle_t src, starpu_data_handle_t dst, DType dtype, const std::string& name) {
  if (dtype != DType::f32 && dtype != DType::bf16) throw std::invalid_argument("accumulate: fp32 or bf16 only");
  submit(accumulate_codelet, {src, dst}, StorageArgs{dtype}, name);
}

void submit_scale(float alpha, const Tensor& x, const std::string& name) {
  if (x.dtype() != DType::f32) throw std::invalid_argument("scale: x must be an fp32 tensor");
  submit(scale_codelet, {x.handle()}, AlphaArgs{alpha}, name);
}

}  // namespace starzero::tasks
