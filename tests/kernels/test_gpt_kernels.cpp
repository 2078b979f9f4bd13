// tasks/nn_kernels (CPU): every forward against a naive double-precision reference written here,
// every backward against central finite differences of L = Σ dout ⊙ forward(x) computed with that
// reference, the ACCUMULATE contract of the backward kernels, and the bf16 instantiations against
// the float ones. Shapes are deliberately not multiples of 8 or 16.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/dtype.hpp"
#include "tasks/nn_kernels.hpp"
#include "tasks/nn_simd.hpp"

#include "kernel_test_support.hpp"

using namespace starzero;
namespace k = starzero::kernels;
using namespace starzero::testing;

namespace {


// Shapes shared by the tests.
constexpr int B = 2, Tn = 5, N = B * Tn;
constexpr int C = 12, NH = 3;   // attention: hs = 4
constexpr int Cm = 20, OC = 7;  // matmul
constexpr int V = 11, Vp = 16;  // vocabulary, padded

// Gradients: |kernel − finite difference| <= kGradRtol·|fd| + kGradAtol.
constexpr double kGradRtol = 1e-3, kGradAtol = 1e-5;
// Float forwards against the double reference.
constexpr double kFwdRtol = 1e-5, kFwdAtol = 1e-5;
// bf16 kernels against float kernels fed the same bf16-rounded inputs.
constexpr double kBf16Rtol = 1e-2, kBf16Atol = 1e-6;

// ---- double-precision references (independent of the code under test) ------------------------------

DVec ref_encoder(const std::vector<int>& tokens, const DVec& wte, const DVec& wpe) {
  DVec out(std::size_t(N) * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int c = 0; c < C; ++c) out[(b * Tn + t) * C + c] = wte[tokens[b * Tn + t] * C + c] + wpe[t * C + c];
  return out;
}

DVec ref_layernorm(const DVec& inp, const DVec& w, const DVec* bias, int rows, int cols, DVec* mean = nullptr,
                   DVec* rstd = nullptr) {
  DVec out(inp.size());
  for (int r = 0; r < rows; ++r) {
    double m = 0;
    for (int c = 0; c < cols; ++c) m += inp[r * cols + c];
    m /= cols;
    double v = 0;
    for (int c = 0; c < cols; ++c) v += (inp[r * cols + c] - m) * (inp[r * cols + c] - m);
    v /= cols;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < cols; ++c) out[r * cols + c] = (inp[r * cols + c] - m) * s * w[c] + (bias ? (*bias)[c] : 0.0);
    if (mean) (*mean)[r] = m;
    if (rstd) (*rstd)[r] = s;
  }
  return out;
}

DVec ref_matmul(const DVec& inp, const DVec& w, const DVec* bias, int rows, int cin, int cout) {
  DVec out(std::size_t(rows) * cout);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < cout; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < cin; ++c) s += inp[r * cin + c] * w[o * cin + c];
      out[r * cout + o] = s;
    }
  return out;
}

// An attention shape: B sequences of T positions, NH heads of hs.
struct AttentionShape {
  int B, Tn, NH, hs;
  int C() const { return NH * hs; }
  std::size_t rows() const { return std::size_t(B) * Tn; }
  std::size_t stats() const { return std::size_t(NH) * Tn; }  // log-sum-exps per sequence
};
constexpr AttentionShape kAttention{B, Tn, NH, C / NH};

// The causal probabilities of row t of head h of sequence b, in double: p[u] for u <= t (0 beyond),
// and the row's log-sum-exp of the scaled scores.
DVec ref_attention_row(const DVec& inp, const AttentionShape& sh, int b, int h, int t, double* lse = nullptr) {
  const int C = sh.C(), hs = sh.hs;
  auto at = [&](int u, int part, int i) { return inp[(std::size_t(b) * sh.Tn + u) * 3 * C + part * C + h * hs + i]; };
  DVec p(sh.Tn, 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (int u = 0; u <= t; ++u) {
    double s = 0;
    for (int i = 0; i < hs; ++i) s += at(t, 0, i) * at(u, 1, i);
    p[u] = s / std::sqrt(double(hs));
    mx = std::max(mx, p[u]);
  }
  double z = 0;
  for (int u = 0; u <= t; ++u) z += std::exp(p[u] - mx);
  if (lse) *lse = mx + std::log(z);
  for (int u = 0; u <= t; ++u) p[u] = std::exp(p[u] - mx) / z;
  return p;
}

// inp[B,T,3C] = q|k|v; returns out[B,T,C]; lse[B,NH,T] if asked.
DVec ref_attention(const DVec& inp, const AttentionShape& sh = kAttention, DVec* lse = nullptr) {
  const int C = sh.C(), hs = sh.hs;
  DVec out(sh.rows() * C, 0.0);
  for (int b = 0; b < sh.B; ++b)
    for (int h = 0; h < sh.NH; ++h)
      for (int t = 0; t < sh.Tn; ++t) {
        double row_lse = 0;
        const DVec p = ref_attention_row(inp, sh, b, h, t, &row_lse);
        for (int i = 0; i < hs; ++i) {
          double s = 0;
          for (int u = 0; u <= t; ++u) s += p[u] * inp[(std::size_t(b) * sh.Tn + u) * 3 * C + 2 * C + h * hs + i];
          out[(std::size_t(b) * sh.Tn + t) * C + h * hs + i] = s;
        }
        if (lse) (*lse)[std::size_t(b) * sh.stats() + std::size_t(h) * sh.Tn + t] = row_lse;
      }
  return out;
}

// The gradient of Σ dout ⊙ attention(inp) with respect to inp [B,T,3C], in double, by the
// textbook chain rule through the materialised probabilities (what the memory-efficient kernels
// must agree with): dv += pᵀ dout, dp = dout vᵀ, ds = p ⊙ (dp − Σ p dp), dq += ds k / √hs,
// dk += dsᵀ q / √hs.
DVec ref_attention_backward(const DVec& inp, const DVec& dout, const AttentionShape& sh) {
  const int C = sh.C(), hs = sh.hs;
  const double scale = 1.0 / std::sqrt(double(hs));
  DVec dinp(inp.size(), 0.0);
  auto idx = [&](int b, int u, int part, int h, int i) {
    return (std::size_t(b) * sh.Tn + u) * 3 * C + part * C + h * hs + i;
  };
  for (int b = 0; b < sh.B; ++b)
    for (int h = 0; h < sh.NH; ++h)
      for (int t = 0; t < sh.Tn; ++t) {
        const DVec p = ref_attention_row(inp, sh, b, h, t);
        const double* g = dout.data() + (std::size_t(b) * sh.Tn + t) * C + h * hs;
        DVec dp(sh.Tn, 0.0);
        double pdp = 0;
        for (int u = 0; u <= t; ++u) {
          for (int i = 0; i < hs; ++i) {
            dp[u] += g[i] * inp[idx(b, u, 2, h, i)];
            dinp[idx(b, u, 2, h, i)] += p[u] * g[i];
          }
          pdp += p[u] * dp[u];
        }
        for (int u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - pdp) * scale;
          for (int i = 0; i < hs; ++i) {
            dinp[idx(b, t, 0, h, i)] += ds * inp[idx(b, u, 1, h, i)];
            dinp[idx(b, u, 1, h, i)] += ds * inp[idx(b, t, 0, h, i)];
          }
        }
      }
  return dinp;
}

DVec ref_gelu(const DVec& x) {
  DVec y(x.size());
  const double pi = std::acos(-1.0);
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

// Per-row cross-entropy over the first V columns; probs[N,Vp] (0 in padding) if asked.
DVec ref_losses(const DVec& logits, const std::vector<int>& targets, DVec* probs = nullptr) {
  DVec losses(N);
  for (int n = 0; n < N; ++n) {
    const double* l = logits.data() + n * Vp;
    double mx = *std::max_element(l, l + V);
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(l[i] - mx);
    losses[n] = -((l[targets[n]] - mx) - std::log(z));
    if (probs)
      for (int i = 0; i < Vp; ++i) (*probs)[n * Vp + i] = i < V ? std::exp(l[i] - mx) / z : 0.0;
  }
  return losses;
}

double mean_loss(const DVec& logits, const std::vector<int>& targets) {
  DVec l = ref_losses(logits, targets);
  double s = 0;
  for (double x : l) s += x;
  return s / N;
}

}  // namespace

// ---- bf16 -------------------------------------------------------------------------------------------

