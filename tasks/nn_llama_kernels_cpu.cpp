// CPU implementations of tasks/nn_llama_kernels.hpp: the Llama 3 forward and backward kernels
// (RMSNorm, RoPE, SwiGLU; the grouped-query attention is nn_kernels' memory-efficient attention,
// inline in the header), written from the math of Meta's reference
// model and llm.c's train_llama3.py. Storage T is float or bf16; everything is computed in float
// and rounded once on store. Row reductions (the RMSNorm mean square and its backward dot product)
// and the RMSNorm weight gradient (a sum over all rows) are accumulated in double. Where a gradient
// element receives many contributions (the RMSNorm weight) they are summed first and added to
// the T buffer once, so bf16 gradients are not rounded after every term.
//
// No OpenMP: these run inside StarPU CPU workers, one per core.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "tasks/float_views.hpp"
#include "tasks/nn_llama_kernels.hpp"

namespace starzero::kernels {

namespace {

using std::size_t;

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

// ---- helpers -----------------------------------------------------------------------------------------
int llama_ffn_hidden(int C, float ffn_dim_multiplier, int multiple_of) {
  if (C < 0 || multiple_of <= 0) throw std::invalid_argument("llama_ffn_hidden: need C >= 0 and multiple_of > 0");
  long long hidden = 4LL * C;
  hidden = static_cast<long long>(2.0 * double(hidden) / 3.0);  // Python: int(2 * hidden / 3)
  if (ffn_dim_multiplier > 0.0f) hidden = static_cast<long long>(double(ffn_dim_multiplier) * double(hidden));
  hidden = multiple_of * ((hidden + multiple_of - 1) / multiple_of);
  return int(hidden);
}

void rope_frequencies(float* freqs_cis, int Tn, int hs, float theta, bool use_scaled_rope) {
  if (hs <= 0 || hs % 2 != 0 || Tn < 0) throw std::invalid_argument("rope_frequencies: need an even hs > 0 and T >= 0");
  const int half = hs / 2;
  const double pi = 3.14159265358979323846;
  // Llama 3.1 (Meta's apply_scaling).
  constexpr double kScaleFactor = 8, kLowFreqFactor = 1, kHighFreqFactor = 4, kOldContextLen = 8192;
  const double low_freq_wavelen = kOldContextLen / kLowFreqFactor;
  const double high_freq_wavelen = kOldContextLen / kHighFreqFactor;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(double(theta), double(2 * i) / double(hs));
    if (use_scaled_rope) {
      const double wavelen = 2.0 * pi / freq;
      if (wavelen < high_freq_wavelen) {
        // high frequencies: unchanged
      } else if (wavelen > low_freq_wavelen) {
        freq /= kScaleFactor;
      } else {
        const double smooth = (kOldContextLen / wavelen - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
        freq = (1.0 - smooth) * freq / kScaleFactor + smooth * freq;
      }
    }
    for (int t = 0; t < Tn; ++t) {
      const double angle = double(t) * freq;
      float* f = freqs_cis + (size_t(t) * half + i) * 2;
      f[0] = float(std::cos(angle));
      f[1] = float(std::sin(angle));
    }
  }
}

// ---- RMSNorm -----------------------------------------------------------------------------------------
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps) {
  assert(N >= 0 && C > 0);
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    T* o = out + size_t(n) * C;
    double sumsq = 0.0;
    for (int c = 0; c < C; ++c) {
      const double v = to_float(x[c]);
      sumsq += v * v;
    }
    const float s = float(1.0 / std::sqrt(sumsq / C + double(eps)));
    for (int c = 0; c < C; ++c) o[c] = from_float<T>(to_float(x[c]) * s * to_float(weight[c]));
    if (rstd != nullptr) rstd[n] = s;
  }
}

// dinp row by row; dweight as column sums over the rows in row order (in double), added once: the
// same bits whether or not dinp is computed in the same call.
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C) {
  assert(N >= 0 && C > 0);
  if (dinp != nullptr) {
    for (int n = 0; n < N; ++n) {
      const size_t row = size_t(n) * C;
      const float s = rstd[n];
      double dot = 0.0;  // Σ_c g · norm
      for (int c = 0; c < C; ++c) {
        const float norm = to_float(inp[row + c]) * s;
        const float g = to_float(weight[c]) * to_float(dout[row + c]);
        dot += double(g) * double(norm);
      }
      const float mean_dot = float(dot / C);
      for (int c = 0; c < C; ++c) {
        const float norm = to_float(inp[row + c]) * s;
        const float g = to_float(weight[c]) * to_float(dout[row + c]);
        dinp[row + c] = from_float<T>(to_float(dinp[row + c]) + s * (g - norm * mean_dot));
      }
    }
  }
  if (dweight != nullptr) {
    std::vector<double> acc(size_t(C), 0.0);
    for (int n = 0; n < N; ++n) {
      const size_t row = size_t(n) * C;
      const float s = rstd[n];
      for (int c = 0; c < C; ++c) acc[c] += double(to_float(dout[row + c])) * double(to_float(inp[row + c]) * s);
    }
    for (int c = 0; c < C; ++c) dweight[c] = from_float<T>(to_float(dweight[c]) + float(acc[c]));
  }
}

