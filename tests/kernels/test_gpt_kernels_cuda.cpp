// CUDA-vs-CPU tests of the GPT-2 kernels (tasks/nn_kernels.hpp): every CUDA kernel, forward and
// backward, float and bf16 storage, on seeded random inputs with shapes that are not multiples of
// 8, compared with the CPU kernel on the same inputs.
//
// Tolerance: |cuda - cpu| <= tol · (|cpu| + mean |cpu|) per element, tol = 1e-4 for float
// results (fp32 storage, and the float outputs of the bf16 kernels: mean/rstd, attention lse, probs,
// losses), 2e-2 for bf16 results. Backward kernels start from the same random non-zero gradients on
// both sides, which checks that they accumulate.
//
// The device AdamW is compared bit for bit instead: it is written to give the CPU AdamW's bits.
//
// Needs an NVIDIA GPU: without a usable one every test FAILS with the reason (the CTest entry only
// exists with -DSTARZERO_GPU_TESTS=ON).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "optimizers/adamw.hpp"
#include "tasks/nn_kernels.hpp"

#include "cuda_test_support.hpp"

namespace {

std::vector<int> random_tokens(size_t n, int V, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = dist(rng);
  if (n > 5) v[5] = v[0];  // at least one repeated token
  return v;
}

// A skewed distribution: `share` of the positions hold token `hot`, the rest are uniform over V.
std::vector<int> skewed_tokens(size_t n, int V, int hot, double share, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<int> v(n);
  for (auto& x : v) x = coin(rng) < share ? hot : dist(rng);
  return v;
}

// Σ_rows dout[r, c] in double, added to start[c]: the bias gradient's reference.
template <class T>
std::vector<double> column_sums_double(const std::vector<T>& start, const std::vector<T>& dout, int N, int OC) {
  std::vector<double> want(static_cast<size_t>(OC));
  for (int c = 0; c < OC; ++c) want[size_t(c)] = to_float(start[size_t(c)]);
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < OC; ++c) want[size_t(c)] += to_float(dout[size_t(r) * OC + c]);
  return want;
}

// |got - want| <= tol · (|want| + mean |want|) for every element, want in double.
template <class T>
void check_against_double(const std::string& what, const std::vector<T>& got, const std::vector<double>& want,
                          double tol) {
  REQUIRE(got.size() == want.size());
  double mean_abs = 0.0;
  for (const double w : want) mean_abs += std::fabs(w);
  mean_abs /= want.empty() ? 1.0 : double(want.size());
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(to_float(got[i])) - want[i]) / (std::fabs(want[i]) + mean_abs + 1e-30);
    if (!(err <= tol)) ++bad;  // NaN counts as bad
    worst = std::max(worst, err);
  }
  INFO(what << ": " << got.size() << " elements, worst relative error " << worst << ", " << bad << " over " << tol);
  CHECK(bad == 0);
}

// The shapes of the brief: not multiples of 8.
constexpr int kB = 2, kT = 37, kC = 48, kNH = 4, kOC = 72, kV = 101, kVp = 128;
constexpr int kN = kB * kT;

}  // namespace