TEST_CASE("bf16 conversions round to nearest even and round-trip representable values") {
  auto bits = [](float f) { return from_float<bf16>(f).bits; };
  auto f32 = [](std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  };
  CHECK(bits(1.0f) == 0x3F80);
  CHECK(bits(-2.5f) == 0xC020);
  CHECK(bits(0.0f) == 0x0000);
  CHECK(bits(-0.0f) == 0x8000);
  // 1 + 2^-8 lies halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even -> down.
  CHECK(bits(1.0f + 0x1p-8f) == 0x3F80);
  // 1 + 3·2^-8 lies halfway between 0x3F81 (odd) and 0x3F82 (even): ties to even -> up.
  CHECK(bits(1.0f + 3 * 0x1p-8f) == 0x3F82);
  // Just above / below the halfway point round to the nearer neighbour.
  CHECK(bits(f32(0x3F808001u)) == 0x3F81);
  CHECK(bits(f32(0x3F807FFFu)) == 0x3F80);
  // The largest float rounds up into infinity; infinities and NaN stay what they are.
  CHECK(bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(std::isnan(to_float(from_float<bf16>(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  CHECK(std::isnan(to_float(from_float<bf16>(f32(0x7F800001u)))));
  // Values with 8 significant bits round-trip exactly.
  for (float x : {1.0f, -3.0f, 0.5f, 1.0078125f, 65280.0f, -0x1p-100f, 0x1.fep127f})
    CHECK(to_float(from_float<bf16>(x)) == x);
  // Rounding error is at most half a bf16 ulp: 8 significant bits, so 2^-8 relative.
  std::mt19937 rng(7);
  for (float x : normal(rng, 1000, 100.0f)) CHECK(std::abs(to_float(from_float<bf16>(x)) - x) <= std::abs(x) * 0x1p-8f);
}

// ---- encoder ----------------------------------------------------------------------------------------

TEST_CASE("encoder forward matches the double reference") {
  std::mt19937 rng(1);
  const auto tokens = random_ints(rng, N, V);
  const Vec wte = normal(rng, V * C), wpe = normal(rng, Tn * C);
  Vec out(N * C);
  k::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
  check_close(out, ref_encoder(tokens, to_d(wte), to_d(wpe)), kFwdRtol, kFwdAtol, "encoder out");
}

TEST_CASE("encoder backward matches finite differences and accumulates") {
  std::mt19937 rng(2);
  auto tokens = random_ints(rng, N, V);
  tokens[7] = tokens[3] = tokens[1];  // repeated tokens, in both sequences and at different positions
  const Vec wte = normal(rng, V * C), wpe = normal(rng, Tn * C), dout = normal(rng, N * C);
  const auto g = backward_grads(
      {wte.size(), wpe.size()},
      [&](std::vector<Vec>& d) { k::encoder_backward(d[0].data(), d[1].data(), dout.data(), tokens.data(), B, Tn, C); },
      rng);
  const DVec dd = to_d(dout);
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_encoder(tokens, x, to_d(wpe))); }, to_d(wte)),
              kGradRtol, kGradAtol, "dwte");
  check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_encoder(tokens, to_d(wte), x)); }, to_d(wpe)),
              kGradRtol, kGradAtol, "dwpe");
}

// ---- layernorm --------------------------------------------------------------------------------------

TEST_CASE("layernorm forward matches the double reference") {
  std::mt19937 rng(3);
  const Vec inp = uniform(rng, N * C, -3.0f, 5.0f), w = normal(rng, C), b = normal(rng, C);
  Vec out(N * C), mean(N), rstd(N);
  DVec rmean(N), rrstd(N);
  SECTION("with bias") {
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    const DVec db = to_d(b);
    check_close(out, ref_layernorm(to_d(inp), to_d(w), &db, N, C, &rmean, &rrstd), kFwdRtol, kFwdAtol, "ln out");
  }
  SECTION("without bias") {
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), (const float*)nullptr, N, C);
    check_close(out, ref_layernorm(to_d(inp), to_d(w), nullptr, N, C, &rmean, &rrstd), kFwdRtol, kFwdAtol, "ln out");
  }
  check_close(mean, rmean, kFwdRtol, kFwdAtol, "ln mean");
  check_close(rstd, rrstd, kFwdRtol, kFwdAtol, "ln rstd");
}

TEST_CASE("layernorm backward matches finite differences and accumulates") {
  std::mt19937 rng(4);
  const Vec inp = uniform(rng, N * C, -3.0f, 5.0f), w = normal(rng, C), b = normal(rng, C), dout = normal(rng, N * C);
  Vec out(N * C), mean(N), rstd(N);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  const auto g = backward_grads(
      {inp.size(), w.size(), b.size()},
      [&](std::vector<Vec>& d) {
        k::layernorm_backward(d[0].data(), d[1].data(), d[2].data(), dout.data(), inp.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
      },
      rng);
  const DVec dd = to_d(dout), di = to_d(inp), dw = to_d(w), db = to_d(b);
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(x, dw, &db, N, C)); }, di), kGradRtol,
              kGradAtol, "ln dinp");
  check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(di, x, &db, N, C)); }, dw), kGradRtol,
              kGradAtol, "ln dweight");
  check_close(g[2], fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(di, dw, &x, N, C)); }, db), kGradRtol,
              kGradAtol, "ln dbias");
}

// ---- matmul -----------------------------------------------------------------------------------------

TEST_CASE("matmul forward matches the double reference") {
  std::mt19937 rng(5);
  SECTION("small, with and without bias") {
    const Vec inp = normal(rng, N * Cm), w = normal(rng, OC * Cm), b = normal(rng, OC);
    const DVec db = to_d(b);
    Vec out(N * OC, 123.0f);  // stale contents must be overwritten
    k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, Cm, OC);
    check_close(out, ref_matmul(to_d(inp), to_d(w), &db, N, Cm, OC), kFwdRtol, kFwdAtol, "matmul out (bias)");
    std::fill(out.begin(), out.end(), 123.0f);
    k::matmul_forward(out.data(), inp.data(), w.data(), (const float*)nullptr, N, Cm, OC);
    check_close(out, ref_matmul(to_d(inp), to_d(w), nullptr, N, Cm, OC), kFwdRtol, kFwdAtol, "matmul out (no bias)");
  }
  SECTION("larger odd shape") {
    const int rows = 37, cin = 70, cout = 45;
    const Vec inp = normal(rng, rows * cin), w = normal(rng, cout * cin), b = normal(rng, cout);
    const DVec db = to_d(b);
    Vec out(rows * cout);
    k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), rows, cin, cout);
    check_close(out, ref_matmul(to_d(inp), to_d(w), &db, rows, cin, cout), kFwdRtol, 1e-4, "matmul out (37x70x45)");
  }
}

TEST_CASE("matmul backward matches finite differences and accumulates") {
  std::mt19937 rng(6);
  const Vec inp = normal(rng, N * Cm), w = normal(rng, OC * Cm), b = normal(rng, OC), dout = normal(rng, N * OC);
  const DVec dd = to_d(dout), di = to_d(inp), dw = to_d(w), db = to_d(b);
  SECTION("with bias") {
    const auto g = backward_grads(
        {inp.size(), w.size(), b.size()},
        [&](std::vector<Vec>& d) {
          k::matmul_backward(d[0].data(), d[1].data(), d[2].data(), dout.data(), inp.data(), w.data(), N, Cm, OC);
        },
        rng);
    check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_matmul(x, dw, &db, N, Cm, OC)); }, di),
                kGradRtol, kGradAtol, "matmul dinp");
    check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_matmul(di, x, &db, N, Cm, OC)); }, dw),
                kGradRtol, kGradAtol, "matmul dweight");
    check_close(g[2], fd_gradient([&](const DVec& x) { return dot(dd, ref_matmul(di, dw, &x, N, Cm, OC)); }, db),
                kGradRtol, kGradAtol, "matmul dbias");
  }
  SECTION("without bias") {
    const auto g = backward_grads(
        {inp.size(), w.size()},
        [&](std::vector<Vec>& d) {
          k::matmul_backward(d[0].data(), d[1].data(), (float*)nullptr, dout.data(), inp.data(), w.data(), N, Cm, OC);
        },
        rng);
    check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_matmul(x, dw, nullptr, N, Cm, OC)); }, di),
                kGradRtol, kGradAtol, "matmul dinp");
    check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref_matmul(di, x, nullptr, N, Cm, OC)); }, dw),
                kGradRtol, kGradAtol, "matmul dweight");
  }
}

// ---- split backwards ---------------------------------------------------------------------------------
// The input gradient and the parameter gradients as separate calls (separate tasks) give the bits
// of one call computing both, in fp32 and bf16, accumulating onto non-zero gradients.

