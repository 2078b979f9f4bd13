// CUDA-vs-CPU tests of the Llama 3 kernels (tasks/nn_llama_kernels.hpp): every CUDA kernel, forward
// and backward, float and bf16 storage, on seeded random inputs with shapes that are not multiples
// of 8, compared with the CPU kernel on the same inputs.
//
// Tolerance: |cuda - cpu| <= tol · (|cpu| + mean |cpu|) per element, tol = 1e-4 for float
// results (fp32 storage, and the float outputs of the bf16 kernels: rstd, attention lse), 2e-2 for
// bf16 results. Backward kernels start from the same random non-zero gradients on both sides, which
// checks that they accumulate.
//
// Needs an NVIDIA GPU: without a usable one every test FAILS with the reason (the CTest entry only
// exists with -DSTARZERO_GPU_TESTS=ON).
#include <cuda_runtime.h>

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

#include "tasks/nn_kernels.hpp"
#include "tasks/nn_llama_kernels.hpp"

#include "cuda_test_support.hpp"

namespace {

constexpr int kB = 2, kT = 37, kC = 48, kH = 100;
constexpr int kN = kB * kT;

}  // namespace

// The embedding backward (llama_embedding_backward: the GPT-2 encoder's backward with the position
// gradient into a scratch that is dropped) on a large vocabulary with one token in most positions
// (Llama's tokenizer repeats a few ids a lot: padding, newlines), into non-zero gradients, against
// the CPU kernel; twice, for the same bytes.
TEMPLATE_TEST_CASE("cuda embedding backward matches the CPU and is deterministic", "[cuda][embedding]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int B, Tn, C, V;
    double hot_share;
  };
  for (const Shape s : {Shape{3, 517, 53, 1003, 0.8}, Shape{2, 129, 37, 3001, 0.0}, Shape{1, 2049, 24, 97, 0.99}}) {
    INFO(type_name<T>() << " B=" << s.B << " T=" << s.Tn << " C=" << s.C << " V=" << s.V << " hot " << s.hot_share);
    std::mt19937 rng(5151);
    const size_t N = size_t(s.B) * s.Tn;
    std::uniform_int_distribution<int> any(0, s.V - 1);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    std::vector<int> tokens(N);
    for (auto& t : tokens) t = coin(rng) < s.hot_share ? s.V / 3 : any(rng);
    const auto dout = random_array<T>(N * s.C, rng);
    const auto dwte0 = random_array<T>(size_t(s.V) * s.C, rng);
    DeviceArray<int> d_tokens(tokens);
    DeviceArray<T> d_dout(dout);

    std::vector<T> want = dwte0, scratch(size_t(s.Tn) * s.C);
    starzero::kernels::encoder_backward(want.data(), scratch.data(), dout.data(), tokens.data(), s.B, s.Tn, s.C);
    auto run = [&] {
      DeviceArray<T> dwte(dwte0), d_scratch{size_t(s.Tn) * s.C};
      gpu::encoder_backward(dwte.get(), d_scratch.get(), d_dout.get(), d_tokens.get(), s.B, s.Tn, s.C, g.stream);
      return dwte.download(g);
    };
    const auto first = run(), second = run();
    check_close("embedding backward dwte", first, want, kTol<T>);
    CHECK(same_bits(first, second));
  }
}

