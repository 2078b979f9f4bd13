// CUDA implementations of tasks/nn_kernels.hpp (namespace starzero::kernels::cuda): the GPT-2
// forward and backward kernels, same math and conventions as the CPU kernels (llm.c's
// train_gpt2.c). Storage T is float or bf16 (device type __nv_bfloat16, layout-compatible with
// starzero::bf16); everything is computed in float and rounded once on store.
//
// - Every function only enqueues work on the given stream (asynchronous); errors in a call or a
//   launch throw std::runtime_error naming the call and CUDA's / cuBLAS's error string.
// - Backward kernels accumulate (+=). Each gradient element is read, incremented by the float sum
//   of all its contributions and written exactly once (one rounding for bf16), with a fixed
//   summation order: the results are deterministic (no atomics anywhere).
// - Matmuls run cublasGemmEx (fp32 or bf16 operands, CUBLAS_COMPUTE_32F) on the caller's handle.
//   Accumulation uses beta = 1 straight into the output, also for bf16: cuBLAS reads the bf16
//   output, adds it to the fp32 product in fp32 and rounds once. For the call, the handle is put
//   on `stream`, in host pointer mode, and in CUBLAS_DEFAULT_MATH |
//   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (no TF32; split-K partial sums in fp32, never
//   in bf16); its previous settings are restored afterwards.
// - Scratch: the bias / layernorm parameter gradients use a small float buffer of per-chunk
//   partial column sums (cudaMallocAsync / cudaFreeAsync on the stream).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tasks/nn_kernels.hpp"

namespace starzero::kernels::cuda {

namespace {

using std::size_t;

static_assert(sizeof(__nv_bfloat16) == sizeof(bf16) && alignof(__nv_bfloat16) == alignof(bf16),
              "starzero::bf16 must be layout-compatible with __nv_bfloat16");

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// ---- errors ------------------------------------------------------------------------------------
void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("starzero CUDA kernels: ") + call + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("starzero CUDA kernels: ") + call + " failed: " + cublasGetStatusName(s) +
                             " (" + cublasGetStatusString(s) + ")");
}
#define SZ_CUDA(call) check_cuda((call), #call)
#define SZ_CUBLAS(call) check_cublas((call), #call)
// After a <<<...>>> launch: launch-configuration errors (and any earlier sticky error).
#define SZ_LAUNCHED(kernel) check_cuda(cudaGetLastError(), "launch of " #kernel)

void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("starzero CUDA kernels: ") + what);
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

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
unsigned blocks_for(size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(blocks < kMaxGridStrideBlocks ? blocks : kMaxGridStrideBlocks);
}
// Blocks for one warp per row.
unsigned blocks_for_rows(size_t rows) {
  const size_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks <= 0x7fffffffu, "too many rows for one launch");
  return unsigned(blocks);
}

__device__ __forceinline__ size_t global_index() { return blockIdx.x * size_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ size_t global_stride() { return size_t(gridDim.x) * blockDim.x; }

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
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.0f);
}
__device__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -INFINITY);
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

// ---- column sums (dbias, layernorm dweight/dbias) ----------------------------------------------
// Rows are cut into chunks of kChunkRows; a (32 x 8) block sums 32 columns over one chunk into
// float partials, then one thread per column adds the chunk partials in order to the gradient.
constexpr int kChunkRows = 64;
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;

// psum[chunk, c] = Σ dout[r, c]; pnorm[chunk, c] = Σ dout[r, c] · (inp[r, c] - mean[r]) · rstd[r]
// (each skipped when null).
template <class D>
__global__ void column_partials_kernel(float* psum, float* pnorm, const D* dout, const D* inp, const float* mean,
                                       const float* rstd, int N, int C) {
  __shared__ float ssum[kRowLanes][kColTile + 1];
  __shared__ float snorm[kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_end = min(N, (chunk + 1) * kChunkRows);
  float acc_sum = 0.0f, acc_norm = 0.0f;
  if (c < C) {
    for (int r = chunk * kChunkRows + threadIdx.y; r < row_end; r += kRowLanes) {
      const size_t i = size_t(r) * C + c;
      const float g = load_f(dout[i]);
      acc_sum += g;
      if (pnorm != nullptr) acc_norm += g * (load_f(inp[i]) - mean[r]) * rstd[r];
    }
  }
  ssum[threadIdx.y][threadIdx.x] = acc_sum;
  snorm[threadIdx.y][threadIdx.x] = acc_norm;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f, n = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) {
      s += ssum[k][threadIdx.x];
      n += snorm[k][threadIdx.x];
    }
    if (psum != nullptr) psum[size_t(chunk) * C + c] = s;
    if (pnorm != nullptr) pnorm[size_t(chunk) * C + c] = n;
  }
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