template <class T>
void check_split_backwards() {
  std::mt19937 rng(21);
  const int rows = 13, c = 19, oc = 11;
  const auto inp = to_T<T>(uniform(rng, rows * c, -2.0f, 3.0f)), w = to_T<T>(normal(rng, oc * c));
  const auto lw = to_T<T>(normal(rng, c)), dout = to_T<T>(normal(rng, rows * oc));
  const auto ldout = to_T<T>(normal(rng, rows * c));
  const Vec mean = uniform(rng, rows, -0.5f, 0.5f), rstd = uniform(rng, rows, 0.5f, 2.0f);
  const auto start = [&](std::size_t n) { return to_T<T>(normal(rng, n)); };
  const auto dinp0 = start(rows * c), dw0 = start(oc * c), db0 = start(oc), ldw0 = start(c), ldb0 = start(c);

  auto dinp = dinp0, dw = dw0, db = db0;
  k::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), rows, c, oc);
  auto split_dinp = dinp0, split_dw = dw0, split_db = db0;
  k::matmul_backward(split_dinp.data(), (T*)nullptr, (T*)nullptr, dout.data(), (const T*)nullptr, w.data(), rows, c,
                     oc);
  k::matmul_backward((T*)nullptr, split_dw.data(), split_db.data(), dout.data(), inp.data(), (const T*)nullptr, rows, c,
                     oc);
  CHECK(std::memcmp(dinp.data(), split_dinp.data(), dinp.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(dw.data(), split_dw.data(), dw.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(db.data(), split_db.data(), db.size() * sizeof(T)) == 0);

  auto ldinp = dinp0, ldw = ldw0, ldb = ldb0;
  k::layernorm_backward(ldinp.data(), ldw.data(), ldb.data(), ldout.data(), inp.data(), lw.data(), mean.data(),
                        rstd.data(), rows, c);
  auto split_ldinp = dinp0, split_ldw = ldw0, split_ldb = ldb0;
  k::layernorm_backward(split_ldinp.data(), (T*)nullptr, (T*)nullptr, ldout.data(), inp.data(), lw.data(), mean.data(),
                        rstd.data(), rows, c);
  k::layernorm_backward((T*)nullptr, split_ldw.data(), split_ldb.data(), ldout.data(), inp.data(), (const T*)nullptr,
                        mean.data(), rstd.data(), rows, c);
  CHECK(std::memcmp(ldinp.data(), split_ldinp.data(), ldinp.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(ldw.data(), split_ldw.data(), ldw.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(ldb.data(), split_ldb.data(), ldb.size() * sizeof(T)) == 0);
  // Not vacuous: the calls changed the gradients.
  CHECK(std::memcmp(ldinp.data(), dinp0.data(), ldinp.size() * sizeof(T)) != 0);
  CHECK(std::memcmp(dw.data(), dw0.data(), dw.size() * sizeof(T)) != 0);
}

TEST_CASE("split matmul and layernorm backwards equal the combined call bit for bit") {
  SECTION("fp32") { check_split_backwards<float>(); }
  SECTION("bf16") { check_split_backwards<bf16>(); }
}

// The weight gradient cut by output channels (a gradient split into pieces): each piece of rows,
// computed on its own buffer, against finite differences, and the pieces against one whole call.
template <class T>
void check_weight_rows() {
  std::mt19937 rng(22);
  const int rows = 37, c = 29, oc = 23;
  const Vec inp_f = uniform(rng, rows * c, -2.0f, 3.0f), dout_f = normal(rng, rows * oc), dw0_f = normal(rng, oc * c);
  const auto inp = to_T<T>(inp_f), dout = to_T<T>(dout_f), dw0 = to_T<T>(dw0_f);
  auto whole = dw0;
  k::matmul_backward((T*)nullptr, whole.data(), (T*)nullptr, dout.data(), inp.data(), (const T*)nullptr, rows, c, oc);
  std::vector<T> pieces;
  for (const auto& [first, end] : {std::pair{0, 7}, std::pair{7, 8}, std::pair{8, oc}}) {
    std::vector<T> piece(dw0.begin() + first * c, dw0.begin() + end * c);
    k::matmul_backward_weight_rows(piece.data(), dout.data(), inp.data(), rows, c, oc, first, end - first);
    pieces.insert(pieces.end(), piece.begin(), piece.end());
  }
  // Against the double reference dW0 + doutᵀ·inp of the stored values.
  DVec want(std::size_t(oc) * c);
  for (int o = 0; o < oc; ++o)
    for (int i = 0; i < c; ++i) {
      double s = to_float(dw0[o * c + i]);
      for (int r = 0; r < rows; ++r) s += double(to_float(dout[r * oc + o])) * to_float(inp[r * c + i]);
      want[o * c + i] = s;
    }
  check_close(to_f(pieces), want, std::is_same_v<T, float> ? 1e-5 : kBf16Rtol, 1e-5, "dweight by rows");
  // The pieces against one whole call: equal to rounding. Not bit for bit: whether OpenBLAS gives an
  // output element the same sum whatever the number of output rows in one call depends on the
  // kernel it picks for the CPU (its SkylakeX and Cooperlake sgemm do, its Haswell and Zen ones do
  // not: OPENBLAS_CORETYPE shows it); nothing relies on it (docs/architecture.md: results are
  // bitwise identical per tile count, across tile counts to rounding).
  check_close(to_f(pieces), to_d(to_f(whole)), std::is_same_v<T, float> ? 1e-5 : kBf16Rtol, 1e-5, "pieces vs whole");
}

TEST_CASE("the weight gradient by pieces of output channels") {
  SECTION("fp32") { check_weight_rows<float>(); }
  SECTION("bf16") { check_weight_rows<bf16>(); }
}

// ---- attention ------------------------------------------------------------------------------------
// The memory-efficient kernels keep per row only the log-sum-exp. Shapes cross the kernel's
// blocks of kAttentionQueryBlock query rows: a single row, fewer rows than a block, exactly one
// block, one more, several with a ragged end.

std::vector<AttentionShape> attention_shapes() {
  const int Q = k::kAttentionQueryBlock;
  return {{2, 1, 3, 4}, {2, Tn, NH, C / NH}, {1, Q, 2, 5}, {2, Q + 1, 2, 3}, {1, 2 * Q + 3, 3, 7}};
}

TEST_CASE("attention forward matches the double reference, log-sum-exps included") {
  std::mt19937 rng(8);
  for (const AttentionShape& sh : attention_shapes()) {
    INFO("B=" << sh.B << " T=" << sh.Tn << " NH=" << sh.NH << " hs=" << sh.hs);
    const Vec inp = normal(rng, sh.rows() * 3 * sh.C());
    Vec out(sh.rows() * sh.C()), lse(sh.B * sh.stats());
    k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, sh.Tn, sh.C(), sh.NH);
    DVec rlse(lse.size());
    check_close(out, ref_attention(to_d(inp), sh, &rlse), kFwdRtol, kFwdAtol, "attention out");
    check_close(lse, rlse, kFwdRtol, kFwdAtol, "attention log-sum-exp");
  }
}

TEST_CASE("attention is causal: future tokens do not change earlier outputs") {
  std::mt19937 rng(9);
  // Two query blocks, the change in the second one's first row and at a block's last row.
  const AttentionShape sh{2, k::kAttentionQueryBlock + 9, 2, 5};
  const int C = sh.C();
  const Vec inp = normal(rng, sh.rows() * 3 * C);
  Vec out(sh.rows() * C), lse(sh.B * sh.stats());
  k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, sh.Tn, C, sh.NH);
  // The first position attends to itself alone: out = v_0 exactly, lse = its own scaled score.
  for (int b = 0; b < sh.B; ++b)
    for (int i = 0; i < C; ++i) CHECK(out[b * sh.Tn * C + i] == inp[b * sh.Tn * 3 * C + 2 * C + i]);
  for (int tf : {k::kAttentionQueryBlock - 1, k::kAttentionQueryBlock}) {
    // Change q, k and v of position tf in both sequences: rows t < tf stay bit-identical.
    Vec inp2 = inp;
    for (int b = 0; b < sh.B; ++b)
      for (int i = 0; i < 3 * C; ++i) inp2[(b * sh.Tn + tf) * 3 * C + i] += 0.75f + 0.01f * float(i);
    Vec out2(out.size()), lse2(lse.size());
    k::attention_forward(out2.data(), lse2.data(), inp2.data(), sh.B, sh.Tn, C, sh.NH);
    for (int b = 0; b < sh.B; ++b)
      for (int t = 0; t < sh.Tn; ++t) {
        const bool same = std::equal(out.begin() + (b * sh.Tn + t) * C, out.begin() + (b * sh.Tn + t + 1) * C,
                                     out2.begin() + (b * sh.Tn + t) * C);
        INFO("changed " << tf << " b=" << b << " t=" << t);
        CHECK(same == (t < tf));
        for (int h = 0; h < sh.NH; ++h) {
          const std::size_t r = b * sh.stats() + h * sh.Tn + t;
          CHECK((lse[r] == lse2[r]) == (t < tf));
        }
      }
  }
}

TEST_CASE("attention backward matches finite differences and accumulates") {
  std::mt19937 rng(10);
  const Vec inp = normal(rng, N * 3 * C), dout = normal(rng, N * C);
  Vec out(N * C), lse(B * kAttention.stats());
  k::attention_forward(out.data(), lse.data(), inp.data(), B, Tn, C, NH);
  const auto g = backward_grads(
      {inp.size()},
      [&](std::vector<Vec>& d) {
        k::attention_backward(d[0].data(), dout.data(), inp.data(), lse.data(), B, Tn, C, NH);
      },
      rng);
  const DVec dd = to_d(dout);
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref_attention(x)); }, to_d(inp)), kGradRtol,
              kGradAtol, "attention dinp");
}

