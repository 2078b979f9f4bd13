// Fused CPU AdamW: scalar, AVX2 and AVX-512 paths with identical arithmetic (see adamw_simd.hpp).
//
// Bit-identity rules kept here:
//  - every path evaluates, per element and in this order, exactly what adamw_cpu evaluates:
//      g = grad·scale; m = β1·m + (1-β1)·g; v = β2·v + ((1-β2)·g)·g; m̂ = m/bc1; v̂ = v/bc2;
//      w = w - (lr·wd)·w; w = w - (lr·m̂)/(sqrt(v̂) + eps)
//    with the same float constants (bc1, bc2 from the same std::pow calls);
//  - no FMA: this file is compiled with -ffp-contract=off (optimizers/CMakeLists.txt), because the
//    AVX-512 target enables FMA and GCC would otherwise fuse the intrinsics' mul + add;
//  - IEEE division and square root are correctly rounded in SSE/AVX as in scalar code;
//  - the tail after the last full vector is the scalar path itself, so results do not depend on
//    how a shard is cut into chunks.
#include "optimizers/adamw_simd.hpp"

// GCC 12 reports the self-initialised `__Y` of _mm512_undefined_*() inside avx512fintrin.h as
// maybe-uninitialized (a false positive of the intrinsic headers, not of this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace starzero::optim {

namespace {

struct Consts {
  float b1, omb1, b2, omb2, bc1, bc2, lr, lrwd, eps, scale;
};

Consts make_consts(const AdamWHyper& h, float grad_scale) {
  Consts c{};
  c.b1 = h.beta1;
  c.omb1 = 1.0f - h.beta1;
  c.b2 = h.beta2;
  c.omb2 = 1.0f - h.beta2;
  c.bc1 = 1.0f - std::pow(h.beta1, float(h.step));  // as adamw_cpu
  c.bc2 = 1.0f - std::pow(h.beta2, float(h.step));
  c.lr = h.lr;
  c.lrwd = h.lr * h.weight_decay;  // adamw_cpu: lr * wd * w == (lr * wd) * w
  c.eps = h.eps;
  c.scale = grad_scale;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Scalar: the reference order of operations. Also the tail of the vector paths.
template <class G, class P>
inline void adamw_scalar(std::size_t begin, std::size_t end, const G* grad, float* master, float* m, float* v,
                         P* param, const Consts& c) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = to_float(grad[i]) * c.scale;
    const float mi = c.b1 * m[i] + c.omb1 * g;
    const float vi = c.b2 * v[i] + c.omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / c.bc1;
    const float v_hat = vi / c.bc2;
    float w = master[i];
    w -= c.lrwd * w;
    w -= c.lr * m_hat / (std::sqrt(v_hat) + c.eps);
    master[i] = w;
    if (param) param[i] = from_float<P>(w);
  }
}

template <class S, class D>
inline void cast_scalar(std::size_t begin, std::size_t end, const S* src, D* dst) {
  for (std::size_t i = begin; i < end; ++i) dst[i] = from_float<D>(to_float(src[i]));
}

// ---------------------------------------------------------------------------------------------
// AVX2: 8 floats per vector.
#define SZ_AVX2 __attribute__((target("avx2")))

SZ_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
SZ_AVX2 inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// float_to_bf16 on 8 lanes: NaN -> (u >> 16) | 0x40, else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
SZ_AVX2 inline __m128i to_bf16_8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i abs_u = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs_u, _mm256_set1_epi32(0x7f800000));  // abs_u >= 0 as int32
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i nan_bits = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  r = _mm256_blendv_epi8(r, nan_bits, is_nan);
  const __m256i packed = _mm256_packus_epi32(r, r);  // per 128-bit lane: r0..3 r0..3 | r4..7 r4..7
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
SZ_AVX2 inline void store8(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
SZ_AVX2 inline void store8(bf16* p, __m256 x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_bf16_8(x));
}

