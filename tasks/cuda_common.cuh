#pragma once
// What the CUDA kernels of tasks/ share (nn_kernels.cu, nn_llama_kernels.cu): errors, the storage
// types and their device types, loads and stores in float, launch shapes, warp and block
// reductions, and a stream-ordered scratch buffer. Include inside namespace
// starzero::kernels::cuda: everything here has internal linkage.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "runtime/dtype.hpp"

namespace starzero::kernels::cuda {

namespace {

using std::size_t;

static_assert(sizeof(__nv_bfloat16) == sizeof(bf16) && alignof(__nv_bfloat16) == alignof(bf16),
              "starzero::bf16 must be layout-compatible with __nv_bfloat16");

// ---- errors ------------------------------------------------------------------------------------
inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("starzero CUDA kernels: ") + call + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
#define SZ_CUDA(call) check_cuda((call), #call)
// After a <<<...>>> launch: launch-configuration errors (and any earlier sticky error).
#define SZ_LAUNCHED(kernel) check_cuda(cudaGetLastError(), "launch of " #kernel)

inline void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("starzero CUDA kernels: ") + what);
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// ---- storage types -----------------------------------------------------------------------------
template <class T>
struct Storage;
template <>
struct Storage<float> {
  using device = float;
  static constexpr cudaDataType_t cuda_type = CUDA_R_32F;
};
template <>
struct Storage<bf16> {
  using device = __nv_bfloat16;
  static constexpr cudaDataType_t cuda_type = CUDA_R_16BF;
};
template <class T>
using dev_t = typename Storage<T>::device;

template <class T>
dev_t<T>* dev(T* p) {
  return reinterpret_cast<dev_t<T>*>(p);
}
template <class T>
const dev_t<T>* dev(const T* p) {
  return reinterpret_cast<const dev_t<T>*>(p);
}

__device__ __forceinline__ float load_f(float x) { return x; }
__device__ __forceinline__ float load_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class D>
__device__ __forceinline__ D store_f(float x);
template <>
__device__ __forceinline__ float store_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 store_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // round to nearest even, NaN stays NaN: as float_to_bf16
}
// *p += v, rounded once.
template <class D>
__device__ __forceinline__ void add_to(D* p, float v) {
  *p = store_f<D>(load_f(*p) + v);
}

// ---- launch shapes and reductions --------------------------------------------------------------
constexpr int kBlock = 256;                  // threads per block of the 1-D kernels
constexpr int kWarpsPerBlock = kBlock / 32;  // rows per block of the warp-per-row kernels
constexpr unsigned kMaxGridStrideBlocks = 65536;

// Blocks for a grid-stride loop over n elements.
inline unsigned blocks_for(size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(blocks < kMaxGridStrideBlocks ? blocks : kMaxGridStrideBlocks);
}
// Blocks for one warp per row.
inline unsigned blocks_for_rows(size_t rows) {
  const size_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks <= 0x7fffffffu, "too many rows for one launch");
  return unsigned(blocks);
}

__device__ __forceinline__ size_t global_index() { return blockIdx.x * size_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ size_t global_stride() { return size_t(gridDim.x) * blockDim.x; }
// The row of the calling thread's warp, and its lane.
__device__ __forceinline__ size_t warp_row() { return size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; }
__device__ __forceinline__ int warp_lane() { return int(threadIdx.x % 32); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// Reductions over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result.
inline __device__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.0f);
}
inline __device__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -INFINITY);
}

// grad[c] += Σ_chunks partial[chunk, c]
template <class D>
__global__ void column_finish_kernel(D* grad, const float* partial, int chunks, int C) {
  for (size_t c = global_index(); c < size_t(C); c += global_stride()) {
    float acc = 0.0f;
    for (int k = 0; k < chunks; ++k) acc += partial[size_t(k) * C + c];
    add_to(&grad[c], acc);
  }
}

// A float buffer on the stream's memory pool, released (stream-ordered) when it goes out of scope.
class Scratch {
 public:
  Scratch(size_t count, cudaStream_t stream) : stream_(stream) {
    SZ_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), count * sizeof(float), stream));
  }
  ~Scratch() { (void)cudaFreeAsync(ptr_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

}  // namespace starzero::kernels::cuda