// dsum[c] += Σ_r dout[r, c]; dnorm[c] += Σ_r dout[r, c] · (inp[r, c] - mean[r]) · rstd[r].
template <class D>
void column_sums(D* dsum, D* dnorm, const D* dout, const D* inp, const float* mean, const float* rstd, int N, int C,
                 cudaStream_t stream) {
  if ((dsum == nullptr && dnorm == nullptr) || N <= 0 || C <= 0) return;
  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  require(chunks <= 65535, "too many rows for the column sums");
  const size_t per = size_t(chunks) * C;
  Scratch partial((dsum != nullptr ? per : 0) + (dnorm != nullptr ? per : 0), stream);
  float* psum = dsum != nullptr ? partial.get() : nullptr;
  float* pnorm = dnorm != nullptr ? partial.get() + (dsum != nullptr ? per : 0) : nullptr;
  const dim3 grid((C + kColTile - 1) / kColTile, chunks);
  column_partials_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(psum, pnorm, dout, inp, mean, rstd, N, C);
  SZ_LAUNCHED(column_partials_kernel);
  if (dsum != nullptr) {
    column_finish_kernel<<<blocks_for(C), kBlock, 0, stream>>>(dsum, psum, chunks, C);
    SZ_LAUNCHED(column_finish_kernel);
  }
  if (dnorm != nullptr) {
    column_finish_kernel<<<blocks_for(C), kBlock, 0, stream>>>(dnorm, pnorm, chunks, C);
    SZ_LAUNCHED(column_finish_kernel);
  }
}

// ---- encoder -----------------------------------------------------------------------------------
template <class D>
__global__ void encoder_forward_kernel(D* out, const int* tokens, const D* wte, const D* wpe, int Tn, int C, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const size_t bt = i / C, c = i % C;
    const size_t t = bt % Tn;
    out[i] = store_f<D>(load_f(wte[size_t(tokens[bt]) * C + c]) + load_f(wpe[t * C + c]));
  }
}

// dwpe[t, c] += Σ_b dout[b, t, c]
template <class D>
__global__ void encoder_backward_wpe_kernel(D* dwpe, const D* dout, int B, int Tn, int C) {
  const size_t n = size_t(Tn) * C;
  for (size_t i = global_index(); i < n; i += global_stride()) {
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += load_f(dout[size_t(b) * n + i]);
    add_to(&dwpe[i], acc);
  }
}

// dwte[tok, :] += Σ_{positions q with tokens[q] == tok} dout[q, :]. One block per position p; only
// the first position holding a token writes its row (positions in increasing order): no atomics,
// deterministic. Blocks scan the tokens a chunk at a time and skip chunks without a match.
template <class D>
__global__ void encoder_backward_wte_kernel(D* dwte, const D* dout, const int* tokens, int N, int C) {
  __shared__ int hit[kBlock];
  const int p = blockIdx.x;
  const int tok = tokens[p];
  bool earlier = false;
  for (int q = threadIdx.x; q < p; q += blockDim.x) earlier = earlier || tokens[q] == tok;
  if (__syncthreads_or(earlier)) return;
  for (int c0 = 0; c0 < C; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    float acc = 0.0f;
    for (int q0 = p; q0 < N; q0 += blockDim.x) {
      const int q = q0 + threadIdx.x;
      const int match = q < N && tokens[q] == tok;
      __syncthreads();  // every thread is done reading the previous chunk's `hit`
      hit[threadIdx.x] = match;
      if (__syncthreads_count(match) == 0) continue;
      const int count = min(int(blockDim.x), N - q0);
      if (c < C)
        for (int j = 0; j < count; ++j)
          if (hit[j]) acc += load_f(dout[size_t(q0 + j) * C + c]);
    }
    if (c < C) add_to(&dwte[size_t(tok) * C + c], acc);
  }
}