TEST_CASE("attention backward matches the double reference across query blocks") {
  std::mt19937 rng(11);
  for (const AttentionShape& sh : attention_shapes()) {
    INFO("B=" << sh.B << " T=" << sh.Tn << " NH=" << sh.NH << " hs=" << sh.hs);
    const int C = sh.C();
    const Vec inp = normal(rng, sh.rows() * 3 * C), dout = normal(rng, sh.rows() * C);
    Vec out(sh.rows() * C), lse(sh.B * sh.stats()), dinp(inp.size(), 0.0f);
    k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, sh.Tn, C, sh.NH);
    k::attention_backward(dinp.data(), dout.data(), inp.data(), lse.data(), sh.B, sh.Tn, C, sh.NH);
    check_close(dinp, ref_attention_backward(to_d(inp), to_d(dout), sh), 1e-4, 1e-5, "attention dinp");
  }
  // Finite differences at the edge of a block (one sequence, T = block + 2, small heads).
  const AttentionShape sh{1, k::kAttentionQueryBlock + 2, 1, 3};
  const Vec inp = normal(rng, sh.rows() * 3 * sh.C()), dout = normal(rng, sh.rows() * sh.C());
  Vec out(sh.rows() * sh.C()), lse(sh.stats()), dinp(inp.size(), 0.0f);
  k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, sh.Tn, sh.C(), sh.NH);
  k::attention_backward(dinp.data(), dout.data(), inp.data(), lse.data(), sh.B, sh.Tn, sh.C(), sh.NH);
  const DVec dd = to_d(dout);
  check_close(dinp, fd_gradient([&](const DVec& x) { return dot(dd, ref_attention(x, sh)); }, to_d(inp)), kGradRtol,
              kGradAtol, "attention dinp (finite differences)");
}

// ---- attention by head groups ---------------------------------------------------------------------
// A head group's call (heads [h0, h0 + nh)) writes only its own columns of out and of dinp's q, k and
// v parts and its own [nh, T] of lse; the groups of any cut, in place (the views a CPU task gets)
// or packed (a block alone with its own leading dimension, as on a GPU), give the whole call's
// bits, in fp32 and bf16. Shapes: odd sizes, uneven groups, more than one query block.

// The heads of group g of G: NH·g/G .. NH·(g+1)/G − 1, as the model cuts them.
std::pair<int, int> head_group(int NH, int G, int g) { return {NH * g / G, NH * (g + 1) / G - NH * g / G}; }

template <class T>
void check_attention_head_groups(const AttentionShape& sh, int G, bool packed) {
  INFO("B=" << sh.B << " T=" << sh.Tn << " NH=" << sh.NH << " hs=" << sh.hs << " groups=" << G
            << (packed ? " packed" : " in place"));
  std::mt19937 rng(40 + G);
  const int C = sh.C(), Tn = sh.Tn;
  const std::size_t rows = sh.rows();
  const auto inp = to_T<T>(normal(rng, rows * 3 * C)), dout = to_T<T>(normal(rng, rows * C));
  const auto dinp0 = to_T<T>(normal(rng, rows * 3 * C));

  // The whole op.
  std::vector<T> out(rows * C);
  Vec lse(sh.B * sh.stats());
  k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, Tn, C, sh.NH);
  auto dinp = dinp0;
  k::attention_backward(dinp.data(), dout.data(), inp.data(), lse.data(), sh.B, Tn, C, sh.NH);
  REQUIRE(!same_bits(dinp, dinp0));  // not vacuous

  // The groups: every output starts as garbage (the backward's dinp as dinp0), which each group
  // must overwrite (or accumulate into) exactly in its own columns.
  std::vector<T> g_out = to_T<T>(uniform(rng, out.size(), 100.0f, 200.0f));
  Vec g_lse = uniform(rng, lse.size(), 100.0f, 200.0f);
  auto g_dinp = dinp0;
  for (int g = 0; g < G; ++g) {
    const auto [h0, nh] = head_group(sh.NH, G, g);
    const int width = nh * sh.hs;
    if (!packed) {
      const std::size_t column = std::size_t(h0) * sh.hs, stats = std::size_t(h0) * Tn;
      k::attention_forward_heads(g_out.data() + column, C, g_lse.data() + stats, int(sh.stats()), inp.data(), sh.B,
                                 Tn, C, sh.NH, h0, nh);
      k::attention_backward_heads(g_dinp.data() + column, g_dinp.data() + C + column, g_dinp.data() + 2 * C + column,
                                  3 * C, dout.data(), inp.data(), g_lse.data() + stats, int(sh.stats()), sh.B, Tn, C,
                                  sh.NH, h0, nh);
      continue;
    }
    // Packed: the group's blocks alone, rows `width` (or nh·T) apart, copied in and out around the calls.
    const std::size_t group_stats = std::size_t(nh) * Tn;
    std::vector<T> p_out(rows * width), p_dq(rows * width), p_dk(rows * width), p_dv(rows * width);
    Vec p_lse(sh.B * group_stats);
    for (std::size_t r = 0; r < rows; ++r)
      for (int i = 0; i < width; ++i) {
        const std::size_t at = r * 3 * C + std::size_t(h0) * sh.hs + i;
        p_dq[r * width + i] = g_dinp[at];
        p_dk[r * width + i] = g_dinp[at + C];
        p_dv[r * width + i] = g_dinp[at + 2 * C];
      }
    k::attention_forward_heads(p_out.data(), width, p_lse.data(), int(group_stats), inp.data(), sh.B, Tn, C, sh.NH,
                               h0, nh);
    k::attention_backward_heads(p_dq.data(), p_dk.data(), p_dv.data(), width, dout.data(), inp.data(), p_lse.data(),
                                int(group_stats), sh.B, Tn, C, sh.NH, h0, nh);
    for (std::size_t r = 0; r < rows; ++r)
      for (int i = 0; i < width; ++i) {
        const std::size_t at = r * 3 * C + std::size_t(h0) * sh.hs + i;
        g_out[r * C + std::size_t(h0) * sh.hs + i] = p_out[r * width + i];
        g_dinp[at] = p_dq[r * width + i];
        g_dinp[at + C] = p_dk[r * width + i];
        g_dinp[at + 2 * C] = p_dv[r * width + i];
      }
    for (int b = 0; b < sh.B; ++b)
      std::copy_n(p_lse.begin() + b * group_stats, group_stats, g_lse.begin() + b * sh.stats() + h0 * Tn);
  }
  CHECK(same_bits(g_out, out));
  CHECK(same_bits(g_lse, lse));
  CHECK(same_bits(g_dinp, dinp));
}

TEST_CASE("attention by head groups equals the whole call bit for bit") {
  for (const AttentionShape& sh : {AttentionShape{3, 7, 5, 3}, AttentionShape{2, 13, 7, 5}, AttentionShape{1, 9, 4, 6},
                                   AttentionShape{1, k::kAttentionQueryBlock + 5, 3, 4}})
    for (int G = 1; G <= sh.NH; ++G)
      for (bool packed : {false, true}) {
        check_attention_head_groups<float>(sh, G, packed);
        check_attention_head_groups<bf16>(sh, G, packed);
      }
}

TEST_CASE("an attention head group writes only its own columns") {
  const AttentionShape sh{2, 6, 4, 3};
  const int C = sh.C();
  std::mt19937 rng(47);
  const Vec inp = normal(rng, sh.rows() * 3 * C), dout = normal(rng, sh.rows() * C);
  const Vec out0 = uniform(rng, sh.rows() * C, 100.0f, 200.0f), lse0 = uniform(rng, sh.B * sh.stats(), 100.0f, 200.0f);
  const Vec dinp0 = normal(rng, sh.rows() * 3 * C);
  Vec out = out0, lse = lse0, dinp = dinp0;
  const int h0 = 1, nh = 2, hs = sh.hs;  // heads 1 and 2 of 0..3
  k::attention_forward_heads(out.data() + h0 * hs, C, lse.data() + h0 * sh.Tn, int(sh.stats()), inp.data(), sh.B,
                             sh.Tn, C, sh.NH, h0, nh);
  k::attention_backward_heads(dinp.data() + h0 * hs, dinp.data() + C + h0 * hs, dinp.data() + 2 * C + h0 * hs, 3 * C,
                              dout.data(), inp.data(), lse.data() + h0 * sh.Tn, int(sh.stats()), sh.B, sh.Tn, C, sh.NH,
                              h0, nh);
  for (std::size_t r = 0; r < sh.rows(); ++r)
    for (int i = 0; i < C; ++i) {
      const bool mine = i >= h0 * hs && i < (h0 + nh) * hs;
      INFO("row " << r << " column " << i);
      CHECK((out[r * C + i] != out0[r * C + i]) == mine);
      for (int part = 0; part < 3; ++part)
        if (!mine) CHECK(dinp[r * 3 * C + part * C + i] == dinp0[r * 3 * C + part * C + i]);
    }
  CHECK(dinp != dinp0);
  for (int b = 0; b < sh.B; ++b)
    for (std::size_t i = 0; i < sh.stats(); ++i) {
      const bool mine = i >= std::size_t(h0) * sh.Tn && i < std::size_t(h0 + nh) * sh.Tn;
      const std::size_t at = b * sh.stats() + i;
      if (!mine) CHECK(lse[at] == lse0[at]);
      if (mine) CHECK(lse[at] < 50.0f);  // a log-sum-exp of these scores, not the garbage (>= 100)
    }
}

