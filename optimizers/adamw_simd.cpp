// Fused CPU AdamW: scalar, AVX2 and AVX-512 paths with identical arithmetic (see adamw_simd.hpp).
//
// Bit-identity rules kept here:
//  - every path evaluates, per element and in this order, exactly what adamw_cpu evaluates:
//      g = grad·scale; m = β1·m + (1-β1)·g; v = β2·v + ((1-β2)·g)·g; m̂ = m/bc1; v̂ = v/bc2;
//      w = w - (lr·wd)·w; w = w - (lr·m̂)/(sqrt(v̂) + eps)
//    with the same float constants (bc1, bc2 from the same std::pow calls);
//  - no FMA: this file is compiled with -ffp-contract=off (optimizers/CMakeLists.txt), because the
//    AVX-512 target enables FMA and GCC would otherwise fuse the vector code's mul + add;
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
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
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
// The state is read from `in` and written to master, m, v: the same arrays (in place), or the
// other set of a speculative update. Element i is read before it is written, so both are safe.
template <class G, class P>
inline void adamw_scalar(std::size_t begin, std::size_t end, const G* grad, const AdamWStateIn& in, float* master,
                         float* m, float* v, P* param, const Consts& c) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = to_float(grad[i]) * c.scale;
    const float mi = c.b1 * in.m[i] + c.omb1 * g;
    const float vi = c.b2 * in.v[i] + c.omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / c.bc1;
    const float v_hat = vi / c.bc2;
    float w = in.master[i];
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
// Vector paths: AVX2 (8 floats per vector) and AVX-512 F+BW (16). The loop of each kernel is
// written once (adamw_vector, cast_vector) on GCC vector types of `lanes` floats, whose + - * /
// are element-wise and round like the scalar operations. That code has no target of its own: it
// is always inlined into the entry points (adamw_avx2, cast_avx512, ...), which carry their
// instruction set's target attribute and `flatten`, so it compiles to that instruction set there.
// What the vector types lack, the square root and the bf16 loads and stores, is an intrinsic of
// each instruction set, in functions overloaded on the vector type.

// The vector code hands vectors to functions of another target than its own: GCC notes that this
// changes the ABI, which does not matter here, as all of it is inlined into one function.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define SZ_AVX2 __attribute__((target("avx2")))
#define SZ_AVX512 __attribute__((target("avx512f,avx512bw")))

// `lanes` floats, and their bits as unsigned and as signed 32-bit integers.
template <std::size_t lanes>
struct Vectors {
  typedef float Floats __attribute__((vector_size(4 * lanes)));
  typedef std::uint32_t Bits __attribute__((vector_size(4 * lanes)));
  typedef std::int32_t SignedBits __attribute__((vector_size(4 * lanes)));
};
template <std::size_t lanes>
using Floats = typename Vectors<lanes>::Floats;
template <std::size_t lanes>
using Bits = typename Vectors<lanes>::Bits;

SZ_AVX2 Floats<8> sqrt(const Floats<8>& x) { return _mm256_sqrt_ps(x); }
SZ_AVX512 Floats<16> sqrt(const Floats<16>& x) { return _mm512_sqrt_ps(x); }

// Loads `lanes` bf16, zero-extended to 32 bits.
template <std::size_t lanes>
Bits<lanes> widen(const bf16* p);
template <>
SZ_AVX2 Bits<8> widen<8>(const bf16* p) {
  return std::bit_cast<Bits<8>>(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
template <>
SZ_AVX512 Bits<16> widen<16>(const bf16* p) {
  return std::bit_cast<Bits<16>>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}

// Stores the low 16 bits of every lane (each lane holds a value below 2^16).
SZ_AVX2 void narrow(bf16* p, const Bits<8>& x) {
  const __m256i lanes = std::bit_cast<__m256i>(x);
  const __m256i packed = _mm256_packus_epi32(lanes, lanes);       // per 128-bit lane: x0..3 x0..3 | x4..7 x4..7
  const __m256i halves = _mm256_permute4x64_epi64(packed, 0x08);  // x0..7 in the low 128 bits
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(halves));
}
SZ_AVX512 void narrow(bf16* p, const Bits<16>& x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(std::bit_cast<__m512i>(x)));
}