// ---- layernorm ---------------------------------------------------------------------------------
// One warp per row.
template <class D>
__global__ void layernorm_forward_kernel(D* out, float* mean, float* rstd, const D* inp, const D* weight, const D* bias,
                                         int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const D* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += load_f(x[c]);
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = load_f(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + kLayerNormEps);
  D* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load_f(x[c]) - m) * s;
    o[c] = store_f<D>(norm * load_f(weight[c]) + (bias != nullptr ? load_f(bias[c]) : 0.0f));
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = s;
  }
}

// dinp[r, :] += (w·dout - mean(w·dout) - norm · mean(w·dout·norm)) · rstd; one warp per row.
template <class D>
__global__ void layernorm_backward_dinp_kernel(D* dinp, const D* dout, const D* inp, const D* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t base = size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load_f(inp[base + c]) - m) * s;
    const float dnorm = load_f(weight[c]) * load_f(dout[base + c]);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load_f(inp[base + c]) - m) * s;
    const float dnorm = load_f(weight[c]) * load_f(dout[base + c]);
    add_to(&dinp[base + c], (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// ---- matmul ------------------------------------------------------------------------------------
// out[r, c] = bias[c]
template <class D>
__global__ void broadcast_rows_kernel(D* out, const D* bias, int OC, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) out[i] = bias[i % OC];
}

// The caller's cuBLAS handle, set up for one call (stream, host pointer mode, fp32 math without
// reduced-precision split-K reductions) and restored on scope exit.
class CublasCall {
 public:
  CublasCall(void* handle, cudaStream_t stream) : handle_(static_cast<cublasHandle_t>(handle)) {
    require(handle_ != nullptr, "matmul: null cublasHandle_t");
    SZ_CUBLAS(cublasGetStream(handle_, &old_stream_));
    SZ_CUBLAS(cublasGetMathMode(handle_, &old_math_));
    SZ_CUBLAS(cublasGetPointerMode(handle_, &old_pointer_));
    // cublasSetStream also resets the handle's workspace: only when the stream really changes.
    if (old_stream_ != stream) {
      SZ_CUBLAS(cublasSetStream(handle_, stream));
      restore_stream_ = true;
    }
    const auto math = cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (old_math_ != math) {
      SZ_CUBLAS(cublasSetMathMode(handle_, math));
      restore_math_ = true;
    }
    if (old_pointer_ != CUBLAS_POINTER_MODE_HOST) {
      SZ_CUBLAS(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
      restore_pointer_ = true;
    }
  }
  ~CublasCall() {
    if (restore_pointer_) (void)cublasSetPointerMode(handle_, old_pointer_);
    if (restore_math_) (void)cublasSetMathMode(handle_, old_math_);
    if (restore_stream_) (void)cublasSetStream(handle_, old_stream_);
  }
  CublasCall(const CublasCall&) = delete;
  CublasCall& operator=(const CublasCall&) = delete;

  // Column-major C[m,n] = alpha · op(A) · op(B) + beta · C, all of storage type T, fp32 compute.
  template <class T>
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* A, int lda, const T* B, int ldb,
            float beta, T* Cm, int ldc) const {
    const float alpha = 1.0f;
    constexpr cudaDataType_t type = Storage<T>::cuda_type;
    SZ_CUBLAS(cublasGemmEx(handle_, ta, tb, m, n, k, &alpha, A, type, lda, B, type, ldb, &beta, Cm, type, ldc,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

 private:
  cublasHandle_t handle_;
  cudaStream_t old_stream_ = nullptr;
  cublasMath_t old_math_ = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t old_pointer_ = CUBLAS_POINTER_MODE_HOST;
  bool restore_stream_ = false, restore_math_ = false, restore_pointer_ = false;
};

// ---- attention ---------------------------------------------------------------------------------
// A head group [h0, h0 + nh) of NH (the whole op: h0 = 0, nh = NH). Rows are (b, h, t) in the
// order of the group's [B, nh, T, T] scores; one warp per row; each warp keeps one hs-vector in
// shared memory. inp (qkv) and dout are read whole; out, the q/k/v parts of dinp and preatt/att
// are the group's strided blocks (nn_kernels.hpp).
struct AttentionGroup {
  int B, Tn, C, NH, h0, nh;
  int ld_att;  // preatt, att: elements from one sequence's [nh, T, T] to the next
};
struct AttentionRow {
  size_t row;  // b·nh·T + (h − h0)·T + t; B·nh·T or more for the warps past the last row
  int lane;    // the thread's lane in its warp
  int b, h, t;
  int hs;         // head size C / NH
  size_t C3;      // 3·C: the stride of one position in qkv
  size_t scores;  // the row (b, h, t) in preatt / att: b·ld_att + ((h − h0)·T + t)·T
};
// The row of the calling thread's warp. Only launched with B·nh·T > 0, so T and nh are not 0.
__device__ __forceinline__ AttentionRow attention_row(const AttentionGroup& g) {
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const size_t bh = row / g.Tn;
  const int b = int(bh / g.nh), local_head = int(bh % g.nh), t = int(row % g.Tn);
  return {row,
          int(threadIdx.x % 32),
          b,
          g.h0 + local_head,
          t,
          g.C / g.NH,
          size_t(3) * g.C,
          size_t(b) * g.ld_att + (size_t(local_head) * g.Tn + t) * g.Tn};
}
// The warp's hs floats of the block's dynamic shared memory (attention_shared_bytes).
__device__ __forceinline__ float* warp_shared_vector(int hs) {
  extern __shared__ float shared_vec[];
  return shared_vec + (threadIdx.x / 32) * hs;
}

// preatt[b,h,t,t2] = q_t · k_t2 · scale; att = causal softmax; both 0 for t2 > t;
// out[b,t,h·hs + d] = Σ_t2 att[t2] · v_t2[d] (the group's block: column (h − h0)·hs + d).
template <class D>
__global__ void attention_forward_kernel(D* out, int ld_out, float* preatt, float* att, const D* inp,
                                         AttentionGroup g) {
  const auto [row, lane, b, h, t, hs, C3, scores] = attention_row(g);
  const int Tn = g.Tn, C = g.C;
  if (row >= size_t(g.B) * g.nh * Tn) return;
  const D* base = inp + size_t(b) * Tn * C3 + size_t(h) * hs;  // q of (b, t = 0, h)
  const float scale = 1.0f / sqrtf(float(hs));
  float* q = warp_shared_vector(hs);
  for (int d = lane; d < hs; d += 32) q[d] = load_f(base[size_t(t) * C3 + d]);
  __syncwarp();

  float* pre = preatt + scores;
  float* a = att + scores;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const D* k = base + size_t(t2) * C3 + C;
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += q[d] * load_f(k[d]);
    dot *= scale;
    pre[t2] = dot;
    maxval = fmaxf(maxval, dot);
  }
  maxval = warp_max(maxval);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const float e = expf(pre[t2] - maxval);
    a[t2] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int t2 = lane; t2 < Tn; t2 += 32) {
    if (t2 <= t) {
      a[t2] *= inv;
    } else {
      pre[t2] = 0.0f;
      a[t2] = 0.0f;
    }
  }
  __syncwarp();  // the whole att row is visible to every lane

  D* o = out + (size_t(b) * Tn + t) * ld_out + size_t(h - g.h0) * hs;
  for (int d = lane; d < hs; d += 32) {
    const D* v = base + 2 * size_t(C) + d;
    float acc = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) acc += a[t2] * load_f(v[size_t(t2) * C3]);
    o[d] = store_f<D>(acc);
  }
}

// datt[t2] = v_t2 · dout_t; dpreatt[t2] = att[t2] · (datt[t2] - Σ_t3 att[t3] datt[t3]) for t2 <= t;
// both 0 for t2 > t. One warp per (b, h, t) row. dpreatt and datt are contiguous [B, nh, T, T].
template <class D>
__global__ void attention_backward_scores_kernel(float* dpreatt, float* datt, const D* dout, const D* inp,
                                                 const float* att, AttentionGroup g) {
  const auto [row, lane, b, h, t, hs, C3, scores] = attention_row(g);
  const int Tn = g.Tn, C = g.C;
  if (row >= size_t(g.B) * g.nh * Tn) return;
  const D* v0 = inp + size_t(b) * Tn * C3 + 2 * size_t(C) + size_t(h) * hs;  // v of (b, t = 0, h)
  float* gv = warp_shared_vector(hs);
  const D* dout_t = dout + (size_t(b) * Tn + t) * C + size_t(h) * hs;
  for (int d = lane; d < hs; d += 32) gv[d] = load_f(dout_t[d]);
  __syncwarp();

  const float* a = att + scores;
  float* da = datt + row * Tn;
  float* dpre = dpreatt + row * Tn;
  float dot_sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const D* v = v0 + size_t(t2) * C3;
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += load_f(v[d]) * gv[d];
    da[t2] = dot;
    dot_sum += a[t2] * dot;
  }
  dot_sum = warp_sum(dot_sum);
  for (int t2 = lane; t2 < Tn; t2 += 32) {
    if (t2 <= t) {
      dpre[t2] = a[t2] * (da[t2] - dot_sum);
    } else {
      dpre[t2] = 0.0f;
      da[t2] = 0.0f;
    }
  }
}

