// cuDNN's flash attention (tasks/attention_cudnn.hpp) on a GPU: against a double-precision CPU
// reference and beside the own CUDA kernel (tasks/nn_kernels.hpp), forward (out, lse) and
// backward (dq, dk, dv added into non-zero buffers, as the codelets' gradients accumulate), at
// T = 1024, 4096 and 1000, GPT (NKV = NH) and grouped-query (NKV < NH) shapes, head groups, and
// random data (not multiples of anything but what cuDNN needs: hs a multiple of 8). Then the
// timings of both kernels at gpt-13B's shape, printed and written as
// $OUT_DIR/attention_calibration.json (default: the working folder) for the simulator.
//
// Tolerances, |got − want| <= tol · (|want| + mean |want|) per element (cuda_test_support.hpp):
// - out, dq, dk, dv (bf16): 3e-2. Inputs are the same bf16 values on both sides; cuDNN rounds P
//   and dS to bf16 before its second matmuls (relative error 2^-9 per term, averaging over the
//   keys) and the results to bf16 once (2^-9): a few 1e-3; a wrong mask, scale or head mapping
//   is an O(1) error. The own kernel meets the existing 2e-2.
// - lse (fp32): 1e-3. Scores accumulate in fp32 from bf16 inputs in both kernels (about 1e-6
//   relative); cuDNN's exponential is exp2-based in fp32. A wrong mask or scale moves lse by O(1).
// The gradient buffers start at small random values (±0.01) so that their bf16 sum with the
// gradient keeps the gradient's precision, and `want` is that start plus the reference gradient.
//
// Needs an NVIDIA GPU and a cuDNN build; fails (never skips) without them.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tasks/attention_cudnn.hpp"
#include "tasks/nn_kernels.hpp"

#include "cuda_test_support.hpp"

namespace {

namespace cudnn = starzero::tasks::cudnn_attention;

struct Shape {
  int B, T, NH, NKV, hs, h0, nh;
  int C3() const { return (NH + 2 * NKV) * hs; }
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs) + " heads [" + std::to_string(h0) + ", " +
           std::to_string(h0 + nh) + ")";
  }
};

// The reference in double: per (b, query head h), scores, causal softmax, out, lse; and the
// gradients of dout for dq, dk, dv (heads [h0, h0 + nh) only, laid out as the kernels write them).
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Shape& s, const std::vector<bf16>& qkv, const std::vector<bf16>& dout) {
  const int group = s.NH / s.NKV, kv0 = s.h0 / group, nkv = s.nh / group, T = s.T, hs = s.hs;
  const size_t C3 = size_t(s.C3()), Cout = size_t(s.NH) * hs;
  Reference r;
  r.out.assign(size_t(s.B) * T * s.nh * hs, 0.0);
  r.lse.assign(size_t(s.B) * s.nh * T, 0.0);
  r.dq.assign(size_t(s.B) * T * s.nh * hs, 0.0);
  r.dk.assign(size_t(s.B) * T * nkv * hs, 0.0);
  r.dv.assign(size_t(s.B) * T * nkv * hs, 0.0);
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> values(qkv.size());  // each bf16 once to double
  for (size_t i = 0; i < qkv.size(); ++i) values[i] = to_float(qkv[i]);
  const auto at = [&](int b, int t, size_t col) { return values[(size_t(b) * T + t) * C3 + col]; };
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < s.B; ++b)
    for (int lh = 0; lh < s.nh; ++lh) {
      const int h = s.h0 + lh, kv = h / group, lkv = kv - kv0;
      const size_t qcol = size_t(h) * hs, kcol = size_t(s.NH + kv) * hs, vcol = size_t(s.NH + s.NKV + kv) * hs;
      for (int i = 0; i < T; ++i) {
        double m = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += at(b, i, qcol + d) * at(b, j, kcol + d);
          p[j] = dot * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(p[j] - m);
        const double lse = m + std::log(sum);
        r.lse[(size_t(b) * s.nh + lh) * T + i] = lse;
        double* o = &r.out[(size_t(b) * T + i) * s.nh * hs + size_t(lh) * hs];
        const bf16* go = &dout[(size_t(b) * T + i) * Cout + size_t(h) * hs];
        double delta = 0;
        for (int j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - lse);
          double g = 0;
          for (int d = 0; d < hs; ++d) {
            o[d] += p[j] * at(b, j, vcol + d);
            g += double(to_float(go[d])) * at(b, j, vcol + d);
          }
          dp[j] = g;
          delta += p[j] * g;
        }
        double* dq = &r.dq[(size_t(b) * T + i) * s.nh * hs + size_t(lh) * hs];
        for (int j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          double* dk = &r.dk[(size_t(b) * T + j) * nkv * hs + size_t(lkv) * hs];
          double* dv = &r.dv[(size_t(b) * T + j) * nkv * hs + size_t(lkv) * hs];
          for (int d = 0; d < hs; ++d) {
            dq[d] += ds * at(b, j, kcol + d);
            dk[d] += ds * at(b, i, qcol + d);
            dv[d] += p[j] * double(to_float(go[d]));
          }
        }
      }
    }
  return r;
}

