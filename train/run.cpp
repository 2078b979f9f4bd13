#include "train/run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/ranks.hpp"
#include "offload/engine.hpp"
#include "offload/host_plan.hpp"
#include "offload/planner.hpp"
#include "offload/step_work.hpp"
#include "optimizers/adamw_simd.hpp"
#include "runtime/activity.hpp"
#include "runtime/disk.hpp"
#include "runtime/files.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/sim.hpp"
#include "runtime/topology.hpp"
#include "runtime/trace.hpp"
#include "runtime/watchdog.hpp"
#include "sim/platform.hpp"
#include "sim/step_bound.hpp"
#include "tasks/attention_kernel.hpp"
#include "train/checkpoint.hpp"
#include "train/metrics.hpp"
#include "train/peak_probes.hpp"
#include "train/reports.hpp"
#include "train/sharded_state.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

EngineOptions engine_options_of(const RunOptions& o);

// Input that cannot work, before anything starts: the one check of a run. The ZeRO and offload
// rules are check_engine_options' (offload/engine_options.hpp); below this nothing checks again.
void check_options(const RunOptions& o, int world) {
  const TrainerOptions& t = o.trainer;
  check_engine_options(engine_options_of(o), world);
  if (t.global_batch % (world * t.micro_batches) != 0)
    throw std::invalid_argument("--batch " + std::to_string(t.global_batch) + " must be divisible by the " +
                                std::to_string(world) + " ranks times --grad-accum " + std::to_string(t.micro_batches) +
                                " (each rank trains B/(N*K) sequences per micro-batch)");
  if (o.fp32_grad_accum && o.precision != Precision::bf16)
    throw std::invalid_argument(
        "--fp32-grad-accum is for --precision bf16 (fp32 gradients already accumulate in fp32)");
  if (t.save_every > 0 && !o.checkpoint_out && !o.checkpoint_dir)
    throw std::invalid_argument("--save-every needs --checkpoint-out or --checkpoint-dir");
  if (o.keep_checkpoints != 0 && !o.checkpoint_dir)
    throw std::invalid_argument("--keep-checkpoints needs --checkpoint-dir");
  if (o.checkpoint_dir && fs::exists(*o.checkpoint_dir) && !fs::is_directory(*o.checkpoint_dir))
    throw std::invalid_argument("--checkpoint-dir: '" + o.checkpoint_dir->string() + "' is not a folder");
  if (o.metrics) {
    const fs::path dir = o.metrics->has_parent_path() ? o.metrics->parent_path() : fs::path(".");
    if (!fs::is_directory(dir)) throw std::invalid_argument("--metrics: no folder '" + dir.string() + "'");
    if (fs::is_directory(*o.metrics))
      throw std::invalid_argument("--metrics: '" + o.metrics->string() + "' is a folder");
  }
}

EngineOptions engine_options_of(const RunOptions& o) {
  EngineOptions e;
  e.seed = o.trainer.seed;
  e.grad_clip = o.grad_clip;
  e.adam = o.adam;
  e.zero = o.zero;
  e.fp32_grad_accum = o.fp32_grad_accum;
  e.nan_gradients = o.nan_gradients;
  e.offload = o.offload;  // its fractions resolved by start_session
  return e;
}

PlanInput plan_input_of(const ModelSpec& spec, const RunOptions& o, int world, int micro_batch) {
  PlanInput input;
  input.model = spec.footprint(micro_batch, o.activations);
  input.dp = world;
  input.stage = o.zero.stage;
  input.precision = o.precision;
  input.offload = o.offload;
  input.prefetch_depth = o.zero.prefetch_depth;
  input.grad_window = o.zero.grad_window;
  // Resolved by start_session once the session runs (own until then).
  input.cudnn_attention = tasks::session_attention() == tasks::AttentionKernel::cudnn;
  return input;
}

// Everything that lives as long as the StarPU session, in construction order.
struct RunState {
  std::optional<Session> session;
  std::optional<DiskNode> nvme;
  std::unique_ptr<Trainable> model;
  std::optional<Engine> engine;
  tasks::ResolvedAttention attention;  // set by start_session, once
};

// The session's attention kernel from --attention: cuDNN needs CUDA workers (in a simulation,
// GPUs on the simulated platform, where the kernel is only charged) and bf16. Throws
// std::invalid_argument for an explicit `cudnn` that cannot run.
tasks::ResolvedAttention resolve_session_attention(const RunOptions& o, const Session& session) {
  const bool gpu = sim::predicts_times ? sim::machine_size().gpus > 0 : session.cuda_workers() > 0;
  tasks::ResolvedAttention resolved =
      tasks::resolve_attention(o.attention, gpu, o.precision != Precision::fp32, sim::predicts_times);
  tasks::set_session_attention(resolved.kernel);
  return resolved;
}

