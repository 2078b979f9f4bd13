// CUDA AdamW (adamw_cpu's operations, bit for bit) and the sum of squares for global-norm clipping.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "optimizers/adamw.hpp"

namespace starzero::optim {

namespace {

__device__ float load(float x) { return x; }
__device__ float load(bf16 x) { return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&x)); }
__device__ void store(float* p, float x) { *p = x; }
__device__ void store(bf16* p, float x) { *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(x); }

template <class G, class P>
__global__ void adamw_kernel(std::size_t n, const G* grad, const float* grad_scale, float* master, float* m, float* v,
                             P* param, AdamWHyper hyper, float bias_correction1, float bias_correction2) {
  const float scale = *grad_scale;
  const bool skip = isnan(scale);  // a non-finite gradient norm: the step is skipped (adamw_codelet.hpp)
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    if (skip) {
      store(param + i, master[i]);
      continue;
    }
    // adamw_cpu's operations in its order, each rounded on its own: the _rn intrinsics are never
    // contracted into FMAs (nvcc fuses a * b + c by default) and divide and take the square root
    // correctly rounded, as the CPU does, so the device AdamW gives the CPU AdamW's bits and a
    // split optimizer state (--offload-optimizer-fraction) trains as all-CPU AdamW does.
    const float g = __fmul_rn(load(grad[i]), scale);
    const float mi = __fadd_rn(__fmul_rn(hyper.beta1, m[i]), __fmul_rn(__fsub_rn(1.0f, hyper.beta1), g));
    const float vi =
        __fadd_rn(__fmul_rn(hyper.beta2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, hyper.beta2), g), g));
    m[i] = mi;
    v[i] = vi;
    float w = master[i];
    w = __fsub_rn(w, __fmul_rn(__fmul_rn(hyper.lr, hyper.weight_decay), w));
    const float m_hat = __fdiv_rn(mi, bias_correction1), v_hat = __fdiv_rn(vi, bias_correction2);
    w = __fsub_rn(w, __fdiv_rn(__fmul_rn(hyper.lr, m_hat), __fadd_rn(__fsqrt_rn(v_hat), hyper.eps)));
    master[i] = w;
    store(param + i, w);
  }
}

// Σ x², deterministic (no atomics): the result's bits depend on n alone, not on timing.
// 1. sum_blocks(n) blocks of kSumThreads threads: thread t of block b adds the squares of the
//    elements b·kSumThreads + t + k·(blocks·kSumThreads), k = 0, 1, ... in order, in double;
//    the block's threads are then added by a fixed shared-memory tree into partial[b].
// 2. One block adds the partials the same way (thread t: partials t, t + kSumThreads, ... in
//    order, then the tree) and writes the total, rounded once to float.
// In double like the CPU twin (sum_of_squares_simd.cpp): millions of small squares.
constexpr unsigned kSumThreads = 256;
constexpr unsigned kMaxSumBlocks = 1024;  // the partials: at most 8 KiB

unsigned sum_blocks(std::size_t n) {
  const std::size_t blocks = (n + 4 * kSumThreads - 1) / (4 * kSumThreads);  // >= 4 elements per thread
  return unsigned(blocks == 0 ? 1 : blocks < kMaxSumBlocks ? blocks : kMaxSumBlocks);
}

// The fixed tree over the block's kSumThreads values; thread 0 returns the total.
__device__ double block_tree_sum(double value) {
  __shared__ double partial[kSumThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return partial[0];
}

template <class T>
__global__ void sum_of_squares_partials_kernel(std::size_t n, const T* x, double* partials) {
  double local = 0;
  for (std::size_t i = blockIdx.x * std::size_t(kSumThreads) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * kSumThreads) {
    const double value = load(x[i]);
    local += value * value;
  }
  const double total = block_tree_sum(local);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_of_squares_combine_kernel(const double* partials, unsigned count, float* sum) {
  double local = 0;
  for (unsigned i = threadIdx.x; i < count; i += kSumThreads) local += partials[i];
  const double total = block_tree_sum(local);
  if (threadIdx.x == 0) *sum = float(total);
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return unsigned(blocks == 0 ? 1 : blocks < 2048 ? blocks : 2048);
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// count elements of T on the stream's memory pool, freed (stream-ordered) on scope exit.
template <class T>
class StreamScratch {
 public:
  StreamScratch(std::size_t count, cudaStream_t stream) : stream_(stream) {
    const cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&ptr_), count * sizeof(T), stream);
    if (err != cudaSuccess) throw std::runtime_error(std::string("cudaMallocAsync: ") + cudaGetErrorString(err));
  }
  ~StreamScratch() { (void)cudaFreeAsync(ptr_, stream_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

template <class G, class P>
void adamw_cuda(std::size_t n, const G* grad, const float* grad_scale_device, float* master, float* m, float* v,
                P* param, const AdamWHyper& hyper, void* stream) {
  const float bias_correction1 = 1.0f - std::pow(hyper.beta1, float(hyper.step));
  const float bias_correction2 = 1.0f - std::pow(hyper.beta2, float(hyper.step));
  adamw_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      n, grad, grad_scale_device, master, m, v, param, hyper, bias_correction1, bias_correction2);
  check_launch("adamw kernel");
}

template <class T>
void sum_of_squares_cuda(std::size_t n, const T* x, float* sum_device, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = sum_blocks(n);
  // The partials on the stream's memory pool, stream-ordered: sound whatever thread or stream a
  // StarPU CUDA worker runs on (a buffer kept per thread would be shared by the streams of the
  // workers one thread drives), and no StarPU scratch handle to register with every task.
  const StreamScratch<double> partials(blocks, s);
  sum_of_squares_partials_kernel<<<blocks, kSumThreads, 0, s>>>(n, x, partials.get());
  check_launch("sum of squares partials kernel");
  sum_of_squares_combine_kernel<<<1, kSumThreads, 0, s>>>(partials.get(), blocks, sum_device);
  check_launch("sum of squares combine kernel");
}

template void adamw_cuda<float, float>(std::size_t, const float*, const float*, float*, float*, float*, float*,
                                       const AdamWHyper&, void*);
template void adamw_cuda<bf16, bf16>(std::size_t, const bf16*, const float*, float*, float*, float*, bf16*,
                                     const AdamWHyper&, void*);
template void sum_of_squares_cuda<float>(std::size_t, const float*, float*, void*);
template void sum_of_squares_cuda<bf16>(std::size_t, const bf16*, float*, void*);

}  // namespace starzero::optim
