#pragma once
// What one training step of a planned configuration asks of each resource, per rank, and the rates
// one rank gets on a machine with the host plan's defaults: the planner's side of the step bound
// (sim/step_bound.hpp; docs/sim.md, "Step bound"). `starzero plan --platform` and the
// simulated run's summary use these; a trace measures its own work (profile/trace_report.hpp).
#include <optional>

#include "offload/planner.hpp"
#include "sim/platform.hpp"
#include "sim/step_bound.hpp"

namespace starzero {

// One optimizer step of K = micro_batches forward and backward passes of `input` (validated),
// per rank:
//   compute      K × the footprint's training_flops (unknown without a model footprint or when
//                the model declares none);
//   CPU AdamW    under optimizer offload, for the n = Ψ' (ZeRO-0) or Ψ'/N parameters of the rank's
//                offloaded state, Ψ' the offloaded share (all of Ψ unless --offload-optimizer-fraction
//                keeps some on the GPU, whose device AdamW is not counted, as without offload):
//                bytes n·(2p + 2k) (gradient read, state read and written, parameter
//                written; 28 per parameter in bf16 with k = 12, as the adamw_cpu codelet declares)
//                and FLOPs 12·n;
//   PCIe         on a GPU only (on_gpu): under optimizer offload p·n bytes each way (the gradient
//                shard down, the updated parameter shard up); under parameter offload the shard
//                p·Ψ/N up twice per micro-batch (forward and backward gathers); at dp 1 with both
//                offloaded, the gradient p·Ψ down every micro-batch and back up for every one but
//                the first (streamed), and no separate parameter upload; under activation
//                offload the offloaded activations down and up once per micro-batch;
//   disk         under NVMe optimizer offload, the state on the disk node read and written once.
// The PCIe bytes at K = 1 add up to MemoryPlan::offload_transfer_bytes.
sim::StepWork plan_step_work(const PlanInput& input, int micro_batches = 1, bool on_gpu = true);

// The rates one of `input.dp` ranks gets on `machine` (sim::rates_of_machine): ranks share the
// machine while it has a GPU for each (without GPUs, one rank per machine), each with its share of
// the cores; under optimizer offload the CPU AdamW runs adam_threads threads (default: the host
// plan's, default_adam_threads), and without a GPU the compute runs on the CPU workers the host
// plan leaves (the rank's cores minus the AdamW's extra threads). std::invalid_argument for
// adam_threads outside 1..the rank's cores.
sim::ResourceRates planned_rates(const sim::MachineSpec& machine, const PlanInput& input,
                                 std::optional<int> adam_threads = std::nullopt);

}  // namespace starzero
