// tasks/nn_llama_kernels (CPU): the Llama 3 kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention)
// and the two host helpers. Every forward against a naive double-precision reference written here,
// every backward against central finite differences (in double, through that reference) of
// L = Σ dout ⊙ forward(x) with random weights dout, the ACCUMULATE contract of the backward kernels,
// and the split (null-gradient) calls against the combined one bit for bit. Float and bf16 storage;
// for bf16 the reference is fed the very bf16 values the kernel reads. Shapes are deliberately not
// multiples of 8: B = 3, T = 7, C = 36, NH = 6 query heads, NKV = 2 key/value heads (hs = 6).
//
// Tolerances, |got − want| <= rtol·|want| + atol element-wise:
// - float forwards against the double reference: rtol 1e-5, atol 1e-6 (as float results of the
//   bf16 kernels: rstd, attention probabilities);
// - float gradients against finite differences: rtol 1e-4, atol 2e-6 (measured worst: under
//   2e-5 relative; the finite differences themselves are good to ~1e-9);
// - bf16 storage: one rounding of the stored result (8 significant bits: relative error below
//   u = 2^-8) on top of the float arithmetic, so forwards rtol 2^-8 + 1e-5, atol 1e-5 and
//   gradients rtol 2^-8 + 1e-4, atol 1e-5;
// - accumulation into pre-filled gradients P (one and two calls, want P + k·g, g from zeroed
//   buffers): rtol·(|P| + k·|g|) + 1e-6, rtol 1e-6 for float and 3u = 3·2^-8 for bf16 (g, P + g
//   and P + 2g are each rounded once: at most 2.5u of that scale);
// - the RoPE table against its double reference: rtol 6.5e-8 (one float rounding, 2^-24), atol 1e-12.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.hpp"
#include "tasks/nn_llama_kernels.hpp"
#include "tasks/nn_kernels.hpp"

#include "kernel_test_support.hpp"

using namespace starzero;
namespace k = starzero::kernels;
using namespace starzero::testing;

namespace {


// Shapes shared by the tests.
constexpr int B = 3, Tn = 7, N = B * Tn;
constexpr int C = 36, NH = 6, NKV = 2, HS = C / NH;  // hs = 6: three rotated pairs per head
constexpr int C3 = (NH + 2 * NKV) * HS;              // one position of qkv: q | k | v
constexpr int H = 29;                                // SwiGLU hidden size
constexpr float kEps = 1e-5f;                        // Llama 3 norm_eps

template <class T>
struct Tol;
template <>
struct Tol<float> {
  static constexpr double fwd_rtol = 1e-5, fwd_atol = 1e-6;
  static constexpr double grad_rtol = 1e-4, grad_atol = 2e-6;
  static constexpr double acc_rtol = 1e-6;
};
template <>
struct Tol<bf16> {
  static constexpr double u = 1.0 / 256;  // bf16 unit roundoff
  static constexpr double fwd_rtol = u + 1e-5, fwd_atol = 1e-5;
  static constexpr double grad_rtol = u + 1e-4, grad_atol = 1e-5;
  static constexpr double acc_rtol = 3 * u;
};
// Float results (rstd, attention probabilities), also of the bf16 kernels.
constexpr double kF32Rtol = 1e-5, kF32Atol = 1e-6;

// ---- double-precision references (independent of the code under test) ------------------------------

// out = x · w / sqrt(mean(x²) + eps), per row of `cols`.
DVec ref_rmsnorm(const DVec& x, const DVec& w, int rows, int cols, DVec* rstd = nullptr) {
  DVec out(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int c = 0; c < cols; ++c) ms += x[r * cols + c] * x[r * cols + c];
    ms /= cols;
    const double s = 1.0 / std::sqrt(ms + double(kEps));
    for (int c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * s * w[c];
    if (rstd) (*rstd)[r] = s;
  }
  return out;
}

// Meta's precompute_freqs_cis (with apply_scaling when `scaled`), every step in double; table
// [T, hs/2] of frequencies is returned through `freqs` when asked.
DVec ref_rope_table(int T_, int hs, double theta, bool scaled, DVec* freqs = nullptr) {
  const double pi = std::acos(-1.0);
  DVec tab(std::size_t(T_) * hs);
  for (int i = 0; i < hs / 2; ++i) {
    double f = std::pow(theta, -double(2 * i) / hs);
    if (scaled) {
      const double wavelen = 2 * pi / f;
      if (wavelen > 8192.0) {
        f = f / 8;
      } else if (wavelen >= 8192.0 / 4) {
        const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
        f = (1 - smooth) * f / 8 + smooth * f;
      }
    }
    if (freqs) freqs->push_back(f);
    for (int t = 0; t < T_; ++t) {
      tab[(t * hs / 2 + i) * 2] = std::cos(t * f);
      tab[(t * hs / 2 + i) * 2 + 1] = std::sin(t * f);
    }
  }
  return tab;
}

// The first nh heads of each row of `cols` channels rotated pair by pair with table tab[T, hs/2, 2];
// the other channels copied.
DVec ref_rope(const DVec& x, const DVec& tab, int rows_b, int T_, int nh, int hs, int cols) {
  DVec out = x;
  for (int b = 0; b < rows_b; ++b)
    for (int t = 0; t < T_; ++t)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < hs / 2; ++i) {
          const std::size_t a = std::size_t(b * T_ + t) * cols + h * hs + 2 * i;
          const double c = tab[(t * hs / 2 + i) * 2], s = tab[(t * hs / 2 + i) * 2 + 1];
          out[a] = x[a] * c - x[a + 1] * s;
          out[a + 1] = x[a] * s + x[a + 1] * c;
        }
  return out;
}

