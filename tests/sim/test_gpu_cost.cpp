// Tests of the GPU cost classes (runtime/gpu_cost.hpp) that the simulator charges each GPU task and
// the step bound adds up, and of every codelet's declaration of one. Expected values are
// arithmetic written out here from the published figures and the hand counts of docs/sim.md
// ("GPU cost classes"), never computed by the code under test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "runtime/codelet.hpp"
#include "runtime/gpu_cost.hpp"
#include "sim/platform.hpp"
#include "tasks/attention_kernel.hpp"
#include "tasks/nn.hpp"
#include "tasks/nn_llama.hpp"

using namespace starzero;
using Catch::Detail::Approx;

namespace {

// The H200's figures as the named machine h200x1 gives them (docs/sim.md, "The named machines").
sim::GpuFigures h200() {
  return {.bf16_tensor_flops = 989e12, .fp32_flops = 67e12, .memory_Bps = 4.8e12, .sm_count = 132, .clock_hz = 1.98e9,
          .launch_s = 5e-6};
}

// gpt-13B's attention (B = 8, T = 1024, 40 heads of 128), all heads in one task.
sim::AttentionWork gpt13b_attention(bool backward) {
  return {.B = 8, .T = 1024, .heads = 40, .hs = 128, .kv_heads = 40, .backward = backward};
}

sim::GpuWork attention_work(sim::GpuCostClass kind, const sim::AttentionWork& a) {
  return {.kind = kind, .flops = sim::causal_attention_flops(a), .attention = a, .kernels = 1};
}

}  // namespace

TEST_CASE("every codelet with a CUDA function declares a GPU cost class", "[gpu_cost][codelets]") {
  const std::vector<CodeletDeclared> codelets = declared_codelets();
  int model_ops = 0, cuda = 0;
  for (const CodeletDeclared& c : codelets) {
    INFO(c.name);
    if (c.cuda) {
      ++cuda;
      CHECK(c.gpu_cost);
    }
    // The model's ops declare their class in every build, with CUDA or without.
    if (c.name.starts_with("nn_") || c.name.starts_with("llama_")) {
      ++model_ops;
      CHECK(c.gpu_cost);
    }
  }
  // GPT's 21 op codelets and Llama's 11 (tasks/nn.hpp, tasks/nn_llama.hpp).
  CHECK(model_ops == 32);
#ifdef STARZERO_WITH_CUDA
  CHECK(cuda >= model_ops);
#else
  CHECK(cuda == 0);
#endif
}

TEST_CASE("matmuls are cuBLAS GEMMs, attention follows the session's kernel", "[gpu_cost][codelets]") {
  const tasks::Dims d{.dtype = DType::bf16, .B = 8, .T = 1024, .C = 5120, .NH = 40, .V = 50257, .Vp = 50304};
  const tasks::NnArgs fc{.d = d, .bias = 0, .C = 5120, .OC = 20480};
  const sim::GpuWork mm = *tasks::nn::matmul_forward.gpu_work(fc, {});
  CHECK(mm.kind == sim::GpuCostClass::gemm);
  CHECK(mm.bf16);
  CHECK(mm.flops == Approx(2.0 * 8192 * 5120 * 20480));
  CHECK(mm.m == 8192);
  // The bias: out read and written once more, 2 bytes per element.
  CHECK(mm.pass_bytes == Approx(2.0 * (2.0 * 8192 * 20480 + 20480)));
  CHECK(tasks::nn::layernorm_forward.gpu_work({.d = d}, {})->kind == sim::GpuCostClass::streaming);

  tasks::set_session_attention(tasks::AttentionKernel::own);
  const sim::GpuWork own = *tasks::nn::attention_forward.gpu_work({.d = d}, {});
  CHECK(own.kind == sim::GpuCostClass::own_attention);
  // The causal FLOPs: 4·B·NH·T²·hs / 2.
  CHECK(own.flops == Approx(4.0 * 8 * 40 * 1024.0 * 1024 * 128 / 2));
  tasks::set_session_attention(tasks::AttentionKernel::cudnn);
  CHECK(tasks::nn::attention_backward.gpu_work({.d = d}, {})->kind == sim::GpuCostClass::cudnn_attention);
  // fp32 never runs cuDNN's flash attention.
  tasks::Dims fp32 = d;
  fp32.dtype = DType::f32;
  CHECK(tasks::nn::attention_forward.gpu_work({.d = fp32}, {})->kind == sim::GpuCostClass::own_attention);
  // Llama's grouped-query attention: NH query heads over NKV key/value heads.
  const tasks::LlamaArgs llama{.d = {.dtype = DType::bf16, .B = 1, .T = 4096, .C = 4096, .NH = 32, .NKV = 8, .H = 14336}};
  const sim::GpuWork gqa = *tasks::llama::attention_gqa_backward.gpu_work(llama, {});
  CHECK(gqa.kind == sim::GpuCostClass::cudnn_attention);
  CHECK(gqa.attention.heads == 32);
  CHECK(gqa.attention.kv_heads == 8);
  tasks::set_session_attention(tasks::AttentionKernel::own);
}