// ---- GELU -------------------------------------------------------------------------------------------

TEST_CASE("gelu forward matches the double reference") {
  std::mt19937 rng(11);
  Vec x = uniform(rng, 101, -5.0f, 5.0f);
  x[0] = 12.0f;  // saturated tails
  x[1] = -12.0f;
  Vec y(x.size());
  k::gelu_forward(y.data(), x.data(), x.size());
  check_close(y, ref_gelu(to_d(x)), kFwdRtol, 1e-6, "gelu out");
}

TEST_CASE("gelu backward matches finite differences and accumulates") {
  std::mt19937 rng(12);
  Vec x = uniform(rng, 101, -5.0f, 5.0f);
  x[0] = 12.0f;
  x[1] = -12.0f;
  const Vec dout = normal(rng, x.size());
  const auto g = backward_grads(
      {x.size()}, [&](std::vector<Vec>& d) { k::gelu_backward(d[0].data(), x.data(), dout.data(), x.size()); }, rng);
  const DVec dd = to_d(dout);
  check_close(g[0], fd_gradient([&](const DVec& v) { return dot(dd, ref_gelu(v)); }, to_d(x)), kGradRtol, kGradAtol,
              "gelu dinp");
}

// The analytic GELU derivative in double (tanh approximation), for the per-path checks.
DVec ref_gelu_grad(const DVec& x) {
  DVec g(x.size());
  const double k = std::sqrt(2 / std::acos(-1.0));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = k * (x[i] + 0.044715 * x[i] * x[i] * x[i]), th = std::tanh(u);
    g[i] = 0.5 * (1 + th) + 0.5 * x[i] * (1 - th * th) * k * (1 + 3 * 0.044715 * x[i] * x[i]);
  }
  return g;
}

TEST_CASE("gelu on every SIMD path: the double reference to 2e-6 relative + 1e-7, and the same bits") {
  // 1000 + 7 elements (a vector tail on every path), offset by one element (unaligned), over the
  // range where GELU bends and both saturated tails.
  std::mt19937 rng(31);
  Vec x = uniform(rng, 1008, -9.0f, 9.0f);
  x[1] = 0.0f, x[2] = -30.0f, x[3] = 30.0f, x[4] = 1e-20f, x[5] = -1e-20f;
  const std::size_t n = x.size() - 1;
  const float* in = x.data() + 1;
  const DVec xd(in, in + n), dout_d = DVec(n, 1.0), want_y = ref_gelu(xd), want_g = ref_gelu_grad(xd);
  const Vec dout(n, 1.0f);
  std::vector<Vec> outs, grads;
  for (SimdPath path : available_simd_paths()) {
    INFO("path " << simd_path_name(path));
    Vec y(n, 7.0f), g(n, 0.0f);
    k::simd::gelu_forward(path, y.data(), in, n);
    k::simd::gelu_backward(path, g.data(), in, dout.data(), n);
    check_close(y, want_y, 2e-6, 1e-7, "gelu out");
    check_close(g, want_g, 2e-6, 1e-7, "gelu grad");
    outs.push_back(y);
    grads.push_back(g);
    // bf16 storage: the float result of the bf16 input, rounded once.
    std::vector<bf16> xb = to_T<bf16>(Vec(in, in + n)), yb(n), gb = to_T<bf16>(Vec(n, 0.5f)), db = to_T<bf16>(dout);
    k::simd::gelu_forward(path, yb.data(), xb.data(), n);
    k::simd::gelu_backward(path, gb.data(), xb.data(), db.data(), n);
    Vec xr(n), yr(n), gr(n, 0.5f);
    for (std::size_t i = 0; i < n; ++i) xr[i] = to_float(xb[i]);
    k::simd::gelu_forward(path, yr.data(), xr.data(), n);
    k::simd::gelu_backward(path, gr.data(), xr.data(), dout.data(), n);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < n; ++i)
      mismatches += (yb[i].bits != from_float<bf16>(yr[i]).bits) + (gb[i].bits != from_float<bf16>(gr[i]).bits);
    CHECK(mismatches == 0);
  }
  for (std::size_t p = 1; p < outs.size(); ++p) {
    INFO("path " << simd_path_name(available_simd_paths()[p]) << " against scalar");
    CHECK(std::memcmp(outs[p].data(), outs[0].data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(grads[p].data(), grads[0].data(), n * sizeof(float)) == 0);
  }
  // Saturation: gelu(30) = 30, gelu(-30) = -0 (or a denormal), gelu'(±30) = 1, 0.
  CHECK(outs[0][2] == 30.0f);
  CHECK(std::abs(outs[0][1]) < 1e-30f);
  CHECK(grads[0][2] == 1.0f);
  CHECK(std::abs(grads[0][1]) < 1e-30f);
}

// ---- the row kernels on every SIMD path ------------------------------------------------------------
// Rows of 773 (and 1001 of 1040) elements: a vector tail on every path; inputs offset by one element
// (unaligned). Each path against double references, then every path bit for bit against scalar, and
// bf16 storage equal to the float kernel on the same values, rounded once.

// Runs `kernel(path, outputs...)` on every path and checks that each path's outputs are bitwise those
// of the scalar path; returns the scalar path's outputs.
std::vector<Vec> same_bits_on_every_path(const std::vector<Vec>& initial,
                                         const std::function<void(SimdPath, std::vector<Vec>&)>& kernel) {
  std::vector<Vec> first;
  for (SimdPath path : available_simd_paths()) {
    INFO("path " << simd_path_name(path));
    std::vector<Vec> outs = initial;
    kernel(path, outs);
    if (first.empty()) {
      first = outs;
      continue;
    }
    for (std::size_t j = 0; j < outs.size(); ++j) {
      INFO("output " << j << " against the scalar path");
      CHECK(std::memcmp(outs[j].data(), first[j].data(), outs[j].size() * sizeof(float)) == 0);
    }
  }
  return first;
}

// bf16 copies of float vectors and back, for the bf16 storage checks.
std::vector<bf16> bf(const Vec& v) { return to_T<bf16>(v); }

TEST_CASE("layernorm on every SIMD path: double reference and finite differences, the same bits") {
  constexpr int rows = 6, cols = 773;
  std::mt19937 rng(41);
  const Vec inp_buf = uniform(rng, rows * cols + 1, -3.0f, 5.0f), w = normal(rng, cols), b = normal(rng, cols),
            dout = normal(rng, rows * cols);
  const Vec inp(inp_buf.begin() + 1, inp_buf.end());
  const DVec di = to_d(inp), dw = to_d(w), db = to_d(b), dd = to_d(dout);
  DVec rmean(rows), rrstd(rows);
  const DVec want = ref_layernorm(di, dw, &db, rows, cols, &rmean, &rrstd);
  const auto fwd = same_bits_on_every_path({Vec(rows * cols, 7.0f), Vec(rows), Vec(rows)}, [&](SimdPath p, auto& o) {
    k::simd::layernorm_forward(p, o[0].data(), o[1].data(), o[2].data(), inp_buf.data() + 1, w.data(), b.data(), rows,
                               cols);
    check_close(o[0], want, kFwdRtol, kFwdAtol, "ln out");
    check_close(o[1], rmean, kFwdRtol, kFwdAtol, "ln mean");
    check_close(o[2], rrstd, kFwdRtol, kFwdAtol, "ln rstd");
  });
  const Vec &mean = fwd[1], &rstd = fwd[2];
  const DVec g_inp = fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(x, dw, &db, rows, cols)); }, di);
  const DVec g_w = fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(di, x, &db, rows, cols)); }, dw);
  const DVec g_b = fd_gradient([&](const DVec& x) { return dot(dd, ref_layernorm(di, dw, &x, rows, cols)); }, db);
  const auto bwd = same_bits_on_every_path({Vec(rows * cols), Vec(cols), Vec(cols)}, [&](SimdPath p, auto& g) {
    k::simd::layernorm_backward(p, g[0].data(), g[1].data(), g[2].data(), dout.data(), inp.data(), w.data(),
                                mean.data(), rstd.data(), rows, cols);
    check_close(g[0], g_inp, kGradRtol, kGradAtol, "ln dinp");
    check_close(g[1], g_w, kGradRtol, kGradAtol, "ln dweight");
    check_close(g[2], g_b, kGradRtol, kGradAtol, "ln dbias");
  });
  SECTION("bf16 storage: the float kernel on the same values, rounded once") {
    const Vec ir = round_bf16(inp), wr = round_bf16(w), br = round_bf16(b), gr = round_bf16(dout);
    for (SimdPath p : available_simd_paths()) {
      INFO("path " << simd_path_name(p));
      Vec of(rows * cols), mf(rows), rf(rows), dif(rows * cols, 0.25f), dwf(cols, 0.5f), dbf(cols, -0.5f);
      k::simd::layernorm_forward(p, of.data(), mf.data(), rf.data(), ir.data(), wr.data(), br.data(), rows, cols);
      k::simd::layernorm_backward(p, dif.data(), dwf.data(), dbf.data(), gr.data(), ir.data(), wr.data(), mf.data(),
                                  rf.data(), rows, cols);
      std::vector<bf16> ob(rows * cols), dib = bf(Vec(rows * cols, 0.25f)), dwb = bf(Vec(cols, 0.5f)),
                                         dbb = bf(Vec(cols, -0.5f));
      Vec mb(rows), rb(rows);
      const auto ib = bf(inp), wb = bf(w), bb = bf(b), gb = bf(dout);
      k::simd::layernorm_forward(p, ob.data(), mb.data(), rb.data(), ib.data(), wb.data(), bb.data(), rows, cols);
      k::simd::layernorm_backward(p, dib.data(), dwb.data(), dbb.data(), gb.data(), ib.data(), wb.data(), mb.data(),
                                  rb.data(), rows, cols);
      CHECK(std::memcmp(mb.data(), mf.data(), rows * sizeof(float)) == 0);
      CHECK(std::memcmp(rb.data(), rf.data(), rows * sizeof(float)) == 0);
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < ob.size(); ++i)
        mismatches += (ob[i].bits != from_float<bf16>(of[i]).bits) + (dib[i].bits != from_float<bf16>(dif[i]).bits);
      for (int i = 0; i < cols; ++i)
        mismatches += (dwb[i].bits != from_float<bf16>(dwf[i]).bits) + (dbb[i].bits != from_float<bf16>(dbf[i]).bits);
      CHECK(mismatches == 0);
    }
  }
  (void)bwd;
}

