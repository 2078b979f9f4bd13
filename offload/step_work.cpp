#include "offload/step_work.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "offload/host_plan.hpp"

namespace starzero {

sim::StepWork plan_step_work(const PlanInput& input, int micro_batches, bool on_gpu) {
  if (micro_batches < 1) throw PlanError("micro-batches must be >= 1, got " + std::to_string(micro_batches));
  const MemoryPlan plan = plan_memory(input);  // validates
  const double K = micro_batches, p = precision_bytes(input.precision);
  sim::StepWork work;
  if (input.model && input.model->training_flops > 0) work.compute_flops = K * input.model->training_flops;
  if (input.model && on_gpu) {
    const auto& kernels = input.precision == Precision::fp32 ? input.model->training_gpu_kernels_4
                                                             : input.model->training_gpu_kernels_2;
    work.gpu_kernels = sim::with_attention(kernels, input.attention);
    for (sim::CountedGpuWork& k : work.gpu_kernels) k.count *= K;
  }
  if (const double offloaded = double(plan.optimizer_split.offloaded_params); offloaded > 0) {
    // The parameters whose offloaded state this rank holds: all of the offloaded share at ZeRO-0, a
    // 1/N shard of it from ZeRO-1 on. (The device AdamW of the rest is left out, as without offload.)
    const double n = input.stage >= 1 ? offloaded / double(input.dp) : offloaded;
    work.adam_bytes = n * (2.0 * p + 2.0 * input.k);
    work.adam_flops = 12.0 * n;
    if (on_gpu) {
      // One rank with the parameters on the host (any stage): the next forward's fetch brings the
      // updated parameters up, and the full gradients are streamed: home after every micro-batch's
      // backward, back up for every later one's.
      const bool streamed = input.dp == 1 && input.offload.params == ParamOffload::cpu;
      work.gpu_to_host_bytes += (streamed ? K : 1.0) * p * n;  // the gradient shard comes down
      work.host_to_gpu_bytes += streamed ? (K - 1) * p * n     // the gradient goes back up
                                         : p * n;              // the updated parameter shard goes up
    }
    if (input.offload.optimizer == OptimizerOffload::nvme)
      work.disk_read_bytes = work.disk_write_bytes = plan.nvme_total();
  }
  if (on_gpu) {
    // Parameter offload: the shard (at dp 1 the whole model) goes up for the forward's and the
    // backward's gathers (at dp 1: fetches).
    if (input.offload.params == ParamOffload::cpu) work.host_to_gpu_bytes += K * 2.0 * plan.seeds.params;
    // Activation offload: down after the forward, up before the backward.
    work.gpu_to_host_bytes += K * plan.host_activations;
    work.host_to_gpu_bytes += K * plan.host_activations;
  }
  return work;
}

sim::ResourceRates planned_rates(const sim::MachineSpec& machine, const PlanInput& input,
                                 std::optional<int> adam_threads) {
  validate(input);
  const bool gpu = machine.gpus > 0;
  // Ranks share a machine while it has a GPU for each; without GPUs each rank has a machine.
  const std::int64_t ranks_here = gpu ? std::min<std::int64_t>(input.dp, machine.gpus) : 1;
  const int cores = std::max(1, int(machine.cpus / ranks_here));
  if (adam_threads && (*adam_threads < 1 || *adam_threads > cores))
    throw std::invalid_argument("CPU AdamW threads must be 1.." + std::to_string(cores) + " (a rank's cores on " +
                                machine.name + "), got " + std::to_string(*adam_threads));
  const bool cpu_adam = input.offload.optimizer != OptimizerOffload::none;
  const int threads = cpu_adam ? adam_threads.value_or(default_adam_threads(cores, gpu)) : 0;
  const int compute_cores = gpu ? 0 : default_cpu_workers(cores, false, std::max(1, threads));
  return sim::rates_of_machine(machine, input.precision != Precision::fp32, compute_cores, threads);
}

}  // namespace starzero
