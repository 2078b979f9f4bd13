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
//   partial column sums, the token embedding gradient the sorted tokens and positions, per-chunk
//   partial sums and cub's sort storage (cudaMallocAsync / cudaFreeAsync on the stream: ordered
//   with the kernels that use it whatever thread or stream a StarPU worker runs on).
#include <cublas_v2.h>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tasks/cuda_common.cuh"
#include "tasks/nn_kernels.hpp"

namespace starzero::kernels::cuda {

namespace {

using std::size_t;

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("starzero CUDA kernels: ") + call + " failed: " + cublasGetStatusName(s) +
                             " (" + cublasGetStatusString(s) + ")");
}
#define SZ_CUBLAS(call) check_cublas((call), #call)

// ---- column sums (dbias, layernorm dweight/dbias) ----------------------------------------------
// A deterministic two-stage column reduction, no atomics (chosen over cuBLASLt's BGRADA/BGRADB
// epilogues: those overwrite the bias gradient instead of accumulating into it, and whether one
// is supported depends on the layout, the type and the algorithm cuBLASLt picks; these kernels
// give the same bits on every call for a given shape).
// 1. Partials: the rows are cut into `chunks` chunks of chunk_rows rows (a function of N and C
//    only); a (32 x 8) block sums 32 columns over one chunk, each of its 8 row lanes every 8th row
//    in increasing order, then the 8 lanes in lane order, into float partials [chunks, C]. chunks
//    is as many as fill about one wave of a large GPU (kTargetBlocks), at least kMinChunkRows
//    rows each: the bias gradient of a GPT-2 layer (N = 2048, OC = 768) runs on 24 x 37 blocks.
// 2. Combine: a (32 x 16) block per 32 columns; lane y adds chunks y, y + 16, ... in order, then
//    the 16 lane sums are added in lane order and the total once to the gradient (one rounding).
// Traffic: the input once (s·N·C, s·2·N·C with the layernorm input), per gradient 4·chunks·C
// bytes of partials written and read again (chunks·C <= max(32768, C)), and the gradient read
// and written once.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int kCombineLanes = 16;
constexpr int kMinChunkRows = 32;
constexpr int kTargetBlocks = 1024;

struct ColumnSplit {
  int chunks, chunk_rows;
};
// The row chunks of an N x C column reduction: a function of the shape alone (deterministic).
inline ColumnSplit column_split(int N, int C) {
  const int col_tiles = (C + kColTile - 1) / kColTile;
  const int by_rows = (N + kMinChunkRows - 1) / kMinChunkRows;
  int chunks = std::max(1, std::min(by_rows, kTargetBlocks / col_tiles));
  chunks = std::min(chunks, 65535);
  int chunk_rows = (N + chunks - 1) / chunks;
  chunk_rows = (chunk_rows + kRowLanes - 1) / kRowLanes * kRowLanes;
  return {(N + chunk_rows - 1) / chunk_rows, chunk_rows};
}