TEST_CASE("residual on every SIMD path: exact float sums, the same bits") {
  constexpr std::size_t n = 1003;
  std::mt19937 rng(42);
  const Vec a = normal(rng, n + 1), b = normal(rng, n), dout = normal(rng, n), pre1 = normal(rng, n),
            pre2 = normal(rng, n);
  same_bits_on_every_path({Vec(n), pre1, pre2}, [&](SimdPath p, auto& o) {
    k::simd::residual_forward(p, o[0].data(), a.data() + 1, b.data(), n);
    k::simd::residual_backward(p, o[1].data(), o[2].data(), dout.data(), n);
    std::size_t wrong = 0;  // a float sum is the exact sum rounded once
    for (std::size_t i = 0; i < n; ++i)
      wrong += (o[0][i] != float(double(a[i + 1]) + double(b[i]))) + (o[1][i] != float(double(pre1[i]) + dout[i])) +
               (o[2][i] != float(double(pre2[i]) + dout[i]));
    CHECK(wrong == 0);
  });
}

TEST_CASE("softmax-crossentropy on every SIMD path: double reference, the same bits") {
  constexpr int rows = 4, vocab = 1001, padded = 1040;
  std::mt19937 rng(43);
  Vec logits = normal(rng, rows * padded, 3.0f);
  for (int r = 0; r < rows; ++r)
    for (int i = vocab; i < padded; ++i) logits[r * padded + i] = 60.0f;  // padding ignored whatever it holds
  logits[5] = 80.0f;                                                      // a large logit
  logits[padded + 7] = -200.0f;                                           // an exponent below exp's clamp
  const std::vector<int> targets = {5, 7, 0, vocab - 1};
  DVec want_loss(rows), want_probs(std::size_t(rows) * padded, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* l = logits.data() + r * padded;
    const double mx = *std::max_element(l, l + vocab);
    double z = 0;
    for (int i = 0; i < vocab; ++i) z += std::exp(double(l[i]) - mx);
    for (int i = 0; i < vocab; ++i) want_probs[r * padded + i] = std::exp(double(l[i]) - mx) / z;
    want_loss[r] = std::log(z) - (double(l[targets[r]]) - mx);
  }
  const float dloss = 1.0f / 3.0f;
  const Vec pre = normal(rng, rows * padded);
  same_bits_on_every_path({Vec(rows), Vec(rows * padded, -1.0f), pre}, [&](SimdPath p, auto& o) {
    k::simd::softmax_crossentropy_forward(p, o[0].data(), o[1].data(), logits.data(), targets.data(), rows, vocab,
                                          padded);
    // exp to 2e-7 relative, summed in float over 1001 terms: 1e-5 relative.
    check_close(o[0], want_loss, 1e-5, 1e-6, "losses");
    check_close(o[1], want_probs, 1e-5, 1e-9, "probs");
    k::simd::softmax_crossentropy_backward(p, o[2].data(), o[1].data(), targets.data(), rows, vocab, padded, dloss);
    DVec want_d(pre.size());
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < padded; ++i) {
        const std::size_t at = std::size_t(r) * padded + i;
        want_d[at] = i < vocab ? double(pre[at]) + (double(o[1][at]) - (i == targets[r])) * dloss : double(pre[at]);
      }
    check_close(o[2], want_d, 1e-6, 1e-7, "dlogits");
    std::size_t padding_touched = 0;
    for (int r = 0; r < rows; ++r)
      for (int i = vocab; i < padded; ++i) padding_touched += o[2][r * padded + i] != pre[r * padded + i];
    CHECK(padding_touched == 0);
  });
  SECTION("bf16 logits and gradients: the float kernel on the same values, rounded once") {
    const Vec lr = round_bf16(logits), prer = round_bf16(pre);
    const auto lb = bf(logits);
    for (SimdPath p : available_simd_paths()) {
      INFO("path " << simd_path_name(p));
      Vec lf(rows), pf(rows * padded), lbl(rows), pb(rows * padded), df = prer;
      auto db = bf(pre);
      k::simd::softmax_crossentropy_forward(p, lf.data(), pf.data(), lr.data(), targets.data(), rows, vocab, padded);
      k::simd::softmax_crossentropy_forward(p, lbl.data(), pb.data(), lb.data(), targets.data(), rows, vocab, padded);
      CHECK(std::memcmp(lf.data(), lbl.data(), lf.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(pf.data(), pb.data(), pf.size() * sizeof(float)) == 0);
      k::simd::softmax_crossentropy_backward(p, df.data(), pf.data(), targets.data(), rows, vocab, padded, dloss);
      k::simd::softmax_crossentropy_backward(p, db.data(), pb.data(), targets.data(), rows, vocab, padded, dloss);
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < db.size(); ++i) mismatches += db[i].bits != from_float<bf16>(df[i]).bits;
      CHECK(mismatches == 0);
    }
  }
}

