// Tests of the memory/communication planner (offload/planner.hpp), the per-layer plan it shares
// with the engine (offload/layer_plan.hpp), the host plan of offload runs (offload/host_plan.hpp)
// and the flag parser (apps/cli.hpp). Expected values are written as arithmetic from the
// seeds' formulas (docs/zero-formulas.md), never computed by the code under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "apps/cli.hpp"
#include "models/gpt_layout.hpp"
#include "models/llama_layout.hpp"
#include "offload/engine_options.hpp"
#include "offload/footprint.hpp"
#include "offload/host_plan.hpp"
#include "offload/layer_plan.hpp"
#include "offload/optimizer_split.hpp"
#include "offload/planner.hpp"
#include "offload/step_work.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;

namespace {

constexpr std::int64_t kPsi7B = 7'000'000'000;
constexpr double kPsi = 7e9;

PlanInput input7b(std::int64_t dp, int stage) {
  PlanInput in;
  in.params = kPsi7B;
  in.dp = dp;
  in.stage = stage;
  return in;
}

// GPT-2 124M: maxT 1024, V 50257 (Vp 50304), L 12, NH 12, C 768.
GptShape gpt2_124m_shape() { return GptShape{1024, 50257, 50304, 12, 12, 768}; }

ModelFootprint gpt2_124m(int batch = 4) { return gpt_footprint(gpt2_124m_shape(), batch); }

}  // namespace

// ---- Static memory: the seeds' formulas -----------------------------------------------------------

TEST_CASE("seeds' 7B table at dp 1, 8, 64 for every stage (exact bytes)", "[planner][seeds]") {
  // ZeRO-0: 2Ψ + 2Ψ + 12Ψ = 16Ψ at every dp.
  for (std::int64_t dp : {1, 8, 64}) CHECK(zero_memory_per_gpu(kPsi7B, dp, 0) == 16 * kPsi);
  // ZeRO-1: 2Ψ + 2Ψ + 12Ψ/N.
  CHECK(zero_memory_per_gpu(kPsi7B, 1, 1) == 112e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 1) == 28e9 + 84e9 / 8);  // 38.5e9
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 1) == 38.5e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 64, 1) == 28e9 + 84e9 / 64);  // 29.3125e9
  CHECK(zero_memory_per_gpu(kPsi7B, 64, 1) == 29.3125e9);
  // ZeRO-2: 2Ψ + (2Ψ + 12Ψ)/N.
  CHECK(zero_memory_per_gpu(kPsi7B, 1, 2) == 112e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 2) == 26.25e9);      // 14e9 + 98e9/8
  CHECK(zero_memory_per_gpu(kPsi7B, 64, 2) == 15.53125e9);  // 14e9 + 98e9/64
  // ZeRO-3: (2Ψ + 2Ψ + 12Ψ)/N.
  CHECK(zero_memory_per_gpu(kPsi7B, 1, 3) == 112e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 3) == 14e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 64, 3) == 1.75e9);  // 7e9/64*16 exactly
}

TEST_CASE("dp = 1: every stage equals ZeRO-0", "[planner][seeds]") {
  for (std::int64_t psi : {std::int64_t{1}, std::int64_t{124'475'904}, kPsi7B, std::int64_t{70'000'000'000}}) {
    for (bool accum : {false, true}) {
      const double zero0 = zero_memory_per_gpu(psi, 1, 0, 12, accum);
      for (int stage = 1; stage <= 3; ++stage) CHECK(zero_memory_per_gpu(psi, 1, stage, 12, accum) == zero0);
    }
  }
}

TEST_CASE("per-category split: what each stage shards", "[planner][seeds]") {
  struct Expect {
    int stage;
    double params, grads, optimizer;
  };
  // Ψ = 7e9, N = 8, bf16, k = 12.
  const Expect expect[] = {
      {0, 14e9, 14e9, 84e9},
      {1, 14e9, 14e9, 84e9 / 8},
      {2, 14e9, 14e9 / 8, 84e9 / 8},
      {3, 14e9 / 8, 14e9 / 8, 84e9 / 8},
  };
  for (const Expect& e : expect) {
    INFO("stage " << e.stage);
    const MemoryPlan p = plan_memory(input7b(8, e.stage));
    CHECK(p.params == kPsi7B);
    CHECK(p.seeds.params == e.params);
    CHECK(p.seeds.grads == e.grads);
    CHECK(p.seeds.optimizer == e.optimizer);
    CHECK(p.seeds.total() == e.params + e.grads + e.optimizer);
    // Without offload, everything is on the GPU.
    CHECK(p.gpu.total() == p.seeds.total());
    CHECK(p.host.total() == 0);
    CHECK(p.nvme.total() == 0);
    CHECK(p.offload_transfer_bytes == 0);
    // No GPT config: activations unknown; temporaries 0 below ZeRO-3, unknown at ZeRO-3.
    CHECK_FALSE(p.activations.has_value());
    CHECK(p.temporaries.has_value() == (e.stage < 3));
    CHECK(p.gpu_total() == p.gpu.total());
  }
}

TEST_CASE("fp32 gradient accumulation: +4Ψ at stages 0-1, +4Ψ/N at stages 2-3", "[planner][seeds]") {
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 0, 12, true) == 112e9 + 28e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 1, 12, true) == 38.5e9 + 28e9);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 2, 12, true) == 26.25e9 + 28e9 / 8);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 3, 12, true) == 14e9 + 28e9 / 8);
  CHECK(zero_memory_per_gpu(kPsi7B, 64, 3, 12, true) == 1.75e9 + 28e9 / 64);
  // Counted under gradients.
  PlanInput in = input7b(8, 2);
  in.fp32_grad_accum = true;
  CHECK(plan_memory(in).seeds.grads == 14e9 / 8 + 28e9 / 8);
  in.stage = 1;
  CHECK(plan_memory(in).seeds.grads == 14e9 + 28e9);
}

TEST_CASE("precision and k change the byte counts", "[planner][seeds]") {
  // fp32 params and grads: 4Ψ + 4Ψ + 12Ψ.
  CHECK(zero_memory_per_gpu(kPsi7B, 1, 0, 12, false, 4) == 20 * kPsi);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 2, 12, false, 4) == 4 * kPsi + (4 * kPsi + 12 * kPsi) / 8);
  PlanInput in = input7b(8, 3);
  in.precision = Precision::fp16;
  CHECK(plan_memory(in).seeds.total() == 16 * kPsi / 8);
  in.precision = Precision::fp32;
  CHECK(plan_memory(in).seeds.total() == 20 * kPsi / 8);
  // k = 8 (e.g. an 8-byte optimizer), k = 0 (SGD without state).
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 1, 8) == 4 * kPsi + 8 * kPsi / 8);
  CHECK(zero_memory_per_gpu(kPsi7B, 8, 1, 0) == 4 * kPsi);
  CHECK(precision_bytes(Precision::bf16) == 2);
  CHECK(precision_bytes(Precision::fp16) == 2);
  CHECK(precision_bytes(Precision::fp32) == 4);
  CHECK(precision_from_name("fp16") == Precision::fp16);
  CHECK_FALSE(precision_from_name("fp8").has_value());
}

// ---- Communication ------------------------------------------------------------------------------

TEST_CASE("communication: 2Ψ for stages 0-2, 3Ψ for stage 3, ring factor (N-1)/N", "[planner][comm]") {
  for (int stage = 0; stage <= 2; ++stage) {
    const CommVolume v = zero_communication_volume(kPsi7B, 8, stage);
    CHECK(v.psi_multiple == 2);
    CHECK(v.elements == 14e9);
    CHECK(v.bytes == 28e9);                  // bf16
    CHECK(v.ring_elements == 14e9 * 7 / 8);  // 12.25e9
    CHECK(v.ring_bytes == 24.5e9);
  }
  const CommVolume z3 = zero_communication_volume(kPsi7B, 8, 3);
  CHECK(z3.psi_multiple == 3);
  CHECK(z3.elements == 21e9);
  CHECK(z3.bytes == 42e9);
  CHECK(z3.ring_elements == 21e9 * 7 / 8);
  CHECK(z3.ring_bytes == 36.75e9);
  // ZeRO-3 is 1.5x DDP.
  CHECK(z3.elements == 1.5 * zero_communication_volume(kPsi7B, 8, 0).elements);
  // dp = 1: no collectives in the ring figure.
  CHECK(zero_communication_volume(kPsi7B, 1, 3).ring_bytes == 0);
  CHECK(zero_communication_volume(kPsi7B, 64, 1).ring_bytes == 28e9 * 63 / 64);
  // fp32: 4 bytes per element.
  CHECK(zero_communication_volume(kPsi7B, 8, 0, Precision::fp32).bytes == 56e9);
}

// ---- GPT -----------------------------------------------------------------------------------------

TEST_CASE("GPT-2 124M parameter count like llm.c", "[planner][gpt]") {
  const ModelFootprint g = gpt2_124m();
  CHECK(g.params == 124'475'904);
  CHECK(g.params == 50304 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768);
  // The batch does not change the parameter count.
  CHECK(gpt2_124m(1).params == 124'475'904);
  PlanInput in;
  in.model = g;
  CHECK(model_params(in) == 124'475'904);
}

TEST_CASE("GPT layers and the largest one", "[planner][gpt]") {
  const auto kinds = gpt2_124m().layer_kinds;
  REQUIRE(kinds.size() == 3);
  CHECK(kinds[0].count == 50304 * 768 + 1024 * 768);   // 39,419,904
  CHECK(kinds[1].count == 12 * 768 * 768 + 13 * 768);  // 7,087,872
  CHECK(kinds[2].count == 2 * 768);
  CHECK(gpt2_124m().largest_layer().name == "embedding");
  CHECK(gpt2_124m().largest_layer().count == 39'419'904);
  // A wide model with a small vocabulary: a transformer block is the largest.
  GptShape wide = gpt2_124m_shape();
  wide.channels = 8192;
  wide.heads = 64;
  wide.vocab = 1000;
  wide.padded_vocab = 1024;
  CHECK(gpt_footprint(wide, 4).largest_layer().name == "block");
  CHECK(gpt_footprint(wide, 4).largest_layer().count == 12LL * 8192 * 8192 + 13LL * 8192);
}