// psum[chunk, c] = Σ dout[r, c]; pnorm[chunk, c] = Σ dout[r, c] · (inp[r, c] - mean[r]) · rstd[r]
// over the chunk's rows (each skipped when null).
template <class D>
__global__ void column_partials_kernel(float* psum, float* pnorm, const D* dout, const D* inp, const float* mean,
                                       const float* rstd, int N, int C, int chunk_rows) {
  __shared__ float ssum[kRowLanes][kColTile + 1];
  __shared__ float snorm[kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_end = min(N, (chunk + 1) * chunk_rows);
  float acc_sum = 0.0f, acc_norm = 0.0f;
  if (c < C) {
    int r = chunk * chunk_rows + threadIdx.y;
    // Four rows in flight per step (loads first, adds in row order): a memory-bound loop.
    for (; r + 3 * kRowLanes < row_end; r += 4 * kRowLanes) {
      float g[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) g[k] = load_f(dout[size_t(r + k * kRowLanes) * C + c]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc_sum += g[k];
        if (pnorm != nullptr) {
          const int rk = r + k * kRowLanes;
          acc_norm += g[k] * (load_f(inp[size_t(rk) * C + c]) - mean[rk]) * rstd[rk];
        }
      }
    }
    for (; r < row_end; r += kRowLanes) {
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

// grad[c] += Σ_chunks partial[chunk, c], in the fixed order described above.
template <class D>
__global__ void column_combine_kernel(D* grad, const float* partial, int chunks, int C) {
  __shared__ float lane_sum[kCombineLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (int k = threadIdx.y; k < chunks; k += kCombineLanes) acc += partial[size_t(k) * C + c];
  lane_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int k = 0; k < kCombineLanes; ++k) total += lane_sum[k][threadIdx.x];
    add_to(&grad[c], total);
  }
}

// dsum[c] += Σ_r dout[r, c]; dnorm[c] += Σ_r dout[r, c] · (inp[r, c] - mean[r]) · rstd[r].
// Launches: 1 (partials) + 1 per gradient (combine).
template <class D>
void column_sums(D* dsum, D* dnorm, const D* dout, const D* inp, const float* mean, const float* rstd, int N, int C,
                 cudaStream_t stream) {
  if ((dsum == nullptr && dnorm == nullptr) || N <= 0 || C <= 0) return;
  const ColumnSplit split = column_split(N, C);
  const size_t per = size_t(split.chunks) * C;
  Scratch partial((dsum != nullptr ? per : 0) + (dnorm != nullptr ? per : 0), stream);
  float* psum = dsum != nullptr ? partial.get() : nullptr;
  float* pnorm = dnorm != nullptr ? partial.get() + (dsum != nullptr ? per : 0) : nullptr;
  const unsigned col_tiles = unsigned((C + kColTile - 1) / kColTile);
  column_partials_kernel<<<dim3(col_tiles, unsigned(split.chunks)), dim3(kColTile, kRowLanes), 0, stream>>>(
      psum, pnorm, dout, inp, mean, rstd, N, C, split.chunk_rows);
  SZ_LAUNCHED(column_partials_kernel);
  if (dsum != nullptr) {
    column_combine_kernel<<<col_tiles, dim3(kColTile, kCombineLanes), 0, stream>>>(dsum, psum, split.chunks, C);
    SZ_LAUNCHED(column_combine_kernel);
  }
  if (dnorm != nullptr) {
    column_combine_kernel<<<col_tiles, dim3(kColTile, kCombineLanes), 0, stream>>>(dnorm, pnorm, split.chunks, C);
    SZ_LAUNCHED(column_combine_kernel);
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

// dwte[tok, :] += Σ_{positions q with tokens[q] == tok} dout[q, :], deterministic and with a
// serial depth that does not grow with a token's frequency:
// 1. The positions 0..N-1 are sorted by token (cub's radix sort, stable: equal tokens keep their
//    positions in increasing order) into sorted_tokens / sorted_rows.
// 2. Chunks: the sorted list is cut into fixed chunks of `chunk` entries (chunk = max(32,
//    ceil(sqrt N)): a function of N alone). Per chunk and channel (one thread each, coalesced over
//    channels) the chunk's runs of equal tokens are summed in sorted order. A run that is the
//    whole of its token's segment is added to dwte at once; a run that goes on from the previous
//    chunk goes to head[chunk], one that goes on into the next chunk and starts in this one (its
//    owner) to tail[chunk].
// 3. Spans: the owner chunk of each segment that crosses a chunk boundary adds, per channel, its
//    tail and then the heads of the following chunks in chunk order, and adds that once to dwte.
// Every dwte row is written by one thread per channel, once (one rounding); no atomics. Serial
// depth: chunk entries in step 2, N / chunk + 1 partials in step 3, both ~sqrt N however the
// tokens are distributed.
constexpr int kEncoderMinChunk = 32;
constexpr int kEncoderThreads = 128;

inline int encoder_chunk(int N) {
  int chunk = int(std::ceil(std::sqrt(double(N))));
  return std::max(kEncoderMinChunk, chunk);
}

__global__ void iota_kernel(int* values, int n) {
  for (size_t i = global_index(); i < size_t(n); i += global_stride()) values[i] = int(i);
}

template <class D>
__global__ void encoder_wte_chunks_kernel(D* dwte, float* head, float* tail, const D* dout, const int* sorted_tokens,
                                          const int* sorted_rows, int N, int C, int chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int g = blockIdx.y;
  const int begin = g * chunk, end = min(N, begin + chunk);
  for (int i = begin; i < end;) {
    const int tok = sorted_tokens[i];
    const int run_start = i;
    float acc = 0.0f;
    for (; i < end && sorted_tokens[i] == tok; ++i) acc += load_f(dout[size_t(sorted_rows[i]) * C + c]);
    const bool began_before = run_start == begin && begin > 0 && sorted_tokens[begin - 1] == tok;
    const bool goes_on = i == end && end < N && sorted_tokens[end] == tok;
    if (began_before)
      head[size_t(g) * C + c] = acc;
    else if (goes_on)
      tail[size_t(g) * C + c] = acc;
    else
      add_to(&dwte[size_t(tok) * C + c], acc);
  }
}

template <class D>
__global__ void encoder_wte_spans_kernel(D* dwte, const float* head, const float* tail, const int* sorted_tokens,
                                         int N, int C, int chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int g = blockIdx.y;
  const int begin = g * chunk, end = min(N, begin + chunk);
  if (end >= N) return;
  const int tok = sorted_tokens[end - 1];
  if (sorted_tokens[end] != tok) return;  // the chunk's last run ends in it
  const bool owner = begin == 0 || sorted_tokens[begin] != tok || sorted_tokens[begin - 1] != tok;
  if (!owner) return;  // the segment started in an earlier chunk
  float acc = tail[size_t(g) * C + c];
  for (int h = g + 1;; ++h) {
    acc += head[size_t(h) * C + c];
    const int h_end = min(N, (h + 1) * chunk);
    if (h_end >= N || sorted_tokens[h_end] != tok) break;
  }
  add_to(&dwte[size_t(tok) * C + c], acc);
}

// Launches: iota 1, cub's radix sort (its own, a handful), chunks 1, spans 1.
template <class D>
void encoder_backward_wte(D* dwte, const D* dout, const int* tokens, int N, int C, cudaStream_t stream) {
  const int chunk = encoder_chunk(N);
  const int chunks = (N + chunk - 1) / chunk;
  require(chunks <= 65535, "encoder_backward: too many positions");
  size_t sort_bytes = 0;
  SZ_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, tokens, static_cast<int*>(nullptr),
                                          static_cast<const int*>(nullptr), static_cast<int*>(nullptr), N, 0,
                                          int(8 * sizeof(int)), stream));
  // One stream-ordered block: sorted tokens, rows before and after the sort, head and tail
  // partials, cub's temporary storage; every part 256-byte aligned.
  const auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t ints = aligned(size_t(N) * sizeof(int)), partials = aligned(size_t(chunks) * C * sizeof(float));
  const size_t total = 3 * ints + 2 * partials + aligned(sort_bytes);
  Scratch scratch(total / sizeof(float), stream);
  char* base = reinterpret_cast<char*>(scratch.get());
  int* sorted_tokens = reinterpret_cast<int*>(base);
  int* rows = reinterpret_cast<int*>(base + ints);
  int* sorted_rows = reinterpret_cast<int*>(base + 2 * ints);
  float* head = reinterpret_cast<float*>(base + 3 * ints);
  float* tail = reinterpret_cast<float*>(base + 3 * ints + partials);
  void* sort_temp = base + 3 * ints + 2 * partials;

  iota_kernel<<<blocks_for(size_t(N)), kBlock, 0, stream>>>(rows, N);
  SZ_LAUNCHED(iota_kernel);
  SZ_CUDA(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, tokens, sorted_tokens, rows, sorted_rows, N, 0,
                                          int(8 * sizeof(int)), stream));
  const dim3 grid(unsigned((C + kEncoderThreads - 1) / kEncoderThreads), unsigned(chunks));
  encoder_wte_chunks_kernel<<<grid, kEncoderThreads, 0, stream>>>(dwte, head, tail, dout, sorted_tokens, sorted_rows,
                                                                   N, C, chunk);
  SZ_LAUNCHED(encoder_wte_chunks_kernel);
  encoder_wte_spans_kernel<<<grid, kEncoderThreads, 0, stream>>>(dwte, head, tail, sorted_tokens, N, C, chunk);
  SZ_LAUNCHED(encoder_wte_spans_kernel);
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
// out[r, :] = bias for every row r < N: a copy of the bias' bits, rows of `words` words W (16-byte
// uint4 when the row and both pointers allow it, else the element type). Block (bx, by): bx
// threads over a row's words (coalesced), by rows at a time; each thread loads its bias word once
// and stores it to every (gridDim.y · by)-th row. No division per element.
template <class W>
__global__ void broadcast_rows_kernel(W* out, const W* bias, int N, int words) {
  const int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= words) return;
  const W value = bias[w];
  for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < N; r += gridDim.y * blockDim.y)
    out[size_t(r) * words + w] = value;
}

constexpr int kBroadcastRowsPerThread = 4;

template <class W>
void launch_broadcast_rows(W* out, const W* bias, int N, int words, cudaStream_t stream) {
  // bx: the row's words rounded up to a warp, at most kBlock; by fills the block with rows.
  const int bx = std::min(kBlock, (words + 31) / 32 * 32);
  const int by = kBlock / bx;
  const unsigned gx = unsigned((words + bx - 1) / bx);
  const int row_groups = (N + by * kBroadcastRowsPerThread - 1) / (by * kBroadcastRowsPerThread);
  const unsigned gy = unsigned(std::max(1, std::min(row_groups, 65535)));
  broadcast_rows_kernel<W><<<dim3(gx, gy), dim3(unsigned(bx), unsigned(by)), 0, stream>>>(out, bias, N, words);
  SZ_LAUNCHED(broadcast_rows_kernel);
}

// out[N, OC] = bias in every row, one coalesced pass of 16-byte stores where possible.
template <class D>
void broadcast_rows(D* out, const D* bias, int N, int OC, cudaStream_t stream) {
  constexpr int kPerWord = int(sizeof(uint4) / sizeof(D));
  const bool vectorizable = OC % kPerWord == 0 && reinterpret_cast<std::uintptr_t>(out) % sizeof(uint4) == 0 &&
                            reinterpret_cast<std::uintptr_t>(bias) % sizeof(uint4) == 0;
  if (vectorizable)
    launch_broadcast_rows(reinterpret_cast<uint4*>(out), reinterpret_cast<const uint4*>(bias), N, OC / kPerWord,
                          stream);
  else
    launch_broadcast_rows(out, bias, N, OC, stream);
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
// Memory-efficient ("flash" style): no [T, T] matrix. Query heads [h0, h0 + nh) of NH, key/value
// heads NKV (GPT: NKV = NH; the layouts in nn_kernels.hpp). One warp per row: (b, query head, t)
// of the group's [B, nh, T] log-sum-exps, or in the key kernel (b, key/value head, t). Lane l owns
// the head dimensions l, l + 32, ... (hs <= 32·kMaxDimsPerLane) of the row's vectors and, in each
// chunk of 32 keys (or queries), the score of the chunk's l-th one. Each warp keeps two
// hs-vectors in shared memory. qkv and dout are read whole; out, dinp's parts and lse are the
// group's strided blocks. Fixed summation orders, no atomics.
constexpr int kMaxDimsPerLane = 8;  // hs <= 256
struct AttentionGroup {
  int B, Tn, NH, NKV, hs, h0, nh;
  int ld_lse;  // lse: elements from one sequence's [nh, T] to the next
  __host__ __device__ int group() const { return NH / NKV; }                 // query heads per key/value head
  __host__ __device__ size_t C3() const { return size_t(NH + 2 * NKV) * hs; }  // one position of qkv
  __host__ __device__ size_t Cout() const { return size_t(NH) * hs; }         // one position of out, dout
};
struct AttentionRow {
  size_t row;  // b·heads·T + local head·T + t; past the last row for the spare warps
  int lane;    // the thread's lane in its warp
  int b, local_head, t;
};
// The row of the calling thread's warp over `heads` heads per sequence.
__device__ __forceinline__ AttentionRow attention_row(const AttentionGroup& g, int heads) {
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const size_t bh = row / g.Tn;
  return {row, int(threadIdx.x % 32), int(bh / heads), int(bh % heads), int(row % g.Tn)};
}
// The warp's two hs-float vectors of the block's dynamic shared memory (attention_shared_bytes).
__device__ __forceinline__ float* warp_shared_vector(int hs, int which) {
  extern __shared__ float shared_vec[];
  return shared_vec + (size_t(threadIdx.x / 32) * 2 + which) * hs;
}
template <class D>
__device__ __forceinline__ void load_vector(float* to, const D* from, int hs, int lane) {
  for (int d = lane; d < hs; d += 32) to[d] = load_f(from[d]);
}
// x · y over hs, x in shared memory, y in global.
template <class D>
__device__ __forceinline__ float dot_hs(const float* x, const D* y, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s += x[d] * load_f(y[d]);
  return s;
}

// Of query q (scaled scores, log-sum-exp lse) against key k, and of dout g against value v:
// p = exp(scale q·k − lse) and dp = g·v (the probability and its gradient).
struct ProbAndGradient {
  float p, dp;
};
template <class D>
__device__ __forceinline__ ProbAndGradient prob_and_gradient(const float* q, const D* k, const float* g, const D* v,
                                                             int hs, float scale, float lse) {
  return {expf(scale * dot_hs(q, k, hs) - lse), dot_hs(g, v, hs)};
}

// Sequence b of qkv, and the keys and values (position 0) that query head h reads.
template <class D>
struct QueryHead {
  const D *seq, *keys, *values;
};
template <class D>
__device__ __forceinline__ QueryHead<D> query_head(const D* qkv, const AttentionGroup& g, int b, int h) {
  const D* seq = qkv + size_t(b) * g.Tn * g.C3();
  const int kv = h / g.group();
  return {seq, seq + size_t(g.NH + kv) * g.hs, seq + size_t(g.NH + g.NKV + kv) * g.hs};
}

// Online softmax over keys t2 <= t, a chunk of 32 at a time: m the largest score so far, l the
// sum of exp(s − m), acc[d] = Σ exp(s − m) v[d]; out = acc / l, lse = m + log l.
template <class D>
__global__ void attention_forward_kernel(D* out, int ld_out, float* lse, const D* qkv, AttentionGroup g) {
  const auto [row, lane, b, local_head, t] = attention_row(g, g.nh);
  if (row >= size_t(g.B) * g.nh * g.Tn) return;
  const int hs = g.hs, h = g.h0 + local_head;
  const size_t C3 = g.C3();
  const auto [seq, keys, values] = query_head(qkv, g, b, h);
  const float scale = 1.0f / sqrtf(float(hs));
  float* q = warp_shared_vector(hs, 0);
  load_vector(q, seq + size_t(t) * C3 + size_t(h) * hs, hs, lane);
  __syncwarp();

  float m = -INFINITY, l = 0.0f, acc[kMaxDimsPerLane] = {};
  for (int chunk = 0; chunk <= t; chunk += 32) {
    const int key = chunk + lane;
    const float s = key <= t ? scale * dot_hs(q, keys + size_t(key) * C3, hs) : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));  // finite: key `chunk` <= t
    const float p = key <= t ? expf(s - m_new) : 0.0f;
    const float rescale = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    l = l * rescale + warp_sum(p);
    const int count = min(32, t + 1 - chunk);
    for (int n = 0, d = lane; d < hs; ++n, d += 32) {
      float a = acc[n] * rescale;
      for (int j = 0; j < count; ++j) a += __shfl_sync(0xffffffffu, p, j) * load_f(values[size_t(chunk + j) * C3 + d]);
      acc[n] = a;
    }
    m = m_new;
  }
  D* o = out + (size_t(b) * g.Tn + t) * ld_out + size_t(local_head) * hs;
  for (int n = 0, d = lane; d < hs; ++n, d += 32) o[d] = store_f<D>(acc[n] / l);
  if (lane == 0) lse[size_t(b) * g.ld_lse + size_t(local_head) * g.Tn + t] = m + logf(l);
}

