// CUDA implementations of the element-wise codelets; launched on the StarPU worker's stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "tasks/elementwise_kernels.hpp"

namespace starzero::tasks {

namespace {

__global__ void axpy_kernel(std::size_t n, float alpha, const float* x, float* y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += alpha * x[i];
}

__global__ void scale_kernel(std::size_t n, float alpha, float* x) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] *= alpha;
}

__global__ void accumulate_f32_kernel(std::size_t n, const float* x, float* y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void accumulate_bf16_kernel(std::size_t n, const __nv_bfloat16* x, __nv_bfloat16* y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}

__global__ void accumulate_widen_kernel(std::size_t n, const __nv_bfloat16* x, float* y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += __bfloat162float(x[i]);
}

__global__ void narrow_kernel(std::size_t n, const float* x, __nv_bfloat16* y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return unsigned(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

}  // namespace

void axpy_cuda(std::size_t n, float alpha, const float* x, float* y, void* stream) {
  axpy_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, alpha, x, y);
}

void accumulate_cuda(std::size_t n, const float* x, float* y, void* stream) {
  accumulate_f32_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, x, y);
}

void accumulate_cuda(std::size_t n, const bf16* x, bf16* y, void* stream) {
  accumulate_bf16_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      n, reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<__nv_bfloat16*>(y));
}

void accumulate_widen_cuda(std::size_t n, const bf16* x, float* y, void* stream) {
  accumulate_widen_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      n, reinterpret_cast<const __nv_bfloat16*>(x), y);
}

void narrow_cuda(std::size_t n, const float* x, bf16* y, void* stream) {
  narrow_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, x,
                                                                              reinterpret_cast<__nv_bfloat16*>(y));
}

void scale_cuda(std::size_t n, float alpha, float* x, void* stream) {
  scale_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, alpha, x);
}

}  // namespace starzero::tasks
