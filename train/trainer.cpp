#include "train/trainer.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <starpu.h>

#include "optimizers/adamw.hpp"
#include "runtime/activity.hpp"
#include "runtime/session.hpp"
#include "runtime/sim.hpp"

namespace starzero {

namespace {

// Simulated time in starzero-sim.
double seconds_since(double start) { return sim::now_seconds() - start; }

CommStats difference(const CommStats& after, const CommStats& before) {
  CommStats d;
  for (std::size_t op = 0; op < kCommOpCount; ++op) {
    d.ops[op].bytes_sent = after.ops[op].bytes_sent - before.ops[op].bytes_sent;
    d.ops[op].calls = after.ops[op].calls - before.ops[op].calls;
  }
  return d;
}

}  // namespace

bool started_by_launcher() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(variable) != nullptr) return true;
  return false;
}

bool shows_progress_bar(ProgressStyle style) {
  switch (style) {
    case ProgressStyle::bar:
      return true;
    case ProgressStyle::lines:
      return false;
    case ProgressStyle::automatic:
      break;
  }
  return isatty(STDOUT_FILENO) != 0 && !started_by_launcher();
}

Trainer::Trainer(Trainable& model, Engine& engine, const DataParallelRanks& ranks, TrainerOptions options)
    : model_(model), engine_(engine), ranks_(ranks), options_(std::move(options)),
      tty_(shows_progress_bar(options_.progress)) {
  if (options_.micro_batches < 1 || options_.steps < 1 || options_.max_skipped_steps < 1)
    throw std::invalid_argument("the trainer needs at least one step, one micro-batch and max_skipped_steps >= 1");
  if (options_.global_batch != model.micro_batch() * ranks.size() * options_.micro_batches)
    throw std::invalid_argument("global batch " + std::to_string(options_.global_batch) + " is not " +
                                std::to_string(ranks.size()) + " ranks x " + std::to_string(options_.micro_batches) +
                                " micro-batches x " + std::to_string(model.micro_batch()) + " rows");
}

// Micro-batch m of rank r: rows (m·N + r)·b .. +b of the global batch, so any N and K train the
// same global batch.
BatchRows Trainer::rows_of_micro_batch(int micro) const {
  const int b = model_.micro_batch();
  return BatchRows{(micro * ranks_.size() + ranks_.rank()) * b, b, options_.global_batch};
}

// Submits one optimizer step; returns its loss (mean over micro-batches and ranks: with masked
// targets, each micro-batch's mean_loss is its share of the global batch's mean over the counted
// targets, so this mean is that one).
double Trainer::submit_step(std::uint64_t step, float lr) {
  double loss_sum = 0;
  {
    const StepMark mark{static_cast<long>(step)};
    engine_.submit_step(lr, int(step), options_.micro_batches, [&](int micro) {
      if (micro > 0) loss_sum += ranks_.average(model_.mean_loss());  // the previous micro-batch's
      model_.load_train_rows(step, rows_of_micro_batch(micro));
    });
  }
  return (loss_sum + ranks_.average(model_.mean_loss())) / options_.micro_batches;
}

TrainingSummary Trainer::run(std::uint64_t first_step) {
  TrainingSummary summary;
  const std::uint64_t last_step = first_step + std::uint64_t(options_.steps) - 1;
  const double tokens_per_step = double(options_.global_batch) * double(model_.row_tokens());
  Communicator* comm = ranks_.engine_comm();
  for (std::uint64_t step = first_step; step <= last_step; ++step) {
    const double start = sim::now_seconds();
    const float lr = optim::learning_rate(options_.schedule, int(step), int(last_step));
    const CommStats before = comm ? comm->stats() : CommStats{};
    double loss = 0;
    float norm = 0;
    {
      const activity::Scope waiting("step " + std::to_string(step) +
                                    ": submitting its tasks, waiting for its loss and gradient norm");
      loss = submit_step(step, lr);
      norm = engine_.last_grad_norm();  // waits for the whole backward
      if (comm) {
        starpu_task_wait_for_all();  // this step's collectives, for the byte count
        summary.last_step_traffic = difference(comm->stats(), before);
      }
    }
    const double seconds = seconds_since(start);
    if constexpr (!sim::kernels_run) loss = norm = 0;  // no kernel ran: the buffers hold no values
    summary.train_seconds += seconds;
    if (summary.steps++ == 0) summary.first_loss = loss;
    summary.last_loss = loss;
    if (!std::isfinite(loss))
      throw std::runtime_error("loss is " + std::to_string(loss) + " at step " + std::to_string(step));
    const bool skipped = !check_gradient_norm(step, norm);
    // A simulation has no norm: nothing is clipped there.
    const int rollbacks = sim::kernels_run ? engine_.last_step_rollbacks() : 0;
    summary.rolled_back_steps += rollbacks > 0 ? 1 : 0;
    const std::string rolled_back = rollbacks > 0 ? " | rollback: " + std::to_string(rollbacks) + " AdamW re-run" : "";
    char line[320];
    if constexpr (sim::predicts_times)
      std::snprintf(line, sizeof line, "step %llu/%llu | lr %.2e | predicted %.1f ms | %.0f tok/s",
                    (unsigned long long)step, (unsigned long long)last_step, lr, seconds * 1e3,
                    tokens_per_step / seconds);
    else
      std::snprintf(line, sizeof line, "step %llu/%llu | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s%s",
                    (unsigned long long)step, (unsigned long long)last_step, loss, lr, norm, seconds * 1e3,
                    tokens_per_step / seconds, skipped ? " | skipped" : "", rolled_back.c_str());
    report_step(step - first_step + 1, std::uint64_t(options_.steps), line);
    if (on_step) on_step(StepRecord{step, loss, lr, norm, seconds, tokens_per_step / seconds, skipped, rollbacks});
    if (options_.val_every > 0 && (step % std::uint64_t(options_.val_every) == 0 || step == last_step)) {
      if (const auto validation = validate()) {
        summary.last_validation = validation->loss;
        summary.last_accuracy = validation->accuracy;
        if (on_validation) on_validation(step, *validation);
        print_line("  validation loss " + std::to_string(validation->loss) +
                   (validation->accuracy ? ", accuracy " + std::to_string(*validation->accuracy) : ""));
      }
    }
    if (options_.sample_every > 0 && step % std::uint64_t(options_.sample_every) == 0 && !options_.quiet)
      if (const auto text = sample(options_.seed + step)) print_line("  sample: " + *text);
    if (on_save && options_.save_every > 0 && step % std::uint64_t(options_.save_every) == 0 && step != last_step)
      on_save(step);
  }
  engine_.flush();  // the last step's delayed update
  return summary;
}