void print_banner(const ModelSpec& spec, const RunOptions& o, const RunState& run, const DataParallelRanks& ranks,
                  const HostPlan& host) {
  const Session& session = *run.session;
  const TrainerOptions& t = o.trainer;
  if constexpr (sim::predicts_times) std::printf("%s\n", sim::machine_description().c_str());
  std::printf(
      "%s: %s, %s, B=%d T=%d, %d steps, policy %s, %s\n", o.program.c_str(), spec.describe().c_str(),
      (std::string(precision_name(o.precision)) + (o.precision == Precision::fp32 ? "" : " (fp32 master)")).c_str(),
      t.global_batch, run.model->row_tokens(), t.steps, session.policy().c_str(), session.workers_summary().c_str());
  if (ranks.is_sim() && ranks.size() > 1) {
    const sim::CollectiveLink& link = sim::collective_link();
    std::printf(
        "simulated data parallel: this is rank 0 of %d ranks, ZeRO-%d, %d sequences per rank and "
        "micro-batch; each collective is costed as its ring volume over %s (%.0f GB/s, %.1f us per ring "
        "step): an approximation (docs/sim.md, \"Simulated ranks\")\n",
        ranks.size(), o.zero.stage, run.model->micro_batch(), link.what.c_str(), link.Bps / 1e9,
        link.step_latency_s * 1e6);
  } else if (ranks.size() > 1)
    std::printf("data parallel: %d ranks (%s collectives), ZeRO-%d, %d sequences per rank and micro-batch%s\n",
                ranks.size(), ranks.uses_nccl() ? "NCCL" : "MPI", o.zero.stage, run.model->micro_batch(),
                o.zero.stage == 3 ? (", prefetch depth " + std::to_string(o.zero.prefetch_depth)).c_str() : "");
  if (const std::string data = spec.data_summary(); !data.empty()) std::printf("%s\n", data.c_str());
  std::printf("attention: %s (%s)\n", tasks::attention_kernel_name(run.attention.kernel), run.attention.why.c_str());
  if (!o.offload.anything_offloaded()) return;
  const std::string nvme = o.offload.optimizer == OptimizerOffload::nvme
                               ? " (" + o.offload.nvme_path.string() + ", host limit " +
                                     std::to_string(o.offload.host_mem_limit_mib) + " MiB)"
                               : "";
  const std::string delayed =
      o.offload.delayed_update_warmup >= 0
          ? ", delayed update after " + std::to_string(o.offload.delayed_update_warmup) + " steps"
      : o.offload.speculative_update ? ", speculative update (exact)"
                                     : "";
  std::printf("offload: optimizer %s%s, parameters %s, CPU AdamW %d thread(s) (%s), host memory on NUMA node %s%s\n",
              std::string(offload_name(o.offload.optimizer)).c_str(), nvme.c_str(),
              std::string(offload_name(o.offload.params)).c_str(), host.adam_threads,
              std::string(optim::simd_path_name(optim::best_simd_path())).c_str(),
              host.numa_node < 0 ? "any" : std::to_string(host.numa_node).c_str(), delayed.c_str());
  if (o.offload.optimizer != OptimizerOffload::none)
    std::printf("optimizer state: %s\n", describe_split(run.engine->optimizer_split(),
                                                        o.offload.optimizer == OptimizerOffload::nvme ? "NVMe" : "host")
                                             .c_str());
  if (o.offload.speculative_update)
    std::printf("speculative update: %s\n",
                describe_speculative_split(run.engine->speculative_split(), run.engine->optimizer_split()).c_str());
}

// The machine the run plans for: this one, or in a simulation the simulated machine's cores and
// GPUs, which then decide workers and CPU Adam threads.
Topology run_topology() {
  Topology topology = Topology::discover();
  if constexpr (!sim::host_is_this_machine) {
    const sim::MachineSize sim_size = sim::machine_size();
    topology.cores = topology.hardware_threads = sim_size.cpus;
    topology.numa_nodes = 1;
    topology.cores_per_numa.assign(1, std::vector<int>(std::size_t(sim_size.cpus), 0));
    topology.gpus.assign(std::size_t(sim_size.gpus), GpuLocality{});
    for (int g = 0; g < sim_size.gpus; ++g) topology.gpus[std::size_t(g)] = {g, "simulated", 0};
  }
  return topology;
}

