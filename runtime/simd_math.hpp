#pragma once
// The building blocks of the CPU kernels that have SIMD paths (runtime/simd.hpp): per-element math
// written once as a template over the value type V, which is `float` for the scalar path and for
// vector tails, or a GCC vector type of 8 (AVX2) or 16 (AVX-512) floats, whose + − × ÷ and ?: are
// element-wise and round like the scalar operations. A file that includes this header compiles
// with -ffp-contract=off, so no path fuses a multiply and an add and every path gives the same
// bits; its vector loops carry their instruction set's target attribute and inline all of this
// (flatten). Nothing here may be called from code compiled without those rules. Such a file also
// takes -Wno-psabi: GCC notes at the end of the file that handing vectors to functions of another
// target changes the ABI, which does not matter as all of it is inlined.
//
// Reductions keep the same bits on every path by fixing the order of the additions: element i is
// added into lane i mod 16 (in element order within a lane, the tail included), and the 16 lanes
// are then added pairwise (lane j += lane j+8, j+4, j+2, j+1). The scalar path keeps 16 floats,
// AVX2 two vectors of 8, AVX-512 one of 16: the same 16 sums.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace starzero::simd_math {

template <int lanes>
struct Vec {
  typedef float Floats __attribute__((vector_size(4 * lanes)));
  typedef std::int32_t Ints __attribute__((vector_size(4 * lanes)));
  typedef double Doubles __attribute__((vector_size(8 * lanes)));
};

// The value type of a path with `lanes` floats per vector: float for 1.
template <int lanes>
using Floats = std::conditional_t<lanes == 1, float, typename Vec<lanes>::Floats>;

// What differs between a float and a vector of floats: broadcasting a constant, rounding to an
// integer-valued float's int32, reinterpreting int32 bits as floats, loads and stores.
template <class V>
struct Ops;
template <>
struct Ops<float> {
  using Int = std::int32_t;
  static float splat(float c) { return c; }
  static Int to_int(float x) { return Int(x); }
  static float from_bits(Int bits) { return std::bit_cast<float>(bits); }
  static float select(bool m, float a, float b) { return m ? a : b; }
  static float load(const float* p) { return *p; }
  static void store(float* p, float x) { *p = x; }
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
  [[gnu::always_inline]] static F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  [[gnu::always_inline]] static void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
};

// exp(x) for x in [-87.3, 88.3] (clamped): x = n·ln2 + r, |r| <= ln2/2, exp(r) by Cephes'
// polynomial, times 2^n built in the exponent bits. n is rounded with the 1.5·2^23 trick, exact
// for |x/ln2| < 2^22. Relative error below 2e-7 against exp in double.
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

// Applies body(V{}, i) to elements [i, i + lanes) of [0, n) with V = Floats<lanes>, then to the
// rest one by one with V = float.
template <int lanes, class Body>
[[gnu::always_inline]] inline void for_each_element(std::size_t n, const Body& body) {
  std::size_t i = 0;
  if constexpr (lanes > 1)
    for (; i + lanes <= n; i += lanes) body(Floats<lanes>{}, i);
  for (; i < n; ++i) body(float{}, i);
}

// Σ_i term(V{}, i) over [0, n) in the fixed order of the header comment. term(V{}, i) returns the
// terms of elements [i, i + lanes(V)); it is called once per element.
template <int lanes, class Term>
[[gnu::always_inline]] inline float sum16(std::size_t n, const Term& term) {
  using F = Floats<lanes>;
  constexpr int per = 16 / lanes;
  F acc[per];
  for (int v = 0; v < per; ++v) acc[v] = Ops<F>::splat(0.0f);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int v = 0; v < per; ++v) acc[v] = acc[v] + term(F{}, i + std::size_t(v * lanes));
  float lane[16];
  for (int v = 0; v < per; ++v) Ops<F>::store(lane + v * lanes, acc[v]);
  for (std::size_t j = 0; i < n; ++i, ++j) lane[j] = lane[j] + term(float{}, i);
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  return lane[0];
}

// max_i x[i] over [0, n), n > 0 (exact, so any order gives the same value; NaN-free input).
template <int lanes>
[[gnu::always_inline]] inline float max_of(const float* x, std::size_t n) {
  float m = -__builtin_inff();
  std::size_t i = 0;
  if constexpr (lanes > 1) {
    using F = Floats<lanes>;
    using O = Ops<F>;
    F acc = O::splat(m);
    for (; i + lanes <= n; i += lanes) {
      const F v = O::load(x + i);
      acc = O::select(v > acc, v, acc);
    }
    for (int k = 0; k < lanes; ++k) m = acc[k] > m ? acc[k] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

}  // namespace starzero::simd_math

// On a lambda given to for_each_element or sum16, after its parameter list: inlined into the
// path's function even though a lambda has no target attribute of its own (out of line, its
// vector arguments would go through memory).
#define SZ_SIMD_INLINE __attribute__((always_inline))
// The target attributes of the three paths' outer functions.
#define SZ_SIMD_AVX2 __attribute__((target("avx2"), flatten))
#define SZ_SIMD_AVX512 __attribute__((target("avx512f,avx512bw"), flatten))
// The scalar path stays scalar: GCC would otherwise vectorise its loops with SSE2.
#define SZ_SIMD_SCALAR __attribute__((optimize("no-tree-vectorize"), flatten))