// Query row i of query head h, one warp: with p_j = exp(scale q_i·k_j − lse_i) and
// dp_j = dout_i·v_j for j <= i, first delta_i = Σ_j p_j dp_j (into `delta`, [B, nh, T]
// contiguous), then dq_i += scale Σ_j p_j (dp_j − delta_i) k_j.
template <class D>
__global__ void attention_backward_query_kernel(D* dq, int ld_dinp, float* delta, const D* dout, const D* qkv,
                                                const float* lse, AttentionGroup g) {
  const auto [row, lane, b, local_head, i] = attention_row(g, g.nh);
  if (row >= size_t(g.B) * g.nh * g.Tn) return;
  const int hs = g.hs, h = g.h0 + local_head;
  const size_t C3 = g.C3();
  const auto [seq, keys, values] = query_head(qkv, g, b, h);
  const float scale = 1.0f / sqrtf(float(hs));
  float* q = warp_shared_vector(hs, 0);
  float* go = warp_shared_vector(hs, 1);
  load_vector(q, seq + size_t(i) * C3 + size_t(h) * hs, hs, lane);
  load_vector(go, dout + (size_t(b) * g.Tn + i) * g.Cout() + size_t(h) * hs, hs, lane);
  __syncwarp();
  const float row_lse = lse[size_t(b) * g.ld_lse + size_t(local_head) * g.Tn + i];
  float partial = 0.0f;
  for (int j = lane; j <= i; j += 32) {
    const auto [p, dp] = prob_and_gradient(q, keys + size_t(j) * C3, go, values + size_t(j) * C3, hs, scale, row_lse);
    partial += p * dp;
  }
  const float row_delta = warp_sum(partial);
  if (lane == 0) delta[row] = row_delta;

  float acc[kMaxDimsPerLane] = {};
  for (int chunk = 0; chunk <= i; chunk += 32) {
    const int j = chunk + lane;
    float ds = 0.0f;
    if (j <= i) {
      const auto [p, dp] = prob_and_gradient(q, keys + size_t(j) * C3, go, values + size_t(j) * C3, hs, scale, row_lse);
      ds = p * (dp - row_delta);
    }
    const int count = min(32, i + 1 - chunk);
    for (int n = 0, d = lane; d < hs; ++n, d += 32)
      for (int jj = 0; jj < count; ++jj)
        acc[n] += __shfl_sync(0xffffffffu, ds, jj) * load_f(keys[size_t(chunk + jj) * C3 + d]);
  }
  D* dq_i = dq + (size_t(b) * g.Tn + i) * ld_dinp + size_t(local_head) * hs;
  for (int n = 0, d = lane; d < hs; ++n, d += 32) add_to(&dq_i[d], scale * acc[n]);
}