// --speculative-fraction auto: as many speculative layers as this host's memory holds for each of
// the `ranks_here` ranks on it, planned with all of the state offloaded (a share of it left on
// the GPU later only frees host memory). A simulation's host memory is not this machine's and is
// not checked: all of them.
void resolve_speculative_fraction_auto(RunOptions& o, const PlanInput& planned, int ranks_here, bool leader) {
  const double host_bytes = double(available_host_memory_bytes()) / ranks_here;
  o.offload.speculative_fraction = {
      sim::host_is_this_machine ? auto_speculative_fraction(planned, host_bytes) : 1.0, false};
  if (!leader) return;
  const std::string why = sim::host_is_this_machine
                              ? "their second optimizer state fits the " + fixed(host_bytes / 1e9, 1) +
                                    " GB available per rank beside the rest of the plan"
                              : "a simulation: all of them, its host memory is not checked";
  std::printf("--speculative-fraction auto: F = %.4g of the parameters speculative (%s)\n",
              o.offload.speculative_fraction.value, why.c_str());
}

// --offload-optimizer-fraction auto (offload/planner.hpp): as much state on the GPU (of
// `device_bytes`) as its memory holds beside the rest of the plan; without a GPU, all of it
// offloaded (as --offload-optimizer alone).
void resolve_offload_fraction_auto(RunOptions& o, const PlanInput& planned, std::size_t device_bytes, bool leader) {
  o.offload.optimizer_fraction = {device_bytes > 0 ? auto_offload_fraction(planned, double(device_bytes)) : 1.0, false};
  if (!leader) return;
  const std::string why = device_bytes > 0 ? "the state of the rest fits the GPU's " +
                                                 fixed(double(device_bytes) / 1e9, 1) +
                                                 " GB beside the plan's other bytes and a " +
                                                 fixed(100 * kAutoGpuMargin, 0) + " % margin"
                                           : "no GPU: all of it, as --offload-optimizer alone";
  std::printf("--offload-optimizer-fraction auto: F = %.4g of the parameters offloaded (%s)\n",
              o.offload.optimizer_fraction.value, why.c_str());
}

// What every step needs on the device for good (parameters, gradients, optimizer state: the
// plan's static GPU bytes) must fit the GPU, or StarPU would evict and fetch it back again and
// again. Activations are not counted: recomputation, activation offload and eviction take care of
// them; but with them too it runs while StarPU evicts inside tasks all step long (a gpt-7B at B=8,
// T=4096: AdamW tasks stalled for seconds): the leader says so once.
void check_device_fits(const MemoryPlan& memory, std::size_t device_bytes, const std::string& program, bool leader) {
  if (device_bytes == 0) return;
  const double device = double(device_bytes);
  if (memory.gpu_static() > device)
    throw std::invalid_argument(
        "the model's parameters, gradients and optimizer state take " + fixed(memory.gpu_static() / 1e9, 1) +
        " GB per GPU (`starzero plan`), more than the GPU's " + fixed(device / 1e9, 1) +
        " GB: offload them (--offload-optimizer cpu; --stage 3 --offload-params cpu) or use more ranks");
  if (memory.gpu_total() > device && leader)
    std::fprintf(stderr,
                 "%s: warning: with one micro-batch's activations the GPU needs %.1f GB (`starzero plan`), more "
                 "than its %.1f GB: StarPU will evict and fetch back every step; fewer sequences per micro-batch "
                 "(--batch with --grad-accum), --recompute or --offload-activations cpu fit it\n",
                 program.c_str(), memory.gpu_total() / 1e9, device / 1e9);
}