TEST_CASE("cuDNN's attention is charged at the published rates", "[gpu_cost][attention]") {
  // FlashAttention-3 paper, figure 5d: cuDNN, causal, head size 128, forward: 410 TFLOP/s at T = 1k,
  // 518 at 4k; figure 6b (backward, no mask) 408 at 1k, scaled by the causal forward's 410 / 574.
  CHECK(sim::cudnn_attention_rate_h100(1024, 128, false) == Approx(410e12));
  CHECK(sim::cudnn_attention_rate_h100(4096, 128, false) == Approx(518e12));
  CHECK(sim::cudnn_attention_rate_h100(1024, 128, true) == Approx(408e12 * 410.0 / 574.0));
  // Between table points: log-linear (T = 1448 ≈ 2^10.5: half way from 410 to 484).
  CHECK(sim::cudnn_attention_rate_h100(1448.1547, 128, false) == Approx(447e12).epsilon(1e-4));
  // Head size 64: the unmasked forward's ratio 373 / 574 at 1k.
  CHECK(sim::cudnn_attention_rate_h100(1024, 64, false) == Approx(410e12 * 373.0 / 574.0));

  // gpt-13B on an H200 (the H100's rates: the same 989 TFLOP/s peak): forward
  // 4·8·40·1024²·128 / 2 = 8.59e10 FLOPs at 410 TFLOP/s = 0.2095 ms, plus 5 us of launch.
  const double forward_us = sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(false)), h200());
  CHECK(forward_us == Approx(8.589934592e10 / 410e12 * 1e6 + 5).epsilon(1e-6));
  const double backward_us = sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(true)), h200());
  // The backward runs the forward graph again first (our codelets keep no O).
  CHECK(backward_us ==
        Approx((2.5 * 8.589934592e10 / (408e12 * 410.0 / 574.0) + 8.589934592e10 / 410e12) * 1e6 + 5).epsilon(1e-6));
  // An A100 (312 TFLOP/s dense) at the same fraction of its peak.
  sim::GpuFigures a100 = h200();
  a100.bf16_tensor_flops = 312e12;
  CHECK(sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(false)), a100) ==
        Approx(8.589934592e10 / (410e12 * 312.0 / 989.0) * 1e6 + 5).epsilon(1e-6));
}