DVec ref_swiglu(const DVec& gate, const DVec& up) {
  DVec out(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

// qkv[B, T, (nh + 2·nkv)·hs] = q | k | v; returns out[B, T, nh·hs]; lse[B, nh, T] (each row's
// log-sum-exp of its scaled scores) if asked. Query head h attends with key/value head
// h / (nh / nkv) (Meta's repeat_kv).
DVec ref_attention_gqa(const DVec& qkv, int B_, int T_, int nh, int nkv, int hs, DVec* lse = nullptr) {
  const int c3 = (nh + 2 * nkv) * hs, cout = nh * hs, rep = nh / nkv;
  DVec out(std::size_t(B_) * T_ * cout, 0.0);
  auto at = [&](int b, int t, int head, int i) { return qkv[std::size_t(b * T_ + t) * c3 + head * hs + i]; };
  for (int b = 0; b < B_; ++b)
    for (int h = 0; h < nh; ++h) {
      const int kh = nh + h / rep, vh = nh + nkv + h / rep;
      for (int t = 0; t < T_; ++t) {
        DVec p(T_, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int u = 0; u <= t; ++u) {
          double s = 0;
          for (int i = 0; i < hs; ++i) s += at(b, t, h, i) * at(b, u, kh, i);
          p[u] = s / std::sqrt(double(hs));
          mx = std::max(mx, p[u]);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += (p[u] = std::exp(p[u] - mx));
        for (int u = 0; u <= t; ++u) p[u] /= z;
        for (int i = 0; i < hs; ++i) {
          double s = 0;
          for (int u = 0; u <= t; ++u) s += p[u] * at(b, u, vh, i);
          out[std::size_t(b * T_ + t) * cout + h * hs + i] = s;
        }
        if (lse) (*lse)[(std::size_t(b) * nh + h) * T_ + t] = mx + std::log(z);
      }
    }
  return out;
}

// A RoPE table of random angles (unit-norm pairs, rounded to float): every pair really rotates.
Vec random_rope_table(std::mt19937& rng, int T_, int hs) {
  const Vec angle = uniform(rng, std::size_t(T_) * hs / 2, -3.14159f, 3.14159f);
  Vec tab(std::size_t(T_) * hs);
  for (std::size_t j = 0; j < angle.size(); ++j) {
    tab[2 * j] = float(std::cos(double(angle[j])));
    tab[2 * j + 1] = float(std::sin(double(angle[j])));
  }
  return tab;
}

}  // namespace

// ---- helpers ------------------------------------------------------------------------------------------

TEST_CASE("llama_ffn_hidden gives the Llama feed-forward sizes", "[llama]") {
  CHECK(k::llama_ffn_hidden(2048, 1.5f, 256) == 8192);     // Llama 3.2 1B
  CHECK(k::llama_ffn_hidden(3072, 1.0f, 256) == 8192);     // Llama 3.2 3B
  CHECK(k::llama_ffn_hidden(4096, 1.3f, 1024) == 14336);   // Llama 3 / 3.1 8B
  CHECK(k::llama_ffn_hidden(8192, 1.3f, 1024) == 28672);   // Llama 3 / 3.1 70B
  CHECK(k::llama_ffn_hidden(16384, 1.2f, 4096) == 53248);  // Llama 3.1 405B
  CHECK(k::llama_ffn_hidden(4096, 0.0f, 256) == 11008);    // no multiplier: Llama 2 7B
  CHECK(k::llama_ffn_hidden(36, 0.0f, 1) == 96);           // int(2·144/3)
  CHECK(k::llama_ffn_hidden(36, 1.5f, 32) == 160);         // int(1.5·96) = 144, rounded up to 5·32
  CHECK_THROWS_AS(k::llama_ffn_hidden(36, 1.0f, 0), std::invalid_argument);
}

TEST_CASE("rope_frequencies matches Meta's precompute_freqs_cis in double, plain and Llama 3.1-scaled",
          "[llama][rope]") {
  struct Case {
    int T_, hs;
    float theta;
    bool scaled;
  };
  for (const Case cs : {Case{Tn, HS, 10000.0f, false}, Case{37, 128, 500000.0f, false}, Case{37, 128, 500000.0f, true},
                        Case{9000, 64, 500000.0f, true}}) {
    INFO("T=" << cs.T_ << " hs=" << cs.hs << " theta=" << cs.theta << " scaled=" << cs.scaled);
    Vec tab(std::size_t(cs.T_) * cs.hs, -7.0f);
    k::rope_frequencies(tab.data(), cs.T_, cs.hs, cs.theta, cs.scaled);
    check_close(tab, ref_rope_table(cs.T_, cs.hs, cs.theta, cs.scaled), 6.5e-8, 1e-12, "freqs_cis");
  }

  // Llama 3 8B's head size and theta: the three regimes of the scaling rule all occur, and the
  // table at t = 1 holds (cos, sin) of the frequency itself.
  const int hs = 128, half = hs / 2;
  Vec plain(2 * hs), scaled(2 * hs);
  k::rope_frequencies(plain.data(), 2, hs, 500000.0f, false);
  k::rope_frequencies(scaled.data(), 2, hs, 500000.0f, true);
  const double pi = std::acos(-1.0);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < half; ++i) {
    INFO("pair " << i);
    CHECK(plain[2 * i] == 1.0f);  // t = 0: angle 0
    CHECK(plain[2 * i + 1] == 0.0f);
    const double f = std::pow(500000.0, -double(2 * i) / hs), wavelen = 2 * pi / f;
    const double got = std::atan2(double(scaled[hs + 2 * i + 1]), double(scaled[hs + 2 * i]));
    double want;
    if (wavelen < 2048) {
      ++kept;
      want = f;
      CHECK(scaled[hs + 2 * i] == plain[hs + 2 * i]);
      CHECK(scaled[hs + 2 * i + 1] == plain[hs + 2 * i + 1]);
    } else if (wavelen > 8192) {
      ++divided;
      want = f / 8;
    } else {
      ++smoothed;
      const double s = (8192 / wavelen - 1) / 3;
      want = (1 - s) * f / 8 + s * f;
      CHECK(want < f);
      CHECK(want > f / 8);
    }
    CHECK(std::abs(got - want) <= 1e-6 * want + 1e-9);
  }
  CHECK(kept == 29);
  CHECK(smoothed == 6);
  CHECK(divided == 29);

  Vec odd(3 * 7);
  CHECK_THROWS_AS(k::rope_frequencies(odd.data(), 3, 7, 10000.0f, false), std::invalid_argument);
}

// ---- RMSNorm ------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("rmsnorm forward matches the double reference", "[llama][rmsnorm]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(101);
  const auto inp = to_T<T>(uniform(rng, N * C, -3.0f, 5.0f)), w = to_T<T>(normal(rng, C));
  std::vector<T> out(N * C);
  Vec rstd(N, -1.0f);
  k::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
  DVec rrstd(N);
  check_close(to_f(out), ref_rmsnorm(to_d(inp), to_d(w), N, C, &rrstd), Tol<T>::fwd_rtol, Tol<T>::fwd_atol,
              std::string("rmsnorm out ") + type_name<T>());
  check_close(rstd, rrstd, kF32Rtol, kF32Atol, "rmsnorm rstd");
  // A null rstd is allowed and changes nothing else.
  std::vector<T> out2(N * C);
  k::rmsnorm_forward(out2.data(), (float*)nullptr, inp.data(), w.data(), N, C, kEps);
  CHECK(same_bits(out, out2));
}

