#pragma once
// The metrics file of a run (`--metrics FILE.jsonl`): one JSON object per line, written by the
// leader and flushed line by line, so a killed run leaves every line it finished.
//   {"event":"start", ...}       the run: model, precision, batch, steps, ranks, stage, first step
//   {"event":"step", ...}        step, loss, lr, grad_norm, step_seconds, tokens_per_second,
//                                skipped (a non-finite gradient norm: no update), rollbacks
//                                (--speculative-update: AdamW tasks the clipping re-ran) and
//                                peak_bytes {device, host, disk, rss}: the largest over the ranks
//   {"event":"validation", ...}  step, loss (and accuracy when the model has one)
//   {"event":"end", ...}         steps done, training seconds
// The file is appended to: a resumed run continues its predecessor's curve (a reader takes the
// last line written for a step). Floats are written with enough digits to read back exactly.
// A failed write prints one warning and stops the metrics; training goes on.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "comm/ranks.hpp"
#include "offload/engine.hpp"
#include "train/trainer.hpp"

namespace starzero {

struct RunDescription {
  std::string model;      // ModelSpec::describe()
  std::string precision;  // "fp32" / "bf16"
  int global_batch = 0, row_tokens = 0, steps = 0, ranks = 1, stage = 0;
  std::uint64_t first_step = 1;
};

// Bytes a rank holds at most, per place (the engine's ledger) and the process's peak RSS.
struct PeakBytes {
  std::int64_t device = 0, host = 0, disk = 0, rss = 0;
};
// This rank's peaks now.
PeakBytes peak_bytes_of(const Engine& engine);
// The largest of every rank's peaks, on the leader (collective; other ranks get their own).
PeakBytes largest_over_ranks(const PeakBytes& mine, const DataParallelRanks& ranks);

class MetricsLog {
 public:
  // Opens `path` for appending (creating it). std::invalid_argument when it cannot be opened.
  explicit MetricsLog(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  std::size_t lines() const { return lines_; }

  void start(const RunDescription& run);
  void step(const StepRecord& record, const PeakBytes& peaks);
  void validation(std::uint64_t step, const Trainer::Validation& validation);
  void end(int steps, double train_seconds);

 private:
  void write_line(const std::string& json);

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::filesystem::path path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::size_t lines_ = 0;
};

}  // namespace starzero
