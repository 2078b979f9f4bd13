// The backward's accumulation of cuDNN's gradients into the codelet's (tasks/attention_cudnn.hpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tasks/attention_cudnn.hpp"

namespace starzero::tasks::cudnn_attention {

namespace {
__global__ void add_rows_kernel(__nv_bfloat16* dst, int ld_dst, const __nv_bfloat16* src, int rows, int cols) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)rows * cols) return;
  const long long r = i / cols, c = i % cols;
  __nv_bfloat16& d = dst[r * ld_dst + c];
  d = __float2bfloat16(__bfloat162float(d) + __bfloat162float(src[i]));
}
}  // namespace

void add_rows(bf16* dst, int ld_dst, const bf16* src, int rows, int cols, void* stream) {
  const long long n = (long long)rows * cols;
  if (n == 0) return;
  constexpr int kBlock = 256;
  add_rows_kernel<<<unsigned((n + kBlock - 1) / kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(dst), ld_dst, reinterpret_cast<const __nv_bfloat16*>(src), rows, cols);
}

}  // namespace starzero::tasks::cudnn_attention
