// optimizers/adamw_simd: every available path against a double-precision AdamW reference,
// bit-identity between paths and with the plain adamw_cpu, independence from threads and chunk
// sizes, NaN gradients, and the bf16 casts against float_to_bf16.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "optimizers/adamw.hpp"
#include "optimizers/adamw_simd.hpp"
#include "runtime/dtype.hpp"

using namespace starzero;
using namespace starzero::optim;

namespace {

// Sizes that are not multiples of 16 (tails on every path), one large enough for chunking.
constexpr std::size_t kLarge = 1000003;
constexpr std::size_t kSmall = 37;

struct State {
  std::vector<bf16> grad16, param16;
  std::vector<float> grad32, param32, master, m, v;
};

State random_state(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), pos(0.0f, 1.0f);
  State s;
  s.grad16.resize(n);
  s.grad32.resize(n);
  s.master.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  s.param16.assign(n, bf16{0});
  s.param32.assign(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float g = unit(rng);
    if (g == 0.0f) g = 0.5f;
    s.grad16[i] = from_float<bf16>(g);
    s.grad32[i] = g;
    s.master[i] = unit(rng);
    s.m[i] = 0.1f * unit(rng);
    s.v[i] = 0.01f * pos(rng) + 1e-6f;
  }
  return s;
}

AdamWHyper hyper_for(int step) {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.step = step;
  return h;
}

constexpr float kGradScale = 0.75f;

bool same_bytes(const void* a, const void* b, std::size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && same_bytes(a.data(), b.data(), a.size() * sizeof(T));
}

bool same_state(const State& a, const State& b) {
  return same(a.master, b.master) && same(a.m, b.m) && same(a.v, b.v) && same(a.param16, b.param16) &&
         same(a.param32, b.param32);
}

void run_bf16(SimdPath p, State& s, int step) {
  adamw_fused(p, s.master.size(), s.grad16.data(), kGradScale, s.master.data(), s.m.data(), s.v.data(),
              s.param16.data(), hyper_for(step));
}
void run_f32(SimdPath p, State& s, int step) {
  adamw_fused(p, s.master.size(), s.grad32.data(), kGradScale, s.master.data(), s.m.data(), s.v.data(),
              s.param32.data(), hyper_for(step));
}

bool close(double got, double want, double rel, double abs_tol) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs_tol;
}

// The AdamW formulas (docs/toolchain.md, "AdamW conventions") in double, from the same starting state, one element at a
// time. Tolerance: fp32 rounding of a handful of operations: 1e-6 relative + 1e-7 absolute on master, m and v; the bf16
// parameter is exactly float_to_bf16(master).
void check_against_double(const State& before, const State& after, const std::vector<float>& grad, int step,
                          bool bf16_param) {
  const AdamWHyper h = hyper_for(step);
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, wd = h.weight_decay, eps = h.eps;
  const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    const double g = double(grad[i]) * double(kGradScale);
    const double m = b1 * before.m[i] + (1.0 - b1) * g;
    const double v = b2 * before.v[i] + (1.0 - b2) * g * g;
    double w = before.master[i];
    w -= lr * wd * w;
    w -= lr * (m / bc1) / (std::sqrt(v / bc2) + eps);
    const bool ok = close(after.m[i], m, 1e-6, 1e-7) && close(after.v[i], v, 1e-6, 1e-7) &&
                    close(after.master[i], w, 1e-6, 1e-7) &&
                    (bf16_param ? after.param16[i].bits == float_to_bf16(after.master[i])
                                : same_bytes(&after.param32[i], &after.master[i], sizeof(float)));
    if (!ok && bad++ < 5) {
      INFO("element " << i << ": master " << after.master[i] << " want " << w << ", m " << after.m[i] << " want " << m
                      << ", v " << after.v[i] << " want " << v);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

std::vector<float> widen(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = to_float(x[i]);
  return out;
}

}  // namespace

TEST_CASE("paths: scalar always, best path is available", "[adamw]") {
  const auto paths = available_simd_paths();
  REQUIRE(!paths.empty());
  CHECK(paths.front() == SimdPath::scalar);
  CHECK(simd_path_available(best_simd_path()));
  CHECK(paths.back() == best_simd_path());
  for (SimdPath p : paths) CHECK(!simd_path_name(p).empty());
}

TEST_CASE("every path matches a double-precision AdamW reference", "[adamw]") {
  for (std::size_t n : {kLarge, kSmall}) {
    const State start = random_state(n, 7);
    for (SimdPath p : available_simd_paths()) {
      for (int step : {1, 2, 10}) {
        INFO("path " << simd_path_name(p) << ", n " << n << ", step " << step);
        State bf = start;
        run_bf16(p, bf, step);
        check_against_double(start, bf, widen(start.grad16), step, true);
        State f = start;
        run_f32(p, f, step);
        check_against_double(start, f, start.grad32, step, false);
      }
    }
  }
}

TEST_CASE("all paths are bit-identical to each other and to adamw_cpu", "[adamw]") {
  for (std::size_t n : {kLarge, kSmall}) {
    const State start = random_state(n, 11);
    for (int step : {1, 2, 10}) {
      State ref = start;
      adamw_cpu(n, ref.grad16.data(), kGradScale, ref.master.data(), ref.m.data(), ref.v.data(), ref.param16.data(),
                hyper_for(step));
      State ref32 = start;
      adamw_cpu(n, ref32.grad32.data(), kGradScale, ref32.master.data(), ref32.m.data(), ref32.v.data(),
                ref32.param32.data(), hyper_for(step));
      for (SimdPath p : available_simd_paths()) {
        INFO("path " << simd_path_name(p) << ", n " << n << ", step " << step);
        State bf = start;
        run_bf16(p, bf, step);
        CHECK(same_state(bf, ref));
        State f = start;
        run_f32(p, f, step);
        CHECK(same_state(f, ref32));
      }
    }
  }
}

TEST_CASE("several consecutive steps stay bit-identical across paths", "[adamw]") {
  const State start = random_state(kSmall * 29, 3);
  State ref = start;
  for (int step = 1; step <= 10; ++step)
    adamw_cpu(ref.master.size(), ref.grad16.data(), kGradScale, ref.master.data(), ref.m.data(), ref.v.data(),
              ref.param16.data(), hyper_for(step));
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    State s = start;
    for (int step = 1; step <= 10; ++step) run_bf16(p, s, step);
    CHECK(same_state(s, ref));
  }
}