TEST_CASE("GPT activations: llm.c train_gpt2.c layout", "[planner][gpt]") {
  const std::int64_t L = 12, B = 4, T = 1024, C = 768, NH = 12, Vp = 50304;
  const std::int64_t expected = B * T * C             // encoded
                                + L * B * T * C       // ln1
                                + L * B * T           // ln1_mean
                                + L * B * T           // ln1_rstd
                                + L * B * T * 3 * C   // qkv
                                + L * B * T * C       // atty
                                + L * B * NH * T      // att_lse (memory-efficient attention)
                                + L * B * T * C       // attproj
                                + L * B * T * C       // residual2
                                + L * B * T * C       // ln2
                                + L * B * T           // ln2_mean
                                + L * B * T           // ln2_rstd
                                + L * B * T * 4 * C   // fch
                                + L * B * T * 4 * C   // fch_gelu
                                + L * B * T * C       // fcproj
                                + L * B * T * C       // residual3
                                + B * T * C           // lnf
                                + B * T               // lnf_mean
                                + B * T               // lnf_rstd
                                + B * T * Vp          // logits
                                + B * T * Vp          // probs
                                + B * T;              // losses
  CHECK(gpt2_124m().activation_elements() == expected);
  CHECK(gpt2_124m().activation_tensors.size() == 22);

  // What GptModel allocates for them (docs/activation-memory.md), per token, with e-byte
  // activations: every block's forward tensors (the attention's log-sum-exps and the layernorm
  // statistics in fp32), two slots of activation gradients (18C each), the embedding's and the
  // head's tensors, and the tokens. No T×T term anywhere: the attention keeps none.
  const auto buffers = [&](std::int64_t e, std::int64_t kept_per_block, std::int64_t slots) {
    const std::int64_t block = 18 * C * e + 16 + NH * 4;
    return double(B * T * (L * kept_per_block + slots * (block - kept_per_block) + 2 * 18 * C * e + 8 + 4 * C * e +
                           8 + 2 * Vp * e + Vp * 4 + 4));
  };
  const double none_bf16 = buffers(2, 18 * C * 2 + 16 + NH * 4, 0);
  PlanInput in;
  in.model = gpt2_124m();
  in.dp = 8;
  for (int stage = 0; stage <= 3; ++stage) {
    in.stage = stage;
    const MemoryPlan p = plan_memory(in);
    REQUIRE(p.activations.has_value());
    // The same at every stage (ZeRO does not shard activations).
    CHECK(*p.activations == none_bf16);
  }
  in.precision = Precision::fp32;
  CHECK(*plan_memory(in).activations == buffers(4, 18 * C * 4 + 16 + NH * 4, 0));
  in.dp = 64;
  CHECK(*plan_memory(in).activations == buffers(4, 18 * C * 4 + 16 + NH * 4, 0));
  // Recomputation: selective keeps qkv, residual2, fch and the output (9C), full the output
  // (C); the rest lives in W + 1 slots.
  in.precision = Precision::bf16;
  in.model = gpt_footprint(gpt2_124m_shape(), int(B), {Recompute::selective, 1});
  CHECK(*plan_memory(in).activations == buffers(2, 9 * C * 2, 2));
  in.model = gpt_footprint(gpt2_124m_shape(), int(B), {Recompute::full, 0});
  CHECK(*plan_memory(in).activations == buffers(2, C * 2, 1));
  // Full recomputation keeps a third less here: the logits, their gradient and fp32
  // probabilities (4 + 4 bytes per Vp per token at bf16), which no mode changes, are most of the rest.
  CHECK(*plan_memory(in).activations < none_bf16 * 0.7);
  // Offload: the kept tensors of the first L − (W + 1) blocks go to host memory and cross the bus
  // twice; the device keeps W + 1 blocks' worth.
  for (const Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    for (const int window : {0, 1, 3, 11, 20}) {
      const std::int64_t kept = mode == Recompute::none        ? 18 * C * 2 + 16 + NH * 4
                                : mode == Recompute::selective ? 9 * C * 2
                                                               : C * 2;
      const std::int64_t slots = mode == Recompute::none ? 0 : std::min<std::int64_t>(L, window + 1);
      const std::int64_t offloaded = std::max<std::int64_t>(0, L - (window + 1));
      in.model = gpt_footprint(gpt2_124m_shape(), int(B), {mode, window});
      const MemoryPlan kept_here = plan_memory(in);
      in.model = gpt_footprint(gpt2_124m_shape(), int(B), {mode, window, ActivationOffload::cpu});
      const MemoryPlan p = plan_memory(in);
      CAPTURE(recompute_name(mode), window);
      CHECK(*kept_here.activations == buffers(2, kept, slots));
      CHECK(kept_here.host_activations == 0);
      CHECK(p.host_activations == double(B * T * offloaded * kept));
      CHECK(*p.activations == *kept_here.activations - p.host_activations);
      CHECK(p.host_total() == kept_here.host_total() + p.host_activations);
      CHECK(p.offload_transfer_bytes == kept_here.offload_transfer_bytes + 2 * p.host_activations);
      CHECK(p.gpu_total() == kept_here.gpu_total() - p.host_activations);
    }
  }
  // Without the buffers' bytes (another model), llm.c's elements at the precision's size.
  ModelFootprint elements_only = gpt2_124m();
  elements_only.activation_bytes_2 = elements_only.activation_bytes_4 = 0;
  in.model = elements_only;
  CHECK(*plan_memory(in).activations == 2.0 * double(expected));
}

TEST_CASE("ZeRO-3 temporary full layers: (W+1) x largest layer x precision", "[planner][gpt]") {
  const double largest = 50304.0 * 768 + 1024.0 * 768;
  PlanInput in;
  in.model = gpt2_124m();
  in.dp = 8;
  in.stage = 3;
  CHECK(*plan_memory(in).temporaries == 2 * largest * 2);  // W = 1
  in.prefetch_depth = 0;
  CHECK(*plan_memory(in).temporaries == 1 * largest * 2);
  in.prefetch_depth = 3;
  CHECK(*plan_memory(in).temporaries == 4 * largest * 2);
  in.precision = Precision::fp32;
  CHECK(*plan_memory(in).temporaries == 4 * largest * 4);
  // GPU total = model states + activations + temporaries.
  const MemoryPlan p = plan_memory(in);
  CHECK(p.gpu_total() == p.gpu.total() + *p.activations + *p.temporaries);
  // dp = 1 without parameter offload: the shard is the model, nothing is gathered.
  in.dp = 1;
  CHECK(*plan_memory(in).temporaries == 0);
  in.offload.params = ParamOffload::cpu;
  CHECK(*plan_memory(in).temporaries == 4 * largest * 4);
  // Stages 0-2 keep full parameters: no temporaries.
  in.offload.params = ParamOffload::none;
  in.dp = 8;
  for (int stage = 0; stage <= 2; ++stage) {
    in.stage = stage;
    CHECK(*plan_memory(in).temporaries == 0);
  }
}

// ---- Offload placement ---------------------------------------------------------------------------

TEST_CASE("optimizer offload to cpu: state and staging copies on the host", "[planner][offload]") {
  PlanInput in = input7b(8, 2);
  in.offload.optimizer = OptimizerOffload::cpu;
  const MemoryPlan p = plan_memory(in);
  CHECK(p.seeds.total() == 26.25e9);  // the seeds' figure is unchanged
  CHECK(p.gpu.params == 14e9);
  CHECK(p.gpu.grads == 14e9 / 8);
  CHECK(p.gpu.optimizer == 0);
  CHECK(p.gpu.total() == 14e9 + 14e9 / 8);
  CHECK(p.host.optimizer == 84e9 / 8);
  CHECK(p.host.grads == 14e9 / 8);   // gradient shard, bf16
  CHECK(p.host.params == 14e9 / 8);  // updated parameter shard, bf16
  CHECK(p.nvme.total() == 0);
  CHECK(p.offload_transfer_bytes == 2 * 14e9 / 8);

  // ZeRO-0: the whole optimizer state and full-size staging copies.
  in.stage = 0;
  const MemoryPlan p0 = plan_memory(in);
  CHECK(p0.gpu.total() == 28e9);
  CHECK(p0.host.optimizer == 84e9);
  CHECK(p0.host.grads == 14e9);
  CHECK(p0.host.params == 14e9);

  // ZeRO-1: shard of the optimizer; full gradients stay on the GPU.
  in.stage = 1;
  const MemoryPlan p1 = plan_memory(in);
  CHECK(p1.gpu.total() == 28e9);
  CHECK(p1.host.total() == 84e9 / 8 + 2 * 14e9 / 8);
}

TEST_CASE("optimizer offload to nvme: state on NVMe, staging on the host", "[planner][offload]") {
  PlanInput in = input7b(8, 3);
  in.offload.optimizer = OptimizerOffload::nvme;
  const MemoryPlan p = plan_memory(in);
  CHECK(p.gpu.total() == 28e9 / 8);
  CHECK(p.nvme.optimizer == 84e9 / 8);
  CHECK(p.nvme.total() == 84e9 / 8);
  CHECK(p.host.optimizer == 0);
  CHECK(p.host.total() == 2 * 14e9 / 8);
}

TEST_CASE("parameter offload (ZeRO-3): parameter shard on the host", "[planner][offload]") {
  PlanInput in = input7b(8, 3);
  in.offload.params = ParamOffload::cpu;
  const MemoryPlan p = plan_memory(in);
  CHECK(p.gpu.params == 0);
  CHECK(p.gpu.grads == 14e9 / 8);
  CHECK(p.gpu.optimizer == 84e9 / 8);
  CHECK(p.host.params == 14e9 / 8);
  CHECK(p.host.total() == 14e9 / 8);
  CHECK(p.offload_transfer_bytes == 2 * 14e9 / 8);  // up for forward and for backward

  // Both: the parameter shard on the host is also the optimizer's staging buffer (not twice).
  in.offload.optimizer = OptimizerOffload::cpu;
  const MemoryPlan both = plan_memory(in);
  CHECK(both.gpu.total() == 14e9 / 8);
  CHECK(both.host.params == 14e9 / 8);
  CHECK(both.host.grads == 14e9 / 8);
  CHECK(both.host.optimizer == 84e9 / 8);
  CHECK(both.host.total() == (2 + 2 + 12) * kPsi / 8);
}