// For position i of (b, h), one warp: dq_i += scale Σ_{j<=i} dpreatt[i,j] k_j;
// dk_i += scale Σ_{j>=i} dpreatt[j,i] q_j; dv_i += Σ_{j>=i} att[j,i] dout_j.
template <class D>
__global__ void attention_backward_qkv_kernel(D* dq, D* dk, D* dv, int ld_dinp, const float* dpreatt, const D* dout,
                                              const D* inp, const float* att, AttentionGroup g) {
  const auto [row, lane, b, h, i, hs, C3, scores] = attention_row(g);
  const int Tn = g.Tn, C = g.C;
  if (row >= size_t(g.B) * g.nh * Tn) return;
  const float scale = 1.0f / sqrtf(float(hs));
  const size_t head = size_t(b) * Tn * C3 + size_t(h) * hs;     // q of (b, t = 0, h) in inp
  const size_t head_out = size_t(b) * Tn * C + size_t(h) * hs;  // (b, t = 0, h) in dout
  const float* dpre_bh = dpreatt + (row - i) * Tn;              // [T, T] block of (b, h)
  const float* att_bh = att + (scores - size_t(i) * Tn);
  const size_t at = (size_t(b) * Tn + i) * ld_dinp + size_t(h - g.h0) * hs;  // (b, i, h) in dq, dk, dv
  for (int d = lane; d < hs; d += 32) {
    float dqd = 0.0f, dkd = 0.0f, dvd = 0.0f;
    for (int j = 0; j <= i; ++j) dqd += dpre_bh[size_t(i) * Tn + j] * load_f(inp[head + size_t(j) * C3 + C + d]);
    for (int j = i; j < Tn; ++j) {
      dkd += dpre_bh[size_t(j) * Tn + i] * load_f(inp[head + size_t(j) * C3 + d]);
      dvd += att_bh[size_t(j) * Tn + i] * load_f(dout[head_out + size_t(j) * C + d]);
    }
    add_to(&dq[at + d], dqd * scale);
    add_to(&dk[at + d], dkd * scale);
    add_to(&dv[at + d], dvd);
  }
}