TEMPLATE_TEST_CASE("cuda encoder_forward / encoder_backward match the CPU", "[cuda][encoder]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int B, Tn, C, V;
    double hot_share;  // > 0: that share of the positions holds one token
  };
  // Uniform tokens; tokens repeated heavily over many chunks; one token in ~90 % of 2103 positions
  // (a segment over dozens of chunks, beside short ones); one token everywhere; fewer positions than
  // one chunk; channels beyond one block of threads.
  for (const Shape s : {Shape{kB, kT, kC, kV, 0.0}, Shape{2, 300, 40, 7, 0.0}, Shape{3, 701, 45, 50, 0.9},
                        Shape{2, 333, 19, 11, 1.0}, Shape{1, 13, 7, 5, 0.0}, Shape{2, 97, 301, 23, 0.7}}) {
    INFO(type_name<T>() << " B=" << s.B << " T=" << s.Tn << " C=" << s.C << " V=" << s.V << " hot " << s.hot_share);
    std::mt19937 rng(1001);
    const size_t N = size_t(s.B) * s.Tn;
    const auto tokens = s.hot_share > 0 ? skewed_tokens(N, s.V, s.V / 2, s.hot_share, rng) : random_tokens(N, s.V, rng);
    const auto wte = random_array<T>(size_t(s.V) * s.C, rng);
    const auto wpe = random_array<T>(size_t(s.Tn) * s.C, rng);
    DeviceArray<int> d_tokens(tokens);
    DeviceArray<T> d_wte(wte), d_wpe(wpe);

    Mirrored<T> out(N * s.C);
    cpu::encoder_forward(out.host(), tokens.data(), wte.data(), wpe.data(), s.B, s.Tn, s.C);
    gpu::encoder_forward(out.device(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.Tn, s.C, g.stream);
    out.check("encoder_forward out", g, kTol<T>);

    Mirrored<T> dout(N * s.C, rng), dwte(wte.size(), rng), dwpe(wpe.size(), rng);
    cpu::encoder_backward(dwte.host(), dwpe.host(), dout.host(), tokens.data(), s.B, s.Tn, s.C);
    gpu::encoder_backward(dwte.device(), dwpe.device(), dout.device(), d_tokens.get(), s.B, s.Tn, s.C, g.stream);
    dwte.check("encoder_backward dwte", g, kTol<T>);
    dwpe.check("encoder_backward dwpe", g, kTol<T>);
  }
}

TEMPLATE_TEST_CASE("cuda layernorm_forward / layernorm_backward match the CPU", "[cuda][layernorm]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  std::mt19937 rng(2002);
  const auto inp = random_array<T>(size_t(kN) * kC, rng, -2.0f, 3.0f);
  const auto weight = random_array<T>(kC, rng, 0.5f, 1.5f);
  const auto bias = random_array<T>(kC, rng);
  DeviceArray<T> d_inp(inp), d_weight(weight), d_bias(bias);

  Mirrored<T> out(inp.size());
  Mirrored<float> mean(kN), rstd(kN);
  cpu::layernorm_forward(out.host(), mean.host(), rstd.host(), inp.data(), weight.data(), bias.data(), kN, kC);
  gpu::layernorm_forward(out.device(), mean.device(), rstd.device(), d_inp.get(), d_weight.get(), d_bias.get(), kN, kC,
                         g.stream);
  out.check("layernorm_forward out", g, kTol<T>);
  mean.check("layernorm_forward mean", g, kTolF32);
  rstd.check("layernorm_forward rstd", g, kTolF32);

  // Backward from the CPU's mean/rstd, into random non-zero gradients.
  const auto dout = random_array<T>(inp.size(), rng);
  Mirrored<T> dinp(inp.size(), rng), dweight(kC, rng), dbias(kC, rng);
  DeviceArray<T> d_dout(dout);
  DeviceArray<float> d_mean_cpu(mean.cpu_values()), d_rstd_cpu(rstd.cpu_values());
  cpu::layernorm_backward(dinp.host(), dweight.host(), dbias.host(), dout.data(), inp.data(), weight.data(),
                          mean.host(), rstd.host(), kN, kC);
  gpu::layernorm_backward(dinp.device(), dweight.device(), dbias.device(), d_dout.get(), d_inp.get(), d_weight.get(),
                          d_mean_cpu.get(), d_rstd_cpu.get(), kN, kC, g.stream);
  dinp.check("layernorm_backward dinp", g, kTol<T>);
  dweight.check("layernorm_backward dweight", g, kTol<T>);
  dbias.check("layernorm_backward dbias", g, kTol<T>);
}