TEMPLATE_TEST_CASE("rmsnorm backward matches finite differences and accumulates", "[llama][rmsnorm]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(102);
  const auto inp = to_T<T>(uniform(rng, N * C, -3.0f, 5.0f)), w = to_T<T>(normal(rng, C));
  const auto dout = to_T<T>(normal(rng, N * C));
  std::vector<T> out(N * C);
  Vec rstd(N);
  k::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
  const auto g = backward_grads<T>(
      {inp.size(), w.size()},
      [&](std::vector<std::vector<T>>& d) {
        k::rmsnorm_backward(d[0].data(), d[1].data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
      },
      rng, Tol<T>::acc_rtol);
  const DVec dd = to_d(dout), di = to_d(inp), dw = to_d(w);
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_rmsnorm(x, dw, N, C)); }, di),
              Tol<T>::grad_rtol, Tol<T>::grad_atol, std::string("rmsnorm dinp ") + type_name<T>());
  check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_rmsnorm(di, x, N, C)); }, dw),
              Tol<T>::grad_rtol, Tol<T>::grad_atol, std::string("rmsnorm dweight ") + type_name<T>());
}

TEMPLATE_TEST_CASE("rmsnorm backward: separate dinp and dweight calls equal the combined call bit for bit",
                   "[llama][rmsnorm]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(103);
  const auto inp = to_T<T>(uniform(rng, N * C, -3.0f, 5.0f)), w = to_T<T>(normal(rng, C));
  const auto dout = to_T<T>(normal(rng, N * C));
  const Vec rstd = uniform(rng, N, 0.3f, 2.0f);
  const auto dinp0 = to_T<T>(normal(rng, N * C)), dw0 = to_T<T>(normal(rng, C));
  auto dinp = dinp0, dw = dw0;
  k::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  auto split_dinp = dinp0, split_dw = dw0;
  k::rmsnorm_backward(split_dinp.data(), (T*)nullptr, dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  k::rmsnorm_backward((T*)nullptr, split_dw.data(), dout.data(), inp.data(), (const T*)nullptr, rstd.data(), N, C);
  CHECK(same_bits(dinp, split_dinp));
  CHECK(same_bits(dw, split_dw));
  CHECK(!same_bits(dinp, dinp0));  // not vacuous
  CHECK(!same_bits(dw, dw0));
}

// ---- RoPE ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("rope forward matches the double reference, in place and with pass-through channels",
                   "[llama][rope]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(201);
  const Vec tab = random_rope_table(rng, Tn, HS);
  const DVec dtab = to_d(tab);
  struct Case {
    int nh, cols;
    const char* what;
  };
  // A packed [B, T, NH, hs] buffer; the q and k heads of a qkv buffer, v passing through.
  for (const Case cs : {Case{NH, NH * HS, "packed q"}, Case{NH + NKV, C3, "q|k of qkv"}}) {
    INFO(type_name<T>() << " " << cs.what);
    const auto inp = to_T<T>(normal(rng, std::size_t(N) * cs.cols));
    std::vector<T> out(inp.size(), from_float<T>(123.0f));
    k::rope_forward(out.data(), inp.data(), tab.data(), B, Tn, cs.nh, HS, cs.cols);
    const DVec want = ref_rope(to_d(inp), dtab, B, Tn, cs.nh, HS, cs.cols);
    check_close(to_f(out), want, Tol<T>::fwd_rtol, Tol<T>::fwd_atol, "rope out");
    // The channels past the rotated heads are copied exactly.
    std::size_t copied = 0;
    for (int r = 0; r < N; ++r)
      for (int c = cs.nh * HS; c < cs.cols; ++c) {
        const std::size_t i = std::size_t(r) * cs.cols + c;
        copied += std::memcmp(&out[i], &inp[i], sizeof(T)) == 0;
      }
    CHECK(copied == std::size_t(N) * (cs.cols - cs.nh * HS));
    // In place: the same bits.
    auto inplace = inp;
    k::rope_forward(inplace.data(), inplace.data(), tab.data(), B, Tn, cs.nh, HS, cs.cols);
    CHECK(same_bits(inplace, out));
  }
}