size_t attention_shared_bytes(int C, int NH) {
  const size_t bytes = size_t(kWarpsPerBlock) * size_t(C / NH) * sizeof(float);
  require(bytes <= 48 * 1024, "attention: head size too large for the shared-memory layout");
  return bytes;
}
void check_attention_shape(int B, int Tn, int C, int NH, int h0, int nh) {
  require(B >= 0 && Tn >= 0 && C >= 0 && NH > 0, "attention: negative size or NH <= 0");
  require(C % NH == 0, "attention: C must be a multiple of NH");
  require(h0 >= 0 && nh >= 0 && h0 + nh <= NH, "attention: heads outside 0..NH");
}

// ---- GELU, residual ----------------------------------------------------------------------------
template <class D>
__global__ void gelu_forward_kernel(D* out, const D* inp, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float x = load_f(inp[i]);
    const float cube = kGeluCubic * x * x * x;
    out[i] = store_f<D>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube))));
  }
}

template <class D>
__global__ void gelu_backward_kernel(D* dinp, const D* inp, const D* dout, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float x = load_f(inp[i]);
    const float cube = kGeluCubic * x * x * x;
    const float tanh_arg = kGeluScale * (x + cube);
    const float tanh_out = tanhf(tanh_arg);
    const float cosh_out = coshf(tanh_arg);
    const float sech_out = 1.0f / (cosh_out * cosh_out);
    const float local_grad =
        0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    add_to(&dinp[i], local_grad * load_f(dout[i]));
  }
}