TEMPLATE_TEST_CASE("cuda rmsnorm_forward / rmsnorm_backward match the CPU", "[cuda][rmsnorm]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  for (const int C : {kC, 200}) {
    INFO(type_name<T>() << " N=" << kN << " C=" << C);
    std::mt19937 rng(1101);
    const auto inp = random_array<T>(size_t(kN) * C, rng, -2.0f, 3.0f);
    const auto weight = random_array<T>(C, rng, 0.5f, 1.5f);
    DeviceArray<T> d_inp(inp), d_weight(weight);

    Mirrored<T> out(inp.size());
    Mirrored<float> rstd(kN);
    cpu::rmsnorm_forward(out.host(), rstd.host(), inp.data(), weight.data(), kN, C, 1e-5f);
    gpu::rmsnorm_forward(out.device(), rstd.device(), d_inp.get(), d_weight.get(), kN, C, 1e-5f, g.stream);
    out.check("rmsnorm_forward out", g, kTol<T>);
    rstd.check("rmsnorm_forward rstd", g, kTolF32);

    // Backward from the CPU's rstd, into random non-zero gradients; then the split calls.
    const auto dout = random_array<T>(inp.size(), rng);
    const auto dinp0 = random_array<T>(inp.size(), rng);
    const auto dweight0 = random_array<T>(C, rng);
    auto dinp = dinp0, dweight = dweight0;
    DeviceArray<T> d_dout(dout), d_dinp(dinp0), d_dweight(dweight0);
    DeviceArray<float> d_rstd_cpu(rstd.cpu_values());
    cpu::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.host(), kN, C);
    gpu::rmsnorm_backward(d_dinp.get(), d_dweight.get(), d_dout.get(), d_inp.get(), d_weight.get(), d_rstd_cpu.get(),
                          kN, C, g.stream);
    const auto both_dinp = d_dinp.download(g), both_dweight = d_dweight.download(g);
    check_close("rmsnorm_backward dinp", both_dinp, dinp, kTol<T>);
    check_close("rmsnorm_backward dweight", both_dweight, dweight, kTol<T>);

    DeviceArray<T> s_dinp(dinp0), s_dweight(dweight0);
    gpu::rmsnorm_backward(s_dinp.get(), static_cast<T*>(nullptr), d_dout.get(), d_inp.get(), d_weight.get(),
                          d_rstd_cpu.get(), kN, C, g.stream);
    gpu::rmsnorm_backward(static_cast<T*>(nullptr), s_dweight.get(), d_dout.get(), d_inp.get(),
                          static_cast<const T*>(nullptr), d_rstd_cpu.get(), kN, C, g.stream);
    CHECK(same_bits(s_dinp.download(g), both_dinp));
    CHECK(same_bits(s_dweight.download(g), both_dweight));
  }
}

TEMPLATE_TEST_CASE("cuda rope_forward / rope_backward match the CPU", "[cuda][rope]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int NH, NKV, hs;
  };
  // q|k of a qkv buffer with v passing through; hs = 12 and hs = 80.
  for (const Shape s : {Shape{6, 2, 12}, Shape{4, 1, 80}}) {
    const int nh = s.NH + s.NKV, C = (s.NH + 2 * s.NKV) * s.hs;
    INFO(type_name<T>() << " B=" << kB << " T=" << kT << " n_head=" << nh << " hs=" << s.hs << " C=" << C);
    std::mt19937 rng(2202);
    std::vector<float> freqs(size_t(kT) * s.hs);
    cpu::rope_frequencies(freqs.data(), kT, s.hs, 500000.0f, true);
    DeviceArray<float> d_freqs(freqs);
    const auto inp = random_array<T>(size_t(kN) * C, rng);
    DeviceArray<T> d_inp(inp);

    Mirrored<T> out(inp.size());
    cpu::rope_forward(out.host(), inp.data(), freqs.data(), kB, kT, nh, s.hs, C);
    gpu::rope_forward(out.device(), d_inp.get(), d_freqs.get(), kB, kT, nh, s.hs, C, g.stream);
    out.check("rope_forward out", g, kTol<T>);
    DeviceArray<T> d_inplace(inp);
    gpu::rope_forward(d_inplace.get(), d_inplace.get(), d_freqs.get(), kB, kT, nh, s.hs, C, g.stream);
    check_close("rope_forward in place", d_inplace.download(g), out.cpu_values(), kTol<T>);

    Mirrored<T> dout(inp.size(), rng), dinp(inp.size(), rng);
    cpu::rope_backward(dinp.host(), dout.host(), freqs.data(), kB, kT, nh, s.hs, C);
    gpu::rope_backward(dinp.device(), dout.device(), d_freqs.get(), kB, kT, nh, s.hs, C, g.stream);
    dinp.check("rope_backward dinp", g, kTol<T>);
  }
}

