// CUDA implementations of tasks/nn_llama_kernels.hpp (namespace starzero::kernels::cuda): the Llama 3
// forward and backward kernels (RMSNorm, RoPE, SwiGLU; the grouped-query attention is nn_kernels.cu's
// memory-efficient attention, called from the header), same math and
// conventions as the CPU kernels. Storage T is float or bf16 (device type __nv_bfloat16,
// layout-compatible with starzero::bf16); everything is computed in float and rounded once on
// store. Simple kernels: one thread per element (pair) or one warp per row.
//
// - Every function only enqueues work on the given stream (asynchronous); errors in a call or a
//   launch throw std::runtime_error naming the call and CUDA's error string.
// - Backward kernels accumulate (+=). Each gradient element is read, incremented by the float sum
//   of all its contributions and written exactly once (one rounding for bf16), with a fixed
//   summation order: the results are deterministic (no atomics anywhere).
// - Scratch: the RMSNorm weight gradient uses a small float buffer of per-chunk partial column sums
//   (cudaMallocAsync / cudaFreeAsync on the stream).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tasks/cuda_common.cuh"
#include "tasks/nn_llama_kernels.hpp"

namespace starzero::kernels::cuda {

namespace {

using std::size_t;

// ---- RMSNorm -----------------------------------------------------------------------------------
// One warp per row.
template <class D>
__global__ void rmsnorm_forward_kernel(D* out, float* rstd, const D* inp, const D* weight, int N, int C, float eps) {
  const size_t row = warp_row();
  const int lane = warp_lane();
  if (row >= size_t(N)) return;
  const D* x = inp + row * C;
  float sumsq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = load_f(x[c]);
    sumsq += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(sumsq) / C + eps);
  D* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = store_f<D>(load_f(x[c]) * s * load_f(weight[c]));
  if (lane == 0 && rstd != nullptr) rstd[row] = s;
}

// dinp[r, :] += rstd · (g - norm · mean(g · norm)), g = weight · dout, norm = inp · rstd; one warp per row.
template <class D>
__global__ void rmsnorm_backward_dinp_kernel(D* dinp, const D* dout, const D* inp, const D* weight, const float* rstd,
                                             int N, int C) {
  const size_t row = warp_row();
  const int lane = warp_lane();
  if (row >= size_t(N)) return;
  const size_t base = row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += load_f(weight[c]) * load_f(dout[base + c]) * (load_f(inp[base + c]) * s);
  const float mean_dot = warp_sum(dot) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = load_f(inp[base + c]) * s;
    const float g = load_f(weight[c]) * load_f(dout[base + c]);
    add_to(&dinp[base + c], s * (g - norm * mean_dot));
  }
}

// dweight[c] += Σ_r dout[r, c] · inp[r, c] · rstd[r]: rows cut into chunks of kChunkRows; a
// (32 x 8) block sums 32 columns over one chunk into float partials, then one thread per column
// adds the chunk partials in order to the gradient.
constexpr int kChunkRows = 64;
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;

template <class D>
__global__ void rmsnorm_dweight_partials_kernel(float* partial, const D* dout, const D* inp, const float* rstd, int N,
                                                int C) {
  __shared__ float acc[kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_end = min(N, (chunk + 1) * kChunkRows);
  float sum = 0.0f;
  if (c < C) {
    for (int r = chunk * kChunkRows + threadIdx.y; r < row_end; r += kRowLanes) {
      const size_t i = size_t(r) * C + c;
      sum += load_f(dout[i]) * (load_f(inp[i]) * rstd[r]);
    }
  }
  acc[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) s += acc[k][threadIdx.x];
    partial[size_t(chunk) * C + c] = s;
  }
}

// ---- RoPE --------------------------------------------------------------------------------------
// Work units of a row of C channels: the n_head·hs/2 rotated pairs, then (when `rest`) the
// C - n_head·hs channels that pass through. One thread per unit (grid-stride).
struct RopeShape {
  int Tn, n_head, hs, C;
  int pairs;  // rotated pairs per row: n_head·hs/2
  int units;  // work units per row
};