TEMPLATE_TEST_CASE("cuda matmul_forward / matmul_backward match the CPU", "[cuda][matmul]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int N, C, OC;
  };
  // OC = 72: the 16-byte bias broadcast; OC = 37: the element-wise one; N = 1531: many row chunks
  // in the bias gradient.
  for (const Shape shape : {Shape{kN, kC, kOC}, Shape{kN, kC, 37}, Shape{1531, 29, 72}, Shape{1531, 45, 37}}) {
    for (const bool with_bias : {true, false}) {
      const int N = shape.N, C = shape.C, OC = shape.OC;
      INFO(type_name<T>() << " N=" << N << " C=" << C << " OC=" << OC << (with_bias ? " with" : " without") << " bias");
      std::mt19937 rng(3003);
      const auto inp = random_array<T>(size_t(N) * C, rng);
      const auto weight = random_array<T>(size_t(OC) * C, rng);
      const auto bias = random_array<T>(OC, rng);
      DeviceArray<T> d_inp(inp), d_weight(weight), d_bias(bias);
      const T* bias_cpu = with_bias ? bias.data() : nullptr;
      const T* bias_gpu = with_bias ? d_bias.get() : nullptr;

      Mirrored<T> out(size_t(N) * OC);
      cpu::matmul_forward(out.host(), inp.data(), weight.data(), bias_cpu, N, C, OC);
      gpu::matmul_forward(out.device(), d_inp.get(), d_weight.get(), bias_gpu, N, C, OC, g.cublas, g.stream);
      out.check("matmul_forward out", g, kTol<T>);

      const auto dout = random_array<T>(out.size(), rng);
      Mirrored<T> dinp(inp.size(), rng), dweight(weight.size(), rng), dbias(OC, rng);
      DeviceArray<T> d_dout(dout);
      cpu::matmul_backward(dinp.host(), dweight.host(), with_bias ? dbias.host() : nullptr, dout.data(), inp.data(),
                           weight.data(), N, C, OC);
      gpu::matmul_backward(dinp.device(), dweight.device(), with_bias ? dbias.device() : nullptr, d_dout.get(),
                           d_inp.get(), d_weight.get(), N, C, OC, g.cublas, g.stream);
      dinp.check("matmul_backward dinp", g, kTol<T>);
      dweight.check("matmul_backward dweight", g, kTol<T>);
      dbias.check("matmul_backward dbias", g, kTol<T>);  // untouched without bias
    }
  }
}

// The bias gradient alone (the nn_bias_backward codelet: matmul_backward with only dbias, C = 0)
// against a double-precision reference, accumulated into non-zero values, on shapes from one row
// to many row chunks and one to many column tiles.
TEMPLATE_TEST_CASE("cuda bias gradient matches a double reference", "[cuda][matmul][bias]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int N, OC;
  };
  for (const Shape s : {Shape{1, 5}, Shape{37, 33}, Shape{2047, 72}, Shape{4099, 771}, Shape{301, 2305}}) {
    INFO(type_name<T>() << " N=" << s.N << " OC=" << s.OC);
    std::mt19937 rng(3113);
    const auto dout = random_array<T>(size_t(s.N) * s.OC, rng);
    const auto start = random_array<T>(size_t(s.OC), rng, -4.0f, 4.0f);
    DeviceArray<T> d_dout(dout), dbias(start);
    gpu::matmul_backward<T>(nullptr, nullptr, dbias.get(), d_dout.get(), nullptr, nullptr, s.N, 0, s.OC, g.cublas,
                            g.stream);
    // float sums of up to 4099 terms, then one rounding to T
    check_against_double("bias gradient", dbias.download(g), column_sums_double(start, dout, s.N, s.OC), kTol<T>);
    // and the CPU twin on the same inputs
    std::vector<T> cpu_dbias = start;
    cpu::matmul_backward<T>(nullptr, nullptr, cpu_dbias.data(), dout.data(), nullptr, nullptr, s.N, 0, s.OC);
    check_close("bias gradient vs CPU", dbias.download(g), cpu_dbias, kTol<T>);
  }
}