// Starts StarPU (and NCCL, the disk node) for this rank as the host plan says, and resolves
// --offload-optimizer-fraction auto in `o` from the GPU's memory.
HostPlan start_session(const ModelSpec& spec, RunOptions& o, DataParallelRanks& ranks, RunState& run,
                       int micro_batch) {
  tasks::set_session_attention(tasks::AttentionKernel::own);  // until resolved below, on the session
  SessionOptions session = o.session;
  session.trace_rank = ranks.rank();
  session.profile_workers = o.measurements != nullptr;
  // One GPU per rank: the rank's index among the ranks on this machine picks it.
  const Topology topology = run_topology();
  const int gpus = session.cuda_workers == 0 ? 0 : int(topology.gpus.size());
  const int rank_gpu = gpus > 0 ? ranks.local_rank() % gpus : -1;
  if (ranks.size() > 1 && rank_gpu >= 0) session.cuda_device = rank_gpu;
  HostPlanInput host_input;
  host_input.offload = o.offload;
  host_input.gpu = rank_gpu;
  // Simulated ranks share the machine while it has a GPU for each; beyond, each machine holds as
  // many as it has GPUs (CPU-only: one rank per machine).
  host_input.ranks_here = !ranks.is_sim() ? ranks.local_size() : gpus > 0 ? std::min(ranks.size(), gpus) : 1;
  host_input.cpu_workers = session.cpu_workers;
  // Until the GPU's memory is known, auto plans for all of the state on the host: the most host
  // memory it can take.
  PlanInput planned = plan_input_of(spec, o, ranks.size(), micro_batch);
  if (planned.offload.optimizer_fraction.automatic) planned.offload.optimizer_fraction = {1.0, false};
  if (o.offload.speculative_fraction.automatic) {
    resolve_speculative_fraction_auto(o, planned, host_input.ranks_here, ranks.leader());
    planned.offload.speculative_fraction = o.offload.speculative_fraction;
  }
  host_input.memory = plan_memory(planned);
  const HostPlan host = plan_host(host_input, topology);
  // The CPU AdamW's threads, resolved as the fractions are: the engine reads them from the options.
  if (o.offload.optimizer_offloaded()) o.offload.adam_threads = host.adam_threads;
  session.cpu_workers = host.cpu_workers;
  if (o.offload.optimizer == OptimizerOffload::nvme) session.cpu_memory_limit_mib = o.offload.host_mem_limit_mib;
  run.session.emplace(session);
  run.attention = resolve_session_attention(o, *run.session);
  // The memory plan again with what resolved now: the offload fraction, cuDNN's workspace.
  const bool cudnn = run.attention.kernel == tasks::AttentionKernel::cudnn;
  if (o.offload.optimizer_fraction.automatic || cudnn) {
    if (o.offload.optimizer_fraction.automatic)
      resolve_offload_fraction_auto(o, planned, run.session->cuda_memory_bytes(), ranks.leader());
    host_input.memory = plan_memory(plan_input_of(spec, o, ranks.size(), micro_batch));
  }
  const bool nccl = ranks.size() > 1 && (o.collectives == Collectives::nccl ||
                                         (o.collectives == Collectives::automatic && run.session->cuda_workers() > 0));
  check_device_fits(host_input.memory, run.session->cuda_memory_bytes(), o.program, ranks.leader());
  if (ranks.is_sim()) ranks.use_sim_collectives(run.session->cuda_workers() > 0);
  if (nccl && !ranks.is_sim()) {
    if (run.session->cuda_workers() == 0)
      throw std::invalid_argument("--collectives nccl needs a CUDA worker on every rank");
    ranks.use_nccl(std::max(0, session.cuda_device));
  }
  if (o.offload.optimizer == OptimizerOffload::nvme)  // each rank its own folder: files never collide
    run.nvme.emplace((o.offload.nvme_path / ("rank" + std::to_string(ranks.rank()))).string(), host.disk_bytes);
  return host;
}

void print_summary(const RunOptions& o, const TrainingSummary& s, int row_tokens, std::size_t parameters, int ranks,
                   double start) {
  const double tokens = double(o.trainer.global_batch) * row_tokens * s.steps;
  if constexpr (sim::predicts_times) {
    std::printf(
        "summary (predicted on the simulated machine): %d steps, %.3f s training (%.0f tok/s), "
        "%.3f s total simulated\n",
        s.steps, s.train_seconds, tokens / s.train_seconds, sim::now_seconds() - start);
    // Model FLOP/s per rank: 6 FLOPs per parameter and token (attention's own left out), against
    // the peak of the devices this rank runs on (its GPU, else the machine's CPU cores).
    const sim::Roofline& r = sim::roofline();
    const sim::MachineSize machine = sim::machine_size();
    const double gpu_peak = o.precision == Precision::fp32 ? r.gpu_fp32_flops : r.gpu_bf16_flops;
    const double peak = machine.gpus > 0 ? gpu_peak : r.cpu_core_flops * machine.cpus;
    const double model_flops = 6.0 * double(parameters) * tokens / double(ranks) / s.train_seconds;
    std::printf(
        "model FLOP/s (6 per parameter and token) per rank: %.2f GFLOP/s, MFU %.1f %% of the %s peak "
        "(%.0f GFLOP/s)\n",
        model_flops / 1e9, 100.0 * model_flops / peak,
        machine.gpus > 0 ? ("GPU's " + std::string(precision_name(o.precision))).c_str() : "CPU cores'", peak / 1e9);
    const sim::DurationSources sources = sim::duration_sources();
    const double estimates = double(std::max<std::uint64_t>(1, sources.calibrated + sources.roofline));
    const sim::ChargedOverhead& overhead = sim::charged_task_overhead();
    std::printf(
        "task durations: %.1f %% of the estimates from calibration, %.1f %% from the roofline; StarPU's "
        "overhead per task on a CPU worker: %s (docs/sim.md)\n",
        100.0 * double(sources.calibrated) / estimates, 100.0 * double(sources.roofline) / estimates,
        overhead.measured_under.empty()
            ? "none (not measured on this platform)"
            : (fixed(overhead.us.per_task, 1) + " us, + " + fixed(overhead.us.wake, 1) +
               " us after idling, as measured under " + overhead.measured_under)
                  .c_str());
    if (machine.gpus > 0) {
      // What the GPU tasks were charged, by cost class (runtime/gpu_cost.hpp), per step.
      sim::GpuSecondsByClass per_step = sim::gpu_class_seconds();
      for (double& seconds : per_step) seconds /= double(std::max(1, s.steps));
      std::string classes;
      for (const sim::GpuCostClass kind : sim::kGpuCostClasses)
        classes += std::string(classes.empty() ? "" : ", ") + sim::gpu_cost_class_name(kind) + " " +
                   fixed(per_step[std::size_t(kind)] * 1e3, 1) + " ms";
      std::printf("GPU time per step by cost class (all GPUs of this rank, docs/sim.md): %s\n", classes.c_str());
    }
    return;
  }
  std::printf("summary: %d steps, loss %.4f -> %.4f, validation %s, %.1f s training (%.0f tok/s), %.1f s total\n",
              s.steps, s.first_loss, s.last_loss, s.last_validation ? fixed(*s.last_validation, 6).c_str() : "none",
              s.train_seconds, tokens / s.train_seconds, sim::now_seconds() - start);
}