// Work unit u: where its element (the pair's first) sits and, for a rotated pair, the cosine and
// sine of its angle at its position.
struct RopeUnit {
  size_t at;
  bool rotated;
  float cos_t, sin_t;
};
__device__ inline RopeUnit rope_unit(size_t u, const float* freqs_cis, const RopeShape& s) {
  const int half = s.hs / 2;
  const size_t row = u / s.units;
  const int k = int(u % s.units);
  const int t = int(row % s.Tn);
  const size_t base = row * s.C;
  if (k >= s.pairs) return {base + 2 * size_t(s.pairs) + (k - s.pairs), false, 0.0f, 0.0f};
  const int h = k / half, i = k % half;
  return {base + size_t(h) * s.hs + 2 * i, true, freqs_cis[size_t(t) * s.hs + 2 * i],
          freqs_cis[size_t(t) * s.hs + 2 * i + 1]};
}

// RoPE, both directions in one kernel. forward: out = rotation · inp (out may be inp); backward:
// out += rotationᵀ · inp (out the input's gradient, inp the output's). v passes through.
template <bool backward, class D>
__global__ void rope_kernel(D* out, const D* inp, const float* freqs_cis, RopeShape s, size_t n) {
  for (size_t u = global_index(); u < n; u += global_stride()) {
    const RopeUnit r = rope_unit(u, freqs_cis, s);
    if (!r.rotated) {
      if constexpr (backward)
        add_to(&out[r.at], load_f(inp[r.at]));
      else
        out[r.at] = inp[r.at];
      continue;
    }
    const float x0 = load_f(inp[r.at]), x1 = load_f(inp[r.at + 1]);
    if constexpr (backward) {
      add_to(&out[r.at], x0 * r.cos_t + x1 * r.sin_t);
      add_to(&out[r.at + 1], x1 * r.cos_t - x0 * r.sin_t);
    } else {
      out[r.at] = store_f<D>(x0 * r.cos_t - x1 * r.sin_t);
      out[r.at + 1] = store_f<D>(x0 * r.sin_t + x1 * r.cos_t);
    }
  }
}

// ---- SwiGLU ------------------------------------------------------------------------------------
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <class D>
__global__ void swiglu_forward_kernel(D* out, const D* gate, const D* up, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float g = load_f(gate[i]);
    out[i] = store_f<D>(g * sigmoid(g) * load_f(up[i]));
  }
}

template <class D>
__global__ void swiglu_backward_kernel(D* dgate, D* dup, const D* dout, const D* gate, const D* up, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float g = load_f(gate[i]), d = load_f(dout[i]);
    const float sig = sigmoid(g);
    if (dgate != nullptr) add_to(&dgate[i], d * load_f(up[i]) * (sig * (1.0f + g * (1.0f - sig))));
    if (dup != nullptr) add_to(&dup[i], d * (g * sig));
  }
}

RopeShape rope_shape(int B, int Tn, int n_head, int hs, int C, bool rest, const char* what) {
  require(B >= 0 && Tn >= 0 && n_head >= 0 && hs > 0 && hs % 2 == 0 && C >= n_head * hs, what);
  const int pairs = n_head * hs / 2;
  return {Tn, n_head, hs, C, pairs, pairs + (rest ? C - n_head * hs : 0)};
}

}  // namespace