TEST_CASE("memory floor as dp grows", "[planner][seeds]") {
  PlanInput in = input7b(8, 0);
  CHECK(gpu_floor_bytes(in) == 112e9);
  in.stage = 1;
  CHECK(gpu_floor_bytes(in) == 28e9);  // 2Ψ + 2Ψ
  in.stage = 2;
  CHECK(gpu_floor_bytes(in) == 14e9);  // 2Ψ
  in.stage = 3;
  CHECK(gpu_floor_bytes(in) == 0);  // without a GPT config nothing else is known
  PlanInput gpt;
  gpt.model = gpt2_124m();
  gpt.stage = 3;
  const double act = double(gpt2_124m().activation_bytes_2);  // GptModel's buffers, bf16
  CHECK(gpu_floor_bytes(gpt) == act + 2 * (50304.0 * 768 + 1024.0 * 768) * 2);
}

// ---- Fit check -----------------------------------------------------------------------------------

TEST_CASE("70B on 4 x 80 GB: ZeRO-3 with offload, or plain ZeRO-3 from dp 14", "[planner][fit]") {
  PlanInput in;
  in.params = 70'000'000'000;
  in.dp = 4;
  MemoryLimits limits;
  limits.gpu_bytes = 80e9;
  const FitReport f = check_fit(in, limits);
  CHECK(f.dp == 4);
  CHECK(f.options.size() == 15);  // 4 stages x 3 optimizer placements + 3 with parameter offload
  REQUIRE(f.recommended.has_value());
  const FitOption& rec = f.options[*f.recommended];
  CHECK(rec.stage == 3);
  CHECK(rec.offload.optimizer == OptimizerOffload::cpu);
  CHECK(rec.offload.params == ParamOffload::none);
  CHECK(rec.plan.gpu_total() == 4 * 70e9 / 4);    // 2Ψ/N + 2Ψ/N = 70 GB
  CHECK(rec.plan.host_total() == 16 * 70e9 / 4);  // 12Ψ/N + 2Ψ/N + 2Ψ/N = 280 GB
  for (const FitOption& o : f.options) {
    if (!o.offloaded()) CHECK_FALSE(o.fits());  // 1120, 490, 385, 280 GB
  }
  // 16Ψ/N <= 80e9 from N = 1120e9/80e9 = 14; stages 0-2 keep >= 2Ψ = 140 GB at any dp.
  CHECK(f.min_dp_without_offload[3] == 14);
  CHECK_FALSE(f.min_dp_without_offload[0].has_value());
  CHECK_FALSE(f.min_dp_without_offload[1].has_value());
  CHECK_FALSE(f.min_dp_without_offload[2].has_value());

  // With only 100 GB of host memory per rank, the optimizer goes to NVMe.
  limits.host_bytes = 100e9;
  const FitReport f2 = check_fit(in, limits);
  REQUIRE(f2.recommended.has_value());
  CHECK(f2.options[*f2.recommended].stage == 3);
  CHECK(f2.options[*f2.recommended].offload.optimizer == OptimizerOffload::nvme);
}

TEST_CASE("fit check prefers no offload, then less communication, then less memory", "[planner][fit]") {
  MemoryLimits limits;
  limits.gpu_bytes = 40e9;
  const FitReport f = check_fit(input7b(8, 0), limits);
  REQUIRE(f.recommended.has_value());
  // ZeRO-1 (38.5), ZeRO-2 (26.25), ZeRO-3 (14) fit; ZeRO-2 moves 2Ψ (ZeRO-3: 3Ψ) and needs less than ZeRO-1.
  CHECK(f.options[*f.recommended].stage == 2);
  CHECK_FALSE(f.options[*f.recommended].offloaded());
  CHECK(f.min_dp_without_offload[1] == 7);  // 28e9 + 84e9/N <= 40e9 from N = 7
  CHECK(f.min_dp_without_offload[2] == 4);  // 14e9 + 98e9/N <= 40e9 from N = 98/26 -> 4
  CHECK(f.min_dp_without_offload[3] == 3);  // 112e9/N <= 40e9 from N = 2.8 -> 3
  CHECK(offload_rank(OptimizerOffload::none, ParamOffload::none) <
        offload_rank(OptimizerOffload::cpu, ParamOffload::none));
  CHECK(offload_rank(OptimizerOffload::cpu, ParamOffload::none) <
        offload_rank(OptimizerOffload::none, ParamOffload::cpu));
  CHECK(offload_rank(OptimizerOffload::cpu, ParamOffload::cpu) <
        offload_rank(OptimizerOffload::nvme, ParamOffload::none));

  // 1 GB of GPU for 7B at dp 1: only the whole model on the host fits, parameters, gradients (streamed)
  // and optimizer state; without a model shape its windows on the GPU are unknown, the model states there 0.
  limits.gpu_bytes = 1e9;
  const FitReport host_only = check_fit(input7b(1, 0), limits);
  REQUIRE(host_only.recommended.has_value());
  const FitOption& all_host = host_only.options[*host_only.recommended];
  CHECK(all_host.offload.optimizer == OptimizerOffload::cpu);
  CHECK(all_host.offload.params == ParamOffload::cpu);
  CHECK(all_host.plan.gpu.total() == 0);
  CHECK(all_host.plan.host.total() == 16 * 7e9);
  CHECK_FALSE(all_host.plan.grads_in_flight.has_value());
  CHECK(host_only.min_dp_without_offload[3] == 112);  // 112e9/N <= 1e9
  // Nothing fits: 1 GB of host memory too.
  limits.host_bytes = 1e9;
  CHECK_FALSE(check_fit(input7b(1, 0), limits).recommended.has_value());
}

TEST_CASE("fit check with a GPT config counts activations and temporaries", "[planner][fit]") {
  PlanInput in;
  in.model = gpt2_124m();
  in.dp = 8;
  const double psi = 124'475'904.0;
  const double act = double(gpt2_124m().activation_bytes_2);  // GptModel's buffers, bf16
  const double temps = 2 * (50304.0 * 768 + 1024.0 * 768) * 2;
  MemoryLimits limits;
  limits.gpu_bytes = 16 * psi / 8 + act + temps;  // exactly plain ZeRO-3 at dp 8
  const FitReport f = check_fit(in, limits);
  for (const FitOption& o : f.options) {
    if (o.stage == 3 && !o.offloaded()) CHECK(o.fits());
    if (o.stage == 2 && !o.offloaded()) CHECK_FALSE(o.fits());  // 2Ψ + 14Ψ/8 + act > limit
  }
  CHECK(f.min_dp_without_offload[3] == 8);
}

// ---- Validation ----------------------------------------------------------------------------------

TEST_CASE("invalid planner input throws PlanError", "[planner][errors]") {
  CHECK_THROWS_AS(zero_memory_per_gpu(0, 8, 0), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(-7, 8, 0), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 0, 0), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, -1, 0), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 8, -1), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 8, 4), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 8, 1, -1), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 8, 1, std::nan("")), PlanError);
  CHECK_THROWS_AS(zero_memory_per_gpu(kPsi7B, 8, 1, 12, false, 3), PlanError);
  CHECK_THROWS_AS(zero_communication_volume(0, 8, 0), PlanError);
  CHECK_THROWS_AS(zero_communication_volume(kPsi7B, 0, 0), PlanError);
  CHECK_THROWS_AS(zero_communication_volume(kPsi7B, 8, 4), PlanError);

  for (int stage = 0; stage <= 2; ++stage) {
    PlanInput in = input7b(8, stage);
    in.offload.params = ParamOffload::cpu;
    CHECK_THROWS_AS(plan_memory(in), PlanError);
  }
  PlanInput in = input7b(8, 3);
  in.prefetch_depth = -1;
  CHECK_THROWS_AS(plan_memory(in), PlanError);

  // GPT shapes: non-positive fields, heads not dividing channels, a non-positive batch, counts
  // that overflow (gpt_footprint's std::invalid_argument); a disagreeing params.
  for (int field = 0; field < 6; ++field) {
    GptShape shape = gpt2_124m_shape();
    int* fields[] = {&shape.max_seq, &shape.vocab, &shape.padded_vocab, &shape.layers, &shape.heads, &shape.channels};
    *fields[field] = 0;
    CHECK_THROWS_AS(gpt_footprint(shape, 4), std::invalid_argument);
  }
  GptShape shape = gpt2_124m_shape();
  shape.heads = 7;
  CHECK_THROWS_AS(gpt_footprint(shape, 4), std::invalid_argument);
  CHECK_THROWS_AS(gpt_footprint(gpt2_124m_shape(), 0), std::invalid_argument);
  shape = gpt2_124m_shape();
  shape.max_seq = 1 << 30;  // B·T·(bytes per token) overflows 63 bits
  CHECK_THROWS_AS(gpt_footprint(shape, 1 << 30), std::invalid_argument);
  PlanInput g;
  g.model = gpt2_124m();
  g.params = 1000;
  CHECK_THROWS_AS(plan_memory(g), PlanError);
  g.params = 124'475'904;  // agreeing is fine
  CHECK_NOTHROW(plan_memory(g));
  g.params = 0;
  g.model->params = 0;  // a footprint without parameters
  CHECK_THROWS_AS(plan_memory(g), PlanError);

  MemoryLimits bad;
  bad.gpu_bytes = 0;
  CHECK_THROWS_AS(check_fit(input7b(8, 0), bad), PlanError);
  bad.gpu_bytes = -1;
  CHECK_THROWS_AS(check_fit(input7b(8, 0), bad), PlanError);
  bad.gpu_bytes.reset();
  bad.host_bytes = 0;
  CHECK_THROWS_AS(check_fit(input7b(8, 0), bad), PlanError);
  CHECK_THROWS_AS(min_dp_to_fit(input7b(8, 0), MemoryLimits{}, 0), PlanError);
  CHECK_THROWS_AS(check_fit(input7b(0, 0), MemoryLimits{}), PlanError);

  // Messages are one line.
  try {
    zero_memory_per_gpu(kPsi7B, 8, 4);
    FAIL("no throw");
  } catch (const PlanError& e) {
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    CHECK(std::string(e.what()).find("stage") != std::string::npos);
  }
}

