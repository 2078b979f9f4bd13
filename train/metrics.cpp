#include "train/metrics.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace starzero {

using json = nlohmann::json;

PeakBytes peak_bytes_of(const Engine& engine) {
  const MemoryLedger& ledger = engine.ledger();
  PeakBytes peaks;
  peaks.device = ledger.peak_total(MemoryPlace::device);
  peaks.host = ledger.peak_total(MemoryPlace::host);
  peaks.disk = ledger.peak_total(MemoryPlace::disk);
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) peaks.rss = std::int64_t(usage.ru_maxrss) * 1024;  // KiB on Linux
  return peaks;
}

PeakBytes largest_over_ranks(const PeakBytes& mine, const DataParallelRanks& ranks) {
  if (ranks.size() == 1) return mine;
  const std::vector<std::int64_t> all = ranks.gather_to_leader({mine.device, mine.host, mine.disk, mine.rss});
  if (!ranks.leader()) return mine;
  PeakBytes largest;
  for (std::size_t r = 0; r + 3 < all.size(); r += 4) {
    largest.device = std::max(largest.device, all[r]);
    largest.host = std::max(largest.host, all[r + 1]);
    largest.disk = std::max(largest.disk, all[r + 2]);
    largest.rss = std::max(largest.rss, all[r + 3]);
  }
  return largest;
}

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path), file_(std::fopen(path.c_str(), "a")) {
  if (!file_) throw std::invalid_argument("--metrics: cannot open '" + path.string() + "': " + std::strerror(errno));
}

void MetricsLog::write_line(const std::string& text) {
  if (!file_) return;
  if (std::fputs(text.c_str(), file_.get()) < 0 || std::fputc('\n', file_.get()) < 0 ||
      std::fflush(file_.get()) != 0) {
    std::fprintf(stderr, "warning: writing %s failed (%s): no more metrics are written\n", path_.c_str(),
                 std::strerror(errno));
    file_.reset();
    return;
  }
  ++lines_;
}

void MetricsLog::start(const RunDescription& run) {
  char when[32] = "";
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  if (::gmtime_r(&now, &utc)) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  write_line(json{{"event", "start"},
                  {"time", when},
                  {"model", run.model},
                  {"precision", run.precision},
                  {"global_batch", run.global_batch},
                  {"seq", run.row_tokens},
                  {"steps", run.steps},
                  {"first_step", run.first_step},
                  {"ranks", run.ranks},
                  {"stage", run.stage}}
                 .dump());
}

void MetricsLog::step(const StepRecord& r, const PeakBytes& peaks) {
  write_line(json{{"event", "step"},
                  {"step", r.step},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"step_seconds", r.seconds},
                  {"tokens_per_second", r.tokens_per_second},
                  {"skipped", r.skipped},
                  {"rollbacks", r.rollbacks},
                  {"peak_bytes", {{"device", peaks.device}, {"host", peaks.host}, {"disk", peaks.disk}, {"rss", peaks.rss}}}}
                 .dump());
}

void MetricsLog::validation(std::uint64_t step, const Trainer::Validation& v) {
  json line{{"event", "validation"}, {"step", step}, {"loss", v.loss}};
  if (v.accuracy) line["accuracy"] = *v.accuracy;
  write_line(line.dump());
}

void MetricsLog::end(int steps, double train_seconds) {
  write_line(json{{"event", "end"}, {"steps", steps}, {"train_seconds", train_seconds}}.dump());
}

}  // namespace starzero