TEMPLATE_TEST_CASE("rope backward matches finite differences and accumulates", "[llama][rope]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(202);
  const Vec tab = random_rope_table(rng, Tn, HS);
  const DVec dtab = to_d(tab);
  const int nh = NH + NKV;
  const auto inp = to_T<T>(normal(rng, std::size_t(N) * C3)), dout = to_T<T>(normal(rng, std::size_t(N) * C3));
  const auto g = backward_grads<T>(
      {inp.size()},
      [&](std::vector<std::vector<T>>& d) {
        k::rope_backward(d[0].data(), dout.data(), tab.data(), B, Tn, nh, HS, C3);
      },
      rng, Tol<T>::acc_rtol);
  const DVec dd = to_d(dout);
  check_close(g[0],
              fd_gradient([&](const DVec& x) { return dot(dd, ref_rope(x, dtab, B, Tn, nh, HS, C3)); }, to_d(inp)),
              Tol<T>::grad_rtol, Tol<T>::grad_atol, std::string("rope dinp ") + type_name<T>());
}

TEST_CASE("rope backward undoes rope forward on the real table (rotations are orthogonal)", "[llama][rope]") {
  std::mt19937 rng(203);
  const int T_ = 300, hs = 64, nh = 3;  // positions far enough for the angles to wrap
  Vec tab(std::size_t(T_) * hs);
  k::rope_frequencies(tab.data(), T_, hs, 500000.0f, true);
  const Vec x = normal(rng, std::size_t(2) * T_ * nh * hs);
  Vec y(x.size()), back(x.size(), 0.0f);
  k::rope_forward(y.data(), x.data(), tab.data(), 2, T_, nh, hs, nh * hs);
  k::rope_backward(back.data(), y.data(), tab.data(), 2, T_, nh, hs, nh * hs);
  check_close(back, to_d(x), 1e-6, 1e-6, "rope_backward(rope_forward(x))");
}