// The device sum of squares (optimizers/adamw.cu, the sum_of_squares codelet) against a double
// reference: it overwrites the sum, over lengths from 0 to several times its largest grid.
TEMPLATE_TEST_CASE("cuda sum_of_squares matches a double reference", "[cuda][sum_of_squares]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  for (const size_t n : {size_t(0), size_t(1), size_t(257), size_t(100'003), size_t(3'000'017)}) {
    INFO(type_name<T>() << " n=" << n);
    std::mt19937 rng(4242);
    const auto x = random_array<T>(n, rng, -3.0f, 3.0f);
    double want = 0.0;
    for (const T& v : x) want += double(to_float(v)) * double(to_float(v));
    DeviceArray<T> d_x(x);
    DeviceArray<float> sum(std::vector<float>{12345.0f});  // overwritten, not added to
    starzero::optim::sum_of_squares_cuda(n, d_x.get(), sum.get(), g.stream);
    const float got = sum.download(g)[0];
    CHECK(std::fabs(double(got) - want) <= 1e-6 * want);
  }
}

// The memory-efficient attention (no T×T buffer): the warp-per-row online softmax on the GPU
// against the CPU's blocked kernel, T across the CPU's query blocks and not a multiple of 32.
TEMPLATE_TEST_CASE("cuda attention_forward / attention_backward match the CPU", "[cuda][attention]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int B, Tn, C, NH;
  };
  // hs = 12 (under a warp), hs = 80 (not a multiple of 32), hs = 128 over 2 query blocks and a
  // ragged chunk of 32 keys, and a single position.
  for (const Shape s : {Shape{kB, kT, kC, kNH}, Shape{1, 45, 160, 2}, Shape{2, 2 * cpu::kAttentionQueryBlock + 7, 256, 2},
                        Shape{3, 1, 48, 4}}) {
    INFO(type_name<T>() << " B=" << s.B << " T=" << s.Tn << " C=" << s.C << " NH=" << s.NH);
    std::mt19937 rng(4004);
    const size_t N = size_t(s.B) * s.Tn;
    const size_t stats = size_t(s.B) * s.NH * s.Tn;
    const auto inp = random_array<T>(N * 3 * s.C, rng);
    DeviceArray<T> d_inp(inp);

    Mirrored<T> out(N * s.C);
    Mirrored<float> lse(stats);
    cpu::attention_forward(out.host(), lse.host(), inp.data(), s.B, s.Tn, s.C, s.NH);
    gpu::attention_forward(out.device(), lse.device(), d_inp.get(), s.B, s.Tn, s.C, s.NH, g.stream);
    out.check("attention_forward out", g, kTol<T>);
    lse.check("attention_forward lse", g, kTolF32);

    // Backward from the CPU's lse, accumulating into the same random gradients on both sides.
    Mirrored<T> dout(out.size(), rng), dinp(inp.size(), rng);
    DeviceArray<float> d_lse_cpu(lse.cpu_values());
    cpu::attention_backward(dinp.host(), dout.host(), inp.data(), lse.host(), s.B, s.Tn, s.C, s.NH);
    gpu::attention_backward(dinp.device(), dout.device(), d_inp.get(), d_lse_cpu.get(), s.B, s.Tn, s.C, s.NH, g.stream);
    dinp.check("attention_backward dinp", g, kTol<T>);
  }
}