// ---- RoPE --------------------------------------------------------------------------------------------
template <class T>
void rope_forward(T* out, const T* inp, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C) {
  assert(B >= 0 && Tn >= 0 && n_head >= 0 && hs > 0 && hs % 2 == 0 && C >= n_head * hs);
  const int rotated = n_head * hs;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const size_t row = (size_t(b) * Tn + t) * C;
      const float* f = freqs_cis + size_t(t) * hs;  // hs/2 pairs (cos, sin) of position t
      for (int h = 0; h < n_head; ++h) {
        const size_t at = row + size_t(h) * hs;
        for (int i = 0; i < hs / 2; ++i) {
          const float cos_t = f[2 * i], sin_t = f[2 * i + 1];
          const float x0 = to_float(inp[at + 2 * i]), x1 = to_float(inp[at + 2 * i + 1]);
          out[at + 2 * i] = from_float<T>(x0 * cos_t - x1 * sin_t);
          out[at + 2 * i + 1] = from_float<T>(x0 * sin_t + x1 * cos_t);
        }
      }
      if (out != inp) std::copy(inp + row + rotated, inp + row + C, out + row + rotated);
    }
  }
}

template <class T>
void rope_backward(T* dinp, const T* dout, const float* freqs_cis, int B, int Tn, int n_head, int hs, int C) {
  assert(B >= 0 && Tn >= 0 && n_head >= 0 && hs > 0 && hs % 2 == 0 && C >= n_head * hs);
  assert(static_cast<const void*>(dinp) != static_cast<const void*>(dout));
  const int rotated = n_head * hs;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const size_t row = (size_t(b) * Tn + t) * C;
      const float* f = freqs_cis + size_t(t) * hs;
      for (int h = 0; h < n_head; ++h) {
        const size_t at = row + size_t(h) * hs;
        for (int i = 0; i < hs / 2; ++i) {
          const float cos_t = f[2 * i], sin_t = f[2 * i + 1];
          const float d0 = to_float(dout[at + 2 * i]), d1 = to_float(dout[at + 2 * i + 1]);
          dinp[at + 2 * i] = from_float<T>(to_float(dinp[at + 2 * i]) + (d0 * cos_t + d1 * sin_t));
          dinp[at + 2 * i + 1] = from_float<T>(to_float(dinp[at + 2 * i + 1]) + (d1 * cos_t - d0 * sin_t));
        }
      }
      for (size_t j = row + rotated; j < row + C; ++j) dinp[j] = from_float<T>(to_float(dinp[j]) + to_float(dout[j]));
    }
  }
}

// ---- SwiGLU ------------------------------------------------------------------------------------------
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int N, int H) {
  const size_t n = size_t(std::max(N, 0)) * size_t(std::max(H, 0));
  for (size_t i = 0; i < n; ++i) {
    const float g = to_float(gate[i]);
    out[i] = from_float<T>(g * sigmoidf(g) * to_float(up[i]));
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int N, int H) {
  const size_t n = size_t(std::max(N, 0)) * size_t(std::max(H, 0));
  for (size_t i = 0; i < n; ++i) {
    const float g = to_float(gate[i]), d = to_float(dout[i]);
    const float sig = sigmoidf(g);
    if (dgate != nullptr) {
      const float dsilu = sig * (1.0f + g * (1.0f - sig));
      dgate[i] = from_float<T>(to_float(dgate[i]) + d * to_float(up[i]) * dsilu);
    }
    if (dup != nullptr) dup[i] = from_float<T>(to_float(dup[i]) + d * (g * sig));
  }
}

// ---- explicit instantiations -----------------------------------------------------------------------
#define STARZERO_INSTANTIATE_LLAMA_CPU_KERNELS(T)                                                                   \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float);                                \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*, int, int);                  \
  template void rope_forward<T>(T*, const T*, const float*, int, int, int, int, int);                               \
  template void rope_backward<T>(T*, const T*, const float*, int, int, int, int, int);                              \
  template void swiglu_forward<T>(T*, const T*, const T*, int, int);                                                \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int, int);

STARZERO_INSTANTIATE_LLAMA_CPU_KERNELS(float)
STARZERO_INSTANTIATE_LLAMA_CPU_KERNELS(bf16)
#undef STARZERO_INSTANTIATE_LLAMA_CPU_KERNELS

}  // namespace starzero::kernels