// The speculative update's commits as they ran (each rank's own; the same on every rank).
void print_speculative_report(Engine& engine, const TrainingSummary& s) {
  const CommitCounts commits = engine.commits();
  std::printf(
      "speculative update: %d of %d steps clipped and rolled back; commits: %lld adopted, %lld re-run clipped, "
      "%lld discarded (non-finite norm)\n",
      s.rolled_back_steps, s.steps, (long long)commits.adopted, (long long)commits.rerun,
      (long long)commits.discarded);
}

// The median of the steady steps' times (every step but the first: it also pays for allocations,
// first touches and the performance models' first calibration); unset with one step.
std::optional<double> steady_step_seconds(std::vector<double> steady) {
  if (steady.empty()) return std::nullopt;
  std::sort(steady.begin(), steady.end());
  return steady[steady.size() / 2];
}

// The run's step bound (sim/step_bound.hpp): what its plan gives one step (offload/step_work.hpp)
// at the simulated machine's rates, or at this machine's measured peaks (train/peak_probes.hpp;
// only with a steady step, so that a one-step run does not pay for the probes). The leader's.
std::optional<sim::RunBoundFigures> run_bound_figures(const ModelSpec& spec, const RunOptions& o, const RunState& run,
                                                      const DataParallelRanks& ranks, const HostPlan& host,
                                                      std::optional<double> steady_step_s) {
  const Session& session = *run.session;
  const bool gpu = session.cuda_workers() > 0;
  const bool cpu_adam = o.offload.optimizer_offloaded();
  sim::RunBoundFigures figures;
  figures.steady_step_s = steady_step_s;
  PlanInput planned = plan_input_of(spec, o, ranks.size(), run.model->micro_batch());
  planned.attention = tasks::session_attention() == tasks::AttentionKernel::cudnn ? sim::GpuCostClass::cudnn_attention
                                                                                 : sim::GpuCostClass::own_attention;
  figures.planned = plan_step_work(planned, o.trainer.micro_batches, gpu);
  if (const std::optional<sim::MachineSpec>& machine = sim::sim_machine()) {
    // At most the machine's cores: --adam-threads may ask for more threads than there are.
    figures.rates = sim::rates_of_machine(*machine, o.precision != Precision::fp32,
                                          gpu ? 0 : std::min(session.cpu_workers(), machine->cpus),
                                          cpu_adam ? std::min(host.adam_threads, machine->cpus) : 0);
  } else {
    if (!steady_step_s) return std::nullopt;
    // The AdamW's parameters per step: 12 FLOPs each.
    figures.rates = measured_rates(session, storage_dtype(o.precision), cpu_adam ? host.adam_threads : 0,
                                   figures.planned.adam_flops / 12.0);
  }
  return figures;
}

void print_step_bound(const sim::RunBoundFigures& figures) {
  const sim::StepBound bound = sim::step_bound(figures.planned, figures.rates);
  for (const std::string& line : sim::bound_lines(bound, figures.rates, figures.steady_step_s, ""))
    std::printf("%s\n", line.c_str());
}