TEMPLATE_TEST_CASE("cuda gelu and residual kernels match the CPU", "[cuda][gelu][residual]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  const size_t n = size_t(kN) * kC + 5;
  INFO(type_name<T>() << " n=" << n);
  std::mt19937 rng(5005);
  const auto inp = random_array<T>(n, rng, -4.0f, 4.0f);
  const auto inp2 = random_array<T>(n, rng);
  const auto dout = random_array<T>(n, rng);
  DeviceArray<T> d_inp(inp), d_inp2(inp2), d_dout(dout);

  Mirrored<T> out(n);
  cpu::gelu_forward(out.host(), inp.data(), n);
  gpu::gelu_forward(out.device(), d_inp.get(), n, g.stream);
  out.check("gelu_forward out", g, kTol<T>);

  Mirrored<T> dinp(n, rng);
  cpu::gelu_backward(dinp.host(), inp.data(), dout.data(), n);
  gpu::gelu_backward(dinp.device(), d_inp.get(), d_dout.get(), n, g.stream);
  dinp.check("gelu_backward dinp", g, kTol<T>);

  cpu::residual_forward(out.host(), inp.data(), inp2.data(), n);
  gpu::residual_forward(out.device(), d_inp.get(), d_inp2.get(), n, g.stream);
  out.check("residual_forward out", g, kTol<T>);

  Mirrored<T> dinp1(n, rng), dinp2(n, rng);
  cpu::residual_backward(dinp1.host(), dinp2.host(), dout.data(), n);
  gpu::residual_backward(dinp1.device(), dinp2.device(), d_dout.get(), n, g.stream);
  dinp1.check("residual_backward dinp1", g, kTol<T>);
  dinp2.check("residual_backward dinp2", g, kTol<T>);
}

TEMPLATE_TEST_CASE("cuda softmax_crossentropy forward / backward match the CPU", "[cuda][softmax]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int N, V, Vp;
  };
  // The second vocabulary is wider than one block of threads.
  for (const Shape s : {Shape{kN, kV, kVp}, Shape{5, 1001, 1024}}) {
    INFO(type_name<T>() << " N=" << s.N << " V=" << s.V << " Vp=" << s.Vp);
    std::mt19937 rng(6006);
    const size_t n = size_t(s.N) * s.Vp;
    const auto logits = random_array<T>(n, rng, -4.0f, 4.0f);  // padding columns hold garbage too
    const auto targets = random_tokens(s.N, s.V, rng);
    DeviceArray<T> d_logits(logits);
    DeviceArray<int> d_targets(targets);

    std::vector<float> losses(s.N), probs(n);
    cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);
    DeviceArray<float> d_losses(s.N), d_probs(n);
    gpu::softmax_crossentropy_forward(d_losses.get(), d_probs.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp,
                                      g.stream);
    const auto probs_gpu = d_probs.download(g);
    check_close("softmax_crossentropy_forward losses", d_losses.download(g), losses, kTolF32);
    check_close("softmax_crossentropy_forward probs", probs_gpu, probs, kTolF32);
    size_t padding_nonzero = 0;
    for (int r = 0; r < s.N; ++r)
      for (int i = s.V; i < s.Vp; ++i) padding_nonzero += probs_gpu[size_t(r) * s.Vp + i] != 0.0f;
    CHECK(padding_nonzero == 0);

    const auto dlogits0 = random_array<T>(n, rng);
    auto dlogits = dlogits0;
    DeviceArray<T> d_dlogits(dlogits0);
    DeviceArray<float> d_probs_cpu(probs);
    cpu::softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), s.N, s.V, s.Vp, 1.0f / float(s.N));
    gpu::softmax_crossentropy_backward(d_dlogits.get(), d_probs_cpu.get(), d_targets.get(), s.N, s.V, s.Vp,
                                       1.0f / float(s.N), g.stream);
    const auto dlogits_gpu = d_dlogits.download(g);
    check_close("softmax_crossentropy_backward dlogits", dlogits_gpu, dlogits, kTol<T>);
    size_t padding_changed = 0;
    for (int r = 0; r < s.N; ++r)
      for (int i = s.V; i < s.Vp; ++i) {
        const size_t k = size_t(r) * s.Vp + i;
        padding_changed += to_float(dlogits_gpu[k]) != to_float(dlogits0[k]);
      }
    CHECK(padding_changed == 0);
  }
}

