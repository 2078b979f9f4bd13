#pragma once
// A whole training run from a chosen model (ModelSpec) and its options: the ranks of mpirun,
// the host plan (CPU Adam threads, NUMA node, disk), the StarPU session, the collectives (MPI or
// NCCL), the engine, resume, the Trainer, checkpoints, end-of-run reports and the trace. What
// `starzero train` calls after parsing its flags.
//
// Errors: std::invalid_argument (and FileFormatError) for input that cannot work, found before
// StarPU starts where possible; other exceptions for failures while running. With several
// ranks an error on one rank ends them all (a message naming the rank, then the job aborts with
// exit code 2 for bad input and 1 otherwise): the others would wait in a collective forever.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload/engine.hpp"
#include "offload/placement.hpp"
#include "optimizers/adamw.hpp"
#include "runtime/precision.hpp"
#include "runtime/session.hpp"
#include "runtime/task_overhead.hpp"
#include "tasks/attention_kernel.hpp"
#include "train/trainable.hpp"
#include "train/trainer.hpp"

namespace starzero {

enum class Collectives { automatic, mpi, nccl };  // automatic: NCCL when the ranks have GPUs

// What a run measures beyond its own report, for `starzero calibrate`.
struct RunMeasurements {
  std::string policy;          // the session's scheduling policy
  TaskOverhead cpu_task_overhead;  // over the steps after the first (none with one step)
};

struct RunOptions {
  std::string program = "starzero train";  // names the run in messages
  Precision precision = Precision::bf16;   // parameters, gradients, activations
  TrainerOptions trainer;
  // The engine.
  float grad_clip = 1.0f;  // <= 0: no clipping
  optim::AdamWHyper adam;  // betas, eps, weight decay (the engine sets lr and step per step)
  ZeroOptions zero;        // --stage, --prefetch-depth, --grad-window
  bool fp32_grad_accum = false;
  std::vector<std::pair<int, int>> nan_gradients;  // testing: EngineOptions::nan_gradients
  int hang_at_step = 0, hang_rank = 0;             // testing: EngineOptions::hang_at_step, on this rank
  // A rank on which nothing finishes (a step, a validation, a save) for this long reports what
  // each of its threads waits on and ends the job with exit code 3 (runtime/watchdog.hpp); 0: off.
  int watchdog_seconds = 600;
  Collectives collectives = Collectives::automatic;
  // starzero-sim: this process is rank 0 of this many simulated ranks (comm/ranks.hpp); 0: the
  // ranks of mpirun (or one).
  int sim_ranks = 0;
  // Offload: where the model states go, the CPU AdamW, the delayed and speculative updates
  // (offload/placement.hpp). Its fractions may be auto: the run resolves them once StarPU has
  // started (optimizer_fraction from the GPU's memory, all of it without a GPU;
  // speculative_fraction from the host's memory, all of it in a simulation), then hands the
  // object to the host plan, the planner and the engine.
  OffloadOptions offload;
  // --tiles and --head-groups (train/trainable.hpp); the model checks them (check_tiling) and
  // the run resolves an auto tile count on the running session (resolve_tiling).
  Tiling tiling;
  // What the model keeps of the activations for the backward, what it recomputes.
  ActivationPolicy activations;
  // StarPU: policy, workers, memory limits, trace folder.
  SessionOptions session;
  // --attention: the kernel the CUDA workers run for attention (tasks/attention_kernel.hpp),
  // resolved once the session has started (cuDNN needs a GPU and bf16).
  tasks::AttentionRequest attention = tasks::AttentionRequest::automatic;
  // Files.
  std::optional<std::filesystem::path> checkpoint_in, checkpoint_out;
  // Crash-safe sets of checkpoints, one folder per save (train/checkpoint_sets.hpp), of which
  // the newest keep_checkpoints stay (0: all).
  std::optional<std::filesystem::path> checkpoint_dir;
  int keep_checkpoints = 0;
  // trainer.steps counts from step 0: a run resumed at step S trains steps S+1..trainer.steps
  // (`--resume`: the same command line continues a killed run to the same end, on the same
  // learning-rate schedule); a run already there trains nothing.
  bool steps_are_total = false;
  Precision checkpoint_precision = Precision::fp32;
  bool checkpoint_hf = false;  // --checkpoint-out is a Hugging Face folder (--checkpoint-format hf)
  std::optional<std::filesystem::path> metrics;  // JSON lines, one per step (train/metrics.hpp)
  // Set: the run profiles its workers (a few us per task) and fills it in (not in simulation).
  RunMeasurements* measurements = nullptr;
};

// The tile count `--tiles auto` picks on a running session: one tile when there is a CUDA
// worker (one kernel per op is best on a GPU), else one per CPU worker, at most one per row.
int auto_tiles(const Session& session, int micro_batch);
// `tiling` with its tile count set: auto_tiles when it was empty (the head groups stay the model's).
Tiling resolve_tiling(Tiling tiling, const Session& session, int micro_batch);

// The exit code of a job the watchdog ends.
inline constexpr int kWatchdogExitCode = 3;

// Trains `spec` as `options` say; returns once every rank is done (0). Throws as above.
int run_training(const ModelSpec& spec, const RunOptions& options);

}  // namespace starzero