template <class G, class P>
SZ_AVX2 void adamw_avx2(std::size_t n, const G* grad, float* master, float* m, float* v, P* param,
                        const Consts& c) {
  const __m256 b1 = _mm256_set1_ps(c.b1), omb1 = _mm256_set1_ps(c.omb1);
  const __m256 b2 = _mm256_set1_ps(c.b2), omb2 = _mm256_set1_ps(c.omb2);
  const __m256 bc1 = _mm256_set1_ps(c.bc1), bc2 = _mm256_set1_ps(c.bc2);
  const __m256 lr = _mm256_set1_ps(c.lr), lrwd = _mm256_set1_ps(c.lrwd);
  const __m256 eps = _mm256_set1_ps(c.eps), scale = _mm256_set1_ps(c.scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_mul_ps(load8(grad + i), scale);
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, g));
    const __m256 vi =
        _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 m_hat = _mm256_div_ps(mi, bc1);
    const __m256 v_hat = _mm256_div_ps(vi, bc2);
    __m256 w = _mm256_loadu_ps(master + i);
    w = _mm256_sub_ps(w, _mm256_mul_ps(lrwd, w));
    w = _mm256_sub_ps(w, _mm256_div_ps(_mm256_mul_ps(lr, m_hat), _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps)));
    _mm256_storeu_ps(master + i, w);
    if (param) store8(param + i, w);
  }
  adamw_scalar(i, n, grad, master, m, v, param, c);
}

template <class S, class D>
SZ_AVX2 void cast_avx2(std::size_t n, const S* src, D* dst) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dst + i, load8(src + i));
  cast_scalar(i, n, src, dst);
}

// ---------------------------------------------------------------------------------------------
// AVX-512 (F + BW): 16 floats per vector.
#define SZ_AVX512 __attribute__((target("avx512f,avx512bw")))

SZ_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
SZ_AVX512 inline __m512 load16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
SZ_AVX512 inline __m256i to_bf16_16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i abs_u = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_u, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i nan_bits = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_blend_epi32(is_nan, r, nan_bits);
  return _mm512_cvtepi32_epi16(r);
}
SZ_AVX512 inline void store16(float* p, __m512 x) { _mm512_storeu_ps(p, x); }
SZ_AVX512 inline void store16(bf16* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16_16(x));
}

template <class G, class P>
SZ_AVX512 void adamw_avx512(std::size_t n, const G* grad, float* master, float* m, float* v, P* param,
                            const Consts& c) {
  const __m512 b1 = _mm512_set1_ps(c.b1), omb1 = _mm512_set1_ps(c.omb1);
  const __m512 b2 = _mm512_set1_ps(c.b2), omb2 = _mm512_set1_ps(c.omb2);
  const __m512 bc1 = _mm512_set1_ps(c.bc1), bc2 = _mm512_set1_ps(c.bc2);
  const __m512 lr = _mm512_set1_ps(c.lr), lrwd = _mm512_set1_ps(c.lrwd);
  const __m512 eps = _mm512_set1_ps(c.eps), scale = _mm512_set1_ps(c.scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_mul_ps(load16(grad + i), scale);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(omb1, g));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 m_hat = _mm512_div_ps(mi, bc1);
    const __m512 v_hat = _mm512_div_ps(vi, bc2);
    __m512 w = _mm512_loadu_ps(master + i);
    w = _mm512_sub_ps(w, _mm512_mul_ps(lrwd, w));
    w = _mm512_sub_ps(w, _mm512_div_ps(_mm512_mul_ps(lr, m_hat), _mm512_add_ps(_mm512_sqrt_ps(v_hat), eps)));
    _mm512_storeu_ps(master + i, w);
    if (param) store16(param + i, w);
  }
  adamw_scalar(i, n, grad, master, m, v, param, c);
}

template <class S, class D>
SZ_AVX512 void cast_avx512(std::size_t n, const S* src, D* dst) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) store16(dst + i, load16(src + i));
  cast_scalar(i, n, src, dst);
}

// ---------------------------------------------------------------------------------------------
void require(SimdPath path) {
  if (!simd_path_available(path))
    throw std::invalid_argument("SIMD path " + std::string(simd_path_name(path)) + " is not supported by this CPU");
}

template <class G, class P>
void fused(SimdPath path, std::size_t n, const G* grad, float grad_scale, float* master, float* m, float* v,
           P* param, const AdamWHyper& hyper) {
  require(path);
  const Consts c = make_consts(hyper, grad_scale);
  switch (path) {
    case SimdPath::avx512: adamw_avx512(n, grad, master, m, v, param, c); return;
    case SimdPath::avx2: adamw_avx2(n, grad, master, m, v, param, c); return;
    case SimdPath::scalar: adamw_scalar(0, n, grad, master, m, v, param, c); return;
  }
}