// Masked targets (tasks/loss_mask.hpp): loss 0 and dlogits rows untouched on the GPU too, the
// other rows as the CPU's.
TEMPLATE_TEST_CASE("cuda softmax_crossentropy with masked targets matches the CPU", "[cuda][softmax]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  const int N = 37, V = 53, Vp = 64;
  INFO(type_name<T>());
  std::mt19937 rng(6007);
  const size_t n = size_t(N) * Vp;
  const auto logits = random_array<T>(n, rng, -4.0f, 4.0f);
  auto targets = random_tokens(N, V, rng);
  for (int r = 0; r < N; r += 3) targets[size_t(r)] = starzero::kMaskedTarget;
  DeviceArray<T> d_logits(logits);
  DeviceArray<int> d_targets(targets);

  std::vector<float> losses(N), probs(n);
  cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  DeviceArray<float> d_losses(N), d_probs(n);
  gpu::softmax_crossentropy_forward(d_losses.get(), d_probs.get(), d_logits.get(), d_targets.get(), N, V, Vp, g.stream);
  const auto losses_gpu = d_losses.download(g);
  check_close("masked softmax_crossentropy_forward losses", losses_gpu, losses, kTolF32);
  size_t masked_nonzero = 0;
  for (int r = 0; r < N; r += 3) masked_nonzero += losses_gpu[size_t(r)] != 0.0f;
  CHECK(masked_nonzero == 0);

  const auto dlogits0 = random_array<T>(n, rng);
  auto dlogits = dlogits0;
  DeviceArray<T> d_dlogits(dlogits0);
  DeviceArray<float> d_probs_cpu(probs);
  const float dloss = 1.0f / float(N - (N + 2) / 3);
  cpu::softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, Vp, dloss);
  gpu::softmax_crossentropy_backward(d_dlogits.get(), d_probs_cpu.get(), d_targets.get(), N, V, Vp, dloss, g.stream);
  const auto dlogits_gpu = d_dlogits.download(g);
  check_close("masked softmax_crossentropy_backward dlogits", dlogits_gpu, dlogits, kTol<T>);
  size_t masked_changed = 0;
  for (int r = 0; r < N; r += 3)
    for (int i = 0; i < Vp; ++i) {
      const size_t k = size_t(r) * Vp + i;
      masked_changed += std::memcmp(&dlogits_gpu[k], &dlogits0[k], sizeof(T)) != 0;
    }
  CHECK(masked_changed == 0);
}