template <class D>
__global__ void residual_forward_kernel(D* out, const D* inp1, const D* inp2, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) out[i] = store_f<D>(load_f(inp1[i]) + load_f(inp2[i]));
}

template <class D>
__global__ void accumulate_kernel(D* dinp, const D* dout, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) add_to(&dinp[i], load_f(dout[i]));
}

// ---- softmax + cross-entropy -------------------------------------------------------------------
constexpr int kSoftmaxBlock = 512;

// One block per row: probs over the first V logits, 0 in the padding; losses[row] = -log p[target],
// computed as log Σ exp(l - max) - (l[target] - max) so it stays finite where p underflows (NaN for
// a target outside [0, V)).
template <class D>
__global__ void softmax_crossentropy_forward_kernel(float* losses, float* probs, const D* logits, const int* targets,
                                                    int V, int Vp) {
  const size_t row = blockIdx.x;
  const D* x = logits + row * Vp;
  float* p = probs + row * Vp;
  float maxval = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) maxval = fmaxf(maxval, load_f(x[i]));
  maxval = block_max(maxval);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(load_f(x[i]) - maxval);
  sum = block_sum(sum);
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) p[i] = i < V ? expf(load_f(x[i]) - maxval) / sum : 0.0f;
  if (threadIdx.x == 0 && losses != nullptr) {
    const int target = targets[row];
    losses[row] = target >= 0 && target < V ? logf(sum) - (load_f(x[target]) - maxval) : __int_as_float(0x7fc00000);
  }
}

// dlogits[r, i] += (probs[r, i] - [i == target[r]]) · dloss for i < V; padding untouched.
template <class D>
__global__ void softmax_crossentropy_backward_kernel(D* dlogits, const float* probs, const int* targets, int V, int Vp,
                                                     float dloss, size_t n) {
  for (size_t k = global_index(); k < n; k += global_stride()) {
    const size_t row = k / V;
    const int i = int(k % V);
    const size_t at = row * Vp + i;
    const float indicator = i == targets[row] ? 1.0f : 0.0f;
    add_to(&dlogits[at], (probs[at] - indicator) * dloss);
  }
}

}  // namespace

// ================================================================================================
// Public entry points
// ================================================================================================