// ================================================================================================
// Public entry points
// ================================================================================================

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps, void* stream) {
  require(N >= 0 && C > 0, "rmsnorm_forward: N < 0 or C <= 0");
  if (N == 0) return;
  rmsnorm_forward_kernel<<<blocks_for_rows(N), kBlock, 0, as_stream(stream)>>>(dev(out), rstd, dev(inp), dev(weight), N,
                                                                               C, eps);
  SZ_LAUNCHED(rmsnorm_forward_kernel);
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C, void* stream) {
  require(N >= 0 && C > 0, "rmsnorm_backward: N < 0 or C <= 0");
  if (N == 0) return;
  const cudaStream_t s = as_stream(stream);
  if (dinp != nullptr) {
    rmsnorm_backward_dinp_kernel<<<blocks_for_rows(N), kBlock, 0, s>>>(dev(dinp), dev(dout), dev(inp), dev(weight),
                                                                       rstd, N, C);
    SZ_LAUNCHED(rmsnorm_backward_dinp_kernel);
  }
  if (dweight != nullptr) {
    const int chunks = (N + kChunkRows - 1) / kChunkRows;
    require(chunks <= 65535, "rmsnorm_backward: too many rows for the weight gradient");
    Scratch partial(size_t(chunks) * C, s);
    const dim3 grid((C + kColTile - 1) / kColTile, chunks);
    rmsnorm_dweight_partials_kernel<<<grid, dim3(kColTile, kRowLanes), 0, s>>>(partial.get(), dev(dout), dev(inp), rstd,
                                                                               N, C);
    SZ_LAUNCHED(rmsnorm_dweight_partials_kernel);
    column_finish_kernel<<<blocks_for(C), kBlock, 0, s>>>(dev(dweight), partial.get(), chunks, C);
    SZ_LAUNCHED(column_finish_kernel);
  }
}

template <class T>
void rope_forward(T* out, const T* inp, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C,
                  void* stream) {
  // In place, the channels that pass through need no copy.
  const RopeShape shape = rope_shape(B, Tn, n_head, hs, C, out != inp, "rope_forward: bad shape");
  const size_t n = size_t(B) * Tn * shape.units;
  if (n == 0) return;
  rope_kernel<false><<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(out), dev(inp), freqs_cis, shape, n);
  SZ_LAUNCHED(rope_kernel<false>);
}

template <class T>
void rope_backward(T* dinp, const T* dout, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C,
                   void* stream) {
  const RopeShape shape = rope_shape(B, Tn, n_head, hs, C, true, "rope_backward: bad shape");
  require(static_cast<const void*>(dinp) != static_cast<const void*>(dout), "rope_backward: dinp aliases dout");
  const size_t n = size_t(B) * Tn * shape.units;
  if (n == 0) return;
  rope_kernel<true><<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dinp), dev(dout), freqs_cis, shape, n);
  SZ_LAUNCHED(rope_kernel<true>);
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int N, int H, void* stream) {
  require(N >= 0 && H >= 0, "swiglu_forward: negative size");
  const size_t n = size_t(N) * H;
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(out), dev(gate), dev(up), n);
  SZ_LAUNCHED(swiglu_forward_kernel);
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int N, int H, void* stream) {
  require(N >= 0 && H >= 0, "swiglu_backward: negative size");
  const size_t n = size_t(N) * H;
  if (n == 0 || (dgate == nullptr && dup == nullptr)) return;
  swiglu_backward_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(dev(dgate), dev(dup), dev(dout), dev(gate),
                                                                          dev(up), n);
  SZ_LAUNCHED(swiglu_backward_kernel);
}

// ---- explicit instantiations for float and bf16 ------------------------------------------------
#define STARZERO_INSTANTIATE_LLAMA_CUDA_KERNELS(T)                                                                  \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float, void*);                         \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*, int, int, void*);           \
  template void rope_forward<T>(T*, const T*, const float*, int, int, int, int, int, void*);                        \
  template void rope_backward<T>(T*, const T*, const float*, int, int, int, int, int, void*);                       \
  template void swiglu_forward<T>(T*, const T*, const T*, int, int, void*);                                         \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int, int, void*);

STARZERO_INSTANTIATE_LLAMA_CUDA_KERNELS(float)
STARZERO_INSTANTIATE_LLAMA_CUDA_KERNELS(bf16)
#undef STARZERO_INSTANTIATE_LLAMA_CUDA_KERNELS

}  // namespace starzero::kernels::cuda