// Head groups as StarPU hands them to a CUDA task: each group's blocks of out, lse and of dinp's
// q, k and v parts allocated alone (packed, their own leading dimension). Scattered back, the
// groups give the whole call's bits: every warp computes one (b, h, t) row either way.
TEMPLATE_TEST_CASE("cuda attention by head groups equals the whole call bit for bit", "[cuda][attention]", float,
                   bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  const int B = 2, Tn = 37, NH = 5, hs = 12, C = NH * hs;
  const size_t rows = size_t(B) * Tn, stats = size_t(NH) * Tn;  // log-sum-exps per sequence
  std::mt19937 rng(4005);
  const auto inp = random_array<T>(rows * 3 * C, rng), dout = random_array<T>(rows * C, rng);
  const auto dinp0 = random_array<T>(rows * 3 * C, rng);
  DeviceArray<T> d_inp(inp), d_dout(dout);

  DeviceArray<T> d_out(rows * C), d_dinp(dinp0);
  DeviceArray<float> d_lse(B * stats);
  gpu::attention_forward(d_out.get(), d_lse.get(), d_inp.get(), B, Tn, C, NH, g.stream);
  gpu::attention_backward(d_dinp.get(), d_dout.get(), d_inp.get(), d_lse.get(), B, Tn, C, NH, g.stream);
  const auto out = d_out.download(g), dinp = d_dinp.download(g);
  const auto lse = d_lse.download(g);

  for (int G : {2, 3, NH}) {
    INFO(type_name<T>() << " " << G << " head groups");
    std::vector<T> g_out(out.size()), g_dinp = dinp0;
    std::vector<float> g_lse(lse.size());
    for (int group = 0; group < G; ++group) {
      const int h0 = NH * group / G, nh = NH * (group + 1) / G - h0, width = nh * hs;
      const size_t group_stats = size_t(nh) * Tn;
      std::vector<T> dq(rows * width), dk(rows * width), dv(rows * width);
      for (size_t r = 0; r < rows; ++r)
        for (int i = 0; i < width; ++i) {
          const size_t at = r * 3 * C + size_t(h0) * hs + i;
          dq[r * width + i] = dinp0[at];
          dk[r * width + i] = dinp0[at + C];
          dv[r * width + i] = dinp0[at + 2 * C];
        }
      DeviceArray<T> p_out(rows * width), p_dq(dq), p_dk(dk), p_dv(dv);
      DeviceArray<float> p_lse(B * group_stats);
      gpu::attention_forward_heads(p_out.get(), width, p_lse.get(), int(group_stats), d_inp.get(), B, Tn, C, NH, h0, nh,
                                   g.stream);
      gpu::attention_backward_heads(p_dq.get(), p_dk.get(), p_dv.get(), width, d_dout.get(), d_inp.get(), p_lse.get(),
                                    int(group_stats), B, Tn, C, NH, h0, nh, g.stream);
      const auto h_out = p_out.download(g), h_dq = p_dq.download(g), h_dk = p_dk.download(g), h_dv = p_dv.download(g);
      const auto h_lse = p_lse.download(g);
      for (size_t r = 0; r < rows; ++r)
        for (int i = 0; i < width; ++i) {
          const size_t at = r * 3 * C + size_t(h0) * hs + i;
          g_out[r * C + size_t(h0) * hs + i] = h_out[r * width + i];
          g_dinp[at] = h_dq[r * width + i];
          g_dinp[at + C] = h_dk[r * width + i];
          g_dinp[at + 2 * C] = h_dv[r * width + i];
        }
      for (int b = 0; b < B; ++b)
        std::copy_n(h_lse.begin() + b * group_stats, group_stats, g_lse.begin() + b * stats + size_t(h0) * Tn);
    }
    CHECK(std::memcmp(g_out.data(), out.data(), out.size() * sizeof(T)) == 0);
    CHECK(std::memcmp(g_dinp.data(), dinp.data(), dinp.size() * sizeof(T)) == 0);
    CHECK(std::memcmp(g_lse.data(), lse.data(), lse.size() * sizeof(float)) == 0);
  }
}