template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C, void* stream) {
  require(B >= 0 && Tn >= 0 && C >= 0, "encoder_forward: negative size");
  const size_t n = size_t(B) * Tn * C;
  if (n == 0) return;
  encoder_forward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(out), tokens, dev(wte), dev(wpe), Tn, C,
                                                                          n);
  SZ_LAUNCHED(encoder_forward_kernel);
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C, void* stream) {
  require(B >= 0 && Tn >= 0 && C >= 0, "encoder_backward: negative size");
  const int N = B * Tn;
  if (N == 0 || C == 0) return;
  if (dwpe != nullptr) {
    encoder_backward_wpe_kernel<<<blocks_for(size_t(Tn) * C), kBlock, 0, as_stream(stream)>>>(dev(dwpe), dev(dout), B,
                                                                                              Tn, C);
    SZ_LAUNCHED(encoder_backward_wpe_kernel);
  }
  if (dwte != nullptr) {
    encoder_backward_wte_kernel<<<unsigned(N), kBlock, 0, as_stream(stream)>>>(dev(dwte), dev(dout), tokens, N, C);
    SZ_LAUNCHED(encoder_backward_wte_kernel);
  }
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       void* stream) {
  require(N >= 0 && C > 0, "layernorm_forward: N < 0 or C <= 0");
  if (N == 0) return;
  layernorm_forward_kernel<<<blocks_for_rows(N), kBlock, 0, as_stream(stream)>>>(dev(out), mean, rstd, dev(inp),
                                                                                 dev(weight), dev(bias), N, C);
  SZ_LAUNCHED(layernorm_forward_kernel);
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int N, int C, void* stream) {
  require(N >= 0 && C > 0, "layernorm_backward: N < 0 or C <= 0");
  if (N == 0) return;
  if (dinp != nullptr) {
    layernorm_backward_dinp_kernel<<<blocks_for_rows(N), kBlock, 0, as_stream(stream)>>>(dev(dinp), dev(dout), dev(inp),
                                                                                         dev(weight), mean, rstd, N, C);
    SZ_LAUNCHED(layernorm_backward_dinp_kernel);
  }
  column_sums(dev(dbias), dev(dweight), dev(dout), dev(inp), mean, rstd, N, C, as_stream(stream));
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC, void* cublas,
                    void* stream) {
  require(N >= 0 && C >= 0 && OC >= 0, "matmul_forward: negative size");
  if (N == 0 || OC == 0) return;
  const cudaStream_t s = as_stream(stream);
  const size_t n = size_t(N) * OC;
  float beta = 0.0f;
  if (bias != nullptr) {  // out = bias, then out = inp · weightᵀ + 1 · out, rounded once
    broadcast_rows_kernel<<<blocks_for(n), kBlock, 0, s>>>(dev(out), dev(bias), OC, n);
    SZ_LAUNCHED(broadcast_rows_kernel);
    beta = 1.0f;
  }
  if (C == 0) {
    if (bias == nullptr) SZ_CUDA(cudaMemsetAsync(out, 0, n * sizeof(T), s));
    return;
  }
  // Row-major out[N,OC] is column-major outᵀ[OC,N] = weight_cmᵀ · inp_cm.
  const CublasCall call(cublas, s);
  call.gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC,
                     void* cublas, void* stream) {
  require(N >= 0 && C >= 0 && OC >= 0, "matmul_backward: negative size");
  if (N == 0 || OC == 0) return;
  const cudaStream_t s = as_stream(stream);
  if (C > 0 && (dinp != nullptr || dweight != nullptr)) {
    const CublasCall call(cublas, s);
    // dinp[N,C] += dout · weight: column-major dinpᵀ[C,N] += weight_cm[C,OC] · dout_cm[OC,N].
    if (dinp != nullptr) call.gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C);
    // dweight[OC,C] += doutᵀ · inp: column-major dweightᵀ[C,OC] += inp_cm[C,N] · dout_cmᵀ[N,OC].
    if (dweight != nullptr) call.gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  }
  column_sums(dev(dbias), static_cast<dev_t<T>*>(nullptr), dev(dout), static_cast<const dev_t<T>*>(nullptr), nullptr,
              nullptr, N, OC, s);
}

template <class T>
void matmul_backward_weight_rows(T* dweight, const T* dout, const T* inp, int N, int C, int OC, int first, int rows,
                                 void* cublas, void* stream) {
  require(N >= 0 && C >= 0 && first >= 0 && rows >= 0 && first + rows <= OC, "matmul_backward_weight_rows: bad shape");
  if (N == 0 || C == 0 || rows == 0) return;
  // dweight[rows,C] += dout[:, first..]ᵀ · inp: column-major dweightᵀ[C,rows] += inp_cm[C,N] · dout_cmᵀ[N,rows],
  // dout_cm's columns of length OC starting at element `first`.
  const CublasCall call(cublas, as_stream(stream));
  call.gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, rows, N, inp, C, dout + first, OC, 1.0f, dweight, C);
}

template <class T>
void attention_forward_heads(T* out, int ld_out, float* preatt, float* att, int ld_att, const T* inp, int B, int Tn,
                             int C, int NH, int h0, int nh, void* stream) {
  check_attention_shape(B, Tn, C, NH, h0, nh);
  const size_t rows = size_t(B) * nh * Tn;
  if (rows == 0 || C == 0) return;
  attention_forward_kernel<<<blocks_for_rows(rows), kBlock, attention_shared_bytes(C, NH), as_stream(stream)>>>(
      dev(out), ld_out, preatt, att, dev(inp), AttentionGroup{B, Tn, C, NH, h0, nh, ld_att});
  SZ_LAUNCHED(attention_forward_kernel);
}