// A finite norm: true. A non-finite one: the engine skipped the update (false), with a warning
// that names the first layer whose gradient is not finite, until max_skipped_steps in a row
// stop training; without clipping the update has happened, which stops training at once.
bool Trainer::check_gradient_norm(std::uint64_t step, float norm) {
  if (std::isfinite(norm)) {
    skipped_in_a_row_ = 0;
    return true;
  }
  // The first layer over all ranks: each rank knows its own part of the gradients.
  const std::vector<std::int64_t> firsts = ranks_.gather_to_leader({engine_.first_nonfinite_gradient_layer()});
  std::int64_t first = -1;
  for (const std::int64_t l : firsts)
    if (l >= 0 && (first < 0 || l < first)) first = l;
  const std::string where =
      "step " + std::to_string(step) + ": gradient norm " + std::to_string(norm) +
      (first >= 0 ? " (first non-finite gradient: layer " + std::to_string(first) + ", " +
                        model_.layer_name(int(first)) + ")"
                  : "");
  if (!engine_.skips_nonfinite_steps())
    throw std::runtime_error(where + "; without clipping (--grad-clip 0) AdamW does not wait for the norm, so the "
                                     "non-finite gradient has been applied: stopping");
  if (++skipped_in_a_row_ >= options_.max_skipped_steps)
    throw std::runtime_error(where + "; " + std::to_string(skipped_in_a_row_) +
                             " steps in a row skipped (--max-skipped-steps): stopping");
  if (ranks_.leader()) {
    if (tty_ && !options_.quiet) std::printf("\r\033[K");
    std::fprintf(stderr, "warning: %s: update skipped (%d in a row; training stops at %d)\n", where.c_str(),
                 skipped_in_a_row_, options_.max_skipped_steps);
  }
  return false;
}

std::optional<Trainer::Validation> Trainer::validate() {
  const activity::Scope validating("validation");
  const int global = model_.micro_batch() * ranks_.size();
  const std::size_t n = std::min<std::size_t>(std::size_t(options_.val_batches), model_.validation_batches(global));
  if (n == 0) return std::nullopt;
  BatchLossMean loss;
  double accuracy = 0;
  bool has_accuracy = false;
  for (std::size_t b = 0; b < n; ++b) {
    model_.load_validation_rows(b, BatchRows{ranks_.rank() * model_.micro_batch(), model_.micro_batch(), global});
    engine_.submit_forward();
    loss.add(ranks_.average(model_.mean_loss()), model_.batch_targets());
    if (const auto a = model_.accuracy()) {
      has_accuracy = true;
      accuracy += ranks_.average(*a);
    }
  }
  Validation v{loss.mean(), std::nullopt};
  if (has_accuracy) v.accuracy = accuracy / double(n);
  return v;
}

std::optional<std::string> Trainer::sample(std::uint64_t seed) {
  return model_.sample([this] { engine_.submit_forward(); }, options_.prompt, options_.sample_tokens, seed);
}

// One line per step: a progress bar rewritten in place (shows_progress_bar), else plain lines.
void Trainer::report_step(std::uint64_t done, std::uint64_t total, const std::string& line) const {
  if (options_.quiet || !ranks_.leader()) return;
  if (!tty_) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return;
  }
  const int width = 24;
  const int filled = int(double(done) / double(total) * width);
  std::printf("\r[%s%s] %s\033[K", std::string(std::size_t(filled), '#').c_str(),
              std::string(std::size_t(width - filled), '.').c_str(), line.c_str());
  if (done == total) std::printf("\n");
  std::fflush(stdout);
}

void Trainer::print_line(const std::string& text) const {
  if (options_.quiet || !ranks_.leader()) return;
  if (tty_) std::printf("\r\033[K");
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace starzero