// The engine of this run on its session: the options the flags gave, with this rank's
// communicators, host plan and disk node.
Engine& start_engine(const RunOptions& o, bool resuming, DataParallelRanks& ranks, RunState& run,
                     const HostPlan& host) {
  EngineOptions engine_options = engine_options_of(o);
  engine_options.comm = ranks.engine_comm();
  engine_options.host_comm = ranks.uses_nccl() ? ranks.host_comm() : nullptr;
  engine_options.host_numa_node = host.numa_node;
  engine_options.nvme = run.nvme ? &*run.nvme : nullptr;
  engine_options.initialise_params = !resuming;  // the checkpoint's values replace them
  if (ranks.rank() == o.hang_rank) engine_options.hang_at_step = o.hang_at_step;
  return run.engine.emplace(*run.model, engine_options);
}

// The checkpoint's values (and optimizer state, if saved) into the engine, the data stream's
// position into the model; the step it was at.
std::uint64_t resume_engine(const ResumeFiles& resume, const RunOptions& o, Engine& engine,
                            const DataParallelRanks& ranks, Trainable& model) {
  const std::uint64_t step = apply_resume_files(resume, engine);
  // The data stream continues where the state recorded it (any rank count: the same samples follow).
  if (resume.state) model.resume_data(step, resume.state->data_position());
  if (ranks.leader() && resume.state)
    std::printf("resumed from %s at step %llu%s\n", o.checkpoint_in->c_str(), (unsigned long long)step,
                resume.state->ranks() > 1
                    ? (" (optimizer state of " + std::to_string(resume.state->ranks()) + " ranks)").c_str()
                    : "");
  else if (ranks.leader())
    std::printf("initialised from %s (no .state beside it: fresh optimizer)\n", o.checkpoint_in->c_str());
  return step;
}

// Where saves go, cleared of what a killed save left (temporary files as large as the checkpoint);
// the --checkpoint-dir sets, if any.
std::optional<CheckpointSets> open_checkpoint_destinations(const RunOptions& o, const DataParallelRanks& ranks) {
  if (o.checkpoint_out && ranks.leader())
    for (const std::filesystem::path& stale : remove_stale_temporaries(*o.checkpoint_out))
      std::printf("removed %s, left by a save that did not finish\n", stale.c_str());
  std::optional<CheckpointSets> sets;
  if (o.checkpoint_dir) {
    sets.emplace(*o.checkpoint_dir);
    if (ranks.leader())
      for (const fs::path& stale : sets->remove_stale())
        std::printf("removed %s, left by a save that did not finish\n", stale.c_str());
  }
  return sets;
}

// --watchdog: when nothing finishes for that long, every rank says what its threads wait on and
// the job ends with kWatchdogExitCode. Not in simulation: its thread would measure wall time
// against simulated progress.
void start_watchdog(std::optional<Watchdog>& watchdog, const RunOptions& o, DataParallelRanks& ranks) {
  if (o.watchdog_seconds > 0 && !sim::predicts_times)
    watchdog.emplace(std::chrono::seconds(o.watchdog_seconds), [&o, &ranks](const std::string& last,
                                                                            const std::string& threads) {
      std::fprintf(stderr, "%s: rank %d of %d: watchdog: nothing finished for %d s since %s; this rank's threads:\n%s",
                   o.program.c_str(), ranks.rank(), ranks.size(), o.watchdog_seconds, last.c_str(), threads.c_str());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the other ranks' reports come out too
      ranks.abort(kWatchdogExitCode);
      std::_Exit(kWatchdogExitCode);
    });
}

// The leader's line for the last save.
void print_saved(const RunOptions& o, const CheckpointFormat& format, const CheckpointSets* sets,
                 std::uint64_t step, int ranks) {
  const std::string what = format.describe(storage_dtype(o.checkpoint_precision));
  if (sets)
    std::printf("wrote %s/step_%llu (%s and the optimizer state; `latest` names it)\n", sets->dir().c_str(),
                (unsigned long long)step, what.c_str());
  if (o.checkpoint_out)
    std::printf("wrote %s (%s) and %s\n", o.checkpoint_out->c_str(), what.c_str(),
                training_state_path(*o.checkpoint_out, 0, ranks).c_str());
}