// ---- One plan per layer (offload/layer_plan.hpp) -------------------------------------------------

namespace {

// A layer of 10 parameters on rank 1 of 4: shards of 3, full buffers of 12, own block at 3.
LayerPlanInput layer10(int stage, std::int64_t ranks = 4) {
  LayerPlanInput in;
  in.stage = stage;
  in.ranks = ranks;
  in.rank = ranks > 1 ? 1 : 0;
  in.dtype = DType::bf16;
  in.params = 10;
  return in;
}

std::vector<LayerBuffer> roles(const LayerPlan& plan) {
  std::vector<LayerBuffer> out;
  for (const PlannedBuffer& b : plan.buffers()) out.push_back(b.role);
  return out;
}

bool same_slice(const BufferSlice& a, LayerBuffer buffer, std::size_t offset, std::size_t count) {
  return a.buffer == buffer && a.offset == offset && a.count == count;
}

using LB = LayerBuffer;
using Places = std::vector<MemoryPlace>;

}  // namespace

TEST_CASE("ZeRO state: what each stage shards on several ranks, nothing on one", "[planner][layer_plan]") {
  for (int stage = 0; stage <= 3; ++stage) {
    const ZeroState one = ZeroState::of(stage, 1);
    CHECK_FALSE((one.collectives || one.sharded || one.shard_grads || one.shard_params));
    const ZeroState many = ZeroState::of(stage, 8);
    CHECK(many.collectives);
    CHECK(many.sharded == (stage >= 1));
    CHECK(many.shard_grads == (stage >= 2));
    CHECK(many.shard_params == (stage == 3));
  }
  // Checked before (check_zero_options): an assert here.
  CHECK_THROWS_AS(ZeroState::of(4, 2), std::logic_error);
  CHECK_THROWS_AS(ZeroState::of(0, 0), std::logic_error);
}

TEST_CASE("layer plan: buffers and operations of each stage without offload", "[planner][layer_plan]") {
  const LayerPlan z0(layer10(0));
  CHECK(z0.shard() == 3);
  CHECK(z0.padded() == 12);
  CHECK(z0.own_offset() == 3);
  CHECK(roles(z0) == std::vector<LayerBuffer>{LB::param, LB::grad, LB::optimizer_state});
  CHECK(z0.buffer(LB::optimizer_state).elements == 12);
  CHECK(z0.bytes(z0.buffer(LB::optimizer_state)) == 12 * 12);
  CHECK(z0.bytes(z0.buffer(LB::param)) == 12 * 2);
  CHECK(z0.grad_reduction() == GradReduction::all_reduce);
  CHECK(same_slice(z0.update().grad, LB::grad, 0, 12));
  CHECK(same_slice(z0.update().target, LB::param, 0, 12));
  CHECK(z0.publish(false).how == Publish::none);
  CHECK(z0.param_access() == ParamAccess::resident);
  CHECK_THROWS_AS(z0.buffer(LB::grad_shard), std::logic_error);

  const LayerPlan z1(layer10(1));
  CHECK(roles(z1) == std::vector<LayerBuffer>{LB::param, LB::grad, LB::optimizer_state});
  CHECK(z1.buffer(LB::optimizer_state).elements == 3);
  CHECK(z1.grad_reduction() == GradReduction::reduce_scatter_in_place);
  CHECK_FALSE(z1.reduce_every_micro_batch());
  CHECK(same_slice(z1.update().grad, LB::grad, 3, 3));  // its block of the full gradient
  CHECK(same_slice(z1.update().target, LB::param, 3, 3));
  CHECK(z1.publish(false).how == Publish::all_gather_in_place);

  const LayerPlan z2(layer10(2));
  CHECK(roles(z2) ==
        std::vector<LayerBuffer>{LB::param, LB::grad, LB::optimizer_state, LB::grad_shard, LB::grad_partial});
  CHECK(z2.buffer(LB::grad).lifetime == Lifetime::per_use);
  CHECK(z2.buffer(LB::grad_shard).held_at == Places{MemoryPlace::device});
  CHECK(z2.grad_reduction() == GradReduction::reduce_scatter_into_shard);
  CHECK(z2.reduce_every_micro_batch());
  CHECK(same_slice(z2.update().grad, LB::grad_shard, 0, 3));
  CHECK(same_slice(z2.update().target, LB::param, 3, 3));
  CHECK(z2.publish(false).how == Publish::all_gather_in_place);

  const LayerPlan z3(layer10(3));
  CHECK(roles(z3) == std::vector<LayerBuffer>{LB::param, LB::grad, LB::optimizer_state, LB::param_shard, LB::grad_shard,
                                              LB::grad_partial});
  CHECK(z3.buffer(LB::param).home == BufferHome::transient);
  CHECK(z3.buffer(LB::param).lifetime == Lifetime::per_use);
  CHECK(z3.param_access() == ParamAccess::gathered_per_use);
  CHECK(same_slice(z3.update().target, LB::param_shard, 0, 3));
  CHECK(z3.publish(false).how == Publish::none);

  // One rank: every stage is ZeRO-0 without collectives.
  for (int stage = 0; stage <= 3; ++stage) {
    const LayerPlan one(layer10(stage, 1));
    CHECK(roles(one) == std::vector<LayerBuffer>{LB::param, LB::grad, LB::optimizer_state});
    CHECK(one.padded() == 10);
    CHECK(one.grad_reduction() == GradReduction::none);
    CHECK(one.publish(false).how == Publish::none);
    CHECK(one.param_access() == ParamAccess::resident);
  }
}

TEST_CASE("layer plan: optimizer and parameter offload", "[planner][layer_plan]") {
  LayerPlanInput in = layer10(1);
  in.offload_optimizer = OptimizerOffload::cpu;
  const LayerPlan z1(in);
  // ZeRO-1: the shard comes down for the CPU AdamW, which writes a parameter shard on the host.
  CHECK(z1.buffer(LB::param).held_at == Places{MemoryPlace::device});
  CHECK(z1.buffer(LB::grad).held_at == Places{MemoryPlace::device});
  CHECK(z1.buffer(LB::grad_shard).held_at == Places{MemoryPlace::host});
  CHECK(z1.buffer(LB::param_shard).home == BufferHome::pinned_host);
  CHECK(z1.buffer(LB::optimizer_state).home == BufferHome::pinned_host);
  CHECK(z1.grad_reduction() == GradReduction::reduce_scatter_into_shard);
  CHECK(z1.update().kernel == UpdateKernel::cpu);
  CHECK(same_slice(z1.update().target, LB::param_shard, 0, 3));
  CHECK(z1.publish(false).how == Publish::all_gather_from_shard);
  CHECK(z1.publish(false).drop_device_shard);

  // ZeRO-0: the full gradient and parameters have host copies; the gradient's is its pinned home,
  // allocated once (not a copy StarPU pins when the CPU AdamW first reads it).
  in.stage = 0;
  const LayerPlan z0(in);
  CHECK(z0.buffer(LB::param).held_at == Places{MemoryPlace::device, MemoryPlace::host});
  CHECK(z0.buffer(LB::grad).home == BufferHome::pinned_host);
  CHECK(z0.buffer(LB::grad).held_at == Places{MemoryPlace::host, MemoryPlace::device});

  // ZeRO-3: the shard AdamW writes on the host keeps a device copy for the all-gathers.
  in.stage = 3;
  CHECK(LayerPlan(in).buffer(LB::param_shard).held_at == Places{MemoryPlace::host, MemoryPlace::device});
  in.offload_params = ParamOffload::cpu;
  CHECK(LayerPlan(in).buffer(LB::param_shard).held_at == Places{MemoryPlace::host});
  in.offload_optimizer = OptimizerOffload::nvme;
  CHECK(LayerPlan(in).buffer(LB::optimizer_state).home == BufferHome::disk);
  CHECK(LayerPlan(in).buffer(LB::optimizer_state).held_at == Places{MemoryPlace::disk});

  // One rank with the parameters on the host, at any stage (nothing is sharded): fetched for each
  // use; the gradient stays on the device unless the optimizer is offloaded too.
  for (int stage = 0; stage <= 3; ++stage) {
    LayerPlanInput one = layer10(stage, 1);
    one.offload_params = ParamOffload::cpu;
    const LayerPlan fetched(one);
    CHECK(fetched.param_access() == ParamAccess::fetched_per_use);
    CHECK(fetched.grad_access() == GradAccess::resident);
    CHECK(fetched.buffer(LB::param).home == BufferHome::pinned_host);
    CHECK(fetched.buffer(LB::param).held_at == Places{MemoryPlace::host});
    CHECK(fetched.buffer(LB::grad).held_at == Places{MemoryPlace::device});
    // With the optimizer offloaded, the gradient is streamed: its home on the host is the only
    // copy held for good (the device copy is in flight, counted by the ledger as the graph runs).
    one.offload_optimizer = OptimizerOffload::cpu;
    const LayerPlan streamed(one);
    CHECK(streamed.grad_access() == GradAccess::streamed);
    CHECK(streamed.buffer(LB::grad).home == BufferHome::pinned_host);
    CHECK(streamed.buffer(LB::grad).held_at == Places{MemoryPlace::host});
    CHECK(same_slice(streamed.update().grad, LB::grad, 0, 10));
    CHECK(same_slice(streamed.update().target, LB::param, 0, 10));
    CHECK(streamed.publish(false).how == Publish::none);
  }
  // Several ranks: only ZeRO-3 shards the parameters.
  LayerPlanInput two = layer10(2, 2);
  two.offload_params = ParamOffload::cpu;
  CHECK_THROWS_AS(LayerPlan(two), std::logic_error);  // the run's check refuses it first
  two.stage = 3;
  CHECK(LayerPlan(two).grad_access() == GradAccess::per_use);
}