// ---- SwiGLU -------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("swiglu forward matches the double reference", "[llama][swiglu]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(301);
  Vec gate_f = uniform(rng, N * H, -6.0f, 6.0f);
  gate_f[0] = 0.0f, gate_f[1] = -30.0f, gate_f[2] = 30.0f, gate_f[3] = -100.0f, gate_f[4] = 1e-20f;
  const auto gate = to_T<T>(gate_f), up = to_T<T>(normal(rng, N * H));
  std::vector<T> out(N * H);
  k::swiglu_forward(out.data(), gate.data(), up.data(), N, H);
  check_close(to_f(out), ref_swiglu(to_d(gate), to_d(up)), Tol<T>::fwd_rtol, Tol<T>::fwd_atol,
              std::string("swiglu out ") + type_name<T>());
}

TEMPLATE_TEST_CASE("swiglu backward matches finite differences and accumulates", "[llama][swiglu]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(302);
  Vec gate_f = uniform(rng, N * H, -6.0f, 6.0f);
  gate_f[0] = 0.0f;
  const auto gate = to_T<T>(gate_f), up = to_T<T>(normal(rng, N * H)), dout = to_T<T>(normal(rng, N * H));
  const auto g = backward_grads<T>(
      {gate.size(), up.size()},
      [&](std::vector<std::vector<T>>& d) {
        k::swiglu_backward(d[0].data(), d[1].data(), dout.data(), gate.data(), up.data(), N, H);
      },
      rng, Tol<T>::acc_rtol);
  const DVec dd = to_d(dout), dg = to_d(gate), du = to_d(up);
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_swiglu(x, du)); }, dg), Tol<T>::grad_rtol,
              Tol<T>::grad_atol, std::string("swiglu dgate ") + type_name<T>());
  check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_swiglu(dg, x)); }, du), Tol<T>::grad_rtol,
              Tol<T>::grad_atol, std::string("swiglu dup ") + type_name<T>());
}