// The activations the model held (and offloaded) per micro-batch, beside the plan's figures.
void print_activation_report(const ModelSpec& spec, const RunOptions& o, const Trainable& model) {
  const auto held = model.activation_bytes();
  if (!held) return;
  const ActivationPolicy& a = o.activations;
  const auto plan = spec.activation_bytes(storage_dtype(o.precision), model.micro_batch(), a);
  const bool windowed = a.recompute != Recompute::none || a.offload != ActivationOffload::none;
  std::printf("activations: %.1f MB per micro-batch held (--recompute %s%s%s), plan %s\n", double(*held) / 1e6,
              recompute_name(a.recompute), windowed ? (", window " + std::to_string(a.window)).c_str() : "",
              a.offload == ActivationOffload::none ? "" : ", --offload-activations cpu",
              plan ? (fixed(double(*plan) / 1e6, 1) + " MB" + (*plan == *held ? "" : " (differs)")).c_str() : "none");
  if (a.offload == ActivationOffload::none) return;
  const auto offloaded = model.offloaded_activation_bytes();
  const auto offloaded_plan = spec.offloaded_activation_bytes(storage_dtype(o.precision), model.micro_batch(), a);
  std::printf("activations offloaded: %.1f MB per micro-batch in pinned host memory, plan %s\n",
              double(offloaded.value_or(0)) / 1e6,
              offloaded_plan ? (fixed(double(*offloaded_plan) / 1e6, 1) + " MB" +
                                (offloaded_plan == offloaded ? "" : " (differs)"))
                                   .c_str()
                             : "none");
}

// The run on a started session; returns when every step, save and report is done, with the
// figures of its step bound (the leader's; unset on other ranks and for a real one-step run).
std::optional<sim::RunBoundFigures> train_on_session(const ModelSpec& spec, const RunOptions& o,
                                                     const std::optional<ResumeFiles>& resume, DataParallelRanks& ranks,
                                                     RunState& run, const HostPlan& host, double start) {
  Engine& engine = start_engine(o, resume.has_value(), ranks, run, host);
  if (ranks.leader()) print_banner(spec, o, run, ranks, host);
  const std::uint64_t first_step = resume ? resume_engine(*resume, o, engine, ranks, *run.model) + 1 : 1;
  const CheckpointFormat& format = spec.checkpoint_format();
  std::unique_ptr<CheckpointFormat> hf;
  const CheckpointFormat& out_format = o.checkpoint_hf ? hugging_face_format(format, hf) : format;
  std::optional<CheckpointSets> sets = open_checkpoint_destinations(o, ranks);
  Trainer trainer(*run.model, engine, ranks, o.trainer);
  std::optional<Watchdog> watchdog;  // not movable: started in place
  start_watchdog(watchdog, o, ranks);
  const auto progress = [&](const std::string& what) {
    if (watchdog) watchdog->progress(what);
  };
  std::optional<MetricsLog> metrics;  // the leader's
  if (o.metrics && ranks.leader()) {
    metrics.emplace(*o.metrics);
    metrics->start(RunDescription{spec.describe(), std::string(precision_name(o.precision)), o.trainer.global_batch,
                                  run.model->row_tokens(), o.trainer.steps, ranks.size(), o.zero.stage, first_step});
  }
  const std::uint64_t last_step = first_step + std::uint64_t(o.trainer.steps) - 1;
  std::vector<double> steady_seconds;
  trainer.on_step = [&](const StepRecord& record) {
    progress("step " + std::to_string(record.step));
    if (record.step > first_step) steady_seconds.push_back(record.seconds);
    // The steady steps' overhead: the first step's allocations and first touches left out.
    if (o.measurements && ranks.leader() && sim::kernels_run) {
      if (record.step == first_step)
        restart_task_overhead_measurement();
      else if (record.step == last_step) {
        *o.measurements = {run.session->policy(), measured_task_overhead()};
        o.measurements->cpu_task_overhead.wake_us = measure_wake_latency_us();
      }
    }
    if (!o.metrics) return;
    const PeakBytes peaks = largest_over_ranks(peak_bytes_of(engine), ranks);  // collective: every rank
    if (metrics) metrics->step(record, peaks);
  };
  trainer.on_validation = [&](std::uint64_t step, const Trainer::Validation& v) {
    progress("the validation after step " + std::to_string(step));
    if (metrics) metrics->validation(step, v);
  };
  const auto save = [&](std::uint64_t step) {
    const activity::Scope saving("saving step " + std::to_string(step));
    const std::uint64_t position = run.model->data_position_after(step, o.trainer.global_batch);
    if (sets)
      save_checkpoint_set(*sets, o.keep_checkpoints, format, engine, ranks, step,
                          storage_dtype(o.checkpoint_precision), position);
    if (o.checkpoint_out)
      save_checkpoint(*o.checkpoint_out, out_format, engine, ranks, step, storage_dtype(o.checkpoint_precision),
                      position);
    progress("the save of step " + std::to_string(step));
  };
  if (sets || o.checkpoint_out) trainer.on_save = save;
  const TrainingSummary summary = trainer.run(first_step);
  if (sets || o.checkpoint_out) {
    save(last_step);
    if (ranks.leader()) print_saved(o, out_format, sets ? &*sets : nullptr, last_step, ranks.size());
  }
  if (!o.trainer.quiet && sim::kernels_run)  // a simulation has no probabilities to sample from
    if (const auto text = trainer.sample(o.trainer.seed); text && ranks.leader())
      std::printf("sample: %s\n", text->c_str());
  if (ranks.size() > 1) print_zero_report(engine, ranks, summary.last_step_traffic);
  if (o.offload.anything_offloaded()) print_placement_report(engine, ranks);
  if (metrics) metrics->end(summary.steps, summary.train_seconds);
  if (!ranks.leader()) return std::nullopt;
  print_activation_report(spec, o, *run.model);
  print_summary(o, summary, run.model->row_tokens(), engine.parameter_count(), ranks.size(), start);
  if (o.offload.speculative_update && sim::kernels_run) print_speculative_report(engine, summary);
  const std::optional<sim::RunBoundFigures> bound =
      run_bound_figures(spec, o, run, ranks, host, steady_step_seconds(std::move(steady_seconds)));
  if (bound) print_step_bound(*bound);
  if (metrics)
    std::printf("metrics: %s (%zu lines; draw them with `starzero plot %s --out loss.svg`)\n", metrics->path().c_str(),
                metrics->lines(), metrics->path().c_str());
  return bound;
}

}  // namespace

