#include "optimizers/adam_traffic.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace starzero::optim {
namespace {

// The empty asm hides from the compiler that the values come back unchanged, so the stores stay.
__attribute__((target("avx512f"))) void traffic_avx512(std::size_t b, std::size_t e, const bf16* grad, float* master,
                                                       float* m, float* v, bf16* param) {
  std::size_t i = b;
  for (; i + 16 <= e; i += 16) {
    __m256i g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grad + i));
    __m512 w = _mm512_loadu_ps(master + i), mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
    __asm__ volatile("" : "+v"(g), "+v"(w), "+v"(mi), "+v"(vi));
    _mm512_storeu_ps(master + i, w);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(param + i), g);
  }
  for (; i < e; ++i) param[i] = grad[i];
}

__attribute__((target("avx2"))) void traffic_avx2(std::size_t b, std::size_t e, const bf16* grad, float* master,
                                                  float* m, float* v, bf16* param) {
  std::size_t i = b;
  for (; i + 8 <= e; i += 8) {
    __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(grad + i));
    __m256 w = _mm256_loadu_ps(master + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    __asm__ volatile("" : "+x"(g), "+x"(w), "+x"(mi), "+x"(vi));
    _mm256_storeu_ps(master + i, w);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(param + i), g);
  }
  for (; i < e; ++i) param[i] = grad[i];
}

void traffic_sse2(std::size_t b, std::size_t e, const bf16* grad, float* master, float* m, float* v, bf16* param) {
  std::size_t i = b;
  for (; i + 4 <= e; i += 4) {
    __m128i g = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(grad + i));
    __m128 w = _mm_loadu_ps(master + i), mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i);
    __asm__ volatile("" : "+x"(g), "+x"(w), "+x"(mi), "+x"(vi));
    _mm_storeu_ps(master + i, w);
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(param + i), g);
  }
  for (; i < e; ++i) param[i] = grad[i];
}

constexpr std::size_t kChunk = std::size_t(1) << 16;

}  // namespace

void adam_traffic(std::size_t begin, std::size_t end, const bf16* grad, float* master, float* m, float* v,
                  bf16* param) {
  static const auto widest = __builtin_cpu_supports("avx512f") ? traffic_avx512
                             : __builtin_cpu_supports("avx2")  ? traffic_avx2
                                                               : traffic_sse2;
  widest(begin, end, grad, master, m, v, param);
}

double adam_traffic_Bps(int threads, std::size_t params, int repeats) {
  if (threads < 1 || params < 1 || repeats < 1)
    throw std::invalid_argument("Adam traffic probe: threads, parameters and repeats must be >= 1, got " +
                                std::to_string(threads) + ", " + std::to_string(params) + ", " +
                                std::to_string(repeats));
  std::vector<bf16> grad(params), param(params);
  std::vector<float> master(params), m(params), v(params);
  tbb::task_arena arena(threads);
  const std::size_t chunks = (params + kChunk - 1) / kChunk;
  const auto pass = [&] {
    const auto start = std::chrono::steady_clock::now();
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t c = r.begin(); c != r.end(); ++c)
          adam_traffic(c * kChunk, std::min(params, (c + 1) * kChunk), grad.data(), master.data(), m.data(), v.data(),
                       param.data());
      });
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  pass();  // warm-up
  double fastest = pass();
  for (int r = 1; r < repeats; ++r) fastest = std::min(fastest, pass());
  return kAdamTrafficBytes * double(params) / fastest;
}

}  // namespace starzero::optim