TEST_CASE("layer plan: delayed update and fp32 gradient accumulation", "[planner][layer_plan]") {
  LayerPlanInput in = layer10(0, 1);
  in.delayed_update = true;
  const LayerPlan one(in);
  CHECK(same_slice(one.update().delayed_target, LB::param_next, 0, 10));
  CHECK(same_slice(one.update().target, LB::param, 0, 10));
  CHECK(one.publish(true).how == Publish::copy_next);
  CHECK(one.publish(true).destination == LB::param);
  CHECK(one.publish(false).how == Publish::none);
  // ZeRO-1/2: a separate parameter shard takes the delayed update; the all-gather publishes it.
  in = layer10(2);
  in.delayed_update = true;
  const LayerPlan z2(in);
  CHECK_FALSE(z2.has(LB::param_next));
  CHECK(z2.buffer(LB::param_shard).home == BufferHome::device);
  CHECK(same_slice(z2.update().delayed_target, LB::param_shard, 0, 3));
  CHECK(z2.publish(true).how == Publish::all_gather_from_shard);
  CHECK(z2.publish(false).how == Publish::all_gather_from_shard);
  // ZeRO-3: param_next is a shard, copied into param_shard.
  in.stage = 3;
  const LayerPlan z3(in);
  CHECK(z3.buffer(LB::param_next).elements == 3);
  CHECK(z3.publish(true).how == Publish::copy_next);
  CHECK(z3.publish(true).destination == LB::param_shard);

  in = layer10(1);
  in.fp32_grad_accum = true;
  CHECK(LayerPlan(in).fp32_accumulation() == Fp32Accumulation::full_before_reduction);
  CHECK(LayerPlan(in).buffer(LB::grad_accum).elements == 12);
  CHECK(LayerPlan(in).bytes(LayerPlan(in).buffer(LB::grad_accum)) == 12 * 4);
  in.stage = 2;
  CHECK(LayerPlan(in).fp32_accumulation() == Fp32Accumulation::shard_after_reduction);
  CHECK(LayerPlan(in).buffer(LB::grad_accum).elements == 3);
}

TEST_CASE("planner placement is the layer plan's, and padded layers sum to the plan at padded Ψ",
          "[planner][layer_plan]") {
  // The engine's GPT test model: L = 2, C = 34, T = 16, Vp = 256 (layer sizes not multiples of N).
  const std::vector<std::size_t> layers = {256 * 34 + 16 * 34, 12 * 34 * 34 + 13 * 34, 12 * 34 * 34 + 13 * 34, 68};
  for (std::int64_t N : {1, 2, 3}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (OptimizerOffload opt : {OptimizerOffload::none, OptimizerOffload::cpu, OptimizerOffload::nvme}) {
        for (ParamOffload par : {ParamOffload::none, ParamOffload::cpu}) {
          if (par == ParamOffload::cpu && stage != 3 && N > 1) continue;  // one rank: any stage
          for (bool accum : {false, true}) {
            INFO("N " << N << " stage " << stage << " optimizer " << offload_name(opt) << " params "
                      << offload_name(par) << " fp32 accum " << accum);
            // The engine's ledger: every real layer, padded.
            PlacedBytes engine;
            std::int64_t padded_psi = 0;
            for (std::size_t count : layers) {
              LayerPlanInput in;
              in.stage = stage;
              in.ranks = N;
              in.offload_optimizer = opt;
              in.offload_params = par;
              in.fp32_grad_accum = accum;
              in.dtype = DType::f32;
              in.params = count;
              const LayerPlan plan(in);
              add_placed_bytes(plan, true, engine);
              padded_psi += std::int64_t(plan.padded());
            }
            PlanInput input;
            input.params = padded_psi;
            input.dp = N;
            input.stage = stage;
            input.precision = Precision::fp32;
            input.fp32_grad_accum = accum;
            input.offload.optimizer = opt;
            input.offload.params = par;
            const MemoryPlan plan = plan_memory(input);
            for (auto [mine, theirs] : {std::pair{&engine.gpu, &plan.gpu}, std::pair{&engine.host, &plan.host},
                                        std::pair{&engine.nvme, &plan.nvme}}) {
              CHECK(mine->params == theirs->params);
              CHECK(mine->grads == theirs->grads);
              CHECK(mine->optimizer == theirs->optimizer);
            }
            // Without offload the placement is the seeds' figure, all on the GPU.
            if (opt == OptimizerOffload::none && par == ParamOffload::none) {
              CHECK(plan.gpu.total() == plan.seeds.total());
              CHECK(plan.host.total() + plan.nvme.total() == 0);
            }
          }
        }
      }
    }
  }
}

// ---- Host plan of offload runs (offload/host_plan.hpp) ----------------------------------------

namespace {

Topology machine16(bool gpu) {
  Topology t;
  t.cores = 16;
  t.hardware_threads = 32;
  t.numa_nodes = 2;
  if (gpu) t.gpus.push_back(GpuLocality{0, "0000:3b:00.0", 1});
  return t;
}

HostPlanInput cpu_offload(bool gpu) {
  HostPlanInput in;
  in.offload.optimizer = OptimizerOffload::cpu;
  in.gpu = gpu ? 0 : -1;
  in.memory.host.optimizer = 1e6;  // 1 MB: fits anywhere
  return in;
}

}  // namespace

TEST_CASE("host plan: CPU AdamW threads and StarPU workers on 16 cores", "[planner][host_plan]") {
  // With a GPU: AdamW gets 16 - 1 (CUDA worker) - 1 (a CPU worker) = 14 threads; StarPU keeps
  // 16 - 1 - 13 = 2 CPU workers; pinned memory goes to the GPU's NUMA node.
  HostPlan plan = plan_host(cpu_offload(true), machine16(true));
  CHECK(plan.adam_threads == 14);
  CHECK(plan.cpu_workers == 2);
  CHECK(plan.numa_node == 1);
  CHECK(plan.disk_bytes == 0);
  // Without a GPU the compute needs the cores: one AdamW thread, 16 CPU workers, no NUMA node.
  plan = plan_host(cpu_offload(false), machine16(false));
  CHECK(plan.adam_threads == 1);
  CHECK(plan.cpu_workers == 16);
  CHECK(plan.numa_node == -1);
  // Two ranks on the machine share it: 8 cores each.
  HostPlanInput two = cpu_offload(true);
  two.ranks_here = 2;
  plan = plan_host(two, machine16(true));
  CHECK(plan.adam_threads == 6);
  CHECK(plan.cpu_workers == 2);
  // Threads asked for; workers asked for stay.
  HostPlanInput asked = cpu_offload(true);
  asked.offload.adam_threads = 4;
  CHECK(plan_host(asked, machine16(true)).cpu_workers == 16 - 1 - 3);
  asked.cpu_workers = 3;
  CHECK(plan_host(asked, machine16(true)).cpu_workers == 3);
  // Parameters offloaded, optimizer not: AdamW stays on the device (1 thread).
  HostPlanInput params_only = cpu_offload(true);
  params_only.offload.optimizer = OptimizerOffload::none;
  params_only.offload.params = ParamOffload::cpu;
  CHECK(plan_host(params_only, machine16(true)).adam_threads == 1);
  CHECK(plan_host(params_only, machine16(true)).cpu_workers == 15);
  // No offload: the workers asked for (-1: StarPU's default) come back, nothing is checked.
  HostPlanInput none;
  none.memory.host.optimizer = 1e30;
  plan = plan_host(none, machine16(true));
  CHECK(plan.cpu_workers == -1);
  CHECK(plan.adam_threads == 1);
  CHECK(plan.numa_node == -1);
  // The run checks the options (check_engine_options); the host plan only asserts.
  asked.offload.adam_threads = 0;
  CHECK_THROWS_AS(plan_host(asked, machine16(true)), std::logic_error);
}

// Each rule of a run's options has one home and one message (offload/engine_options.hpp): the
// planner gives the same text, as a PlanError, and the layers below assert.
TEST_CASE("a run's rules: one message each, the same from the run's check and the planner", "[planner][rules]") {
  const auto message = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no throw";
  };
  EngineOptions run;
  run.zero.stage = 4;
  const std::string stage = message([&] { check_engine_options(run, 2); });
  CHECK(stage == "--stage 4 is not a ZeRO stage (0..3)");
  PlanInput plan = input7b(8, 4);
  CHECK_THROWS_AS(plan_memory(plan), PlanError);
  CHECK(message([&] { plan_memory(plan); }) == stage);

  run.zero.stage = 1;
  run.offload.params = ParamOffload::cpu;
  const std::string params = message([&] { check_engine_options(run, 2); });
  CHECK(params.find("--offload-params cpu needs --stage 3 with several ranks") == 0);
  CHECK(message([&] { check_engine_options(run, 1); }) == "no throw");  // one rank: any stage
  plan = input7b(8, 1);
  plan.offload.params = ParamOffload::cpu;
  CHECK(message([&] { plan_memory(plan); }) == params);
  LayerPlanInput layer;
  layer.stage = 1;
  layer.ranks = 2;
  layer.offload_params = ParamOffload::cpu;
  layer.params = 10;
  CHECK_THROWS_AS(LayerPlan(layer), std::logic_error);

  run = EngineOptions{};
  run.zero.grad_window = 0;
  const std::string window = message([&] { check_engine_options(run, 1); });
  CHECK(window == "--grad-window must be >= 1, got 0");
  plan = input7b(8, 2);
  plan.grad_window = 0;
  CHECK(message([&] { plan_memory(plan); }) == window);

  run = EngineOptions{};
  run.offload.optimizer = OptimizerOffload::cpu;
  run.offload.speculative_update = true;
  run.grad_clip = 0;
  CHECK(message([&] { check_engine_options(run, 1); }).find("--speculative-update needs clipping") == 0);
  run.grad_clip = 1;
  run.offload.adam_threads = 0;  // the offload concern's own rule, from validate
  CHECK(message([&] { check_engine_options(run, 1); }) == "CPU Adam threads must be >= 1, got 0");
}