template <std::size_t lanes>
[[gnu::always_inline]] inline Floats<lanes> load(const float* p) {
  Floats<lanes> x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
// Exact: a bf16 is the upper half of a float.
template <std::size_t lanes>
[[gnu::always_inline]] inline Floats<lanes> load(const bf16* p) {
  return std::bit_cast<Floats<lanes>>(widen<lanes>(p) << 16);
}
template <std::size_t lanes>
[[gnu::always_inline]] inline void store(float* p, const Floats<lanes>& x) {
  std::memcpy(p, &x, sizeof x);
}
// float_to_bf16 on every lane: NaN -> (u >> 16) | 0x40, else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
template <std::size_t lanes>
[[gnu::always_inline]] inline void store(bf16* p, const Floats<lanes>& x) {
  const Bits<lanes> u = std::bit_cast<Bits<lanes>>(x);
  const Bits<lanes> hi = u >> 16;
  const Bits<lanes> rounded = (u + 0x7fff + (hi & 1)) >> 16;
  // NaN: |x| above the bits of infinity, compared as int32 (both are below 2^31, and AVX2 compares
  // signed integers only).
  const auto is_nan = std::bit_cast<typename Vectors<lanes>::SignedBits>(u & 0x7fffffff) > 0x7f800000;
  narrow(p, Bits<lanes>(is_nan ? (hi | 0x40) : rounded));
}

// x in every lane (the constants of the loop, kept in registers).
template <std::size_t lanes>
[[gnu::always_inline]] inline Floats<lanes> broadcast(float x) {
  Floats<lanes> v;
  for (std::size_t k = 0; k < lanes; ++k) v[k] = x;
  return v;
}

// adamw_scalar's operations in its order, on `lanes` elements at a time; the scalar path does the
// tail.
template <std::size_t lanes, class G, class P>
[[gnu::always_inline]] inline void adamw_vector(std::size_t n, const G* grad, const AdamWStateIn& in, float* master,
                                                float* m, float* v, P* param, const Consts& c) {
  using F = Floats<lanes>;
  const F b1 = broadcast<lanes>(c.b1), omb1 = broadcast<lanes>(c.omb1);
  const F b2 = broadcast<lanes>(c.b2), omb2 = broadcast<lanes>(c.omb2);
  const F bc1 = broadcast<lanes>(c.bc1), bc2 = broadcast<lanes>(c.bc2);
  const F lr = broadcast<lanes>(c.lr), lrwd = broadcast<lanes>(c.lrwd);
  const F eps = broadcast<lanes>(c.eps), scale = broadcast<lanes>(c.scale);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const F g = load<lanes>(grad + i) * scale;
    const F mi = b1 * load<lanes>(in.m + i) + omb1 * g;
    const F vi = b2 * load<lanes>(in.v + i) + omb2 * g * g;
    store<lanes>(m + i, mi);
    store<lanes>(v + i, vi);
    const F m_hat = mi / bc1;
    const F v_hat = vi / bc2;
    F w = load<lanes>(in.master + i);
    w -= lrwd * w;
    w -= lr * m_hat / (sqrt(v_hat) + eps);
    store<lanes>(master + i, w);
    if (param) store<lanes>(param + i, w);
  }
  adamw_scalar(i, n, grad, in, master, m, v, param, c);
}

template <std::size_t lanes, class S, class D>
[[gnu::always_inline]] inline void cast_vector(std::size_t n, const S* src, D* dst) {
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) store<lanes>(dst + i, load<lanes>(src + i));
  cast_scalar(i, n, src, dst);
}

template <class G, class P>
SZ_AVX2 [[gnu::flatten]] void adamw_avx2(std::size_t n, const G* grad, const AdamWStateIn& in, float* master,
                                         float* m, float* v, P* param, const Consts& c) {
  adamw_vector<8>(n, grad, in, master, m, v, param, c);
}
template <class G, class P>
SZ_AVX512 [[gnu::flatten]] void adamw_avx512(std::size_t n, const G* grad, const AdamWStateIn& in, float* master,
                                             float* m, float* v, P* param, const Consts& c) {
  adamw_vector<16>(n, grad, in, master, m, v, param, c);
}
template <class S, class D>
SZ_AVX2 [[gnu::flatten]] void cast_avx2(std::size_t n, const S* src, D* dst) {
  cast_vector<8>(n, src, dst);
}
template <class S, class D>
SZ_AVX512 [[gnu::flatten]] void cast_avx512(std::size_t n, const S* src, D* dst) {
  cast_vector<16>(n, src, dst);
}