TEST_CASE("results do not depend on threads or chunk size", "[adamw]") {
  const std::size_t n = kLarge;
  const State start = random_state(n, 5);
  State ref = start;
  run_bf16(SimdPath::scalar, ref, 2);
  State ref32 = start;
  run_f32(SimdPath::scalar, ref32, 2);
  for (SimdPath p : {SimdPath::scalar, best_simd_path()}) {
    for (int threads : {1, 2, 3}) {
      for (std::size_t chunk : {std::size_t(1024), std::size_t(4099), n}) {
        INFO("path " << simd_path_name(p) << ", threads " << threads << ", chunk " << chunk);
        State s = start;
        adamw_fused_parallel(p, threads, chunk, n, s.grad16.data(), kGradScale, s.master.data(), s.m.data(), s.v.data(),
                             s.param16.data(), hyper_for(2));
        CHECK(same_state(s, ref));
        if (chunk != 4099) continue;  // fp32 gradients: one chunk size keeps the test fast
        State f = start;
        adamw_fused_parallel(p, threads, chunk, n, f.grad32.data(), kGradScale, f.master.data(), f.m.data(), f.v.data(),
                             f.param32.data(), hyper_for(2));
        CHECK(same_state(f, ref32));
      }
    }
  }
  // An arena constrained to NUMA node 0 (every machine has one) computes the same thing.
  State numa = start;
  adamw_fused_parallel(best_simd_path(), 2, 4099, n, numa.grad16.data(), kGradScale, numa.master.data(), numa.m.data(),
                       numa.v.data(), numa.param16.data(), hyper_for(2), 0);
  CHECK(same_state(numa, ref));
}

TEST_CASE("the speculative form reads one set of state and writes another, same bits", "[adamw]") {
  const std::size_t n = kLarge - 3;  // a ragged tail on every path
  const State start = random_state(n, 11);
  State ref = start;
  run_bf16(SimdPath::scalar, ref, 3);
  State ref32 = start;
  run_f32(SimdPath::scalar, ref32, 3);
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    // The outputs start as garbage: nothing of them may be read.
    State s = random_state(n, 12);
    s.grad16 = start.grad16;
    s.grad32 = start.grad32;
    const AdamWStateIn from{start.master.data(), start.m.data(), start.v.data()};
    adamw_fused_parallel(p, 2, 4099, n, s.grad16.data(), kGradScale, from, s.master.data(), s.m.data(), s.v.data(),
                         s.param16.data(), hyper_for(3));
    CHECK(same(s.master, ref.master));
    CHECK(same(s.m, ref.m));
    CHECK(same(s.v, ref.v));
    CHECK(same(s.param16, ref.param16));
    State f = random_state(n, 13);
    f.grad32 = start.grad32;
    adamw_fused_parallel(p, 3, 1024, n, f.grad32.data(), kGradScale, from, f.master.data(), f.m.data(), f.v.data(),
                         f.param32.data(), hyper_for(3));
    CHECK(same(f.master, ref32.master));
    CHECK(same(f.m, ref32.m));
    CHECK(same(f.v, ref32.v));
    CHECK(same(f.param32, ref32.param32));
  }
}

