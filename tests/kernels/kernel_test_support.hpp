#pragma once
// What the CPU kernel tests (test_gpt_kernels.cpp, test_llama_kernels.cpp) share: random data,
// conversions between float, double and the storage types, comparison with a double-precision
// reference, central finite differences, and the check of a backward kernel's accumulate
// contract.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.hpp"

namespace starzero::testing {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

Vec uniform(std::mt19937& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Vec normal(std::mt19937& rng, std::size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<int> random_ints(std::mt19937& rng, std::size_t n, int hi) {
  std::uniform_int_distribution<int> d(0, hi - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }

template <class T>
std::vector<T> to_T(const Vec& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = from_float<T>(v[i]);
  return r;
}

template <class T>
Vec to_f(const std::vector<T>& v) {
  Vec r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_float(v[i]);
  return r;
}

Vec round_bf16(const Vec& v) { return to_f(to_T<bf16>(v)); }

template <class T>
DVec to_d(const std::vector<T>& v) {
  return to_d(to_f(v));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// Element-wise |got − want| <= rtol·scale + atol; reports the count and the worst element.
void check_scaled(const Vec& got, const DVec& want, const DVec& scale, double rtol, double atol,
                  const std::string& what) {
  REQUIRE(got.size() == want.size());
  REQUIRE(scale.size() == want.size());
  std::size_t bad = 0, worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    const double tol = rtol * scale[i] + atol;
    if (!(err <= tol)) ++bad;
    if (err - tol > worst_excess || std::isnan(err)) {
      worst_excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - tol;
      worst = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " out of tolerance (rtol " << rtol << ", atol " << atol
            << "); worst [" << worst << "] got " << (got.empty() ? 0.0f : got[worst]) << " want "
            << (want.empty() ? 0.0 : want[worst]));
  CHECK(bad == 0);
}

// |got − want| <= rtol·|want| + atol.
void check_close(const Vec& got, const DVec& want, double rtol, double atol, const std::string& what) {
  DVec scale(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) scale[i] = std::abs(want[i]);
  check_scaled(got, want, scale, rtol, atol, what);
}

double dot(const DVec& a, const DVec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite differences, in double, of a scalar function at x.
DVec fd_gradient(const std::function<double(const DVec&)>& L, DVec x, double h = 1e-5) {
  DVec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = L(x);
    x[i] = x0 - h;
    const double lm = L(x);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// Runs a backward kernel through `call`, which must add its gradients into the buffers it is given
// (one per gradient, of the given sizes). Returns the gradients computed into zeroed buffers, after
// checking the ACCUMULATE contract: with random pre-filled buffers P, one call leaves P + g and a
// second P + 2g (to the rounding of the additions).
// `acc_rtol`: the tolerance of the additions relative to |P| + times·|g|.
template <class T = float>
std::vector<Vec> backward_grads(const std::vector<std::size_t>& sizes,
                                const std::function<void(std::vector<std::vector<std::type_identity_t<T>>>&)>& call,
                                std::mt19937& rng, double acc_rtol = 1e-6) {
  std::vector<std::vector<T>> zero;
  for (auto n : sizes) zero.emplace_back(n, from_float<T>(0.0f));
  call(zero);
  std::vector<Vec> g;
  for (const auto& z : zero) g.push_back(to_f(z));

  std::vector<std::vector<T>> prefill;
  for (auto n : sizes) prefill.push_back(to_T<T>(uniform(rng, n, -2.0f, 2.0f)));
  auto acc = prefill;
  for (int times = 1; times <= 2; ++times) {
    call(acc);
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      DVec want(sizes[j]), scale(sizes[j]);
      for (std::size_t i = 0; i < sizes[j]; ++i) {
        const double p = to_float(prefill[j][i]);
        want[i] = p + times * double(g[j][i]);
        scale[i] = std::abs(p) + times * std::abs(double(g[j][i]));
      }
      check_scaled(
          to_f(acc[j]), want, scale, acc_rtol, 1e-6,
          "gradient " + std::to_string(j) + " after " + std::to_string(times) + " call(s) on pre-filled buffers");
    }
  }
  return g;
}

}  // namespace starzero::testing