// Key row j of key/value head kv, one warp, over its query heads in increasing order and their
// queries i >= j: with p, dp as above and ds = p (dp − delta_i), dk_j += scale Σ ds q_i and
// dv_j += Σ p dout_i.
template <class D>
__global__ void attention_backward_key_kernel(D* dk, D* dv, int ld_dinp, const float* delta, const D* dout,
                                              const D* qkv, const float* lse, AttentionGroup g) {
  const int kv_heads = g.nh / g.group();
  const auto [row, lane, b, local_kv, j] = attention_row(g, kv_heads);
  if (row >= size_t(g.B) * kv_heads * g.Tn) return;
  const int hs = g.hs, kv = g.h0 / g.group() + local_kv;
  const size_t C3 = g.C3();
  const D* seq = qkv + size_t(b) * g.Tn * C3;
  const float scale = 1.0f / sqrtf(float(hs));
  float* k = warp_shared_vector(hs, 0);
  float* v = warp_shared_vector(hs, 1);
  load_vector(k, seq + size_t(j) * C3 + size_t(g.NH + kv) * hs, hs, lane);
  load_vector(v, seq + size_t(j) * C3 + size_t(g.NH + g.NKV + kv) * hs, hs, lane);
  __syncwarp();
  float acc_k[kMaxDimsPerLane] = {}, acc_v[kMaxDimsPerLane] = {};
  for (int h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    const int local_head = h - g.h0;
    const D* queries = seq + size_t(h) * hs;
    const D* dout_bh = dout + size_t(b) * g.Tn * g.Cout() + size_t(h) * hs;
    const float* lse_bh = lse + size_t(b) * g.ld_lse + size_t(local_head) * g.Tn;
    const float* delta_bh = delta + (size_t(b) * g.nh + local_head) * g.Tn;
    for (int chunk = j; chunk < g.Tn; chunk += 32) {
      const int i = chunk + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < g.Tn) {
        const auto terms =
            prob_and_gradient(k, queries + size_t(i) * C3, v, dout_bh + size_t(i) * g.Cout(), hs, scale, lse_bh[i]);
        p = terms.p;
        ds = p * (terms.dp - delta_bh[i]);
      }
      const int count = min(32, g.Tn - chunk);
      for (int n = 0, d = lane; d < hs; ++n, d += 32)
        for (int ii = 0; ii < count; ++ii) {
          acc_k[n] += __shfl_sync(0xffffffffu, ds, ii) * load_f(queries[size_t(chunk + ii) * C3 + d]);
          acc_v[n] += __shfl_sync(0xffffffffu, p, ii) * load_f(dout_bh[size_t(chunk + ii) * g.Cout() + d]);
        }
    }
  }
  const size_t at = (size_t(b) * g.Tn + j) * ld_dinp + size_t(local_kv) * hs;
  for (int n = 0, d = lane; d < hs; ++n, d += 32) {
    add_to(&dk[at + d], scale * acc_k[n]);
    add_to(&dv[at + d], acc_v[n]);
  }
}