// ---- masked targets (tasks/loss_mask.hpp) -----------------------------------------------------------
// Rows whose target is kMaskedTarget: loss 0, their dlogits rows untouched; every other row the
// bits of the same kernel with that row's target valid, and the double reference; the gradient
// with dloss = 1/counted is that of the mean over the counted rows.
TEST_CASE("softmax-crossentropy with masked targets on every SIMD path: double reference, unmasked rows unchanged") {
  constexpr int rows = 37, vocab = 53, padded = 64;
  std::mt19937 rng(47);
  Vec logits = normal(rng, rows * padded, 3.0f);
  for (int r = 0; r < rows; ++r)
    for (int i = vocab; i < padded; ++i) logits[r * padded + i] = 60.0f;  // padding ignored whatever it holds
  const std::vector<int> valid = random_ints(rng, rows, vocab);
  std::vector<int> masked = valid;
  std::vector<bool> is_masked(rows, false);
  for (int r = 0; r < rows; ++r) is_masked[r] = r == 0 || r == rows - 1 || r % 3 == 1;
  int counted = 0;
  for (int r = 0; r < rows; ++r) {
    if (is_masked[r]) masked[r] = kMaskedTarget;
    counted += is_masked[r] ? 0 : 1;
  }
  REQUIRE(counted > 0);
  REQUIRE(counted < rows);
  // The double reference: the loss of each counted row, the gradient of their mean.
  DVec want_loss(rows, 0.0), probs_d(std::size_t(rows) * padded, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* l = logits.data() + r * padded;
    const double mx = *std::max_element(l, l + vocab);
    double z = 0;
    for (int i = 0; i < vocab; ++i) z += std::exp(double(l[i]) - mx);
    for (int i = 0; i < vocab; ++i) probs_d[std::size_t(r) * padded + i] = std::exp(double(l[i]) - mx) / z;
    if (!is_masked[r]) want_loss[r] = std::log(z) - (double(l[valid[r]]) - mx);
  }
  const float dloss = 1.0f / float(counted);
  const Vec pre = normal(rng, rows * padded);
  DVec want_d(pre.size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < padded; ++i) {
      const std::size_t at = std::size_t(r) * padded + i;
      const bool learned = i < vocab && !is_masked[r];
      want_d[at] = double(pre[at]) + (learned ? (probs_d[at] - (i == valid[r])) / counted : 0.0);
    }
  for (SimdPath p : available_simd_paths()) {
    INFO("path " << simd_path_name(p));
    Vec lm(rows), pm(rows * padded), lv(rows), pv(rows * padded);
    k::simd::softmax_crossentropy_forward(p, lm.data(), pm.data(), logits.data(), masked.data(), rows, vocab, padded);
    k::simd::softmax_crossentropy_forward(p, lv.data(), pv.data(), logits.data(), valid.data(), rows, vocab, padded);
    std::size_t masked_nonzero = 0, counted_changed = 0;
    for (int r = 0; r < rows; ++r) {
      if (is_masked[r])
        masked_nonzero += lm[r] != 0.0f || std::signbit(lm[r]);
      else
        counted_changed += std::memcmp(&lm[r], &lv[r], sizeof(float)) != 0;
    }
    CHECK(masked_nonzero == 0);
    CHECK(counted_changed == 0);
    CHECK(same_bits(pm, pv));  // the probabilities do not depend on the targets
    check_close(lm, want_loss, 1e-5, 1e-6, "masked losses");
    double sum = 0;
    for (float x : lm) sum += x;
    double want_mean = 0;
    for (double x : want_loss) want_mean += x;
    CHECK(std::abs(sum / counted - want_mean / counted) <= 1e-6 * (want_mean / counted));

    Vec dm = pre, dv = pre;
    k::simd::softmax_crossentropy_backward(p, dm.data(), pm.data(), masked.data(), rows, vocab, padded, dloss);
    k::simd::softmax_crossentropy_backward(p, dv.data(), pv.data(), valid.data(), rows, vocab, padded, dloss);
    std::size_t masked_touched = 0, counted_differ = 0;
    for (int r = 0; r < rows; ++r) {
      const std::size_t at = std::size_t(r) * padded, n = padded * sizeof(float);
      if (is_masked[r])
        masked_touched += std::memcmp(dm.data() + at, pre.data() + at, n) != 0;
      else
        counted_differ += std::memcmp(dm.data() + at, dv.data() + at, n) != 0;
    }
    CHECK(masked_touched == 0);
    CHECK(counted_differ == 0);
    check_close(dm, want_d, 1e-6, 1e-7, "masked dlogits");
  }
  SECTION("the dispatching kernels: finite differences of the mean over the counted rows") {
    Vec losses(rows), probs(rows * padded);
    k::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), masked.data(), rows, vocab, padded);
    Vec dl(rows * padded, 0.0f);
    k::softmax_crossentropy_backward(dl.data(), probs.data(), masked.data(), rows, vocab, padded, dloss);
    auto masked_mean = [&](const DVec& x) {
      double total = 0;
      for (int r = 0; r < rows; ++r) {
        if (is_masked[r]) continue;
        const double* l = x.data() + r * padded;
        const double mx = *std::max_element(l, l + vocab);
        double z = 0;
        for (int i = 0; i < vocab; ++i) z += std::exp(l[i] - mx);
        total += std::log(z) - (l[valid[r]] - mx);
      }
      return total / counted;
    };
    check_close(dl, fd_gradient(masked_mean, to_d(logits)), kGradRtol, kGradAtol, "dlogits of the masked mean");
  }
  SECTION("bf16 gradients: masked rows untouched, the others the float kernel's rounded once") {
    const Vec prer = round_bf16(pre);
    for (SimdPath p : available_simd_paths()) {
      INFO("path " << simd_path_name(p));
      Vec lf(rows), pf(rows * padded), df = prer;
      k::simd::softmax_crossentropy_forward(p, lf.data(), pf.data(), round_bf16(logits).data(), masked.data(), rows,
                                            vocab, padded);
      auto db = bf(pre);
      const auto db0 = db;
      k::simd::softmax_crossentropy_backward(p, df.data(), pf.data(), masked.data(), rows, vocab, padded, dloss);
      k::simd::softmax_crossentropy_backward(p, db.data(), pf.data(), masked.data(), rows, vocab, padded, dloss);
      std::size_t mismatches = 0, masked_touched = 0;
      for (std::size_t i = 0; i < db.size(); ++i) {
        mismatches += db[i].bits != from_float<bf16>(df[i]).bits;
        if (is_masked[i / padded]) masked_touched += db[i].bits != db0[i].bits;
      }
      CHECK(mismatches == 0);
      CHECK(masked_touched == 0);
    }
  }
}

// ---- residual ---------------------------------------------------------------------------------------

TEST_CASE("residual forward and backward") {
  std::mt19937 rng(13);
  const std::size_t n = 37;
  const Vec a = normal(rng, n), b = normal(rng, n), dout = normal(rng, n);
  Vec out(n);
  k::residual_forward(out.data(), a.data(), b.data(), n);
  DVec want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = double(a[i]) + double(b[i]);
  check_close(out, want, kFwdRtol, 1e-7, "residual out");

  const auto g = backward_grads(
      {n, n}, [&](std::vector<Vec>& d) { k::residual_backward(d[0].data(), d[1].data(), dout.data(), n); }, rng);
  const DVec dd = to_d(dout);
  auto ref = [](const DVec& p, const DVec& q) {
    DVec r(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) r[i] = p[i] + q[i];
    return r;
  };
  check_close(g[0], fd_gradient([&](const DVec& x) { return dot(dd, ref(x, to_d(b))); }, to_d(a)), kGradRtol, kGradAtol,
              "residual dinp1");
  check_close(g[1], fd_gradient([&](const DVec& x) { return dot(dd, ref(to_d(a), x)); }, to_d(b)), kGradRtol, kGradAtol,
              "residual dinp2");
}

// ---- softmax + cross-entropy ------------------------------------------------------------------------

TEST_CASE("softmax-crossentropy forward matches -log softmax and zeroes the padding") {
  std::mt19937 rng(14);
  Vec logits = normal(rng, N * Vp, 3.0f);
  for (int n = 0; n < N; ++n)
    for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 50.0f;  // padding must be ignored whatever it holds
  logits[0] = 80.0f;                                          // a large logit: the max subtraction keeps exp finite
  const auto targets = random_ints(rng, N, V);
  Vec losses(N), probs(N * Vp, -1.0f);
  k::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  DVec rprobs(probs.size());
  check_close(losses, ref_losses(to_d(logits), targets, &rprobs), kFwdRtol, 1e-6, "losses");
  check_close(probs, rprobs, kFwdRtol, 1e-7, "probs");
  for (int n = 0; n < N; ++n)
    for (int i = V; i < Vp; ++i) CHECK(probs[n * Vp + i] == 0.0f);
}

TEST_CASE("softmax-crossentropy backward matches finite differences of the mean loss") {
  std::mt19937 rng(15);
  const Vec logits = normal(rng, N * Vp, 2.0f);
  const auto targets = random_ints(rng, N, V);
  Vec losses(N), probs(N * Vp);
  k::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  const auto g = backward_grads(
      {logits.size()},
      [&](std::vector<Vec>& d) {
        k::softmax_crossentropy_backward(d[0].data(), probs.data(), targets.data(), N, V, Vp, 1.0f / float(N));
      },
      rng);
  check_close(g[0], fd_gradient([&](const DVec& x) { return mean_loss(x, targets); }, to_d(logits)), kGradRtol,
              kGradAtol, "dlogits");
  // Padding columns get no gradient: pre-filled values stay bit-identical.
  Vec dl = uniform(rng, logits.size());
  const Vec before = dl;
  k::softmax_crossentropy_backward(dl.data(), probs.data(), targets.data(), N, V, Vp, 1.0f / float(N));
  for (int n = 0; n < N; ++n)
    for (int i = V; i < Vp; ++i) CHECK(dl[n * Vp + i] == before[n * Vp + i]);
}

// ---- bf16 instantiations against float ------------------------------------------------------------
// The bf16 kernel gets bf16 inputs, the float kernel the same values as floats: results differ by the
// bf16 rounding of the stored outputs only. Float-typed outputs (mean/rstd, att, probs, losses) match
// to float rounding.