TEST_CASE("host plan: host memory and NVMe space are checked", "[planner][host_plan]") {
  HostPlanInput absurd = cpu_offload(true);
  absurd.memory.host.optimizer = 1e30;
  try {
    plan_host(absurd, machine16(true));
    FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("too little host memory for this offload plan") != std::string::npos);
    CHECK(message.find("--offload-optimizer nvme") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  testing::TempDir dir("host_plan");
  HostPlanInput nvme = cpu_offload(true);
  nvme.offload.optimizer = OptimizerOffload::nvme;
  nvme.offload.nvme_path = dir / "nvme";
  nvme.offload.host_mem_limit_mib = 16;
  nvme.memory.host.optimizer = 0;
  nvme.memory.nvme.optimizer = 1e6;
  const HostPlan plan = plan_host(nvme, machine16(true));
  CHECK(plan.disk_bytes == 1'000'000 + (std::size_t(16) << 20) + (std::size_t(64) << 20));
  CHECK(std::filesystem::is_directory(dir / "nvme"));
  nvme.memory.nvme.optimizer = 1e30;
  CHECK_THROWS_WITH(plan_host(nvme, machine16(true)), Catch::Contains("--nvme-path: "));
}

// ---- Flag parsing (apps/cli.hpp) ---------------------------------------------------------

TEST_CASE("cli: counts with suffixes", "[planner][cli]") {
  CHECK(cli::parse_count("params", "7e9") == 7'000'000'000);
  CHECK(cli::parse_count("params", "7000000000") == 7'000'000'000);
  CHECK(cli::parse_count("params", "1.5B") == 1'500'000'000);
  CHECK(cli::parse_count("params", "125M") == 125'000'000);
  CHECK(cli::parse_count("params", "70B") == 70'000'000'000);
  CHECK(cli::parse_count("params", "4K") == 4'000);
  CHECK(cli::parse_count("params", "2T") == 2'000'000'000'000);
  CHECK(cli::parse_count("params", "1.1B") == 1'100'000'000);
  CHECK(cli::parse_count("params", "70e9") == 70'000'000'000);
  CHECK(cli::parse_count("params", "0.5K") == 500);
  CHECK(cli::parse_count("params", "1.5e3K") == 1'500'000);
  CHECK(cli::parse_count("params", "0") == 0);
  CHECK(cli::parse_number("k", "12") == 12.0);
  CHECK(cli::parse_number("k", "0.5") == 0.5);
}

TEST_CASE("cli: byte sizes", "[planner][cli]") {
  CHECK(cli::parse_bytes("gpu-mem", "80GB") == 80e9);
  CHECK(cli::parse_bytes("gpu-mem", "80gb") == 80e9);
  CHECK(cli::parse_bytes("gpu-mem", "80G") == 80e9);
  CHECK(cli::parse_bytes("gpu-mem", "80e9") == 80e9);
  CHECK(cli::parse_bytes("gpu-mem", "24GiB") == 24.0 * 1024 * 1024 * 1024);
  CHECK(cli::parse_bytes("gpu-mem", "512MiB") == 512.0 * 1024 * 1024);
  CHECK(cli::parse_bytes("gpu-mem", "4KiB") == 4096.0);
  CHECK(cli::parse_bytes("gpu-mem", "1.5TB") == 1.5e12);
  CHECK(cli::parse_bytes("gpu-mem", "2TiB") == 2.0 * 1024 * 1024 * 1024 * 1024);
  CHECK(cli::parse_bytes("gpu-mem", "4096") == 4096.0);
  CHECK(cli::parse_bytes("gpu-mem", "4096B") == 4096.0);
  CHECK(cli::parse_bytes("gpu-mem", "141GB") == 141e9);
}

TEST_CASE("cli: lists and choices", "[planner][cli]") {
  CHECK(cli::parse_count_list("dp", "1,8,64") == std::vector<std::int64_t>{1, 8, 64});
  CHECK(cli::parse_count_list("dp", "4") == std::vector<std::int64_t>{4});
  CHECK(cli::parse_count_list("dp", "1K,2K") == std::vector<std::int64_t>{1000, 2000});
  CHECK(cli::parse_choice("precision", "fp16", {"bf16", "fp16", "fp32"}) == "fp16");
  for (const char* bad : {"", ",", "1,", ",8", "1,,8", "1;8", "1, 8", "1,-8", "1,abc"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(cli::parse_count_list("dp", bad), UsageError);
  }
  CHECK_THROWS_AS(cli::parse_choice("precision", "fp8", {"bf16", "fp16", "fp32"}), UsageError);
  CHECK_THROWS_AS(cli::parse_choice("precision", "", {"bf16"}), UsageError);
}

TEST_CASE("cli: bad numbers are UsageErrors naming the flag and the value", "[planner][cli]") {
  const char* bad_counts[] = {"abc",   "1.5X", "",     "-3",   "1e",      "nan",   "NaN",
                              "inf",   "-inf", "+3",   "0x10", " 7",      "7 ",    "7e9x",
                              ".",     "e9",   "1.5",  "1e-3", "1e99999", "1e999", "99999999999999999999",
                              "1.5BB", "7 B",  "1e3e3"};
  for (const char* text : bad_counts) {
    INFO("'" << text << "'");
    CHECK_THROWS_AS(cli::parse_count("params", text), UsageError);
  }
  const char* bad_sizes[] = {"abc",  "1.5X",  "",      "-3", "1e",   "nan",    "inf",
                             "80XB", "80GBB", "80 GB", "GB", "80bb", "80Gib!", "1e999GB"};
  for (const char* text : bad_sizes) {
    INFO("'" << text << "'");
    CHECK_THROWS_AS(cli::parse_bytes("gpu-mem", text), UsageError);
  }
  for (const char* text : {"abc", "", "-1", "nan", "1e"}) {
    INFO("'" << text << "'");
    CHECK_THROWS_AS(cli::parse_number("k", text), UsageError);
  }
  try {
    cli::parse_count("params", "1.5X");
    FAIL("no throw");
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("--params") != std::string::npos);
    CHECK(msg.find("'1.5X'") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  // Control characters in values never break the one-line message.
  try {
    cli::parse_count("params", "7\n9");
    FAIL("no throw");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  // UsageError is a std::runtime_error.
  CHECK_THROWS_AS(cli::parse_count("params", "abc"), std::runtime_error);
}

namespace {
struct Argv {
  std::vector<std::string> args;
  std::vector<char*> ptrs;
  explicit Argv(std::initializer_list<const char*> list) : args(list.begin(), list.end()) {
    for (auto& a : args) ptrs.push_back(a.data());
  }
  int argc() const { return int(ptrs.size()); }
  char** argv() { return ptrs.data(); }
};

cli::ArgParser test_parser() {
  cli::ArgParser p("starzero test");
  p.option("params", "N", "count").option("dp", "LIST", "degrees").flag("json", "json output");
  return p;
}
}  // namespace

TEST_CASE("cli: ArgParser forms", "[planner][cli]") {
  {
    cli::ArgParser p = test_parser();
    Argv a{"test", "--params", "7e9", "--dp=1,8", "--json"};
    p.parse(a.argc(), a.argv());
    CHECK(p.value("params") == "7e9");
    CHECK(p.value("dp") == "1,8");
    CHECK(p.flag_set("json"));
    CHECK(p.given("params"));
  }
  {
    cli::ArgParser p = test_parser();
    Argv a{"test", "--params=1", "--params", "2", "--json=false"};
    p.parse(a.argc(), a.argv());
    CHECK(p.value("params") == "2");  // last wins
    CHECK_FALSE(p.flag_set("json"));
    CHECK_FALSE(p.given("dp"));
    CHECK_FALSE(p.value("dp").has_value());
  }
  {
    cli::ArgParser p = test_parser();
    Argv a{"test", "--params="};  // an empty value is a value (rejected later by parse_count)
    p.parse(a.argc(), a.argv());
    CHECK(p.value("params") == "");
  }
  {
    cli::ArgParser p = test_parser();
    Argv a{"test", "--params", "-3"};  // a negative value is taken, then rejected by parse_count
    p.parse(a.argc(), a.argv());
    CHECK(p.value("params") == "-3");
  }
  const std::initializer_list<const char*> bad[] = {
      {"test", "--bogus"},
      {"test", "--bogus=1"},
      {"test", "--params"},
      {"test", "--params", "--json"},
      {"test", "7e9"},
      {"test", "-p", "7"},
      {"test", "--"},
      {"test", "--json=maybe"},
      {"test", "--dp", "8", "extra"},
  };
  for (const auto& args : bad) {
    cli::ArgParser p = test_parser();
    Argv a(args);
    std::string joined;
    for (const char* s : args) joined += std::string(s) + " ";
    INFO(joined);
    CHECK_THROWS_AS(p.parse(a.argc(), a.argv()), UsageError);
  }
  const std::string help = test_parser().options_help();
  CHECK(help.find("--params N") != std::string::npos);
  CHECK(help.find("--json") != std::string::npos);
}

TEST_CASE("largest_fitting: per option, the size that fits with the next one not fitting", "[planner][fit]") {
  const auto model_of_size = [](int L) {
    GptShape shape = gpt2_124m_shape();
    shape.layers = L;
    return gpt_footprint(shape, 1);
  };
  PlanInput base;
  MemoryLimits limits;
  limits.gpu_bytes = 8e9;
  limits.host_bytes = 64e9;
  const std::vector<LargestFit> fits = largest_fitting(base, limits, model_of_size, 256);
  REQUIRE(fits.size() == check_fit([&] {
                            PlanInput in = base;
                            in.model = model_of_size(1);
                            return in;
                          }(), limits).options.size());
  for (std::size_t i = 0; i < fits.size(); ++i) {
    const LargestFit& f = fits[i];
    PlanInput in = base;
    if (f.size > 0) {
      in.model = model_of_size(f.size);
      CHECK(check_fit(in, limits).options[i].fits());
    }
    if (f.size < 256) {
      in.model = model_of_size(f.size + 1);
      CHECK_FALSE(check_fit(in, limits).options[i].fits());
    }
  }
  // Optimizer offload fits more layers than none at ZeRO-0 (option 0: none, option 1: cpu).
  CHECK(fits[1].size > fits[0].size);
  CHECK(fits[0].size > 0);
}

// ---- The optimizer state split (--offload-optimizer-fraction) -------------------------------------

TEST_CASE("optimizer split: the last layers holding at least F of the parameters", "[planner][split]") {
  const std::vector<std::int64_t> layers = {100, 10, 10, 10, 1};  // Ψ = 131, forward order
  const auto split = [&](double f) { return split_optimizer_state(layers, f); };
  CHECK(split(1).first_offloaded == 0);
  CHECK(split(1).offloaded_params == 131);
  CHECK(split(0).first_offloaded == 5);  // none
  CHECK(split(0).offloaded_params == 0);
  CHECK(split(0).device_params() == 131);
  // 0.05·131 = 6.55: the last layer (1) is fewer, the last two (11) reach it.
  CHECK(split(0.05).first_offloaded == 3);
  CHECK(split(0.05).offloaded_params == 11);
  // 0.2·131 = 26.2: 1 + 10 + 10 + 10 = 31 (layers 1-4).
  CHECK(split(0.2).first_offloaded == 1);
  CHECK(split(0.2).offloaded_params == 31);
  CHECK(split(0.2).offloaded(1));
  CHECK_FALSE(split(0.2).offloaded(0));
  CHECK(split(0.2).offloaded_layers() == 4);
  // A fraction that is exactly a run of last layers, as a ratio: that run, not one layer more.
  CHECK(split(31.0 / 131.0).first_offloaded == 1);
  CHECK(split(21.0 / 131.0).offloaded_params == 21);
  CHECK(split(1e-9).offloaded_params == 1);  // any share at all: the last layer
  CHECK(split(0.2).fraction() == 31.0 / 131.0);
  // Without layers: round(F·Ψ).
  CHECK(split_optimizer_state(std::int64_t(1000), 0.25).offloaded_params == 250);
  CHECK(split_optimizer_state(std::int64_t(1000), 0.25).layers == 0);
  CHECK_THROWS_AS(split(1.5), std::invalid_argument);
  CHECK_THROWS_AS(split(-0.1), std::invalid_argument);
  CHECK_THROWS_AS(split(std::nan("")), std::invalid_argument);
}

TEST_CASE("GPT and Llama 3 footprints list the engine's layers", "[planner][split]") {
  const auto same_layers = [](const ModelFootprint& f, const auto& layout) {
    REQUIRE(f.layer_params.size() == std::size_t(layout.layers()));
    std::int64_t sum = 0;
    for (int l = 0; l < layout.layers(); ++l) {
      CHECK(f.layer_params[std::size_t(l)] == std::int64_t(layout.layer_params(l)));
      sum += f.layer_params[std::size_t(l)];
    }
    CHECK(sum == f.params);
  };
  same_layers(gpt2_124m(), GptLayout(gpt2_124m_shape()));  // embedding, 12 blocks, final layernorm
  CHECK(gpt2_124m().layer_params.size() == 14);
  const LlamaShape llama = llama_preset("llama3-tiny");
  same_layers(llama_footprint(llama, 1), LlamaLayout(llama));  // embedding, blocks, head
}

TEST_CASE("optimizer offload of a fraction: the two shares placed apart", "[planner][split]") {
  PlanInput in = input7b(8, 2);
  in.offload.optimizer = OptimizerOffload::cpu;
  const MemoryPlan all = plan_memory(in);
  in.offload.optimizer_fraction = {1.0, false};
  const MemoryPlan one = plan_memory(in);  // F = 1 is what --offload-optimizer alone plans
  CHECK(one.gpu.total() == all.gpu.total());
  CHECK(one.host.total() == all.host.total());
  CHECK(one.offload_transfer_bytes == all.offload_transfer_bytes);
  CHECK(one.optimizer_split.offloaded_params == kPsi7B);

  // F = 0.25 of 7e9 (no layers: exactly 1.75e9 parameters) at ZeRO-2 on 8 ranks, bf16.
  in.offload.optimizer_fraction = {0.25, false};
  const MemoryPlan q = plan_memory(in);
  CHECK(q.optimizer_split.offloaded_params == 1'750'000'000);
  CHECK(q.gpu.params == 14e9);
  CHECK(q.gpu.grads == Approx(14e9 / 8));
  CHECK(q.gpu.optimizer == Approx(12 * 5.25e9 / 8));
  CHECK(q.host.optimizer == Approx(12 * 1.75e9 / 8));
  CHECK(q.host.grads == Approx(2 * 1.75e9 / 8));   // the offloaded share's gradient shard
  CHECK(q.host.params == Approx(2 * 1.75e9 / 8));  // and its updated parameter shard
  CHECK(q.offload_transfer_bytes == Approx(2 * 2 * 1.75e9 / 8));

  // F = 0: the state stays on the GPU, as without offload.
  in.offload.optimizer_fraction = {0.0, false};
  const MemoryPlan none = plan_memory(in);
  PlanInput plain = input7b(8, 2);
  CHECK(none.gpu.total() == plan_memory(plain).gpu.total());
  CHECK(none.host.total() == 0);
  CHECK(none.offload_transfer_bytes == 0);
  CHECK(none.optimizer_split.offloaded_params == 0);

  // Without optimizer offload the fraction is not used.
  plain.offload.optimizer_fraction = {0.5, false};
  CHECK(plan_memory(plain).host.total() == 0);

  // The CPU AdamW and the PCIe transfers of the step bound: the offloaded share only.
  in.offload.optimizer_fraction = {0.25, false};
  const sim::StepWork w = plan_step_work(in);
  const double n = 1.75e9 / 8;  // this rank's offloaded parameters
  CHECK(w.adam_bytes == Approx(28 * n));
  CHECK(w.adam_flops == Approx(12 * n));
  CHECK(w.gpu_to_host_bytes == Approx(2 * n));
  CHECK(w.host_to_gpu_bytes == Approx(2 * n));

  in.offload.optimizer_fraction = {1.5, false};
  CHECK_THROWS_AS(plan_memory(in), PlanError);
  in.offload.optimizer_fraction = {1.0, true};  // auto, not resolved
  CHECK_THROWS_AS(plan_memory(in), PlanError);
  CHECK_THROWS_AS(resolve_offload_fraction(in, std::nullopt), PlanError);
}

TEST_CASE("optimizer offload of a fraction of GPT-2 124M: whole layers from the last", "[planner][split]") {
  PlanInput in;
  in.model = gpt2_124m();
  in.precision = Precision::fp32;
  in.offload.optimizer = OptimizerOffload::cpu;
  in.offload.optimizer_fraction = {0.5, false};
  const MemoryPlan p = plan_memory(in);
  // Layers: embedding 50304·768 + 1024·768 = 39,419,904; 12 blocks of 7,087,872; final layernorm 1,536.
  // Ψ/2 = 62,237,952: the final layernorm and 9 blocks (63,792,384) are the first run to reach it.
  CHECK(p.optimizer_split.layers == 14);
  CHECK(p.optimizer_split.first_offloaded == 4);
  CHECK(p.optimizer_split.offloaded_params == 1536 + 9 * 7'087'872);
  CHECK(p.host.optimizer == 12.0 * (1536 + 9 * 7'087'872));
  CHECK(p.gpu.optimizer == 12.0 * (39'419'904 + 3 * 7'087'872));
  CHECK(p.host.grads == 4.0 * (1536 + 9 * 7'087'872));  // ZeRO-0: the offloaded layers' full gradient
}

TEST_CASE("speculative fraction: a second set of state for the last CPU-updated layers only", "[planner][split]") {
  // GPT-2 124M, fp32, ZeRO-0, one rank, the state of the last 9 blocks and the final layernorm
  // offloaded (F = 0.5, as above).
  PlanInput in;
  in.model = gpt2_124m();
  in.precision = Precision::fp32;
  in.offload.optimizer = OptimizerOffload::cpu;
  in.offload.optimizer_fraction = {0.5, false};
  const MemoryPlan sync = plan_memory(in);
  CHECK(sync.speculative_split.offloaded_params == 0);  // no --speculative-update: none
  in.offload.speculative_update = true;
  const MemoryPlan all = plan_memory(in);  // F = 1: every CPU-updated layer, no more
  CHECK(all.speculative_split.first_offloaded == 4);
  CHECK(all.host.optimizer == 2 * sync.host.optimizer);
  CHECK(all.gpu.total() == sync.gpu.total());
  // F = 0.2 of Ψ = 124,475,904 (24,895,180.8): the final layernorm and 4 blocks (28,353,024) are the
  // first run of last layers to reach it: layers 9-13, their 12 bytes per parameter twice.
  in.offload.speculative_fraction = {0.2, false};
  const MemoryPlan part = plan_memory(in);
  CHECK(part.speculative_split.first_offloaded == 9);
  CHECK(part.speculative_split.offloaded_params == 1536 + 4 * 7'087'872);
  CHECK(part.host.optimizer == sync.host.optimizer + 12.0 * (1536 + 4 * 7'087'872));
  CHECK(part.host.grads == sync.host.grads);
  CHECK(part.host.params == sync.host.params);
  CHECK(part.gpu.total() == sync.gpu.total());
  CHECK(describe_speculative_split(part.speculative_split, part.optimizer_split) ==
        "layers 9-13 speculative (28353024 of 124475904 parameters, F = 0.2278), layers 4-8 synchronous "
        "(CPU AdamW after the norm)");
  // F = 0: none; and never more than the offloaded layers.
  in.offload.speculative_fraction = {0.0, false};
  CHECK(plan_memory(in).host.total() == sync.host.total());
  in.offload.speculative_fraction = {0.9, false};
  CHECK(plan_memory(in).speculative_split.first_offloaded == 4);
  // On the device (no CPU AdamW) there is no speculation.
  in.offload.optimizer = OptimizerOffload::none;
  CHECK(plan_memory(in).speculative_split.offloaded_params == 0);
  in.offload.optimizer = OptimizerOffload::nvme;
  CHECK(plan_memory(in).speculative_split.offloaded_params == 0);
  in.offload.optimizer = OptimizerOffload::cpu;
  in.offload.speculative_fraction = {-0.1, false};
  CHECK_THROWS_AS(plan_memory(in), PlanError);
  in.offload.speculative_fraction = {1.0, true};  // auto, not resolved
  CHECK_THROWS_AS(plan_memory(in), PlanError);
  CHECK_THROWS_AS(resolve_speculative_fraction(in, std::nullopt), PlanError);
}

TEST_CASE("speculative fraction auto: the most last layers whose second set fits the host", "[planner][split]") {
  PlanInput in;
  in.model = gpt2_124m();
  in.precision = Precision::fp32;
  in.offload.optimizer = OptimizerOffload::cpu;
  in.offload.speculative_update = true;
  in.offload.speculative_fraction = {0.0, false};
  const double without = plan_memory(in).host_total();
  const double block = 12.0 * 7'087'872;  // a block's second set
  const double layernorm = 12.0 * 1536;
  // Room for the final layernorm's and 3 blocks' second sets, not quite for a 4th: layers 10-13.
  const double host = without + layernorm + 3.5 * block;
  const double f = auto_speculative_fraction(in, host);
  CHECK(f == double(1536 + 3 * 7'087'872) / double(124'475'904));
  in.offload.speculative_fraction = {f, false};
  const MemoryPlan p = plan_memory(in);
  CHECK(p.speculative_split.first_offloaded == 10);
  CHECK(p.host_total() <= host);
  CHECK(p.host_total() + block > host);
  // Exactly the room for them: the same layers.
  in.offload.speculative_fraction = {1.0, true};
  CHECK(resolve_speculative_fraction(in, p.host_total()).offload.speculative_fraction.value == f);
  // All fit: 1; not even the last layer: 0.
  CHECK(auto_speculative_fraction(in, without + 12.0 * 124'475'904) == 1.0);
  CHECK(auto_speculative_fraction(in, without + layernorm / 2) == 0.0);
  // Without layers (Ψ only) the share is continuous: floor of the room over k bytes.
  PlanInput flat;
  flat.params = 1'000'000;
  flat.offload.optimizer = OptimizerOffload::cpu;
  flat.offload.speculative_update = true;
  flat.offload.speculative_fraction = {0.0, false};
  const double base = plan_memory(flat).host_total();
  CHECK(auto_speculative_fraction(flat, base + 12.0 * 250'000 + 5) == 0.25);
}

TEST_CASE("offload fraction auto: the most state that fits the GPU beside the rest", "[planner][split]") {
  PlanInput in;
  in.model = gpt2_124m(8);
  in.offload.optimizer = OptimizerOffload::cpu;
  for (const auto& [dp, stage] : {std::pair<std::int64_t, int>{1, 0}, {8, 1}, {8, 2}, {8, 3}}) {
    in.dp = dp;
    in.stage = stage;
    PlanInput all = in;
    all.offload.optimizer_fraction = {1.0, false};
    const double rest = plan_memory(all).gpu_total();  // everything offloaded
    const double per_param = stage >= 1 ? 12.0 / double(dp) : 12.0;
    const double windows = stage >= 2 ? 3.0 * 39'419'904 * 2 : 0.0;  // (2 + 1) embeddings, bf16
    // A GPU whose room (after the margin) holds the state of 60 M parameters.
    const double gpu = (rest + windows + per_param * 60e6) / (1 - kAutoGpuMargin);
    in.offload.optimizer_fraction = {1.0, true};
    const PlanInput resolved = resolve_offload_fraction(in, gpu);
    CHECK_FALSE(resolved.offload.optimizer_fraction.automatic);
    CHECK(resolved.offload.optimizer_fraction.value == Approx(1 - 60e6 / double(in.model->params)).epsilon(1e-6));
    const MemoryPlan p = plan_memory(resolved);
    INFO("dp " << dp << " stage " << stage << ": " << p.optimizer_split.device_params() << " on the GPU");
    // Fits, and keeps as many whole first layers on the GPU as fit: the embedding and 2 blocks.
    CHECK(p.gpu_total() + windows <= gpu * (1 - kAutoGpuMargin));
    CHECK(p.optimizer_split.first_offloaded == 3);
    CHECK(p.optimizer_split.device_params() == 39'419'904 + 2 * 7'087'872);
    CHECK(p.optimizer_split.device_params() + 7'087'872 > 60'000'000);
  }
  // Room for everything: nothing offloaded; no room: all of it.
  CHECK(auto_offload_fraction(in, 1e15) == 0.0);
  CHECK(auto_offload_fraction(in, 1e6) == 1.0);
  // The fit check resolves auto per option against --gpu-mem.
  in.dp = 1;
  in.stage = 0;
  in.offload.optimizer_fraction = {1.0, false};
  const double room = plan_memory(in).gpu_total() / (1 - kAutoGpuMargin) + 1e9;  // 1 GB for state
  in.offload.optimizer_fraction = {1.0, true};
  const FitReport fit = check_fit(in, MemoryLimits{room, std::nullopt});
  bool some_split = false;
  for (const FitOption& o : fit.options)
    if (o.offload.optimizer != OptimizerOffload::none) {
      CHECK(o.plan.optimizer_split.fraction() < 1.0);
      some_split = true;
    }
  CHECK(some_split);
  CHECK_THROWS_AS(check_fit(in, MemoryLimits{std::nullopt, 1e12}), PlanError);
}

TEST_CASE("cli: --offload-optimizer-fraction", "[planner][cli]") {
  const auto parse = [](const char* value, OptimizerOffload offload) {
    cli::ArgParser p("starzero test");
    p.option("offload-optimizer-fraction", "F", "fraction");
    Argv a{"test", "--offload-optimizer-fraction", value};
    p.parse(a.argc(), a.argv());
    return cli::offload_fraction_option(p, offload);
  };
  CHECK(parse("0.5", OptimizerOffload::cpu).value == 0.5);
  CHECK_FALSE(parse("0.5", OptimizerOffload::cpu).automatic);
  CHECK(parse("0", OptimizerOffload::nvme).value == 0.0);
  CHECK(parse("1", OptimizerOffload::cpu).value == 1.0);
  CHECK(parse("auto", OptimizerOffload::cpu).automatic);
  for (const char* bad : {"1.5", "-0.5", "abc", "1K", "nan", "", "0.5x"})
    CHECK_THROWS_WITH(parse(bad, OptimizerOffload::cpu), Catch::Contains("--offload-optimizer-fraction"));
  CHECK_THROWS_WITH(parse("0.5", OptimizerOffload::none), Catch::Contains("--offload-optimizer cpu|nvme"));
  cli::ArgParser p("starzero test");
  p.option("offload-optimizer-fraction", "F", "fraction");
  CHECK(cli::offload_fraction_option(p, OptimizerOffload::none).value == 1.0);  // not given: all
}

TEST_CASE("cli: --speculative-fraction", "[planner][cli]") {
  const auto parse = [](const char* value, bool speculative_update) {
    cli::ArgParser p("starzero test");
    p.option("speculative-fraction", "F", "fraction");
    Argv a{"test", "--speculative-fraction", value};
    p.parse(a.argc(), a.argv());
    return cli::speculative_fraction_option(p, speculative_update);
  };
  CHECK(parse("0.25", true).value == 0.25);
  CHECK(parse("auto", true).automatic);
  for (const char* bad : {"1.5", "-0.5", "abc", "", "0.5x"})
    CHECK_THROWS_WITH(parse(bad, true), Catch::Contains("--speculative-fraction"));
  CHECK_THROWS_WITH(parse("0.5", false), Catch::Contains("--speculative-update"));
}

TEST_CASE("one rank with the whole model on the host: the GPU holds the windows and the activations",
          "[planner][layer_plan]") {
  // A footprint of Ψ = 1000 + 3·2000 + 500 with blocks of 2000 the largest layer.
  ModelFootprint f;
  f.params = 7500;
  f.layer_kinds = {{"embedding", 1000}, {"block", 2000}, {"head", 500}};
  f.activation_bytes_2 = 300;
  for (int stage = 0; stage <= 3; ++stage) {
    PlanInput in;
    in.model = f;
    in.stage = stage;
    in.offload.optimizer = OptimizerOffload::cpu;
    in.offload.params = ParamOffload::cpu;
    in.prefetch_depth = 2;
    in.grad_window = 3;
    const MemoryPlan p = plan_memory(in);
    INFO("stage " << stage);
    CHECK(p.gpu.total() == 0);
    CHECK(*p.temporaries == 3 * 2000 * 2);      // W + 1 layers fetched
    CHECK(*p.grads_in_flight == 3 * 2000 * 2);  // G gradients streamed
    CHECK(p.gpu_total() == 300 + 2 * 3 * 2000 * 2);
    CHECK(p.host.params == 2 * 7500);
    CHECK(p.host.grads == 2 * 7500);
    CHECK(p.host.optimizer == 12 * 7500);
    // The gradient comes down; the parameters go up for forward and backward (the update's own
    // upload is the next forward's fetch).
    CHECK(p.offload_transfer_bytes == 2 * 7500 + 2 * 2 * 7500);
    // Without the optimizer offloaded the gradients stay on the GPU.
    in.offload.optimizer = OptimizerOffload::none;
    const MemoryPlan resident = plan_memory(in);
    CHECK(*resident.grads_in_flight == 0);
    CHECK(resident.gpu.grads == 2 * 7500);
    CHECK(resident.gpu.optimizer == 12 * 7500);
  }
  PlanInput bad;
  bad.params = 100;
  bad.grad_window = 0;
  CHECK_THROWS_AS(plan_memory(bad), PlanError);
  bad.grad_window = 1;
  bad.dp = 2;
  bad.stage = 2;
  bad.offload.params = ParamOffload::cpu;
  CHECK_THROWS_AS(plan_memory(bad), PlanError);
}
