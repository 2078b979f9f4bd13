// Σ x² in double on every SIMD path (optimizers/adamw_simd.hpp): 16 double lanes, element i in lane
// i mod 16, held as 16 scalars (scalar path), four vectors of 4 (AVX2) or two of 8 (AVX-512).
// Squares and sums of widened floats are exact operations in the same order on every path
// (compiled with -ffp-contract=off: no fused multiply-add).
#include <algorithm>
#include <cstring>

#include "optimizers/adamw_simd.hpp"
#include "runtime/simd_math.hpp"

namespace starzero::optim {

namespace {

using simd_math::Vec;
using std::size_t;

// Adds x[i]² into lane[i mod 16] for i in [0, n); n is a multiple of 16 except for the last call.
template <int lanes>
[[gnu::always_inline]] inline void add_squares(double (&lane)[16], const float* x, size_t n) {
  size_t i = 0;
  if constexpr (lanes > 1) {
    using F = typename Vec<lanes>::Floats;
    using D = typename Vec<lanes>::Doubles;
    constexpr int per = 16 / lanes;
    D acc[per];
    for (int v = 0; v < per; ++v) std::memcpy(&acc[v], lane + v * lanes, sizeof(D));
    for (; i + 16 <= n; i += 16)
      for (int v = 0; v < per; ++v) {
        F f;
        std::memcpy(&f, x + i + size_t(v * lanes), sizeof f);
        const D d = __builtin_convertvector(f, D);
        acc[v] = acc[v] + d * d;
      }
    for (int v = 0; v < per; ++v) std::memcpy(lane + v * lanes, &acc[v], sizeof(D));
  }
  for (size_t j = 0; i < n; ++i, j = (j + 1) % 16) {
    const double d = x[i];
    lane[j] = lane[j] + d * d;
  }
}

[[gnu::always_inline]] inline double pairwise(double (&lane)[16]) {
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  return lane[0];
}

template <int lanes>
[[gnu::always_inline]] inline double squares(const float* x, size_t n) {
  double lane[16] = {};
  add_squares<lanes>(lane, x, n);
  return pairwise(lane);
}

// bf16: chunks of a multiple of 16 elements widened to float, so element i stays in lane i mod 16.
template <int lanes>
[[gnu::always_inline]] inline double squares(const bf16* x, size_t n) {
  constexpr size_t kChunk = 1024;
  double lane[16] = {};
  float f[kChunk];
  for (size_t b = 0; b < n; b += kChunk) {
    const size_t m = std::min(kChunk, n - b);
    for (size_t i = 0; i < m; ++i) f[i] = to_float(x[b + i]);
    add_squares<lanes>(lane, f, m);
  }
  return pairwise(lane);
}

template <class T>
SZ_SIMD_SCALAR double squares_scalar(const T* x, size_t n) {
  return squares<1>(x, n);
}
template <class T>
SZ_SIMD_AVX2 double squares_avx2(const T* x, size_t n) {
  return squares<4>(x, n);
}
template <class T>
SZ_SIMD_AVX512 double squares_avx512(const T* x, size_t n) {
  return squares<8>(x, n);
}

template <class T>
double dispatch(SimdPath path, const T* x, size_t n) {
  require_simd_path(path);
  switch (path) {
    case SimdPath::avx512: return squares_avx512(x, n);
    case SimdPath::avx2: return squares_avx2(x, n);
    case SimdPath::scalar: return squares_scalar(x, n);
  }
  return 0;
}

}  // namespace

double sum_of_squares(SimdPath path, const float* x, size_t n) { return dispatch(path, x, n); }
double sum_of_squares(SimdPath path, const bf16* x, size_t n) { return dispatch(path, x, n); }

}  // namespace starzero::optim