TEMPLATE_TEST_CASE("cuda swiglu_forward / swiglu_backward match the CPU", "[cuda][swiglu]", float, bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  std::mt19937 rng(3303);
  const size_t n = size_t(kN) * kH;
  const auto gate = random_array<T>(n, rng, -6.0f, 6.0f);
  const auto up = random_array<T>(n, rng);
  DeviceArray<T> d_gate(gate), d_up(up);

  Mirrored<T> out(n);
  cpu::swiglu_forward(out.host(), gate.data(), up.data(), kN, kH);
  gpu::swiglu_forward(out.device(), d_gate.get(), d_up.get(), kN, kH, g.stream);
  out.check("swiglu_forward out", g, kTol<T>);

  const auto dout = random_array<T>(n, rng);
  const auto dgate0 = random_array<T>(n, rng), dup0 = random_array<T>(n, rng);
  auto dgate = dgate0, dup = dup0;
  DeviceArray<T> d_dout(dout), d_dgate(dgate0), d_dup(dup0);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), kN, kH);
  gpu::swiglu_backward(d_dgate.get(), d_dup.get(), d_dout.get(), d_gate.get(), d_up.get(), kN, kH, g.stream);
  const auto both_dgate = d_dgate.download(g), both_dup = d_dup.download(g);
  check_close("swiglu_backward dgate", both_dgate, dgate, kTol<T>);
  check_close("swiglu_backward dup", both_dup, dup, kTol<T>);

  DeviceArray<T> s_dgate(dgate0), s_dup(dup0);
  gpu::swiglu_backward(s_dgate.get(), static_cast<T*>(nullptr), d_dout.get(), d_gate.get(), d_up.get(), kN, kH,
                       g.stream);
  gpu::swiglu_backward(static_cast<T*>(nullptr), s_dup.get(), d_dout.get(), d_gate.get(),
                       static_cast<const T*>(nullptr), kN, kH, g.stream);
  CHECK(same_bits(s_dgate.download(g), both_dgate));
  CHECK(same_bits(s_dup.download(g), both_dup));
}

TEMPLATE_TEST_CASE("cuda attention_gqa_forward / attention_gqa_backward match the CPU", "[cuda][attention]", float,
                   bf16) {
  using T = TestType;
  Gpu& g = require_gpu();
  struct Shape {
    int B, Tn, NH, NKV, hs;
  };
  // GQA with hs = 12 (under a warp), multi-query with hs = 80 (over two warps' worth of lanes),
  // multi-head, and GQA with hs = 128 over two of the CPU's query blocks.
  for (const Shape s : {Shape{kB, kT, 6, 2, 12}, Shape{1, 45, 4, 1, 80}, Shape{2, 19, 3, 3, 16},
                        Shape{1, 2 * cpu::kAttentionQueryBlock + 9, 8, 2, 128}}) {
    INFO(type_name<T>() << " B=" << s.B << " T=" << s.Tn << " NH=" << s.NH << " NKV=" << s.NKV << " hs=" << s.hs);
    std::mt19937 rng(4404);
    const size_t N = size_t(s.B) * s.Tn;
    const size_t C3 = size_t(s.NH + 2 * s.NKV) * s.hs, Cout = size_t(s.NH) * s.hs;
    const size_t stats = size_t(s.B) * s.NH * s.Tn;
    const auto qkv = random_array<T>(N * C3, rng);
    DeviceArray<T> d_qkv(qkv);

    Mirrored<T> out(N * Cout);
    Mirrored<float> lse(stats);
    cpu::attention_gqa_forward(out.host(), lse.host(), qkv.data(), s.B, s.Tn, s.NH, s.NKV, s.hs);
    gpu::attention_gqa_forward(out.device(), lse.device(), d_qkv.get(), s.B, s.Tn, s.NH, s.NKV, s.hs, g.stream);
    out.check("attention_gqa_forward out", g, kTol<T>);
    lse.check("attention_gqa_forward lse", g, kTolF32);

    // Backward from the CPU's lse. Twice on the GPU: the same bits (deterministic).
    const auto dout = random_array<T>(out.size(), rng);
    const auto dqkv0 = random_array<T>(qkv.size(), rng);
    auto dqkv = dqkv0;
    DeviceArray<T> d_dout(dout), d_dqkv(dqkv0), d_dqkv2(dqkv0);
    DeviceArray<float> d_lse_cpu(lse.cpu_values());
    cpu::attention_gqa_backward(dqkv.data(), dout.data(), qkv.data(), lse.host(), s.B, s.Tn, s.NH, s.NKV, s.hs);
    gpu::attention_gqa_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_lse_cpu.get(), s.B, s.Tn, s.NH, s.NKV, s.hs,
                                g.stream);
    const auto first = d_dqkv.download(g);
    check_close("attention_gqa_backward dqkv", first, dqkv, kTol<T>);
    gpu::attention_gqa_backward(d_dqkv2.get(), d_dout.get(), d_qkv.get(), d_lse_cpu.get(), s.B, s.Tn, s.NH, s.NKV, s.hs,
                                g.stream);
    CHECK(same_bits(d_dqkv2.download(g), first));
  }
}