TEMPLATE_TEST_CASE("swiglu backward: separate dgate and dup calls equal the combined call bit for bit",
                   "[llama][swiglu]", float, bf16) {
  using T = TestType;
  std::mt19937 rng(303);
  const auto gate = to_T<T>(uniform(rng, N * H, -6.0f, 6.0f)), up = to_T<T>(normal(rng, N * H));
  const auto dout = to_T<T>(normal(rng, N * H));
  const auto dg0 = to_T<T>(normal(rng, N * H)), du0 = to_T<T>(normal(rng, N * H));
  auto dg = dg0, du = du0;
  k::swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), N, H);
  auto split_dg = dg0, split_du = du0;
  k::swiglu_backward(split_dg.data(), (T*)nullptr, dout.data(), gate.data(), up.data(), N, H);
  k::swiglu_backward((T*)nullptr, split_du.data(), dout.data(), gate.data(), (const T*)nullptr, N, H);
  CHECK(same_bits(dg, split_dg));
  CHECK(same_bits(du, split_du));
  CHECK(!same_bits(dg, dg0));
  CHECK(!same_bits(du, du0));
}

// ---- grouped-query attention --------------------------------------------------------------------------

TEMPLATE_TEST_CASE("attention_gqa forward matches the double reference", "[llama][attention]", float, bf16) {
  using T = TestType;
  // GQA (3 query heads per key/value head), multi-query (one key/value head) and multi-head; T
  // within one query block of the CPU kernel, and across two with a ragged end.
  for (const int seq : {Tn, k::kAttentionQueryBlock + 3})
    for (const int nkv : {NKV, 1, NH}) {
      INFO(type_name<T>() << " T=" << seq << " NH=" << NH << " NKV=" << nkv);
      std::mt19937 rng(401 + nkv);
      const int c3 = (NH + 2 * nkv) * HS, n = B * seq;
      const auto qkv = to_T<T>(normal(rng, std::size_t(n) * c3));
      std::vector<T> out(std::size_t(n) * C);
      Vec lse(std::size_t(B) * NH * seq, 5.0f);  // garbage: every entry is written
      k::attention_gqa_forward(out.data(), lse.data(), qkv.data(), B, seq, NH, nkv, HS);
      DVec rlse(lse.size());
      check_close(to_f(out), ref_attention_gqa(to_d(qkv), B, seq, NH, nkv, HS, &rlse), Tol<T>::fwd_rtol,
                  Tol<T>::fwd_atol, "attention out");
      check_close(lse, rlse, kF32Rtol, kF32Atol, "attention log-sum-exp");
    }
}

TEST_CASE("attention_gqa with NKV = NH is nn_kernels' multi-head attention, bit for bit", "[llama][attention]") {
  std::mt19937 rng(410);
  const Vec qkv = normal(rng, std::size_t(N) * 3 * C), dout = normal(rng, N * C);
  const std::size_t stats = std::size_t(B) * NH * Tn;
  Vec out(N * C), lse(stats), out_gpt(N * C), lse_gpt(stats);
  k::attention_gqa_forward(out.data(), lse.data(), qkv.data(), B, Tn, NH, NH, HS);
  k::attention_forward(out_gpt.data(), lse_gpt.data(), qkv.data(), B, Tn, C, NH);
  CHECK(out == out_gpt);
  CHECK(lse == lse_gpt);
  Vec dqkv(qkv.size(), 0.0f), dqkv_gpt(qkv.size(), 0.0f);
  k::attention_gqa_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, Tn, NH, NH, HS);
  k::attention_backward(dqkv_gpt.data(), dout.data(), qkv.data(), lse.data(), B, Tn, C, NH);
  CHECK(dqkv == dqkv_gpt);
  CHECK(dqkv != Vec(qkv.size(), 0.0f));
}