size_t attention_shared_bytes(int hs) {
  const size_t bytes = size_t(kWarpsPerBlock) * 2 * size_t(hs) * sizeof(float);
  require(bytes <= 48 * 1024, "attention: head size too large for the shared-memory layout");
  return bytes;
}
void check_attention_shape(int B, int Tn, int NH, int NKV, int hs, int h0, int nh) {
  require(B >= 0 && Tn >= 0 && NH > 0 && NKV > 0 && hs > 0, "attention: negative size or no heads");
  require(NH % NKV == 0, "attention: NH must be a multiple of NKV");
  require(hs <= 32 * kMaxDimsPerLane, "attention: head size above 256");
  require(h0 >= 0 && nh >= 0 && h0 + nh <= NH, "attention: heads outside 0..NH");
  require(h0 % (NH / NKV) == 0 && nh % (NH / NKV) == 0, "attention: a head group must hold whole key/value groups");
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
// computed as log Σ exp(l - max) - (l[target] - max) so it stays finite where p underflows; 0 for a
// masked target (negative: kMaskedTarget), NaN for a target >= V.
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
    losses[row] = target < 0   ? 0.0f
                  : target < V ? logf(sum) - (load_f(x[target]) - maxval)
                               : __int_as_float(0x7fc00000);
  }
}