TEST_CASE("bf16 forwards match the float kernels") {
  std::mt19937 rng(16);
  auto cmp = [](const Vec& got, const Vec& want, const char* what, double rtol = kBf16Rtol) {
    check_close(got, to_d(want), rtol, kBf16Atol, what);
  };
  SECTION("encoder") {
    const auto tokens = random_ints(rng, N, V);
    const Vec wte = round_bf16(normal(rng, V * C)), wpe = round_bf16(normal(rng, Tn * C));
    Vec of(N * C);
    std::vector<bf16> ob(N * C);
    k::encoder_forward(of.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
    k::encoder_forward(ob.data(), tokens.data(), to_T<bf16>(wte).data(), to_T<bf16>(wpe).data(), B, Tn, C);
    cmp(to_f(ob), of, "encoder");
  }
  SECTION("layernorm") {
    const Vec inp = round_bf16(uniform(rng, N * C, -3.0f, 5.0f)), w = round_bf16(normal(rng, C)),
              b = round_bf16(normal(rng, C));
    Vec of(N * C), mf(N), rf(N), mb(N), rb(N);
    std::vector<bf16> ob(N * C);
    k::layernorm_forward(of.data(), mf.data(), rf.data(), inp.data(), w.data(), b.data(), N, C);
    k::layernorm_forward(ob.data(), mb.data(), rb.data(), to_T<bf16>(inp).data(), to_T<bf16>(w).data(),
                         to_T<bf16>(b).data(), N, C);
    cmp(to_f(ob), of, "layernorm out");
    cmp(mb, mf, "layernorm mean", 1e-6);
    cmp(rb, rf, "layernorm rstd", 1e-6);
  }
  SECTION("matmul") {
    const Vec inp = round_bf16(normal(rng, N * Cm)), w = round_bf16(normal(rng, OC * Cm)),
              b = round_bf16(normal(rng, OC));
    Vec of(N * OC);
    std::vector<bf16> ob(N * OC);
    k::matmul_forward(of.data(), inp.data(), w.data(), b.data(), N, Cm, OC);
    k::matmul_forward(ob.data(), to_T<bf16>(inp).data(), to_T<bf16>(w).data(), to_T<bf16>(b).data(), N, Cm, OC);
    cmp(to_f(ob), of, "matmul");
    k::matmul_forward(of.data(), inp.data(), w.data(), (const float*)nullptr, N, Cm, OC);
    k::matmul_forward(ob.data(), to_T<bf16>(inp).data(), to_T<bf16>(w).data(), (const bf16*)nullptr, N, Cm, OC);
    cmp(to_f(ob), of, "matmul (no bias)");
  }
  SECTION("attention") {
    for (const AttentionShape& sh : attention_shapes()) {
      INFO("T=" << sh.Tn);
      const Vec inp = round_bf16(normal(rng, sh.rows() * 3 * sh.C()));
      Vec of(sh.rows() * sh.C()), lf(sh.B * sh.stats()), lb(lf.size());
      std::vector<bf16> ob(of.size());
      k::attention_forward(of.data(), lf.data(), inp.data(), sh.B, sh.Tn, sh.C(), sh.NH);
      k::attention_forward(ob.data(), lb.data(), to_T<bf16>(inp).data(), sh.B, sh.Tn, sh.C(), sh.NH);
      cmp(to_f(ob), of, "attention out");
      cmp(lb, lf, "attention log-sum-exp", 1e-6);
      // And against the double reference, to bf16's rounding of the output.
      check_close(to_f(ob), ref_attention(to_d(inp), sh), kBf16Rtol, 1e-2, "bf16 attention out vs double");
    }
  }
  SECTION("gelu and residual") {
    const Vec x = round_bf16(uniform(rng, 101, -5.0f, 5.0f)), y = round_bf16(normal(rng, 101));
    Vec of(x.size());
    std::vector<bf16> ob(x.size());
    k::gelu_forward(of.data(), x.data(), x.size());
    k::gelu_forward(ob.data(), to_T<bf16>(x).data(), x.size());
    cmp(to_f(ob), of, "gelu");
    k::residual_forward(of.data(), x.data(), y.data(), x.size());
    k::residual_forward(ob.data(), to_T<bf16>(x).data(), to_T<bf16>(y).data(), x.size());
    cmp(to_f(ob), of, "residual");
  }
  SECTION("softmax-crossentropy") {
    const Vec logits = round_bf16(normal(rng, N * Vp, 3.0f));
    const auto targets = random_ints(rng, N, V);
    Vec lf(N), pf(N * Vp), lb(N), pb(N * Vp);
    k::softmax_crossentropy_forward(lf.data(), pf.data(), logits.data(), targets.data(), N, V, Vp);
    k::softmax_crossentropy_forward(lb.data(), pb.data(), to_T<bf16>(logits).data(), targets.data(), N, V, Vp);
    cmp(lb, lf, "losses", 1e-6);
    cmp(pb, pf, "probs", 1e-6);
  }
}

TEST_CASE("bf16 backwards match the float kernels and accumulate") {
  std::mt19937 rng(17);
  // Runs `call` once on float buffers and once on bf16 buffers, both pre-filled with the same
  // bf16-representable values, and compares.
  auto both = [&](const std::vector<std::size_t>& sizes, const std::function<void(std::vector<Vec>&)>& call_f,
                  const std::function<void(std::vector<std::vector<bf16>>&)>& call_b, const char* what) {
    std::vector<Vec> f;
    std::vector<std::vector<bf16>> b;
    for (auto n : sizes) {
      f.push_back(round_bf16(uniform(rng, n, -1.0f, 1.0f)));
      b.push_back(to_T<bf16>(f.back()));
    }
    call_f(f);
    call_b(b);
    for (std::size_t j = 0; j < sizes.size(); ++j)
      check_close(to_f(b[j]), to_d(f[j]), kBf16Rtol, kBf16Atol, std::string(what) + " gradient " + std::to_string(j));
  };
  SECTION("encoder") {
    auto tokens = random_ints(rng, N, V);
    tokens[7] = tokens[3] = tokens[1];
    const Vec dout = round_bf16(normal(rng, N * C));
    const auto doutb = to_T<bf16>(dout);
    both(
        {std::size_t(V * C), std::size_t(Tn * C)},
        [&](auto& d) { k::encoder_backward(d[0].data(), d[1].data(), dout.data(), tokens.data(), B, Tn, C); },
        [&](auto& d) { k::encoder_backward(d[0].data(), d[1].data(), doutb.data(), tokens.data(), B, Tn, C); },
        "encoder");
  }
  SECTION("layernorm") {
    const Vec inp = round_bf16(uniform(rng, N * C, -3.0f, 5.0f)), w = round_bf16(normal(rng, C)),
              b = round_bf16(normal(rng, C)), dout = round_bf16(normal(rng, N * C));
    Vec out(N * C), mean(N), rstd(N);
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    const auto inpb = to_T<bf16>(inp), wb = to_T<bf16>(w), doutb = to_T<bf16>(dout);
    both(
        {inp.size(), w.size(), b.size()},
        [&](auto& d) {
          k::layernorm_backward(d[0].data(), d[1].data(), d[2].data(), dout.data(), inp.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
        },
        [&](auto& d) {
          k::layernorm_backward(d[0].data(), d[1].data(), d[2].data(), doutb.data(), inpb.data(), wb.data(),
                                mean.data(), rstd.data(), N, C);
        },
        "layernorm");
  }
  SECTION("matmul") {
    const Vec inp = round_bf16(normal(rng, N * Cm)), w = round_bf16(normal(rng, OC * Cm)),
              dout = round_bf16(normal(rng, N * OC));
    const auto inpb = to_T<bf16>(inp), wb = to_T<bf16>(w), doutb = to_T<bf16>(dout);
    both(
        {inp.size(), w.size(), std::size_t(OC)},
        [&](auto& d) {
          k::matmul_backward(d[0].data(), d[1].data(), d[2].data(), dout.data(), inp.data(), w.data(), N, Cm, OC);
        },
        [&](auto& d) {
          k::matmul_backward(d[0].data(), d[1].data(), d[2].data(), doutb.data(), inpb.data(), wb.data(), N, Cm, OC);
        },
        "matmul");
  }
  SECTION("attention") {
    for (const AttentionShape& sh : attention_shapes()) {
      INFO("T=" << sh.Tn);
      const Vec inp = round_bf16(normal(rng, sh.rows() * 3 * sh.C())), dout = round_bf16(normal(rng, sh.rows() * sh.C()));
      Vec out(sh.rows() * sh.C()), lse(sh.B * sh.stats());
      k::attention_forward(out.data(), lse.data(), inp.data(), sh.B, sh.Tn, sh.C(), sh.NH);
      const auto inpb = to_T<bf16>(inp), doutb = to_T<bf16>(dout);
      both(
          {inp.size()},
          [&](auto& d) {
            k::attention_backward(d[0].data(), dout.data(), inp.data(), lse.data(), sh.B, sh.Tn, sh.C(), sh.NH);
          },
          [&](auto& d) {
            k::attention_backward(d[0].data(), doutb.data(), inpb.data(), lse.data(), sh.B, sh.Tn, sh.C(), sh.NH);
          },
          "attention");
    }
  }
  SECTION("gelu, residual, softmax-crossentropy") {
    const std::size_t n = 101;
    const Vec x = round_bf16(uniform(rng, n, -5.0f, 5.0f)), dout = round_bf16(normal(rng, n));
    const auto xb = to_T<bf16>(x), doutb = to_T<bf16>(dout);
    both(
        {n}, [&](auto& d) { k::gelu_backward(d[0].data(), x.data(), dout.data(), n); },
        [&](auto& d) { k::gelu_backward(d[0].data(), xb.data(), doutb.data(), n); }, "gelu");
    both(
        {n, n}, [&](auto& d) { k::residual_backward(d[0].data(), d[1].data(), dout.data(), n); },
        [&](auto& d) { k::residual_backward(d[0].data(), d[1].data(), doutb.data(), n); }, "residual");
    const Vec logits = normal(rng, N * Vp, 2.0f);
    const auto targets = random_ints(rng, N, V);
    Vec losses(N), probs(N * Vp);
    k::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
    both(
        {logits.size()},
        [&](auto& d) {
          k::softmax_crossentropy_backward(d[0].data(), probs.data(), targets.data(), N, V, Vp, 1.0f / float(N));
        },
        [&](auto& d) {
          k::softmax_crossentropy_backward(d[0].data(), probs.data(), targets.data(), N, V, Vp, 1.0f / float(N));
        },
        "softmax-crossentropy");
  }
}