template <class S, class D>
void cast(SimdPath path, std::size_t n, const S* src, D* dst) {
  require(path);
  switch (path) {
    case SimdPath::avx512: cast_avx512(n, src, dst); return;
    case SimdPath::avx2: cast_avx2(n, src, dst); return;
    case SimdPath::scalar: cast_scalar(0, n, src, dst); return;
  }
}

// Runs body(begin, end) over [0, n) cut into chunks of `chunk`, in an arena of `threads` threads,
// on the cores of NUMA node `numa_node` when oneTBB knows it (its tbbbind reads hwloc).
template <class Body>
void for_chunks(int threads, std::size_t chunk, std::size_t n, const Body& body, int numa_node = -1) {
  if (n == 0) return;
  if (chunk == 0 || chunk > n) chunk = n;
  const std::size_t chunks = (n + chunk - 1) / chunk;
  const int t = threads > 0 ? threads : tbb::info::default_concurrency();
  auto run = [&](std::size_t c) { body(c * chunk, std::min(n, (c + 1) * chunk)); };
  if (t == 1 || chunks == 1) {
    for (std::size_t c = 0; c < chunks; ++c) run(c);
    return;
  }
  const std::vector<tbb::numa_node_id> nodes = tbb::info::numa_nodes();
  const bool known = numa_node >= 0 && std::find(nodes.begin(), nodes.end(), numa_node) != nodes.end();
  tbb::task_arena arena(known ? tbb::task_arena(tbb::task_arena::constraints(numa_node, t)) : tbb::task_arena(t));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t c = r.begin(); c != r.end(); ++c) run(c);
                      });
  });
}

template <class G, class P>
void fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const G* grad, float grad_scale,
                    float* master, float* m, float* v, P* param, const AdamWHyper& hyper, int numa_node) {
  require(path);
  for_chunks(
      threads, chunk, n,
      [&](std::size_t b, std::size_t e) {
        fused(path, e - b, grad + b, grad_scale, master + b, m + b, v + b, param ? param + b : nullptr, hyper);
      },
      numa_node);
}

}  // namespace

bool simd_path_available(SimdPath path) {
  __builtin_cpu_init();
  switch (path) {
    case SimdPath::scalar: return true;
    case SimdPath::avx2: return __builtin_cpu_supports("avx2");
    case SimdPath::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

SimdPath best_simd_path() {
  if (simd_path_available(SimdPath::avx512)) return SimdPath::avx512;
  if (simd_path_available(SimdPath::avx2)) return SimdPath::avx2;
  return SimdPath::scalar;
}

std::vector<SimdPath> available_simd_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512})
    if (simd_path_available(p)) paths.push_back(p);
  return paths;
}

std::string_view simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::scalar: return "scalar";
    case SimdPath::avx2: return "avx2";
    case SimdPath::avx512: return "avx512";
  }
  return "unknown";
}

void adamw_fused(SimdPath path, std::size_t n, const bf16* grad, float grad_scale, float* master, float* m,
                 float* v, bf16* param, const AdamWHyper& hyper) {
  fused(path, n, grad, grad_scale, master, m, v, param, hyper);
}
void adamw_fused(SimdPath path, std::size_t n, const float* grad, float grad_scale, float* master, float* m,
                 float* v, float* param, const AdamWHyper& hyper) {
  fused(path, n, grad, grad_scale, master, m, v, param, hyper);
}

void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* grad,
                          float grad_scale, float* master, float* m, float* v, bf16* param,
                          const AdamWHyper& hyper, int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, master, m, v, param, hyper, numa_node);
}
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* grad,
                          float grad_scale, float* master, float* m, float* v, float* param,
                          const AdamWHyper& hyper, int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, master, m, v, param, hyper, numa_node);
}

void cast_bf16_to_f32(SimdPath path, std::size_t n, const bf16* src, float* dst) { cast(path, n, src, dst); }
void cast_f32_to_bf16(SimdPath path, std::size_t n, const float* src, bf16* dst) { cast(path, n, src, dst); }
void cast_bf16_to_f32_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* src,
                               float* dst) {
  require(path);
  for_chunks(threads, chunk, n, [&](std::size_t b, std::size_t e) { cast(path, e - b, src + b, dst + b); });
}
void cast_f32_to_bf16_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* src,
                               bf16* dst) {
  require(path);
  for_chunks(threads, chunk, n, [&](std::size_t b, std::size_t e) { cast(path, e - b, src + b, dst + b); });
}

}  // namespace starzero::optim