int auto_tiles(const Session& session, int micro_batch) {
  if (session.cuda_workers() > 0) return 1;
  return std::max(1, std::min(session.cpu_workers(), micro_batch));
}

Tiling resolve_tiling(Tiling tiling, const Session& session, int micro_batch) {
  if (!tiling.tiles) tiling.tiles = auto_tiles(session, micro_batch);
  return tiling;
}

int run_training(const ModelSpec& spec, const RunOptions& given) {
  const double start = sim::now_seconds();
  if (given.sim_ranks > 0 && DataParallelRanks::world_size() > 1)
    throw std::invalid_argument("--sim-ranks: one process simulates the ranks; do not start it with mpirun");
  const int world = given.sim_ranks > 0 ? given.sim_ranks : DataParallelRanks::world_size();
  check_options(given, world);
  RunOptions options = given;
  const int micro_batch = options.trainer.global_batch / (world * options.trainer.micro_batches);
  spec.check_tiling(options.tiling, micro_batch);
  // Read and check the files before StarPU starts: a bad file is an input error, found early.
  std::optional<ResumeFiles> resume;
  std::unique_ptr<CheckpointFormat> folder_format;  // a Hugging Face folder's; outlives the run
  if (options.checkpoint_in)
    resume = read_resume_files(*options.checkpoint_in,
                               checkpoint_format_at(*options.checkpoint_in, spec.checkpoint_format(), folder_format));
  const std::uint64_t done = resume && resume->state ? resume->state->step() : 0;

  DataParallelRanks ranks =
      options.sim_ranks > 0 ? DataParallelRanks::in_sim(options.sim_ranks) : DataParallelRanks();
  if (options.steps_are_total) {
    if (done >= std::uint64_t(options.trainer.steps)) {
      if (ranks.leader())
        std::printf("%s: %s is at step %llu of %d: nothing to train\n", options.program.c_str(),
                    options.checkpoint_in->c_str(), (unsigned long long)done, options.trainer.steps);
      return 0;
    }
    options.trainer.steps -= int(done);
  }
  try {
    std::string fxt_file;
    std::optional<sim::RunBoundFigures> bound;
    {
      RunState run;
      const HostPlan host = start_session(spec, options, ranks, run, micro_batch);
      fxt_file = run.session->trace_file();
      run.model = spec.build(storage_dtype(options.precision), micro_batch,
                             resolve_tiling(options.tiling, *run.session, micro_batch), options.activations);
      bound = train_on_session(spec, options, resume, ranks, run, host, start);
      run.session->wait_all();
    }  // the session ends here: its FxT file is complete
    if (!fxt_file.empty()) {
      const fs::path out = ranks.trace_dir(options.session.trace_dir);
      convert_fxt_trace(fxt_file, out.string());
      sim::write_executed_durations(out.string());  // what each task was simulated for, if simulated
      // For `starzero trace`'s bound: the rates this run used and what its plan gives one step.
      if (bound) write_text_atomically(out / sim::kRunBoundFile, sim::run_bound_json(*bound));
      std::printf("trace: %s/paje.trace (open with ViTE)\n", out.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    if (ranks.size() > 1) {
      const bool bad_input = dynamic_cast<const std::invalid_argument*>(&e) || dynamic_cast<const FileFormatError*>(&e);
      std::fprintf(stderr, "%s: rank %d of %d %s: %s\n", options.program.c_str(), ranks.rank(), ranks.size(),
                   bad_input ? "error" : "failed", e.what());
      std::fflush(stderr);
      ranks.abort(bad_input ? 2 : 1);
    }
    throw;
  }
}

}  // namespace starzero