TEMPLATE_TEST_CASE("cuda backward kernels are deterministic", "[cuda][determinism]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  // The reductions whose order could hang on timing: the encoder's (uniform tokens, and one token in
  // ~90 % of the positions), the bias and layernorm parameter gradients (many row chunks), and the
  // sum of squares (many blocks). Each is run twice from the same inputs into the same non-zero
  // gradients; the results must be the same bytes.
  for (const double hot_share : {0.0, 0.9}) {
    INFO(type_name<T>() << " hot token share " << hot_share);
    std::mt19937 rng(7007);
    const int B = 4, Tn = 1001, C = 40, V = 37, OC = 77;
    const size_t N = size_t(B) * Tn;
    const auto tokens = hot_share > 0 ? skewed_tokens(N, V, 3, hot_share, rng) : random_tokens(N, V, rng);
    const auto dout = random_array<T>(N * C, rng);
    const auto dout_oc = random_array<T>(N * OC, rng);
    const auto dwte0 = random_array<T>(size_t(V) * C, rng);
    const auto dwpe0 = random_array<T>(size_t(Tn) * C, rng);
    const auto dbias0 = random_array<T>(size_t(OC), rng);
    const auto inp = random_array<T>(N * C, rng);
    const auto weight = random_array<T>(C, rng);
    std::vector<float> mean(N), rstd(N);
    std::vector<T> ln_out(N * C);
    cpu::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), weight.data(), int(N),
                           C);
    DeviceArray<int> d_tokens(tokens);
    DeviceArray<T> d_dout(dout), d_dout_oc(dout_oc), d_inp(inp), d_weight(weight);
    DeviceArray<float> d_mean(mean), d_rstd(rstd);

    auto run = [&] {
      DeviceArray<T> dwte(dwte0), dwpe(dwpe0), dweight{size_t(C)}, dbias{size_t(C)}, dbias_oc(dbias0);
      DeviceArray<float> sum{1};
      gpu::encoder_backward(dwte.get(), dwpe.get(), d_dout.get(), d_tokens.get(), B, Tn, C, g.stream);
      gpu::layernorm_backward<T>(nullptr, dweight.get(), dbias.get(), d_dout.get(), d_inp.get(), d_weight.get(),
                                 d_mean.get(), d_rstd.get(), int(N), C, g.stream);
      gpu::matmul_backward<T>(nullptr, nullptr, dbias_oc.get(), d_dout_oc.get(), nullptr, nullptr, int(N), 0, OC,
                              g.cublas, g.stream);
      starzero::optim::sum_of_squares_cuda(N * OC, d_dout_oc.get(), sum.get(), g.stream);
      std::vector<std::vector<T>> r{dwte.download(g), dwpe.download(g), dweight.download(g), dbias.download(g),
                                    dbias_oc.download(g)};
      return std::pair{r, sum.download(g)};
    };
    const auto [first, first_sum] = run();
    const auto [second, second_sum] = run();
    const char* names[] = {"dwte", "dwpe", "layernorm dweight", "layernorm dbias", "bias gradient"};
    for (size_t k = 0; k < first.size(); ++k) {
      INFO(names[k]);
      CHECK(same_bits(first[k], second[k]));
    }
    INFO("sum_of_squares " << first_sum[0] << " then " << second_sum[0]);
    CHECK(same_bits(first_sum, second_sum));
  }
}

// The device AdamW (optimizers/adamw.cu) against the CPU AdamW that optimizer offload runs
// (adamw_cpu, which the fused SIMD kernels equal bit for bit): the same bits in the master
// weights, both moments and the parameter copy, over several steps with weight decay and a
// clipping scale, so that a state split between GPU and CPU (--offload-optimizer-fraction) trains
// exactly as all-CPU AdamW. The kernel rounds every operation on its own (no FMA contraction,
// IEEE division and square root), which is what makes the bits equal.
TEMPLATE_TEST_CASE("cuda adamw equals the CPU AdamW bit for bit", "[cuda][adamw]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  std::mt19937 rng(2811);
  const size_t n = 100'003;  // not a multiple of the block: the grid-stride loop's tail too
  auto master = random_array<float>(n, rng);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<T> param(n);
  DeviceArray<float> d_master(master), d_m(m), d_v(v);
  DeviceArray<T> d_param(n);
  const std::vector<float> scale{0.37f};
  DeviceArray<float> d_scale(scale);
  starzero::optim::AdamWHyper hyper;
  hyper.lr = 3e-3f;
  hyper.weight_decay = 0.1f;
  for (int step = 1; step <= 5; ++step) {
    hyper.step = step;
    // Gradients over several magnitudes, tiny ones included (denormal products in v).
    auto grad = random_array<T>(n, rng);
    for (size_t i = 0; i < n; i += 7) grad[i] = from_float<T>(to_float(grad[i]) * 1e-20f);
    DeviceArray<T> d_grad(grad);
    starzero::optim::adamw_cpu(n, grad.data(), scale[0], master.data(), m.data(), v.data(), param.data(), hyper);
    starzero::optim::adamw_cuda(n, d_grad.get(), d_scale.get(), d_master.get(), d_m.get(), d_v.get(), d_param.get(),
                                hyper, g.stream);
    const auto bits = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    INFO(type_name<T>() << " step " << step);
    CHECK(bits(d_master.download(g), master));
    CHECK(bits(d_m.download(g), m));
    CHECK(bits(d_v.download(g), v));
    CHECK(bits(d_param.download(g), param));
  }
}
