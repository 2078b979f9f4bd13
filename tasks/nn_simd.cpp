// GELU on every SIMD path (tasks/nn_simd.hpp). The per-element math is written once, as a
// template over the value type V: `float` for the scalar path and the vector tails, GCC vector
// types of 8 (AVX2) or 16 (AVX-512) floats for the vector paths, whose + − × ÷ and ?: are
// element-wise and round like the scalar operations. The vector loops carry their instruction
// set's target attribute and inline everything (flatten). The file is compiled with
// -ffp-contract=off, so no path fuses a multiply and an add: the same bits on every path, and the
// result of an element does not depend on where a vector starts.
#include "tasks/nn_simd.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

// The vector code hands vectors to functions of another target than its own: GCC notes that this
// changes the ABI, which does not matter here, as all of it is inlined into one function.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace starzero::kernels::simd {

namespace {

template <int lanes>
struct Vec {
  typedef float Floats __attribute__((vector_size(4 * lanes)));
  typedef std::int32_t Ints __attribute__((vector_size(4 * lanes)));
};

// What differs between a float and a vector of floats: broadcasting a constant, rounding to an
// integer-valued float's int32, and reinterpreting int32 bits as floats.
template <class V>
struct Ops;
template <>
struct Ops<float> {
  using Int = std::int32_t;
  static float splat(float c) { return c; }
  static Int to_int(float x) { return Int(x); }
  static float from_bits(Int bits) { return std::bit_cast<float>(bits); }
  static float select(bool m, float a, float b) { return m ? a : b; }
};
template <class F>
requires(!std::is_same_v<F, float>) struct Ops<F> {
  static constexpr int lanes = sizeof(F) / 4;
  using Int = typename Vec<lanes>::Ints;
  [[gnu::always_inline]] static F splat(float c) {
    F v;
    for (int k = 0; k < lanes; ++k) v[k] = c;
    return v;
  }
  [[gnu::always_inline]] static Int to_int(F x) { return __builtin_convertvector(x, Int); }
  [[gnu::always_inline]] static F from_bits(Int bits) { return std::bit_cast<F>(bits); }
  [[gnu::always_inline]] static F select(Int m, F a, F b) { return m ? a : b; }
};

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// exp(x) for x in [-87.3, 88.3] (clamped): x = n·ln2 + r, |r| <= ln2/2, exp(r) by Cephes'
// polynomial, times 2^n built in the exponent bits. n is rounded with the 1.5·2^23 trick, exact
// for |x/ln2| < 2^22.
template <class V>
[[gnu::always_inline]] inline V exp_clamped(V x) {
  using O = Ops<V>;
  x = O::select(x < O::splat(-87.3f), O::splat(-87.3f), x);
  x = O::select(x > O::splat(88.3f), O::splat(88.3f), x);
  const V round = O::splat(12582912.0f);  // 1.5·2^23
  const V n = (x * O::splat(1.44269504088896341f) + round) - round;
  V r = x - n * O::splat(0.693359375f);   // ln2, high part: exact products for |n| < 2^11
  r = r - n * O::splat(-2.12194440e-4f);  // ln2 - 0.693359375
  V p = O::splat(1.9875691500e-4f);
  p = p * r + O::splat(1.3981999507e-3f);
  p = p * r + O::splat(8.3334519073e-3f);
  p = p * r + O::splat(4.1665795894e-2f);
  p = p * r + O::splat(1.6666665459e-1f);
  p = p * r + O::splat(5.0000001201e-1f);
  p = p * (r * r) + r + O::splat(1.0f);
  return p * O::from_bits((O::to_int(n) + 127) << 23);
}

// s = 1/(1 + exp(-2u)) = (1 + tanh u)/2.
template <class V>
[[gnu::always_inline]] inline V gelu_sigmoid(V x) {
  using O = Ops<V>;
  const V u = O::splat(kGeluScale) * (x + O::splat(kGeluCubic) * x * x * x);
  return O::splat(1.0f) / (O::splat(1.0f) + exp_clamped(O::splat(-2.0f) * u));
}

template <class V>
[[gnu::always_inline]] inline V gelu(V x) {
  return x * gelu_sigmoid(x);
}

template <class V>
[[gnu::always_inline]] inline V gelu_grad(V x) {
  using O = Ops<V>;
  const V s = gelu_sigmoid(x);
  const V du_dx = O::splat(kGeluScale) * (O::splat(1.0f) + O::splat(3.0f * kGeluCubic) * x * x);
  return s + O::splat(2.0f) * x * s * (O::splat(1.0f) - s) * du_dx;
}

// The float loops: `lanes` elements at a time (lanes 1: scalar), the rest one by one.
template <int lanes>
[[gnu::always_inline]] inline void forward_floats(float* out, const float* inp, std::size_t n) {
  std::size_t i = 0;
  if constexpr (lanes > 1) {
    using F = typename Vec<lanes>::Floats;
    for (; i + lanes <= n; i += lanes) {
      F x;
      std::memcpy(&x, inp + i, sizeof x);
      const F y = gelu(x);
      std::memcpy(out + i, &y, sizeof y);
    }
  }
  for (; i < n; ++i) out[i] = gelu(inp[i]);
}
template <int lanes>
[[gnu::always_inline]] inline void backward_floats(float* dinp, const float* inp, const float* dout, std::size_t n) {
  std::size_t i = 0;
  if constexpr (lanes > 1) {
    using F = typename Vec<lanes>::Floats;
    for (; i + lanes <= n; i += lanes) {
      F x, g, d;
      std::memcpy(&x, inp + i, sizeof x);
      std::memcpy(&g, dout + i, sizeof g);
      std::memcpy(&d, dinp + i, sizeof d);
      d = d + gelu_grad(x) * g;
      std::memcpy(dinp + i, &d, sizeof d);
    }
  }
  for (; i < n; ++i) dinp[i] = dinp[i] + gelu_grad(inp[i]) * dout[i];
}

// bf16 storage: chunks widened to float (exact), computed as above, rounded once on store.
constexpr std::size_t kChunk = 512;
template <int lanes>
[[gnu::always_inline]] inline void forward_any(float* out, const float* inp, std::size_t n) {
  forward_floats<lanes>(out, inp, n);
}
template <int lanes>
[[gnu::always_inline]] inline void forward_any(bf16* out, const bf16* inp, std::size_t n) {
  float x[kChunk], y[kChunk];
  for (std::size_t b = 0; b < n; b += kChunk) {
    const std::size_t m = std::min(kChunk, n - b);
    for (std::size_t i = 0; i < m; ++i) x[i] = to_float(inp[b + i]);
    forward_floats<lanes>(y, x, m);
    for (std::size_t i = 0; i < m; ++i) out[b + i] = from_float<bf16>(y[i]);
  }
}
template <int lanes>
[[gnu::always_inline]] inline void backward_any(float* dinp, const float* inp, const float* dout, std::size_t n) {
  backward_floats<lanes>(dinp, inp, dout, n);
}
template <int lanes>
[[gnu::always_inline]] inline void backward_any(bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n) {
  float x[kChunk], g[kChunk], d[kChunk];
  for (std::size_t b = 0; b < n; b += kChunk) {
    const std::size_t m = std::min(kChunk, n - b);
    for (std::size_t i = 0; i < m; ++i) x[i] = to_float(inp[b + i]), g[i] = to_float(dout[b + i]);
    for (std::size_t i = 0; i < m; ++i) d[i] = to_float(dinp[b + i]);
    backward_floats<lanes>(d, x, g, m);
    for (std::size_t i = 0; i < m; ++i) dinp[b + i] = from_float<bf16>(d[i]);
  }
}

#define SZ_AVX2 __attribute__((target("avx2"), flatten))
#define SZ_AVX512 __attribute__((target("avx512f,avx512bw"), flatten))
// The scalar path stays scalar: GCC would otherwise vectorise its loops with SSE2.
#define SZ_SCALAR __attribute__((optimize("no-tree-vectorize"), flatten))

template <class T>
SZ_SCALAR void forward_scalar(T* out, const T* inp, std::size_t n) {
  forward_any<1>(out, inp, n);
}
template <class T>
SZ_AVX2 void forward_avx2(T* out, const T* inp, std::size_t n) {
  forward_any<8>(out, inp, n);
}
template <class T>
SZ_AVX512 void forward_avx512(T* out, const T* inp, std::size_t n) {
  forward_any<16>(out, inp, n);
}
template <class T>
SZ_SCALAR void backward_scalar(T* dinp, const T* inp, const T* dout, std::size_t n) {
  backward_any<1>(dinp, inp, dout, n);
}
template <class T>
SZ_AVX2 void backward_avx2(T* dinp, const T* inp, const T* dout, std::size_t n) {
  backward_any<8>(dinp, inp, dout, n);
}
template <class T>
SZ_AVX512 void backward_avx512(T* dinp, const T* inp, const T* dout, std::size_t n) {
  backward_any<16>(dinp, inp, dout, n);
}

void require(SimdPath path) {
  if (!simd_path_available(path))
    throw std::invalid_argument("SIMD path " + std::string(simd_path_name(path)) + " is not supported by this CPU");
}

}  // namespace

template <class T>
void gelu_forward(SimdPath path, T* out, const T* inp, std::size_t n) {
  require(path);
  switch (path) {
    case SimdPath::avx512: return forward_avx512(out, inp, n);
    case SimdPath::avx2: return forward_avx2(out, inp, n);
    case SimdPath::scalar: return forward_scalar(out, inp, n);
  }
}

template <class T>
void gelu_backward(SimdPath path, T* dinp, const T* inp, const T* dout, std::size_t n) {
  require(path);
  switch (path) {
    case SimdPath::avx512: return backward_avx512(dinp, inp, dout, n);
    case SimdPath::avx2: return backward_avx2(dinp, inp, dout, n);
    case SimdPath::scalar: return backward_scalar(dinp, inp, dout, n);
  }
}

template void gelu_forward<float>(SimdPath, float*, const float*, std::size_t);
template void gelu_forward<bf16>(SimdPath, bf16*, const bf16*, std::size_t);
template void gelu_backward<float>(SimdPath, float*, const float*, const float*, std::size_t);
template void gelu_backward<bf16>(SimdPath, bf16*, const bf16*, const bf16*, std::size_t);

}  // namespace starzero::kernels::simd