// dlogits[r, i] += (probs[r, i] - [i == target[r]]) · dloss for i < V; padding untouched, and the
// rows of masked targets (negative) too.
template <class D>
__global__ void softmax_crossentropy_backward_kernel(D* dlogits, const float* probs, const int* targets, int V, int Vp,
                                                     float dloss, size_t n) {
  for (size_t k = global_index(); k < n; k += global_stride()) {
    const size_t row = k / V;
    const int target = targets[row];
    if (target < 0) continue;
    const int i = int(k % V);
    const size_t at = row * Vp + i;
    const float indicator = i == target ? 1.0f : 0.0f;
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
    encoder_backward_wte(dev(dwte), dev(dout), tokens, N, C, as_stream(stream));
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
  // With a bias: out = bias (one coalesced pass), then out = inp · weightᵀ + 1 · out. Chosen over
  // a bias pass after the GEMM (the same extra traffic, s·N·OC written and read again) because the
  // sum is rounded once, as the CPU twin does; over cuBLASLt's BIAS epilogue because the bits
  // would then hang on the algorithm cuBLASLt's heuristic picks for the Lt call.
  if (bias != nullptr) {
    broadcast_rows(dev(out), dev(bias), N, OC, s);
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
void attention_forward_gqa(T* out, int ld_out, float* lse, int ld_lse, const T* qkv, int B, int Tn, int NH, int NKV,
                           int hs, int h0, int nh, void* stream) {
  check_attention_shape(B, Tn, NH, NKV, hs, h0, nh);
  const size_t rows = size_t(B) * nh * Tn;
  if (rows == 0) return;
  attention_forward_kernel<<<blocks_for_rows(rows), kBlock, attention_shared_bytes(hs), as_stream(stream)>>>(
      dev(out), ld_out, lse, dev(qkv), AttentionGroup{B, Tn, NH, NKV, hs, h0, nh, ld_lse});
  SZ_LAUNCHED(attention_forward_kernel);
}

template <class T>
void attention_backward_gqa(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* qkv, const float* lse,
                            int ld_lse, int B, int Tn, int NH, int NKV, int hs, int h0, int nh, void* stream) {
  check_attention_shape(B, Tn, NH, NKV, hs, h0, nh);
  const size_t rows = size_t(B) * nh * Tn;
  if (rows == 0) return;
  const cudaStream_t s = as_stream(stream);
  const AttentionGroup group{B, Tn, NH, NKV, hs, h0, nh, ld_lse};
  // delta_i = Σ_j p_ij dp_ij per query row: B·nh·T floats, stream-ordered.
  float* delta = nullptr;
  SZ_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), s));
  attention_backward_query_kernel<<<blocks_for_rows(rows), kBlock, attention_shared_bytes(hs), s>>>(
      dev(dq), ld_dinp, delta, dev(dout), dev(qkv), lse, group);
  SZ_LAUNCHED(attention_backward_query_kernel);
  const size_t key_rows = rows / size_t(NH / NKV);
  attention_backward_key_kernel<<<blocks_for_rows(key_rows), kBlock, attention_shared_bytes(hs), s>>>(
      dev(dk), dev(dv), ld_dinp, delta, dev(dout), dev(qkv), lse, group);
  SZ_LAUNCHED(attention_backward_key_kernel);
  SZ_CUDA(cudaFreeAsync(delta, s));
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
  template void attention_forward_gqa<T>(T*, int, float*, int, const T*, int, int, int, int, int, int, int, void*);  \
  template void attention_backward_gqa<T>(T*, T*, T*, int, const T*, const T*, const float*, int, int, int, int, int, \
                                          int, int, int, void*);                                                     \
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
