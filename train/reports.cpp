#include "train/reports.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/host_memory.hpp"

namespace starzero {

// `starzero plan`'s input for the configuration this engine runs; `padded`: each layer padded to
// a multiple of N elements, as the collectives see it.
PlanInput plan_input_of(const Engine& engine, bool padded) {
  const EngineOptions& options = engine.options();
  PlanInput input;
  input.params = std::int64_t(padded ? engine.padded_parameter_count() : engine.parameter_count());
  input.dp = engine.ranks();
  input.stage = options.zero.stage;
  input.precision = precision_of(engine.model_dtype());
  input.fp32_grad_accum = options.fp32_grad_accum;
  input.offload = options.offload;
  // The engine's splits exactly: its offloaded (and speculative) layers' share of Ψ, padded or
  // not, which the planner, given no layers, takes as round(F·Ψ) parameters.
  const auto share_of = [&](const OptimizerSplit& split) {
    std::size_t count = 0;
    for (int l = split.first_offloaded; l < split.layers; ++l)
      count += padded ? engine.layer_plan(l).padded() : engine.layer_plan(l).count();
    return OffloadFraction{double(count) / double(input.params), false};
  };
  input.offload.optimizer_fraction = share_of(engine.optimizer_split());
  input.offload.speculative_fraction = share_of(engine.speculative_split());
  input.prefetch_depth = options.zero.prefetch_depth;
  input.grad_window = options.zero.grad_window;
  return input;
}

// The end-of-run table: what each rank held and sent, next to `starzero plan`'s prediction for
// this configuration and the same prediction with the collectives' padding accounted.
void print_zero_report(const Engine& engine, const DataParallelRanks& ranks, const CommStats& step_traffic) {
  const MemoryLedger& ledger = engine.ledger();
  // After the run every transient buffer is gone: live = what is held for good.
  const std::vector<std::int64_t> mine = {ledger.live(MemoryCategory::params),
                                          ledger.live(MemoryCategory::grads),
                                          ledger.live(MemoryCategory::optimizer),
                                          ledger.peak(MemoryCategory::grads),
                                          ledger.peak(MemoryCategory::temporaries),
                                          ledger.peak_items(MemoryCategory::temporaries),
                                          std::int64_t(step_traffic[CommOp::all_gather].bytes_sent),
                                          std::int64_t(step_traffic[CommOp::reduce_scatter].bytes_sent),
                                          std::int64_t(step_traffic[CommOp::all_reduce].bytes_sent)};
  const std::vector<std::int64_t> all = ranks.gather_to_leader(mine);
  if (!ranks.leader()) return;

  const int N = ranks.size(), stage = engine.stage();
  const auto bytes = double(dtype_size(engine.model_dtype()));
  const PlanInput input = plan_input_of(engine, false);
  const MemoryPlan plan = plan_memory(input);
  const MemoryPlan padded_plan = plan_memory(plan_input_of(engine, true));
  const CommVolume volume = plan_communication(input);

  std::printf("\nZeRO-%d on %d ranks, per rank, bytes held for good (after the run) next to `starzero plan`:\n", stage,
              N);
  std::printf("  %-5s %12s %12s %12s | %12s %12s %12s | %12s %12s %12s\n", "rank", "params", "grads", "optimizer",
              "plan", "plan", "plan", "plan+pad", "plan+pad", "plan+pad");
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    std::printf("  %-5d %12lld %12lld %12lld | %12.0f %12.0f %12.0f | %12.0f %12.0f %12.0f\n", r, (long long)row[0],
                (long long)row[1], (long long)row[2], plan.gpu.params, plan.gpu.grads, plan.gpu.optimizer,
                padded_plan.gpu.params, padded_plan.gpu.grads, padded_plan.gpu.optimizer);
  }
  std::printf("  plan+pad: the same formulas with each layer padded to a multiple of N = %d elements (Ψ %zu -> %zu)\n",
              N, engine.parameter_count(), engine.padded_parameter_count());
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    if (stage >= 2)
      std::printf(
          "  rank %d: peak gradients %lld bytes (its shard plus the full gradients of the layers being "
          "reduce-scattered, freed right after)\n",
          r, (long long)row[3]);
    if (stage == 3)
      std::printf(
          "  rank %d: ZeRO-3 temporary full parameters: peak %lld bytes, peak %lld layers in flight "
          "(prefetch window)\n",
          r, (long long)row[4], (long long)row[5]);
  }
  const double padded_ring = double(N - 1) / N * double(engine.padded_parameter_count()) * bytes;
  const double regather = double(N - 1) / N * double(engine.regathered_elements_per_step()) * bytes;
  std::printf("collective bytes sent per step (the last), next to (N-1)/N * %dΨ * %g bytes = %.0f:\n",
              volume.psi_multiple, bytes, volume.ring_bytes);
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    std::printf("  rank %d: all-gather %lld, reduce-scatter %lld, all-reduce %lld\n", r, (long long)row[6],
                (long long)row[7], (long long)row[8]);
  }
  if (stage == 0) {
    std::printf(
        "  all-reduce: the ring sends 2(N-1)/N of the (padded) gradients; over all ranks exactly "
        "2(N-1)*%zu*bytes = %.0f\n",
        engine.padded_parameter_count(), 2.0 * (N - 1) * double(engine.padded_parameter_count()) * bytes);
  } else {
    std::printf(
        "  expected with padding: all-gather %.0f, reduce-scatter %.0f per rank%s; all-reduce: a few bytes, the\n"
        "  gradient norm's sum of squares (one fp32 value)\n",
        (stage == 3 ? 2 : 1) * padded_ring + regather, padded_ring,
        regather > 0 ? " (all-gather includes the tied embedding gathered again for the classifier)" : "");
  }
}