// The device's strided block [rows, cols] at ld, to a contiguous host vector.
template <class T>
std::vector<T> block(const std::vector<T>& whole, int rows, int cols, int ld, int first_col) {
  std::vector<T> out(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[size_t(r) * cols + c] = whole[size_t(r) * ld + first_col + c];
  return out;
}

// start + reference gradient, as floats for check_close.
std::vector<float> plus(const std::vector<float>& start, const std::vector<double>& grad) {
  std::vector<float> out(start.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(double(start[i]) + grad[i]);
  return out;
}
template <class T>
std::vector<float> floats(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}
std::vector<float> floats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

constexpr double kTolOut = 3e-2, kTolLse = 1e-3;

// One kernel's results on a shape.
struct Results {
  std::vector<float> out, lse, dq, dk, dv;
};

// Runs `kernel` ("cudnn" or "own") on the device copies of qkv and dout; the gradients start at
// `grad_start` ([B, T, C3] as the codelets' dqkv). Fails the test when cuDNN refuses the shape.
Results run_kernel(const char* kernel, const Shape& s, const Gpu& g, DeviceArray<bf16>& qkv, DeviceArray<bf16>& dout,
                   const std::vector<bf16>& grad_start) {
  const int group = s.NH / s.NKV, kv0 = s.h0 / group, nkv = s.nh / group, hs = s.hs, rows = s.B * s.T;
  const int ld_out = s.NH * hs, ld_lse = s.NH * s.T, C3 = s.C3();
  DeviceArray<bf16> out(size_t(rows) * ld_out);
  DeviceArray<float> lse(size_t(s.B) * ld_lse);
  DeviceArray<bf16> dqkv(grad_start);
  bf16* o = out.get() + size_t(s.h0) * hs;
  float* l = lse.get() + size_t(s.h0) * s.T;
  bf16* dq = dqkv.get() + size_t(s.h0) * hs;
  bf16* dk = dqkv.get() + size_t(s.NH + kv0) * hs;
  bf16* dv = dqkv.get() + size_t(s.NH + s.NKV + kv0) * hs;
  const bool use_cudnn = std::string(kernel) == "cudnn";
  const cudnn::CudnnAttentionShape fwd{.B = s.B, .T = s.T, .NH = s.NH, .NKV = s.NKV, .hs = hs, .h0 = s.h0,
                                       .nh = s.nh, .ld_out = ld_out, .ld_lse = ld_lse};
  cudnn::CudnnAttentionShape bwd = fwd;
  bwd.ld_out = 0;
  bwd.ld_dinp = C3;
  bwd.backward = true;
  if (use_cudnn) {
    REQUIRE(cudnn::forward(fwd, o, l, qkv.get(), g.stream));
    std::printf("  cuDNN %s: %s, workspace %lld bytes\n", s.name().c_str(),
                cudnn::chosen_engine(fwd).description.c_str(), (long long)cudnn::chosen_engine(fwd).workspace_bytes);
  } else {
    gpu::attention_forward_gqa(o, ld_out, l, ld_lse, qkv.get(), s.B, s.T, s.NH, s.NKV, hs, s.h0, s.nh, g.stream);
  }
  sync(g);
  if (use_cudnn) {
    REQUIRE(cudnn::backward(bwd, dq, dk, dv, dout.get(), qkv.get(), l, g.stream));
    const cudnn::ChosenEngine e = cudnn::chosen_engine(bwd);
    std::printf("  cuDNN %s: %s, workspace %lld bytes (estimate %zu)\n", s.name().c_str(), e.description.c_str(),
                (long long)e.workspace_bytes, cudnn::estimated_workspace_bytes(bwd));
  } else {
    gpu::attention_backward_gqa(dq, dk, dv, C3, dout.get(), qkv.get(), l, ld_lse, s.B, s.T, s.NH, s.NKV, hs, s.h0,
                                s.nh, g.stream);
  }
  const std::vector<bf16> out_h = out.download(g), dqkv_h = dqkv.download(g);
  const std::vector<float> lse_h = lse.download(g);
  Results r;
  r.out = floats(block(out_h, rows, s.nh * hs, ld_out, s.h0 * hs));
  for (int b = 0; b < s.B; ++b)
    for (size_t i = 0; i < size_t(s.nh) * s.T; ++i) r.lse.push_back(lse_h[size_t(b) * ld_lse + size_t(s.h0) * s.T + i]);
  r.dq = floats(block(dqkv_h, rows, s.nh * hs, C3, s.h0 * hs));
  r.dk = floats(block(dqkv_h, rows, nkv * hs, C3, (s.NH + kv0) * hs));
  r.dv = floats(block(dqkv_h, rows, nkv * hs, C3, (s.NH + s.NKV + kv0) * hs));
  return r;
}

void check_against_reference(const std::string& kernel, const Shape& s, const Results& got, const Reference& ref,
                             const Results& start) {
  const std::string at = kernel + " " + s.name() + " ";
  check_close(at + "out", got.out, floats(ref.out), kTolOut);
  check_close(at + "lse", got.lse, floats(ref.lse), kTolLse);
  check_close(at + "dq (accumulated)", got.dq, plus(start.dq, ref.dq), kTolOut);
  check_close(at + "dk (accumulated)", got.dk, plus(start.dk, ref.dk), kTolOut);
  check_close(at + "dv (accumulated)", got.dv, plus(start.dv, ref.dv), kTolOut);
}

}  // namespace

TEST_CASE("cuDNN flash attention matches the reference and the own CUDA kernel", "[cuda][cudnn][attention]") {
  Gpu& g = require_gpu();
  // GPT (NKV = NH) and grouped-query (NKV < NH) shapes; whole ops and head groups; T = 1024,
  // 4096 (long: the flash engines' tiling) and 1000 (not a multiple of the tiles).
  const Shape shapes[] = {
      {2, 1024, 4, 4, 64, 0, 4},    // GPT-2-like, whole op
      {1, 4096, 2, 2, 64, 0, 2},    // long sequence
      {2, 1000, 6, 6, 64, 2, 2},    // T not a multiple of 64, a head group in the middle
      {1, 1024, 8, 2, 128, 0, 8},   // Llama-like GQA, hs 128
      {2, 1000, 8, 4, 128, 4, 4},   // GQA head group (whole key/value groups), T = 1000
  };
  for (const Shape& s : shapes) {
    INFO(s.name());
    std::mt19937 rng(4242 + s.T + s.NH);
    const int rows = s.B * s.T;
    const std::vector<bf16> qkv_h = random_array<bf16>(size_t(rows) * s.C3(), rng);
    const std::vector<bf16> dout_h = random_array<bf16>(size_t(rows) * s.NH * s.hs, rng);
    const std::vector<bf16> grad_start = random_array<bf16>(size_t(rows) * s.C3(), rng, -0.01f, 0.01f);
    DeviceArray<bf16> qkv(qkv_h), dout(dout_h);
    const auto t0 = std::chrono::steady_clock::now();
    const Reference ref = reference(s, qkv_h, dout_h);
    std::printf("%s: reference in %.1f s\n", s.name().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const int group = s.NH / s.NKV, kv0 = s.h0 / group, nkv = s.nh / group;
    Results start;
    start.dq = floats(block(grad_start, rows, s.nh * s.hs, s.C3(), s.h0 * s.hs));
    start.dk = floats(block(grad_start, rows, nkv * s.hs, s.C3(), (s.NH + kv0) * s.hs));
    start.dv = floats(block(grad_start, rows, nkv * s.hs, s.C3(), (s.NH + s.NKV + kv0) * s.hs));
    const Results own = run_kernel("own", s, g, qkv, dout, grad_start);
    const Results cudnn_r = run_kernel("cudnn", s, g, qkv, dout, grad_start);
    check_against_reference("own", s, own, ref, start);
    check_against_reference("cudnn", s, cudnn_r, ref, start);
    // Beside each other: the same tolerance, the own kernel as the expected side.
    check_close("cudnn vs own out " + s.name(), cudnn_r.out, own.out, kTolOut);
    check_close("cudnn vs own lse " + s.name(), cudnn_r.lse, own.lse, kTolLse);
  }
}

TEST_CASE("cuDNN vs own attention timings at gpt-13B's shape, written for the simulator",
          "[cuda][cudnn][attention][timing]") {
  Gpu& g = require_gpu();
  const Shape s{8, 1024, 40, 40, 128, 0, 40};  // gpt-13B: B=8, T=1024, NH=40, hs=128
  const int rows = s.B * s.T, hs = s.hs, C3 = s.C3(), ld_out = s.NH * hs, ld_lse = s.NH * s.T;
  std::mt19937 rng(13);
  DeviceArray<bf16> qkv(random_array<bf16>(size_t(rows) * C3, rng));
  DeviceArray<bf16> dout(random_array<bf16>(size_t(rows) * ld_out, rng));
  DeviceArray<bf16> out(size_t(rows) * ld_out), dqkv(size_t(rows) * C3);
  DeviceArray<float> lse(size_t(s.B) * ld_lse);
  const cudnn::CudnnAttentionShape fwd{.B = s.B, .T = s.T, .NH = s.NH, .NKV = s.NKV, .hs = hs, .h0 = 0, .nh = s.NH,
                                       .ld_out = ld_out, .ld_lse = ld_lse};
  cudnn::CudnnAttentionShape bwd = fwd;
  bwd.ld_out = 0;
  bwd.ld_dinp = C3;
  bwd.backward = true;
  bf16* dq = dqkv.get();
  bf16* dk = dq + size_t(s.NH) * hs;
  bf16* dv = dq + size_t(2 * s.NH) * hs;
  // The causal FLOPs: forward 4·B·NH·T²·hs / 2, backward 2.5 times that.
  const double fwd_flops = 4.0 * s.B * s.NH * double(s.T) * s.T * hs / 2.0, bwd_flops = 2.5 * fwd_flops;
  struct Entry {
    const char* kernel;
    const char* direction;
    double ms, tflops;
  };
  std::vector<Entry> entries;
  cudaEvent_t begin, end;
  cuda_ok(cudaEventCreate(&begin), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&end), "cudaEventCreate");
  const auto time = [&](const char* kernel, const char* direction, double flops, auto call) {
    call();  // warm-up: builds cuDNN's graph and plan
    sync(g);
    constexpr int kReps = 5;
    cuda_ok(cudaEventRecord(begin, g.stream), "cudaEventRecord");
    for (int i = 0; i < kReps; ++i) call();
    cuda_ok(cudaEventRecord(end, g.stream), "cudaEventRecord");
    sync(g);
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    const double per_call = double(ms) / kReps;
    entries.push_back({kernel, direction, per_call, flops / (per_call * 1e-3) / 1e12});
    std::printf("attention %-5s %-8s B=%d T=%d NH=%d hs=%d: %.3f ms, %.1f TFLOP/s\n", kernel, direction, s.B, s.T,
                s.NH, hs, per_call, entries.back().tflops);
  };
  time("cudnn", "forward", fwd_flops, [&] { REQUIRE(cudnn::forward(fwd, out.get(), lse.get(), qkv.get(), g.stream)); });
  time("own", "forward", fwd_flops, [&] {
    gpu::attention_forward_gqa(out.get(), ld_out, lse.get(), ld_lse, qkv.get(), s.B, s.T, s.NH, s.NKV, hs, 0, s.NH,
                               g.stream);
  });
  // cuDNN's backward as the codelet pays it: O recomputed, the gradients added.
  time("cudnn", "backward", bwd_flops,
       [&] { REQUIRE(cudnn::backward(bwd, dq, dk, dv, dout.get(), qkv.get(), lse.get(), g.stream)); });
  time("own", "backward", bwd_flops, [&] {
    gpu::attention_backward_gqa(dq, dk, dv, C3, dout.get(), qkv.get(), lse.get(), ld_lse, s.B, s.T, s.NH, s.NKV, hs,
                                0, s.NH, g.stream);
  });
  cudaEventDestroy(begin);
  cudaEventDestroy(end);

  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const char* dir = std::getenv("OUT_DIR");
  const std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : ".") + "/attention_calibration.json";
  std::ofstream file(path);
  REQUIRE(file.good());
  file << "{\"gpu\": \"" << prop.name << "\", \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    char line[400];
    std::snprintf(line, sizeof line,
                  "%s\n  {\"kernel\": \"%s\", \"direction\": \"%s\", \"B\": %d, \"T\": %d, \"heads\": %d, \"hs\": %d, "
                  "\"causal\": true, \"ms\": %.4f, \"tflops\": %.2f}",
                  i == 0 ? "" : ",", e.kernel, e.direction, s.B, s.T, s.NH, hs, e.ms, e.tflops);
    file << line;
  }
  file << "\n]}\n";
  file.close();
  REQUIRE(file.good());
  std::printf("wrote %s\n", path.c_str());
  for (const Entry& e : entries) CHECK(e.ms > 0);
}