TEST_CASE("our scalar attention is charged at least its instruction-issue floor", "[gpu_cost][attention]") {
  for (const bool backward : {false, true}) {
    INFO((backward ? "backward" : "forward"));
    const sim::AttentionWork a = gpt13b_attention(backward);
    const double us = sim::gpu_work_us(attention_work(sim::GpuCostClass::own_attention, a), h200());
    // The causal pairs: 8·40·1024·1025/2 = 167,936,000.
    const double pairs = 167936000.0;
    // Its FMAs alone at the FP32 peak: forward q·k and p·v, 2·hs FMAs per pair; backward 9 dot
    // products' worth (scores and dp twice in the query pass, once in the key pass, dq, dk, dv):
    // 9·hs FMAs. 2 FLOPs per FMA at 67 TFLOP/s.
    const double fma_floor_us = pairs * (backward ? 9.0 : 2.0) * 128 * 2 / 67e12 * 1e6;
    CHECK(us >= fma_floor_us);
    // The issue's hand model: at least 7.6 ms forward, 31 ms backward per task at gpt-13B's shape;
    // and every warp instruction issued (8·hs thread instructions per pair forward, 36·hs backward)
    // at 4 schedulers × 32 lanes × 132 SMs × 1.98 GHz.
    CHECK(us >= (backward ? 31e3 : 7.6e3));
    const double issue_us = pairs * (backward ? 36.0 : 8.0) * 128 / (128.0 * 132 * 1.98e9) * 1e6;
    CHECK(us >= issue_us);
    // And far more than cuDNN's.
    CHECK(us > 20 * sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, a), h200()));
  }
}

TEST_CASE("a GEMM runs at the measured large-GEMM fraction of the tensor peak, less when small", "[gpu_cost][gemm]") {
  // 8192³ bf16 measured at 769-798 of 989 TFLOP/s; the model: 0.78 · 8192 / (8192 + 96).
  CHECK(sim::gemm_efficiency(8192, 8192, 8192) == Approx(0.78 * 8192 / 8288));
  CHECK(sim::gemm_efficiency(8192, 768, 3072) == Approx(0.78 * 768 / 864));
  const sim::GpuWork work{.kind = sim::GpuCostClass::gemm, .m = 8192, .n = 8192, .k = 8192, .flops = 2.0 * 8192 * 8192 * 8192};
  CHECK(sim::gpu_work_us(work, h200()) == Approx(2.0 * 8192 * 8192 * 8192 / (989e12 * 0.78 * 8192 / 8288) * 1e6 + 5));
  // fp32: the CUDA cores (no TF32).
  sim::GpuWork fp32 = work;
  fp32.bf16 = false;
  CHECK(sim::gpu_work_us(fp32, h200()) == Approx(2.0 * 8192 * 8192 * 8192 / (67e12 * 0.78 * 8192 / 8288) * 1e6 + 5));
  // A bias pass of its own: 1 GB at 0.8 of 4.8 TB/s on top.
  sim::GpuWork biased = work;
  biased.pass_bytes = 1e9;
  CHECK(sim::gpu_work_us(biased, h200()) - sim::gpu_work_us(work, h200()) == Approx(1e9 / 3.84e12 * 1e6));
}

TEST_CASE("streaming kernels are charged their bytes at HBM bandwidth", "[gpu_cost][streaming]") {
  const sim::GpuWork work{.kind = sim::GpuCostClass::streaming, .flops = 1e9, .bytes = 3.84e9, .kernels = 2};
  CHECK(sim::gpu_work_us(work, h200()) == Approx(1000.0 + 10.0));
}

TEST_CASE("a step's kernels add up by class, and the plan's attention kernel is swapped in", "[gpu_cost][step]") {
  const sim::AttentionWork a = gpt13b_attention(true);
  std::vector<sim::CountedGpuWork> kernels = {
      {.work = {.kind = sim::GpuCostClass::streaming, .bytes = 3.84e9, .kernels = 0}, .count = 3},
      {.work = attention_work(sim::GpuCostClass::own_attention, a), .count = 2},
  };
  const std::vector<sim::CountedGpuWork> cudnn = sim::with_attention(kernels, sim::GpuCostClass::cudnn_attention);
  REQUIRE(cudnn.size() == 2);
  CHECK(cudnn[1].work.kind == sim::GpuCostClass::cudnn_attention);
  const sim::GpuSecondsByClass seconds = sim::gpu_seconds_by_class(cudnn, h200());
  CHECK(seconds[std::size_t(sim::GpuCostClass::streaming)] == Approx(3e-3));
  CHECK(seconds[std::size_t(sim::GpuCostClass::cudnn_attention)] ==
        Approx(2 * (2.5 * 8.589934592e10 / (408e12 * 410.0 / 574.0) + 8.589934592e10 / 410e12 + 3 * 5e-6)));
  CHECK(cudnn[1].work.kernels == 3);
  // Back to our own: two kernels per backward task.
  const std::vector<sim::CountedGpuWork> own = sim::with_attention(cudnn, sim::GpuCostClass::own_attention);
  CHECK(own[1].work.kind == sim::GpuCostClass::own_attention);
  CHECK(own[1].work.kernels == 2);
}