// Offload runs: bytes per place (device, host, disk) next to `starzero plan` for this exact
// configuration (the plan with each layer padded to a multiple of N beside it).
void print_placement_report(const Engine& engine, const DataParallelRanks& ranks) {
  const MemoryLedger& ledger = engine.ledger();
  std::vector<std::int64_t> mine;
  for (MemoryPlace place : {MemoryPlace::device, MemoryPlace::host, MemoryPlace::disk})
    for (MemoryCategory c : {MemoryCategory::params, MemoryCategory::grads, MemoryCategory::optimizer})
      mine.push_back(ledger.live(c, place));
  const std::vector<std::int64_t> all = ranks.gather_to_leader(mine);
  if (!ranks.leader()) return;
  const MemoryPlan padded = plan_memory(plan_input_of(engine, true));
  const MemoryPlan plan = plan_memory(plan_input_of(engine, false));
  std::printf(
      "\noffload placement per rank, bytes held for good (after the run), next to `starzero plan` "
      "(plan+pad: layers padded to a multiple of N):\n");
  std::printf("  %-5s %-7s %12s %12s %12s | %12s %12s %12s | %12s\n", "rank", "place", "params", "grads", "optimizer",
              "plan", "plan", "plan", "plan+pad sum");
  const ByteSplit* planned[] = {&plan.gpu, &plan.host, &plan.nvme};
  const ByteSplit* planned_pad[] = {&padded.gpu, &padded.host, &padded.nvme};
  const char* names[] = {"device", "host", "disk"};
  for (int r = 0; r < ranks.size(); ++r)
    for (int place = 0; place < 3; ++place) {
      const std::int64_t* row = all.data() + std::size_t(r) * mine.size() + std::size_t(place) * 3;
      std::printf("  %-5d %-7s %12lld %12lld %12lld | %12.0f %12.0f %12.0f | %12.0f\n", r, names[place],
                  (long long)row[0], (long long)row[1], (long long)row[2], planned[place]->params,
                  planned[place]->grads, planned[place]->optimizer, planned_pad[place]->total());
    }
  // Whose optimizer state the device and host rows above hold.
  if (engine.options().offload.optimizer != OptimizerOffload::none) {
    const OptimizerSplit& split = engine.optimizer_split();
    const auto names = [&](int first, int last) {
      return first == last ? engine.layer_name(first) : engine.layer_name(first) + " .. " + engine.layer_name(last);
    };
    std::printf(
        "  optimizer state: %s\n",
        describe_split(split, engine.options().offload.optimizer == OptimizerOffload::nvme ? "disk" : "host").c_str());
    if (split.offloaded_layers() > 0)
      std::printf("    offloaded (CPU AdamW): %s\n", names(split.first_offloaded, split.layers - 1).c_str());
    if (split.first_offloaded > 0)
      std::printf("    on the device (device AdamW): %s\n", names(0, split.first_offloaded - 1).c_str());
  }
  // One rank with the parameters on the host: what the windows let onto the device at once.
  if (engine.layer_plan(0).param_access() == ParamAccess::fetched_per_use) {
    const EngineOptions& options = engine.options();
    std::printf(
        "  device in flight (one rank, parameters on the host): parameters peak %lld bytes, %lld layers "
        "(prefetch window W+1 = %d)",
        (long long)ledger.peak(MemoryCategory::temporaries), (long long)ledger.peak_items(MemoryCategory::temporaries),
        options.zero.prefetch_depth + 1);
    if (engine.layer_plan(0).grad_access() == GradAccess::streamed)
      std::printf("; gradients streamed, peak %lld bytes (gradient window G = %d)",
                  (long long)ledger.peak(MemoryCategory::grads), options.zero.grad_window);
    std::printf("\n");
  }
  const HostMemoryStats pins = host_memory_stats();
  std::printf(
      "  pinned host memory: %s pinned, %s pageable (fallbacks: %zu); device = the GPU, or the same RAM on a "
      "CPU-only run\n",
      format_bytes(double(pins.pinned_bytes)).c_str(), format_bytes(double(pins.pageable_bytes)).c_str(),
      pins.failed_pins);
}

}  // namespace starzero