// ---------------------------------------------------------------------------------------------
template <class G, class P>
void fused(SimdPath path, std::size_t n, const G* grad, float grad_scale, const AdamWStateIn& in, float* master,
           float* m, float* v, P* param, const AdamWHyper& hyper) {
  require_simd_path(path);
  const Consts c = make_consts(hyper, grad_scale);
  switch (path) {
    case SimdPath::avx512: adamw_avx512(n, grad, in, master, m, v, param, c); return;
    case SimdPath::avx2: adamw_avx2(n, grad, in, master, m, v, param, c); return;
    case SimdPath::scalar: adamw_scalar(0, n, grad, in, master, m, v, param, c); return;
  }
}

template <class S, class D>
void cast(SimdPath path, std::size_t n, const S* src, D* dst) {
  require_simd_path(path);
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
#ifdef STARZERO_SANITIZE
  // tbb::info::numa_nodes loads oneTBB's tbbbind with RTLD_DEEPBIND, which the sanitizer runtime
  // refuses: sanitized builds (scripts/sanitize.sh) run the threads unbound.
  const std::vector<tbb::numa_node_id> nodes;
#else
  const std::vector<tbb::numa_node_id> nodes = tbb::info::numa_nodes();
#endif
  const bool known = numa_node >= 0 && std::find(nodes.begin(), nodes.end(), numa_node) != nodes.end();
  tbb::task_arena arena(known ? tbb::task_arena(tbb::task_arena::constraints(numa_node, t)) : tbb::task_arena(t));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t c = r.begin(); c != r.end(); ++c) run(c);
    });
  });
}

template <class G, class P>
void fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const G* grad, float grad_scale,
                    const AdamWStateIn& in, float* master, float* m, float* v, P* param, const AdamWHyper& hyper,
                    int numa_node) {
  require_simd_path(path);
  for_chunks(
      threads, chunk, n,
      [&](std::size_t b, std::size_t e) {
        const AdamWStateIn chunk_in{in.master + b, in.m + b, in.v + b};
        fused(path, e - b, grad + b, grad_scale, chunk_in, master + b, m + b, v + b, param ? param + b : nullptr, hyper);
      },
      numa_node);
}

}  // namespace

void adamw_fused(SimdPath path, std::size_t n, const bf16* grad, float grad_scale, float* master, float* m, float* v,
                 bf16* param, const AdamWHyper& hyper) {
  fused(path, n, grad, grad_scale, AdamWStateIn{master, m, v}, master, m, v, param, hyper);
}
void adamw_fused(SimdPath path, std::size_t n, const float* grad, float grad_scale, float* master, float* m, float* v,
                 float* param, const AdamWHyper& hyper) {
  fused(path, n, grad, grad_scale, AdamWStateIn{master, m, v}, master, m, v, param, hyper);
}

void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* grad,
                          float grad_scale, float* master, float* m, float* v, bf16* param, const AdamWHyper& hyper,
                          int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, AdamWStateIn{master, m, v}, master, m, v, param, hyper,
                 numa_node);
}
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* grad,
                          float grad_scale, const AdamWStateIn& from, float* master, float* m, float* v, bf16* param,
                          const AdamWHyper& hyper, int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, from, master, m, v, param, hyper, numa_node);
}
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* grad,
                          float grad_scale, float* master, float* m, float* v, float* param, const AdamWHyper& hyper,
                          int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, AdamWStateIn{master, m, v}, master, m, v, param, hyper,
                 numa_node);
}
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* grad,
                          float grad_scale, const AdamWStateIn& from, float* master, float* m, float* v, float* param,
                          const AdamWHyper& hyper, int numa_node) {
  fused_parallel(path, threads, chunk, n, grad, grad_scale, from, master, m, v, param, hyper, numa_node);
}

void cast_bf16_to_f32(SimdPath path, std::size_t n, const bf16* src, float* dst) { cast(path, n, src, dst); }
void cast_f32_to_bf16(SimdPath path, std::size_t n, const float* src, bf16* dst) { cast(path, n, src, dst); }
void cast_bf16_to_f32_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* src,
                               float* dst) {
  require_simd_path(path);
  for_chunks(threads, chunk, n, [&](std::size_t b, std::size_t e) { cast(path, e - b, src + b, dst + b); });
}
void cast_f32_to_bf16_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* src,
                               bf16* dst) {
  require_simd_path(path);
  for_chunks(threads, chunk, n, [&](std::size_t b, std::size_t e) { cast(path, e - b, src + b, dst + b); });
}

}  // namespace starzero::optim
