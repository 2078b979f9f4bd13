#pragma once
// The training loop, for any Trainable on any engine configuration: per step the global batch
// cut into this rank's micro-batches, the learning-rate schedule (linear warm-up, cosine decay),
// the engine's step (clipping is the engine's), one log line, and at their cadence validation,
// samples and checkpoints. Every rank runs it; only the leader prints.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "comm/comm.hpp"
#include "comm/ranks.hpp"
#include "offload/engine.hpp"
#include "optimizers/lr_schedule.hpp"
#include "train/trainable.hpp"

namespace starzero {

// How the leader shows each step's line (`starzero train --progress`): a progress bar rewritten
// in place with carriage returns, or one line per step. automatic: the bar only when stdout is a
// terminal and no launcher started the process (started_by_launcher): Open MPI's mpirun gives
// its ranks a pseudo-terminal even when its own output goes to a log file, and a job's output
// under a launcher is a log however it gets there.
enum class ProgressStyle { automatic, bar, lines };

// Whether a parallel launcher started this process: one of OMPI_COMM_WORLD_SIZE (Open MPI's
// mpirun), PMI_RANK (MPICH, Intel MPI), PMIX_RANK (PMIx launchers) or SLURM_PROCID (srun) is set.
bool started_by_launcher();

// Whether `style` draws the bar in this process (automatic: as above).
bool shows_progress_bar(ProgressStyle style);

struct TrainerOptions {
  int global_batch = 8;   // rows per optimizer step, over all ranks and micro-batches
  int micro_batches = 1;  // K: gradient accumulation
  int steps = 300;
  optim::LrSchedule schedule;  // default: linear warm-up over 20 steps to 1e-3, cosine to 1e-4
  std::uint64_t seed = 1337;
  int val_every = 50;  // 0: never; also after the last step
  int val_batches = 4;
  int sample_every = 0;  // 0: never (the run samples once at the end unless quiet)
  int sample_tokens = 64;
  std::string prompt;
  int save_every = 0;  // 0: only at the end (when on_save is set)
  // Consecutive steps with a non-finite gradient norm (each skipped: no update) after which
  // training stops with an error.
  int max_skipped_steps = 5;
  bool quiet = false;  // print only what the caller prints
  ProgressStyle progress = ProgressStyle::automatic;
};

struct TrainingSummary {
  int steps = 0;
  double first_loss = 0, last_loss = 0;
  std::optional<double> last_validation;
  std::optional<double> last_accuracy;  // when the model reports accuracy
  double train_seconds = 0;
  CommStats last_step_traffic{};  // what the engine's collectives sent in the last step
  // The speculative update: steps whose clipping re-ran the AdamW (rolled back).
  int rolled_back_steps = 0;
};

// What one optimizer step did, as observers (the metrics file) see it on every rank.
struct StepRecord {
  std::uint64_t step = 0;
  double loss = 0;  // mean over micro-batches and ranks
  float lr = 0;
  float grad_norm = 0;  // global, before clipping
  double seconds = 0;   // wall time of the step, submission to the norm
  double tokens_per_second = 0;
  bool skipped = false;  // non-finite gradient norm: the update was skipped
  int rollbacks = 0;     // the speculative update: layers whose AdamW the clipping re-ran
};

class Trainer {
 public:
  Trainer(Trainable& model, Engine& engine, const DataParallelRanks& ranks, TrainerOptions options);

  // Mean loss (and accuracy, when the model reports it) of a validation pass.
  struct Validation {
    double loss = 0;
    std::optional<double> accuracy;
  };

  // Called with the step after every save_every-th step but the last (checkpoint cadence).
  std::function<void(std::uint64_t step)> on_save;
  // Called on every rank after each step's line, and after each validation pass.
  std::function<void(const StepRecord&)> on_step;
  std::function<void(std::uint64_t step, const Validation&)> on_validation;

  // Optimizer steps first_step .. first_step + steps - 1 (1-based; a resumed run starts later).
  TrainingSummary run(std::uint64_t first_step);

  // Mean loss (and accuracy) over up to val_batches validation batches, averaged over ranks;
  // nullopt without validation data.
  std::optional<Validation> validate();
  // A sample from the model with the given seed (every rank must call it: forwards may be
  // collective); nullopt when the model makes no text.
  std::optional<std::string> sample(std::uint64_t seed);

 private:
  BatchRows rows_of_micro_batch(int micro) const;
  double submit_step(std::uint64_t step, float lr);
  void report_step(std::uint64_t step, std::uint64_t last_step, const std::string& line) const;
  void print_line(const std::string& text) const;
  bool check_gradient_norm(std::uint64_t step, float norm);

  Trainable& model_;
  Engine& engine_;
  const DataParallelRanks& ranks_;
  TrainerOptions options_;
  bool tty_ = false;  // the progress bar (shows_progress_bar), else one line per step
  int skipped_in_a_row_ = 0;
};

}  // namespace starzero
