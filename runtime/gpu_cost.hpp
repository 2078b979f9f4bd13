#pragma once
// What a GPU kernel costs, by what it is (docs/sim.md, "GPU cost classes"). Each codelet's CUDA
// implementation declares its class and the work of one task (Codelet::Declaration::gpu): a
// cuBLAS GEMM is charged at the tensor-core peak times an efficiency by its shape, cuDNN's flash
// attention at a published TFLOP/s table by sequence length, head size and direction, our own
// element-wise and row kernels at HBM bandwidth with the bytes they really move, our own scalar
// attention at the FP32 CUDA-core issue rate and its L1 traffic. `starzero-sim` charges each task
// its class's time (unless a real run calibrated the codelet), and `starzero plan`'s step bound
// adds up the same classes' times. Where each figure comes from (measured, published, assumed) is
// written beside it in gpu_cost.cpp.
#include <array>
#include <memory>
#include <string>
#include <vector>

namespace starzero::sim {

enum class GpuCostClass {
  gemm,             // cuBLAS GEMM (cublasGemmEx; cuBLASLt with an epilogue)
  cudnn_attention,  // cuDNN's fused flash attention (tasks/attention_cudnn.hpp)
  own_attention,    // our scalar attention kernels (tasks/nn_kernels.cu): one warp per row
  streaming,        // our element-wise and row kernels: bound by the bytes they move
  copy,             // a device copy or fill (cudaMemcpyAsync, cudaMemsetAsync)
};
inline constexpr std::array<GpuCostClass, 5> kGpuCostClasses = {
    GpuCostClass::gemm, GpuCostClass::cudnn_attention, GpuCostClass::own_attention, GpuCostClass::streaming,
    GpuCostClass::copy};
// "gemm", "cudnn_attention", "own_attention", "streaming", "copy".
const char* gpu_cost_class_name(GpuCostClass kind);

// The shape of an attention task, for the attention classes: B sequences of T positions, `heads`
// query heads (of the task's head group) and head size hs; forward or backward; causal.
struct AttentionWork {
  double B = 0, T = 0, heads = 0, hs = 0, kv_heads = 0;  // kv_heads: key/value heads the task reads
  bool backward = false;
};

// One task's work on a GPU, as its class charges it.
struct GpuWork {
  GpuCostClass kind = GpuCostClass::streaming;
  // gemm: the product's dimensions (M×K times K×N; a batch of them multiplies `flops`).
  double m = 0, n = 0, k = 0;
  double flops = 0;  // the FLOPs the kernel executes
  double bytes = 0;  // the bytes it moves through HBM
  // gemm: bytes of our own element-wise passes the task runs besides the product (a bias added or
  // summed in a kernel of its own), charged at HBM bandwidth on top.
  double pass_bytes = 0;
  AttentionWork attention{};
  bool bf16 = true;  // gemm: 2-byte inputs on the tensor cores; false: fp32 on the CUDA cores (no TF32)
  int kernels = 1;   // kernel launches (each pays the launch latency)
};

// An attention kernel's rate measured on a real GPU (scripts/gpu-check.sh's
// attention_calibration.json, `starzero platform --attention-calibration`): it replaces the
// published table (cuDNN) or the counted model (ours) for tasks of that kernel, direction and head
// size; FLOPs counted as causal_attention_flops.
struct MeasuredAttentionRate {
  GpuCostClass kernel = GpuCostClass::cudnn_attention;  // cudnn_attention or own_attention
  bool backward = false;
  double T = 0, hs = 0;
  double flops_per_s = 0;
};

// The figures the classes need, per GPU (sim/platform.hpp's machines fill them in).
struct GpuFigures {
  double bf16_tensor_flops = 0;  // dense tensor-core peak, 2-byte inputs
  double fp32_flops = 0;         // CUDA-core FMA peak (2 FLOPs per FMA)
  double memory_Bps = 0;         // HBM
  double sm_count = 0;           // streaming multiprocessors
  double clock_hz = 0;           // their boost clock
  double launch_s = 5e-6;        // per kernel
  // Measured attention rates, where a calibration gave them (shared: the figures are copied per task).
  std::shared_ptr<const std::vector<MeasuredAttentionRate>> measured_attention{};
};

// Microseconds one task of `work` takes on a GPU of `figures`: its class's time plus a launch
// latency per kernel. A term whose figures are missing (0) charges nothing.
double gpu_work_us(const GpuWork& work, const GpuFigures& figures);

// FLOPs of causal attention as the published tables count them: forward 4·B·H·T²·hs / 2,
// backward 2.5 times that.
double causal_attention_flops(const AttentionWork& work);

// `count` tasks of one work, for what a whole step asks of the GPU (a model's kernels per
// micro-batch: offload/footprint.hpp; the step bound: sim/step_bound.hpp).
struct CountedGpuWork {
  GpuWork work;
  double count = 1;
};
using GpuSecondsByClass = std::array<double, kGpuCostClasses.size()>;
// The seconds `kernels` take on a GPU of `figures`, by class (kGpuCostClasses' order).
GpuSecondsByClass gpu_seconds_by_class(const std::vector<CountedGpuWork>& kernels, const GpuFigures& figures);
// `kernels` with their attention tasks (either attention class) charged as `kind` (an fp32 task
// stays on our own kernel: cuDNN's flash attention is bf16), with that kernel's launches.
std::vector<CountedGpuWork> with_attention(std::vector<CountedGpuWork> kernels, GpuCostClass kind);

// The parts of the charge, for the tests and the docs.
// The published cuDNN flash-attention rate (FLOP/s, causal FLOPs counted) on an H100 SXM at
// sequence length T and head size hs, forward or backward (gpu_cost.cpp cites the table).
double cudnn_attention_rate_h100(double T, double hs, bool backward);
// The fraction of the tensor-core peak a GEMM of these dimensions reaches (assumed: see the
// source).
double gemm_efficiency(double m, double n, double k);
// Our scalar attention: the FP32 instructions per thread and (query, key) pair, and the L1
// wavefronts per pair, that its kernels issue (counted from tasks/nn_kernels.cu), and the
// seconds they take at the GPU's issue rate (4 schedulers × 32 lanes per SM per clock) and L1
// rate (one wavefront per SM per clock).
struct OwnAttentionCounts {
  double pairs = 0;                // causal (query, key) pairs of the task
  double thread_instructions = 0;  // over all pairs
  double l1_wavefronts = 0;
  double issue_s = 0, l1_s = 0;
};
OwnAttentionCounts own_attention_counts(const AttentionWork& work, const GpuFigures& figures);

}  // namespace starzero::sim