TEST_CASE("named machines state their SMs and clock, older machine files read without them", "[gpu_cost][platform]") {
  const sim::MachineSpec h = *sim::named_machine("h200x1");
  CHECK(h.gpu_sm_count == 132);
  CHECK(h.gpu_clock_hz == 1.98e9);
  std::string json = sim::machine_json(h);
  CHECK(json.find("\"gpu_sm_count\": 132") != std::string::npos);
  // Drop the two lines: a file from before them.
  for (const char* key : {"  \"gpu_sm_count\"", "  \"gpu_clock_hz\""}) {
    const std::size_t at = json.find(key);
    REQUIRE(at != std::string::npos);
    json.erase(at, json.find('\n', at) + 1 - at);
  }
  const std::size_t comma = json.rfind(",\n}");
  if (comma != std::string::npos) json.erase(comma, 1);
  const sim::MachineSpec old = sim::machine_from_json(json);
  CHECK(old.gpu_sm_count == 0);
  CHECK(old.gpu_clock_hz == 0);
  std::string negative = sim::machine_json(h);
  negative.replace(negative.find("\"gpu_clock_hz\": ") + 16, 1, "-");
  CHECK_THROWS_WITH(sim::machine_from_json(negative), Catch::Contains("gpu_clock_hz"));
}

TEST_CASE("rates measured on a GPU replace the published table and the counted model", "[gpu_cost][calibration]") {
  const std::vector<sim::MeasuredAttentionRate> measured = sim::attention_rates_from_calibration(R"({"gpu": "H200",
    "entries": [{"kernel": "cudnn", "direction": "forward", "T": 1024, "hs": 128, "tflops": 300},
                {"kernel": "own", "direction": "backward", "T": 1024, "hs": 128, "tflops": 0.5}]})");
  REQUIRE(measured.size() == 2);
  sim::GpuFigures f = h200();
  f.measured_attention = std::make_shared<const std::vector<sim::MeasuredAttentionRate>>(measured);
  // At the measured length: the causal FLOPs at the measured rate, plus the launch.
  CHECK(sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(false)), f) ==
        Approx(8.589934592e10 / 300e12 * 1e6 + 5).epsilon(1e-9));
  CHECK(sim::gpu_work_us(attention_work(sim::GpuCostClass::own_attention, gpt13b_attention(true)), f) ==
        Approx(2.5 * 8.589934592e10 / 0.5e12 * 1e6 + 5).epsilon(1e-9));
  // At T = 4096 cuDNN's rate moves along the published table: 300 × 518 / 410.
  sim::AttentionWork longer = gpt13b_attention(false);
  longer.T = 4096;
  CHECK(sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, longer), f) ==
        Approx(sim::causal_attention_flops(longer) / (300e12 * 518.0 / 410.0) * 1e6 + 5).epsilon(1e-9));
  // What was not measured (cuDNN's backward) keeps the published table.
  CHECK(sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(true)), f) ==
        Approx(sim::gpu_work_us(attention_work(sim::GpuCostClass::cudnn_attention, gpt13b_attention(true)), h200())));
  // Malformed calibrations: one line each.
  CHECK_THROWS_WITH(sim::attention_rates_from_calibration("{"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(sim::attention_rates_from_calibration(R"({"entries": [{"kernel": "cudnn", "direction": "up",
      "T": 1, "hs": 1, "tflops": 1}]})"),
                    Catch::Contains("direction"));
  CHECK_THROWS_WITH(sim::attention_rates_from_calibration(R"({"entries": [{"kernel": "own", "direction": "forward",
      "T": 1024, "hs": 128}]})"),
                    Catch::Contains("tflops"));
}