TEST_CASE("a NaN gradient gives a NaN bf16 parameter, not infinity", "[adamw]") {
  const std::size_t n = kSmall;
  State start = random_state(n, 9);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t i : {std::size_t(0), std::size_t(5), std::size_t(17), std::size_t(36)}) {  // body and tail
    start.grad16[i] = from_float<bf16>(nan);
    start.grad32[i] = nan;
  }
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    State s = start;
    run_bf16(p, s, 1);
    for (std::size_t i : {std::size_t(0), std::size_t(5), std::size_t(17), std::size_t(36)}) {
      CHECK(std::isnan(s.master[i]));
      CHECK((s.param16[i].bits & 0x7fffu) > 0x7f80u);  // NaN, not ±inf
    }
    CHECK(std::isfinite(s.master[1]));
    State f = start;
    run_f32(p, f, 1);
    CHECK(std::isnan(f.param32[5]));
  }
}

TEST_CASE("bf16 casts on every path match float_to_bf16, special values included", "[adamw]") {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f,  // a tie: rounds to even
                          1.01171875f,  // a tie: rounds up to even
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN()};
  const std::uint32_t payload_nans[] = {0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu};
  for (std::uint32_t u : payload_nans) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    x.push_back(f);
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits;
  while (x.size() < 203) {
    const std::uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, sizeof f);
    x.push_back(f);
  }
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    std::vector<bf16> out(x.size());
    cast_f32_to_bf16(p, x.size(), x.data(), out.data());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) bad += out[i].bits != float_to_bf16(x[i]);
    CHECK(bad == 0);
    std::vector<float> back(x.size());
    cast_bf16_to_f32(p, out.size(), out.data(), back.data());
    bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = bf16_to_float(out[i].bits);
      bad += !same_bytes(&back[i], &want, sizeof(float));
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("the gradient sum of squares on every path: long-double reference, the same bits", "[adamw]") {
  // 100003 elements from the second one (unaligned, a tail on every path), spread over 8 decades.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-6.0f, 2.0f);
  std::vector<float> x(100004);
  for (float& v : x) v = normal(rng) * std::pow(10.0f, decade(rng));
  const float* in = x.data() + 1;
  const std::size_t n = x.size() - 1;
  long double want = 0;
  for (std::size_t i = 0; i < n; ++i) want += (long double)in[i] * in[i];
  std::vector<bf16> xb(n);
  long double want_b = 0;
  for (std::size_t i = 0; i < n; ++i) {
    xb[i] = from_float<bf16>(in[i]);
    want_b += (long double)to_float(xb[i]) * to_float(xb[i]);
  }
  std::vector<double> sums, sums_b;
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    const double got = sum_of_squares(p, in, n), got_b = sum_of_squares(p, xb.data(), n);
    // Double sums of n positive terms: relative error below n·2^-53 ≈ 1.1e-11.
    CHECK(std::abs(got - double(want)) <= 1e-11 * double(want));
    CHECK(std::abs(got_b - double(want_b)) <= 1e-11 * double(want_b));
    sums.push_back(got);
    sums_b.push_back(got_b);
    for (std::size_t m : {std::size_t(0), std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17)}) {
      long double small = 0;
      for (std::size_t i = 0; i < m; ++i) small += (long double)in[i] * in[i];
      CHECK(sum_of_squares(p, in, m) == Approx(double(small)).epsilon(1e-15));
    }
  }
  for (std::size_t p = 1; p < sums.size(); ++p) {
    CHECK(same_bytes(&sums[p], &sums[0], sizeof(double)));
    CHECK(same_bytes(&sums_b[p], &sums_b[0], sizeof(double)));
  }
  // The bf16 sum equals the float sum of the same (widened) values.
  std::vector<float> widened(n);
  for (std::size_t i = 0; i < n; ++i) widened[i] = to_float(xb[i]);
  const double from_floats = sum_of_squares(best_simd_path(), widened.data(), n);
  CHECK(same_bytes(&sums_b.back(), &from_floats, sizeof(double)));
}