TEST_CASE("attention_gqa is causal: future tokens do not change earlier outputs", "[llama][attention]") {
  std::mt19937 rng(411);
  const Vec qkv = normal(rng, std::size_t(N) * C3);
  const std::size_t stats = std::size_t(B) * NH * Tn;
  Vec out(N * C), lse(stats);
  k::attention_gqa_forward(out.data(), lse.data(), qkv.data(), B, Tn, NH, NKV, HS);
  // Change q, k and v of position t = 4 in every sequence: rows t < 4 stay bit-identical.
  const int tf = 4;
  Vec qkv2 = qkv;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < C3; ++i) qkv2[std::size_t(b * Tn + tf) * C3 + i] += 0.75f + 0.01f * float(i);
  Vec out2(N * C), lse2(stats);
  k::attention_gqa_forward(out2.data(), lse2.data(), qkv2.data(), B, Tn, NH, NKV, HS);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const bool same = std::equal(out.begin() + (b * Tn + t) * C, out.begin() + (b * Tn + t + 1) * C,
                                   out2.begin() + (b * Tn + t) * C);
      INFO("b=" << b << " t=" << t);
      CHECK(same == (t < tf));
      CHECK((lse[(std::size_t(b) * NH) * Tn + t] == lse2[(std::size_t(b) * NH) * Tn + t]) == (t < tf));
    }
}

TEMPLATE_TEST_CASE("attention_gqa backward matches finite differences and accumulates", "[llama][attention]", float,
                   bf16) {
  using T = TestType;
  for (const int nkv : {NKV, 1}) {
    INFO(type_name<T>() << " NH=" << NH << " NKV=" << nkv);
    std::mt19937 rng(420 + nkv);
    const int c3 = (NH + 2 * nkv) * HS;
    const auto qkv = to_T<T>(normal(rng, std::size_t(N) * c3)), dout = to_T<T>(normal(rng, N * C));
    std::vector<T> out(N * C);
    Vec lse(std::size_t(B) * NH * Tn);
    k::attention_gqa_forward(out.data(), lse.data(), qkv.data(), B, Tn, NH, nkv, HS);
    const auto g = backward_grads<T>(
        {qkv.size()},
        [&](std::vector<std::vector<T>>& d) {
          k::attention_gqa_backward(d[0].data(), dout.data(), qkv.data(), lse.data(), B, Tn, NH, nkv, HS);
        },
        rng, Tol<T>::acc_rtol);
    const DVec dd = to_d(dout);
    check_close(
        g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_attention_gqa(x, B, Tn, NH, nkv, HS)); }, to_d(qkv)),
        Tol<T>::grad_rtol, Tol<T>::grad_atol, "attention dqkv");
  }
}

TEST_CASE("attention_gqa backward across query blocks matches finite differences", "[llama][attention]") {
  // One sequence over two query blocks of the CPU kernel, 2 query heads per key/value head: the
  // heads of a group add into the same dk, dv block after block.
  const int seq = k::kAttentionQueryBlock + 5, nh = 4, nkv = 2, hs = 3, c3 = (nh + 2 * nkv) * hs;
  std::mt19937 rng(430);
  const Vec qkv = normal(rng, std::size_t(seq) * c3), dout = normal(rng, std::size_t(seq) * nh * hs);
  Vec out(dout.size()), lse(std::size_t(nh) * seq), dqkv(qkv.size(), 0.0f);
  k::attention_gqa_forward(out.data(), lse.data(), qkv.data(), 1, seq, nh, nkv, hs);
  k::attention_gqa_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), 1, seq, nh, nkv, hs);
  const DVec dd = to_d(dout);
  check_close(dqkv, fd_gradient([&](const DVec& x) { return dot(dd, ref_attention_gqa(x, 1, seq, nh, nkv, hs)); }, to_d(qkv)),
              1e-3, 1e-5, "attention dqkv");
}

TEST_CASE("the Llama kernels accept empty shapes", "[llama]") {
  // Nothing to do, nothing touched (null data pointers are never dereferenced).
  float* none = nullptr;
  Vec one(1);  // rope_backward's dinp must differ from its dout
  k::rmsnorm_forward(none, none, none, none, 0, C, kEps);
  k::rmsnorm_backward(none, none, none, none, none, none, 0, C);
  k::rope_forward(none, none, none, 0, Tn, NH, HS, C);
  k::rope_backward(one.data(), none, none, B, 0, NH, HS, C);
  k::swiglu_forward(none, none, none, 0, H);
  k::swiglu_backward(none, none, none, none, none, N, 0);
  k::attention_gqa_forward(none, none, none, 0, Tn, NH, NKV, HS);
  k::attention_gqa_backward(none, none, none, none, B, 0, NH, NKV, HS);
  SUCCEED();
}