template <class T>
void attention_backward_heads(T* dq, T* dk, T* dv, int ld_dinp, float* dpreatt, float* datt, const T* dout,
                              const T* inp, const float* att, int ld_att, int B, int Tn, int C, int NH, int h0, int nh,
                              void* stream) {
  check_attention_shape(B, Tn, C, NH, h0, nh);
  const size_t rows = size_t(B) * nh * Tn;
  if (rows == 0 || C == 0) return;
  const cudaStream_t s = as_stream(stream);
  const AttentionGroup group{B, Tn, C, NH, h0, nh, ld_att};
  attention_backward_scores_kernel<<<blocks_for_rows(rows), kBlock, attention_shared_bytes(C, NH), s>>>(
      dpreatt, datt, dev(dout), dev(inp), att, group);
  SZ_LAUNCHED(attention_backward_scores_kernel);
  attention_backward_qkv_kernel<<<blocks_for_rows(rows), kBlock, 0, s>>>(dev(dq), dev(dk), dev(dv), ld_dinp, dpreatt,
                                                                         dev(dout), dev(inp), att, group);
  SZ_LAUNCHED(attention_backward_qkv_kernel);
}

template <class T>
void gelu_forward(T* out, const T* inp, size_t n, void* stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(out), dev(inp), n);
  SZ_LAUNCHED(gelu_forward_kernel);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, void* stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dinp), dev(inp), dev(dout), n);
  SZ_LAUNCHED(gelu_backward_kernel);
}

template <class T>
void residual_forward(T* out, const T* inp1, const T* inp2, size_t n, void* stream) {
  if (n == 0) return;
  residual_forward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(out), dev(inp1), dev(inp2), n);
  SZ_LAUNCHED(residual_forward_kernel);
}

template <class T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, size_t n, void* stream) {
  if (n == 0) return;
  if (dinp1 != nullptr) {
    accumulate_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dinp1), dev(dout), n);
    SZ_LAUNCHED(accumulate_kernel);
  }
  if (dinp2 != nullptr) {
    accumulate_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dinp2), dev(dout), n);
    SZ_LAUNCHED(accumulate_kernel);
  }
}

template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp, void* stream) {
  require(N >= 0 && V > 0 && Vp >= V, "softmax_crossentropy_forward: need N >= 0 and 0 < V <= Vp");
  if (N == 0) return;
  require(losses == nullptr || targets != nullptr, "softmax_crossentropy_forward: losses need targets");
  softmax_crossentropy_forward_kernel<<<unsigned(N), kSoftmaxBlock, 0, as_stream(stream)>>>(losses, probs, dev(logits),
                                                                                            targets, V, Vp);
  SZ_LAUNCHED(softmax_crossentropy_forward_kernel);
}

template <class T>
void softmax_crossentropy_backward(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp,
                                   float dloss, void* stream) {
  require(N >= 0 && V > 0 && Vp >= V, "softmax_crossentropy_backward: need N >= 0 and 0 < V <= Vp");
  if (N == 0) return;
  const size_t n = size_t(N) * V;
  softmax_crossentropy_backward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dlogits), probs, targets, V,
                                                                                        Vp, dloss, n);
  SZ_LAUNCHED(softmax_crossentropy_backward_kernel);
}

// ---- explicit instantiations for float and bf16 ------------------------------------------------
#define STARZERO_INSTANTIATE_CUDA_KERNELS(T)                                                                          \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int, void*);                         \
  template void encoder_backward<T>(T*, T*, const T*, const int*, int, int, int, void*);                              \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, void*);              \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, int, int, \
                                      void*);                                                                         \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int, void*, void*);                     \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, void*, void*);            \
  template void matmul_backward_weight_rows<T>(T*, const T*, const T*, int, int, int, int, int, void*, void*);        \
  template void attention_forward_heads<T>(T*, int, float*, float*, int, const T*, int, int, int, int, int, int,      \
                                           void*);                                                                    \
  template void attention_backward_heads<T>(T*, T*, T*, int, float*, float*, const T*, const T*, const float*, int,   \
                                            int, int, int, int, int, int, void*);                                     \
  template void gelu_forward<T>(T*, const T*, size_t, void*);                                                         \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, void*);                                              \
  template void residual_forward<T>(T*, const T*, const T*, size_t, void*);                                           \
  template void residual_backward<T>(T*, T*, const T*, size_t, void*);                                                \
  template void softmax_crossentropy_forward<T>(float*, float*, const T*, const int*, int, int, int, void*);          \
  template void softmax_crossentropy_backward<T>(T*, const float*, const int*, int, int, int, float, void*);

STARZERO_INSTANTIATE_CUDA_KERNELS(float)
STARZERO_INSTANTIATE_CUDA_KERNELS(bf16)
#undef STARZERO_INSTANTIATE_CUDA_KERNELS

}  // namespace starzero::kernels::cuda
