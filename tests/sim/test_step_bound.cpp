// Tests of the step bound (sim/step_bound.hpp), the planner's work per step and rates per rank
// (offload/step_work.hpp) and the models' FLOP counts (models/gpt_flops.hpp, llama_training_flops).
// Expected values are arithmetic written out here from the formulas of docs/sim.md ("Step
// bound") and the machines' figures (docs/sim.md, "The named machines"), never computed by
// the code under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "models/gpt_flops.hpp"
#include "models/gpt_layout.hpp"
#include "models/llama_flops.hpp"
#include "models/llama_layout.hpp"
#include "models/registry.hpp"
#include "offload/footprint.hpp"
#include "offload/planner.hpp"
#include "offload/step_work.hpp"
#include "sim/platform.hpp"
#include "sim/step_bound.hpp"

using namespace starzero;
using Catch::Detail::Approx;

namespace {

// h200x1 with 32 cores, as `starzero platform h200x1 --cpus 32` writes it.
sim::MachineSpec h200x1_32_cores() {
  sim::MachineOverrides cores;
  cores.cpus = 32;
  return sim::with_overrides(*sim::named_machine("h200x1"), cores);
}

// gpt-13B of the issue: `--preset gpt2-1558M --layers 40 --channels 5120 --heads 40`, T = 1024.
GptShape gpt_13b() { return GptShape{1024, 50257, 50304, 40, 40, 5120}; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a machine's rates: peaks times the simulator's derating", "[step_bound][rates]") {
  const sim::MachineSpec m = h200x1_32_cores();
  const sim::ResourceRates bf16 = sim::rates_of_machine(m, true, 0, 30);
  CHECK(bf16.compute_device == "GPU");
  CHECK(bf16.compute_flops_per_s == Approx(989e12 * 0.75));
  // 30 of 32 cores' share of 307.2 GB/s, at 0.8 of it.
  CHECK(bf16.adam_bytes_per_s == Approx(30 * 307.2e9 / 32 * 0.8));
  CHECK(bf16.adam_flops_per_s == Approx(30 * 128e9 * 0.75));
  CHECK(bf16.host_to_gpu_Bps == 55e9);
  CHECK(bf16.gpu_to_host_Bps == 55e9);
  CHECK(bf16.disk_read_Bps == 6.5e9);
  CHECK(bf16.disk_write_Bps == 3.5e9);
  CHECK(contains(bf16.source, "h200x1"));
  // fp32 runs on the CUDA cores' 67 TFLOP/s.
  CHECK(sim::rates_of_machine(m, false, 0, 30).compute_flops_per_s == Approx(67e12 * 0.75));
  // Without a GPU: the CPU cores compute, nothing crosses PCIe.
  sim::MachineOverrides no_gpu;
  no_gpu.gpus = 0;
  const sim::ResourceRates cpu = sim::rates_of_machine(sim::with_overrides(m, no_gpu), true, 31, 1);
  CHECK(cpu.compute_device == "CPU");
  CHECK(cpu.compute_flops_per_s == Approx(31 * 128e9 * 0.75));
  CHECK(cpu.host_to_gpu_Bps == 0);
  CHECK(cpu.gpu_to_host_Bps == 0);
  // PCIe is capped by the host memory it crosses.
  sim::MachineSpec slow_memory = m;
  slow_memory.host_memory_Bps = 40e9;
  CHECK(sim::rates_of_machine(slow_memory, true, 0, 1).host_to_gpu_Bps == 40e9);
  CHECK_THROWS_AS(sim::rates_of_machine(m, true, 33, 1), std::invalid_argument);
  CHECK_THROWS_AS(sim::rates_of_machine(m, true, 0, -1), std::invalid_argument);
}

TEST_CASE("step bound: each resource's work over its rate, the largest binds", "[step_bound]") {
  sim::StepWork work;
  work.compute_flops = 3e14;
  work.adam_bytes = 5e11;
  work.adam_flops = 1e9;
  work.host_to_gpu_bytes = 11e9;
  work.gpu_to_host_bytes = 22e9;
  work.disk_read_bytes = 13e9;
  work.disk_write_bytes = 7e9;
  sim::ResourceRates rates;
  rates.compute_flops_per_s = 1e14;  // 3 s
  rates.adam_threads = 4;
  rates.adam_bytes_per_s = 2.5e11;  // 2 s
  rates.adam_flops_per_s = 1e12;    // 0.001 s: the bytes are slower
  rates.host_to_gpu_Bps = 11e9;     // 1 s
  rates.gpu_to_host_Bps = 11e9;     // 2 s
  rates.disk_read_Bps = 6.5e9;      // 2 s
  rates.disk_write_Bps = 3.5e9;     // + 2 s = 4 s: the bound
  const sim::StepBound b = sim::step_bound(work, rates);
  REQUIRE(b.resources.size() == 5);
  CHECK(*b.time_of(sim::Resource::compute).seconds == Approx(3.0));
  CHECK(*b.time_of(sim::Resource::cpu_adam).seconds == Approx(2.0));
  CHECK(*b.time_of(sim::Resource::pcie_to_gpu).seconds == Approx(1.0));
  CHECK(*b.time_of(sim::Resource::pcie_to_host).seconds == Approx(2.0));
  CHECK(*b.time_of(sim::Resource::disk).seconds == Approx(4.0));
  REQUIRE(b.binding == sim::Resource::disk);
  CHECK(*b.bound_s() == Approx(4.0));
  CHECK(sim::efficiency(4.0, 5.0) == Approx(0.8));

  // The AdamW's FLOPs bind it when they are slower than its bytes (the simulator's roofline).
  rates.adam_flops_per_s = 1e8;  // 10 s
  CHECK(*sim::step_bound(work, rates).time_of(sim::Resource::cpu_adam).seconds == Approx(10.0));
  CHECK(sim::step_bound(work, rates).binding == sim::Resource::cpu_adam);

  // No work: 0 s; work at no known rate, or unknown work: no time, never the bound.
  sim::StepWork only_compute;
  sim::ResourceRates compute_only;
  compute_only.compute_flops_per_s = 1e12;
  only_compute.compute_flops = 2e12;
  only_compute.gpu_to_host_bytes = 1e9;  // a rate of 0: not known
  const sim::StepBound partial = sim::step_bound(only_compute, compute_only);
  CHECK(*partial.time_of(sim::Resource::cpu_adam).seconds == 0.0);
  CHECK_FALSE(partial.time_of(sim::Resource::pcie_to_host).seconds.has_value());
  CHECK(partial.binding == sim::Resource::compute);
  only_compute.compute_flops.reset();
  const sim::StepBound unknown = sim::step_bound(only_compute, compute_only);
  CHECK_FALSE(unknown.time_of(sim::Resource::compute).seconds.has_value());
  CHECK(unknown.binding == sim::Resource::cpu_adam);  // the only known times are 0 s
  CHECK(*unknown.bound_s() == 0.0);

  // Bad figures.
  sim::StepWork negative;
  negative.adam_bytes = -1;
  CHECK_THROWS_AS(sim::step_bound(negative, rates), std::invalid_argument);
  sim::ResourceRates nan_rate = rates;
  nan_rate.disk_read_Bps = std::nan("");
  CHECK_THROWS_AS(sim::step_bound(work, nan_rate), std::invalid_argument);
  CHECK_THROWS_AS(sim::efficiency(1.0, 0.0), std::invalid_argument);
}

TEST_CASE("GPT FLOPs per micro-batch: matmuls and attention, recomputation included", "[step_bound][flops]") {
  // GPT-2 124M, B = 4, T = 1024: N = 4096 rows, C = 768, L = 12, Vp = 50304.
  const GptShape s{1024, 50257, 50304, 12, 12, 768};
  const double N = 4096, C = 768, L = 12, Vp = 50304, B = 4, T = 1024;
  const double matmuls = 6 * N * (12 * C * C * L + Vp * C);  // forward 2, backward 4 per weight and row
  const double attention = (4 + 10) * B * T * T * C * L;
  CHECK(gpt_training_flops(s, 4, 1024, {}) == Approx(matmuls + attention).epsilon(1e-12));
  // Selective: the attention forward again; full: qkv, attproj and fc (8C² of the block's 12C²) too.
  CHECK(gpt_training_flops(s, 4, 1024, {Recompute::selective}) ==
        Approx(matmuls + attention + 4 * B * T * T * C * L).epsilon(1e-12));
  CHECK(gpt_training_flops(s, 4, 1024, {Recompute::full}) ==
        Approx(matmuls + attention + 2 * N * 8 * C * C * L + 4 * B * T * T * C * L).epsilon(1e-12));
  // About 6Ψ per token without recomputation, plus the attention's 14·L·C·T (7.0Ψ here).
  const double psi = double(s.param_count());
  CHECK(gpt_training_flops(s, 4, 1024, {}) / N / psi == Approx(6.0).epsilon(0.25));
  CHECK_THROWS_AS(gpt_training_flops(s, 0, 1024, {}), std::invalid_argument);
}

TEST_CASE("Llama FLOPs per micro-batch, and the footprints carry them", "[step_bound][flops]") {
  const LlamaShape s = llama_preset("llama3-1B");
  const double B = 2, T = 512, N = B * T, L = s.layers, C = s.channels, Q = s.qkv_channels(), H = s.ffn_hidden,
               V = s.vocab;
  const double block = 2 * N * (C * Q + C * C + 3 * C * H);
  const double none = L * (3 * block + (4 + 10) * B * T * T * C) + 6 * N * C * V;
  CHECK(llama_training_flops(s, 2, 512, {}) == Approx(none).epsilon(1e-12));
  CHECK(llama_training_flops(s, 2, 512, {Recompute::full}) ==
        Approx(none + L * (2 * N * (C * Q + C * C + 2 * C * H) + 4 * B * T * T * C)).epsilon(1e-12));
  CHECK(llama_footprint(s, 2, 512, {Recompute::selective}).training_flops ==
        Approx(none + L * 4 * B * T * T * C).epsilon(1e-12));
}

// The kernel list's GEMM FLOPs are the matmul FLOPs of the formula above, its attention tasks the
// attention's; the footprint the family hands the planner carries the list.
TEST_CASE("Llama GPU kernels per micro-batch: GEMMs and attention match the FLOPs", "[step_bound][flops]") {
  const LlamaShape s = llama_preset("llama3-1B");
  const double B = 2, T = 512, N = B * T, L = s.layers, C = s.channels, Q = s.qkv_channels(), H = s.ffn_hidden,
               V = s.vocab;
  const double block = 2 * N * (C * Q + C * C + 3 * C * H);
  struct Case {
    Recompute recompute;
    double recomputed_matmuls, recomputed_attention;
  };
  for (const Case c : {Case{Recompute::none, 0, 0}, Case{Recompute::selective, 0, 1},
                       Case{Recompute::full, 2 * N * (C * Q + C * C + 2 * C * H), 1}}) {
    CAPTURE(int(c.recompute));
    const std::vector<sim::CountedGpuWork> kernels =
        llama_training_gpu_kernels(s, DType::bf16, 2, 512, {c.recompute});
    double gemm = 0, forward_attention = 0, backward_attention = 0, gemm_bytes = 0;
    for (const sim::CountedGpuWork& k : kernels) {
      if (k.work.kind == sim::GpuCostClass::gemm) {
        gemm += k.count * k.work.flops;
        gemm_bytes += k.count * k.work.bytes;
      }
      if (k.work.kind == sim::GpuCostClass::own_attention)
        (k.work.attention.backward ? backward_attention : forward_attention) += k.count;
      if (k.work.kind == sim::GpuCostClass::own_attention) CHECK(k.work.attention.kv_heads == s.kv_heads);
    }
    // nn_matmul_backward_weight counts N·OC for a bias sum, bias or not (tasks/nn.cpp).
    const double bias_sums = N * (L * (Q + 2 * C + 2 * H) + V);
    CHECK(gemm == Approx(L * 3 * block + 6 * N * C * V + L * c.recomputed_matmuls + bias_sums).epsilon(1e-12));
    CHECK(forward_attention == L * (1 + c.recomputed_attention));
    CHECK(backward_attention == L);
    CHECK(gemm_bytes > 2 * double(s.param_count()) * 3);  // every weight read at least once per pass
  }
  CHECK_THROWS_AS(llama_training_gpu_kernels(s, DType::bf16, 2, 0, {}), std::invalid_argument);
  // The registry's footprint (what `starzero plan --model llama3` uses) carries both precisions.
  const ModelFootprint f = model_family("llama3").preset("llama3-1B").footprint(2, 512, {});
  CHECK(f.training_gpu_kernels_2.size() == llama_training_gpu_kernels(s, DType::bf16, 2, 512, {}).size());
  for (const sim::CountedGpuWork& k : f.training_gpu_kernels_4)
    if (k.work.kind == sim::GpuCostClass::gemm) CHECK_FALSE(k.work.bf16);  // fp32: the CUDA cores
}

TEST_CASE("planned work per step: AdamW bytes, PCIe each way, disk", "[step_bound][plan]") {
  constexpr std::int64_t kPsi = 7'000'000'000;
  PlanInput in;
  in.params = kPsi;
  in.dp = 8;
  in.stage = 2;
  // No offload: nothing but compute, and no model footprint: compute unknown.
  sim::StepWork w = plan_step_work(in);
  CHECK_FALSE(w.compute_flops.has_value());
  CHECK(w.adam_bytes == 0);
  CHECK(w.host_to_gpu_bytes + w.gpu_to_host_bytes + w.disk_read_bytes + w.disk_write_bytes == 0);

  // CPU offload at ZeRO-2, N = 8: the rank's 1/8 of the state; 2 + 24 + 2 bytes per parameter.
  in.offload.optimizer = OptimizerOffload::cpu;
  w = plan_step_work(in);
  const double shard = 7e9 / 8;
  CHECK(w.adam_bytes == Approx(28 * shard));
  CHECK(w.adam_flops == Approx(12 * shard));
  CHECK(w.gpu_to_host_bytes == Approx(2 * shard));  // the gradient shard down
  CHECK(w.host_to_gpu_bytes == Approx(2 * shard));  // the parameter shard up
  CHECK(w.host_to_gpu_bytes + w.gpu_to_host_bytes == Approx(plan_memory(in).offload_transfer_bytes));
  // ZeRO-0 holds all of it; fp32 moves 4 + 24 + 4 bytes; k = 8 moves 2 + 16 + 2.
  in.stage = 0;
  CHECK(plan_step_work(in).adam_bytes == Approx(28 * 7e9));
  in.stage = 2;
  in.precision = Precision::fp32;
  CHECK(plan_step_work(in).adam_bytes == Approx(32 * shard));
  in.precision = Precision::bf16;
  in.k = 8;
  CHECK(plan_step_work(in).adam_bytes == Approx(20 * shard));
  in.k = 12;
  // Without a GPU nothing crosses PCIe.
  w = plan_step_work(in, 1, false);
  CHECK(w.host_to_gpu_bytes + w.gpu_to_host_bytes == 0);
  CHECK(w.adam_bytes == Approx(28 * shard));

  // NVMe: the state (12 bytes per parameter of the shard) read and written once.
  in.offload.optimizer = OptimizerOffload::nvme;
  w = plan_step_work(in);
  CHECK(w.disk_read_bytes == Approx(12 * shard));
  CHECK(w.disk_write_bytes == Approx(12 * shard));

  // ZeRO-3 parameter offload: the parameter shard (2Ψ/N) goes up twice per micro-batch.
  in.stage = 3;
  in.offload.optimizer = OptimizerOffload::cpu;
  in.offload.params = ParamOffload::cpu;
  w = plan_step_work(in);
  CHECK(w.host_to_gpu_bytes == Approx(2 * shard + 2 * (2 * shard)));
  CHECK(w.gpu_to_host_bytes == Approx(2 * shard));
  CHECK(w.host_to_gpu_bytes + w.gpu_to_host_bytes == Approx(plan_memory(in).offload_transfer_bytes));
  w = plan_step_work(in, 4);  // four micro-batches: four times the gathers, one update
  CHECK(w.host_to_gpu_bytes == Approx(2 * shard + 4 * 2 * (2 * shard)));
  CHECK(w.adam_bytes == Approx(28 * shard));
  CHECK_THROWS_AS(plan_step_work(in, 0), PlanError);

  // One rank with the whole model on the host (any stage): the parameters up twice per micro-batch,
  // no separate upload of the update; the gradients streamed: down every micro-batch, back up for
  // every one but the first.
  PlanInput one;
  one.params = 1'000'000;
  one.stage = 1;
  one.offload.optimizer = OptimizerOffload::cpu;
  one.offload.params = ParamOffload::cpu;
  w = plan_step_work(one);
  CHECK(w.host_to_gpu_bytes == Approx(2 * 2e6));
  CHECK(w.gpu_to_host_bytes == Approx(2e6));
  CHECK(w.host_to_gpu_bytes + w.gpu_to_host_bytes == Approx(plan_memory(one).offload_transfer_bytes));
  w = plan_step_work(one, 4);
  CHECK(w.host_to_gpu_bytes == Approx(4 * 2 * 2e6 + 3 * 2e6));
  CHECK(w.gpu_to_host_bytes == Approx(4 * 2e6));
  CHECK(w.adam_bytes == Approx(28 * 1e6));

  // Activation offload and the model's FLOPs, from a footprint written here.
  PlanInput model;
  ModelFootprint f;
  f.params = 1'000'000;
  f.layer_kinds = {{"block", 1'000'000}};
  f.offloaded_activation_bytes_2 = 3'000'000;
  f.training_flops = 5e12;
  model.model = f;
  w = plan_step_work(model, 2);
  CHECK(*w.compute_flops == Approx(2 * 5e12));
  CHECK(w.gpu_to_host_bytes == Approx(2 * 3e6));
  CHECK(w.host_to_gpu_bytes == Approx(2 * 3e6));
}

TEST_CASE("planned rates: the host plan's AdamW threads and each rank's share of the machine", "[step_bound][plan]") {
  PlanInput in;
  in.params = 1'000'000'000;
  in.offload.optimizer = OptimizerOffload::cpu;
  const sim::MachineSpec h200 = h200x1_32_cores();
  // One GPU, 32 cores: 32 - 1 (the GPU's worker) - 1 (a CPU worker) = 30 AdamW threads.
  CHECK(planned_rates(h200, in).adam_threads == 30);
  CHECK(planned_rates(h200, in).adam_bytes_per_s == Approx(30 * 307.2e9 / 32 * 0.8));
  CHECK(planned_rates(h200, in, 8).adam_bytes_per_s == Approx(8 * 307.2e9 / 32 * 0.8));
  CHECK_THROWS_AS(planned_rates(h200, in, 33), std::invalid_argument);
  // h200x8, dp 8: 64 / 8 = 8 cores per rank, 6 AdamW threads.
  in.dp = 8;
  in.stage = 1;
  const sim::ResourceRates dgx = planned_rates(*sim::named_machine("h200x8"), in);
  CHECK(dgx.adam_threads == 6);
  CHECK(dgx.adam_bytes_per_s == Approx(6 * 614.4e9 / 64 * 0.8));
  // Without optimizer offload there is no CPU AdamW.
  in.offload.optimizer = OptimizerOffload::none;
  CHECK(planned_rates(h200, in).adam_threads == 0);
  // Without a GPU the CPU workers compute: all 32 cores (the AdamW has 1 thread, which is one of them).
  sim::MachineOverrides no_gpu;
  no_gpu.gpus = 0;
  in.dp = 1;
  in.offload.optimizer = OptimizerOffload::cpu;
  const sim::ResourceRates cpu = planned_rates(sim::with_overrides(h200, no_gpu), in);
  CHECK(cpu.compute_device == "CPU");
  CHECK(cpu.adam_threads == 1);
  CHECK(cpu.compute_flops_per_s == Approx(32 * 128e9 * 0.75));
}

TEST_CASE("the 13B of issue 27 on one H200 with 32 cores: CPU AdamW binds at about 1.56 s", "[step_bound][plan]") {
  PlanInput in;
  const ActivationPolicy full{Recompute::full};
  in.model = gpt_footprint(gpt_13b(), 8, full);
  in.model->training_flops = gpt_training_flops(gpt_13b(), 8, 1024, full);
  in.stage = 1;
  in.offload.optimizer = OptimizerOffload::cpu;
  const sim::StepBound b = sim::step_bound(plan_step_work(in), planned_rates(h200x1_32_cores(), in));
  // Ψ = Vp·C + T·C + L·(12C² + 13C) + 2C.
  const double C = 5120, L = 40, Vp = 50304, T = 1024, B = 8, N = B * T;
  const double psi = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  CHECK(psi == 12'848'384'000.0);
  // Per block: 72NC² (forward and backward matmuls) + 16NC² (full recomputation) and attention
  // 4 + 10 + 4 times B·T²·C; the classifier 6·N·Vp·C.
  const double flops = L * (88 * N * C * C + 18 * B * T * T * C) + 6 * N * Vp * C;
  CHECK(*b.time_of(sim::Resource::compute).seconds == Approx(flops / (989e12 * 0.75)));
  CHECK(*b.time_of(sim::Resource::cpu_adam).seconds == Approx(28 * psi / (30 * 307.2e9 / 32 * 0.8)));
  CHECK(*b.time_of(sim::Resource::pcie_to_gpu).seconds == Approx(2 * psi / 55e9));
  CHECK(*b.time_of(sim::Resource::pcie_to_host).seconds == Approx(2 * psi / 55e9));
  CHECK(*b.time_of(sim::Resource::disk).seconds == 0.0);
  CHECK(b.binding == sim::Resource::cpu_adam);
  CHECK(*b.bound_s() == Approx(1.5613).epsilon(1e-3));
  CHECK(*b.time_of(sim::Resource::compute).seconds == Approx(1.0779).epsilon(1e-3));
  CHECK(*b.time_of(sim::Resource::pcie_to_gpu).seconds == Approx(0.4672).epsilon(1e-3));
}

TEST_CASE("the bound's lines and JSON fields", "[step_bound][report]") {
  sim::StepWork work;
  work.compute_flops = 2e12;
  work.adam_bytes = 3e9;
  sim::ResourceRates rates;
  rates.compute_flops_per_s = 1e12;
  rates.adam_threads = 2;
  rates.adam_bytes_per_s = 1e9;
  rates.source = "test figures";
  const sim::StepBound b = sim::step_bound(work, rates);
  const std::vector<std::string> lines = sim::bound_lines(b, rates, 4.0);
  REQUIRE(lines.size() == 7);
  CHECK(contains(lines[0], "test figures"));
  CHECK(contains(lines[1], "GPU compute"));
  CHECK(contains(lines[1], "2.0000 s"));
  CHECK_FALSE(contains(lines[1], "<- bound"));
  CHECK(contains(lines[2], "CPU AdamW"));
  CHECK(contains(lines[2], "3.0000 s"));
  CHECK(contains(lines[2], "<- bound"));
  CHECK(contains(lines[2], "(2 threads)"));
  CHECK(lines[6] == "  steady step 4.0000 s, bound 3.0000 s (CPU AdamW), efficiency 75.0 %");
  CHECK(sim::bound_lines(b, rates, std::nullopt).back() == "  bound 3.0000 s (CPU AdamW)");

  const auto fields = sim::bound_json_fields(b, work, rates, 4.0);
  const auto value = [&](const std::string& key) {
    for (const auto& [k, v] : fields)
      if (k == key) return v;
    FAIL("no key " << key);
    return std::string();
  };
  CHECK(value("compute_s") == "2");
  CHECK(value("cpu_adam_s") == "3");
  CHECK(value("pcie_to_gpu_s") == "0");
  CHECK(value("bound_s") == "3");
  CHECK(value("binding") == "\"cpu_adam\"");
  CHECK(value("steady_step_s") == "4");
  CHECK(value("efficiency") == "0.75");
  CHECK(value("rates_source") == "\"test figures\"");
  const auto unsteady = sim::bound_json_fields(b, work, rates, std::nullopt);
  CHECK(unsteady[7].first == "steady_step_s");
  CHECK(unsteady[7].second == "null");
  CHECK(unsteady[8].first == "efficiency");
  CHECK(unsteady[8].second == "null");
}

TEST_CASE("the figures a traced run leaves: JSON both ways, malformed files refused", "[step_bound][file]") {
  sim::RunBoundFigures f;
  f.rates = sim::rates_of_machine(h200x1_32_cores(), true, 0, 30);
  f.planned.compute_flops = 8e14;
  f.planned.adam_bytes = 3.6e11;
  f.planned.host_to_gpu_bytes = 2.5e10;
  f.steady_step_s = 1.75;
  const sim::RunBoundFigures back = sim::run_bound_from_json(sim::run_bound_json(f));
  CHECK(back.rates.compute_device == "GPU");
  CHECK(back.rates.adam_threads == 30);
  CHECK(back.rates.adam_bytes_per_s == f.rates.adam_bytes_per_s);
  CHECK(back.rates.source == f.rates.source);
  CHECK(*back.planned.compute_flops == 8e14);
  CHECK(back.planned.adam_bytes == 3.6e11);
  CHECK(back.planned.host_to_gpu_bytes == 2.5e10);
  CHECK(*back.steady_step_s == 1.75);
  f.planned.compute_flops.reset();
  f.steady_step_s.reset();
  CHECK_FALSE(sim::run_bound_from_json(sim::run_bound_json(f)).planned.compute_flops.has_value());
  CHECK_FALSE(sim::run_bound_from_json(sim::run_bound_json(f)).steady_step_s.has_value());

  CHECK_THROWS_AS(sim::run_bound_from_json("{"), std::invalid_argument);
  CHECK_THROWS_AS(sim::run_bound_from_json("[]"), std::invalid_argument);
  std::string text = sim::run_bound_json(f);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    REQUIRE(t.find(from) != std::string::npos);
    return t.replace(t.find(from), from.size(), to);
  };
  CHECK_THROWS_AS(sim::run_bound_from_json(replaced("\"compute_device\": \"GPU\"", "\"compute_device\": \"TPU\"")),
                  std::invalid_argument);
  CHECK_THROWS_AS(sim::run_bound_from_json(replaced("\"adam_threads\": 30", "\"adam_threads\": -1")),
                  std::invalid_argument);
  CHECK_THROWS_AS(sim::run_bound_from_json(replaced("\"host_to_gpu_Bps\"", "\"host_to_gpu\"")), std::invalid_argument);
  CHECK_THROWS_AS(
      sim::run_bound_from_json(replaced("\"planned_adam_bytes\": 360000000000", "\"planned_adam_bytes\": -5")),
      std::invalid_argument);
}

TEST_CASE("a platform folder's machine, or a named one", "[step_bound][platform]") {
  CHECK(sim::named_or_folder_machine("a100x1").name == "a100x1");
  CHECK_THROWS_AS(sim::named_or_folder_machine("no-such-machine-or-folder"), std::invalid_argument);
  CHECK_THROWS_AS(sim::machine_in_folder("/nonexistent-starzero-folder"), std::invalid_argument);
}
