#include "runtime/gpu_cost.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>

namespace starzero::sim {

const char* gpu_cost_class_name(GpuCostClass kind) {
  switch (kind) {
    case GpuCostClass::gemm: return "gemm";
    case GpuCostClass::cudnn_attention: return "cudnn_attention";
    case GpuCostClass::own_attention: return "own_attention";
    case GpuCostClass::streaming: return "streaming";
    case GpuCostClass::copy: return "copy";
  }
  return "streaming";
}

namespace {

// ---- cuBLAS GEMM ------------------------------------------------------------------------------
// Measured: a bf16 8192³ cublas matmul runs at 769-798 TFLOP/s on one H200 and one H100 SXM
// (PyTorch, random data; ../shared/facts.md), 0.78-0.81 of the 989 TFLOP/s dense peak. Assumed:
// smaller products lose tiles to wave quantisation and prologues; a dimension d keeps
// d / (d + 96) of the large-GEMM rate (768 -> 0.89, 5120 -> 0.98), the smallest dimension rules.
constexpr double kLargeGemmEfficiency = 0.78;
constexpr double kGemmHalfDimension = 96;

// ---- cuDNN flash attention --------------------------------------------------------------------
// Published: FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao, 2024,
// arXiv:2407.08608), figures 5 and 6: cuDNN's attention on an H100 80GB SXM5 in bf16, TFLOP/s
// at sequence lengths 512 .. 16k, batch × length = 16k tokens, 2048 model channels. FLOPs as
// the paper counts them: forward 4·B·H·T²·hs, halved under the causal mask; backward 2.5 times
// the forward's.
constexpr std::array<double, 6> kTableSeq = {512, 1024, 2048, 4096, 8192, 16384};
// Head size 128, forward, causal (figure 5d).
constexpr std::array<double, 6> kForwardCausal128 = {315, 410, 484, 518, 529, 539};
// Head size 128, forward, no mask (figure 5c); head size 64, forward, no mask (figure 5a).
constexpr std::array<double, 6> kForward128 = {497, 574, 617, 609, 600, 595};
constexpr std::array<double, 6> kForward64 = {335, 373, 395, 408, 412, 413};
// Head size 128, backward, no mask (figure 6b).
constexpr std::array<double, 6> kBackward128 = {305, 408, 465, 499, 518, 516};
// Assumed: the causal backward loses what the causal forward loses against the unmasked one at
// the same length (the paper plots no causal backward); head size 64 runs at the unmasked
// forward's 64/128 ratio; head sizes above 128 at 128's rate; below T = 512 the rate falls in
// proportion to T (fewer query tiles than the GPU has SMs), down to a tenth.

// The table's value at T: log-linear between its lengths, constant past 16k.
double at_length(const std::array<double, 6>& table, double T) {
  if (T >= kTableSeq.back()) return table.back();
  if (T <= kTableSeq.front()) return table.front() * std::max(0.1, T / kTableSeq.front());
  std::size_t i = 1;
  while (kTableSeq[i] < T) ++i;
  const double x = (std::log2(T) - std::log2(kTableSeq[i - 1])) / (std::log2(kTableSeq[i]) - std::log2(kTableSeq[i - 1]));
  return table[i - 1] + x * (table[i] - table[i - 1]);
}

// The H100 SXM5's dense bf16 peak, which the published rates were measured against.
constexpr double kH100Bf16Flops = 989e12;

// ---- our scalar attention (tasks/nn_kernels.cu) -------------------------------------------------
// Counted from the kernels (one warp per row; lane l owns the key (or query) l of each chunk of 32
// for the dot products and the head dimensions l, l+32, .. for the accumulations). Per causal
// (query, key) pair and head size hs, in thread instructions (a load, a bf16 widening, an FMA, a
// shuffle each one):
//   forward              q·k: hs × (shared load, global load, widen, FMA) = 4·hs;
//                        p·v: hs × (shuffle, global load, widen, FMA) = 4·hs;          8·hs
//   backward, query rows p and dp twice (delta, then dq): 4 dot products = 16·hs; dq: 4·hs
//   backward, key rows   p and dp once: 8·hs; dk and dv: 8·hs                       36·hs
// L1 wavefronts per pair: a dot product's global loads read one element of 32 different rows per
// warp load, 32 wavefronts per 32 pairs and dimension: hs per pair and dot product; the
// accumulations read 32 consecutive elements of one row (hs/32 per pair); q and dout come from
// shared memory as broadcasts (hs/32 per pair and dot product).
//   forward   1 dot (hs + hs/32) + p·v (hs/32)                          = hs·(1 + 2/32)
//   backward  6 dots (6·hs + 6·hs/32) + dq, dk, dv (3·hs/32)            = hs·(6 + 9/32)
struct OwnAttentionPerPair {
  double thread_instructions, l1_wavefronts;
};
OwnAttentionPerPair own_attention_per_pair(double hs, bool backward) {
  if (backward) return {36.0 * hs, hs * (6.0 + 9.0 / 32.0)};
  return {8.0 * hs, hs * (1.0 + 2.0 / 32.0)};
}
// Published (NVIDIA's Hopper and Ampere tuning guides): an SM issues one warp instruction per
// clock in each of its 4 partitions, 128 thread instructions per clock in all, and its L1 serves
// one wavefront per clock. Without the machine's SM count and clock, the FP32 peak gives them:
// fp32_flops = SMs × 128 lanes × 2 × clock on Hopper.
double sm_clocks_per_s(const GpuFigures& f) {
  if (f.sm_count > 0 && f.clock_hz > 0) return f.sm_count * f.clock_hz;
  return f.fp32_flops / 256.0;
}

// The measured rate for an attention task of `kind`, if the figures hold one of its direction and
// head size: the one measured at the nearest length (log scale); a cuDNN rate moved to T along the
// published table's shape (ours does not depend on T: its time per pair is fixed).
std::optional<double> measured_rate(const GpuFigures& f, GpuCostClass kind, const AttentionWork& w) {
  if (!f.measured_attention) return std::nullopt;
  const MeasuredAttentionRate* nearest = nullptr;
  for (const MeasuredAttentionRate& m : *f.measured_attention) {
    if (m.kernel != kind || m.backward != w.backward || m.hs != w.hs || !(m.flops_per_s > 0)) continue;
    if (!nearest || std::abs(std::log(m.T / w.T)) < std::abs(std::log(nearest->T / w.T))) nearest = &m;
  }
  if (!nearest) return std::nullopt;
  if (kind != GpuCostClass::cudnn_attention) return nearest->flops_per_s;
  return nearest->flops_per_s * cudnn_attention_rate_h100(w.T, w.hs, w.backward) /
         cudnn_attention_rate_h100(nearest->T, w.hs, w.backward);
}

}  // namespace

double gemm_efficiency(double m, double n, double k) {
  double smallest = std::min({m, n, k});
  if (!(smallest > 0)) return kLargeGemmEfficiency;
  return kLargeGemmEfficiency * smallest / (smallest + kGemmHalfDimension);
}

double cudnn_attention_rate_h100(double T, double hs, bool backward) {
  const double causal_loss = at_length(kForwardCausal128, T) / at_length(kForward128, T);
  double rate = backward ? at_length(kBackward128, T) * causal_loss : at_length(kForwardCausal128, T);
  if (hs <= 64) rate *= at_length(kForward64, T) / at_length(kForward128, T);
  return rate * 1e12;
}

OwnAttentionCounts own_attention_counts(const AttentionWork& w, const GpuFigures& f) {
  OwnAttentionCounts c;
  c.pairs = w.B * w.heads * w.T * (w.T + 1) / 2;
  const OwnAttentionPerPair per_pair = own_attention_per_pair(w.hs, w.backward);
  c.thread_instructions = c.pairs * per_pair.thread_instructions;
  c.l1_wavefronts = c.pairs * per_pair.l1_wavefronts;
  const double sm_clocks = sm_clocks_per_s(f);
  if (sm_clocks > 0) {
    c.issue_s = c.thread_instructions / (128.0 * sm_clocks);
    c.l1_s = c.l1_wavefronts / sm_clocks;
  }
  return c;
}

double causal_attention_flops(const AttentionWork& w) {
  const double forward = 4.0 * w.B * w.heads * w.T * w.T * w.hs / 2;
  return w.backward ? 2.5 * forward : forward;
}

namespace {

// cuDNN's flash attention at the published rate, scaled by this GPU's bf16 peak against the H100's
// (attention is compute-bound: an H200's faster HBM does not change it). Our backward codelets
// carry no forward output O, which cuDNN's backward needs: they run the forward graph again first
// (tasks/attention_cudnn.hpp), at the forward's rate.
double cudnn_attention_s(const GpuWork& w, const GpuFigures& f) {
  const double scale = f.bf16_tensor_flops / kH100Bf16Flops;
  const double rate = cudnn_attention_rate_h100(w.attention.T, w.attention.hs, w.attention.backward) * scale;
  double seconds = rate > 0 ? w.flops / rate : 0.0;
  if (w.attention.backward) {
    AttentionWork forward = w.attention;
    forward.backward = false;
    const double forward_rate = cudnn_attention_rate_h100(forward.T, forward.hs, false) * scale;
    if (forward_rate > 0) seconds += causal_attention_flops(forward) / forward_rate;
  }
  return seconds;
}

// Our scalar kernels: the slower of their instruction issue and their L1 wavefronts.
double own_attention_s(const AttentionWork& w, const GpuFigures& f) {
  const OwnAttentionCounts c = own_attention_counts(w, f);
  return std::max(c.issue_s, c.l1_s);
}

}  // namespace

double gpu_work_us(const GpuWork& w, const GpuFigures& f) {
  const double tensor_peak = w.bf16 ? f.bf16_tensor_flops : f.fp32_flops;  // fp32: no TF32
  // The bytes' time at the bandwidth a streaming kernel reaches. Assumed: 0.8 of HBM's data-sheet
  // figure (device-to-device copies measure 4.3 of 4.8 TB/s on an H200, 0.9: ../shared/facts.md).
  const auto streaming_s = [&f](double bytes) { return bytes > 0 && f.memory_Bps > 0 ? bytes / (0.8 * f.memory_Bps) : 0.0; };
  const double memory_s = streaming_s(w.bytes);
  double seconds = 0;
  switch (w.kind) {
    case GpuCostClass::gemm: {
      const double rate = tensor_peak * gemm_efficiency(w.m, w.n, w.k);
      seconds = std::max(rate > 0 ? w.flops / rate : 0.0, memory_s) + streaming_s(w.pass_bytes);
      break;
    }
    case GpuCostClass::cudnn_attention:
    case GpuCostClass::own_attention: {
      // A measured rate (its backward timed as the codelet runs it, the forward re-run included),
      // else cuDNN's published table or our kernels' counted model.
      const std::optional<double> measured = measured_rate(f, w.kind, w.attention);
      seconds = std::max(measured                                      ? w.flops / *measured
                         : w.kind == GpuCostClass::cudnn_attention ? cudnn_attention_s(w, f)
                                                                   : own_attention_s(w.attention, f),
                         memory_s);
      break;
    }
    case GpuCostClass::streaming:
    case GpuCostClass::copy: seconds = memory_s; break;
  }
  return (seconds + double(std::max(0, w.kernels)) * f.launch_s) * 1e6;
}

GpuSecondsByClass gpu_seconds_by_class(const std::vector<CountedGpuWork>& kernels, const GpuFigures& figures) {
  GpuSecondsByClass seconds{};
  for (const CountedGpuWork& k : kernels) seconds[std::size_t(k.work.kind)] += k.count * gpu_work_us(k.work, figures) * 1e-6;
  return seconds;
}

std::vector<CountedGpuWork> with_attention(std::vector<CountedGpuWork> kernels, GpuCostClass kind) {
  for (CountedGpuWork& k : kernels) {
    GpuWork& w = k.work;
    if (w.kind != GpuCostClass::cudnn_attention && w.kind != GpuCostClass::own_attention) continue;
    w.kind = kind == GpuCostClass::cudnn_attention && w.bf16 ? GpuCostClass::cudnn_attention : GpuCostClass::own_attention;
    w.kernels = !w.attention.backward ? 1 : w.kind == GpuCostClass::cudnn_attention ? 3 : 2;
  }
  return kernels;
}

}  // namespace starzero::sim
