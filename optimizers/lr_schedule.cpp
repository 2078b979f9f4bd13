#include "optimizers/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "optimizers/adamw.hpp"

namespace starzero::optim {

namespace {

constexpr std::string_view kNames[] = {"cosine", "ds-warmup", "ds-warmup-decay", "ds-warmup-cosine"};

// DeepSpeed's warm-up fraction γ at iteration i of W (W >= 2).
double warmup_gamma(bool log_warmup, double i, double w) { return log_warmup ? std::log(i + 1) / std::log(w) : i / w; }

}  // namespace

bool lr_schedule_from_name(std::string_view name, LrScheduleKind& kind) {
  for (std::size_t k = 0; k < std::size(kNames); ++k)
    if (name == kNames[k]) {
      kind = LrScheduleKind(k);
      return true;
    }
  return false;
}

std::string_view lr_schedule_name(LrScheduleKind kind) { return kNames[std::size_t(kind)]; }

float learning_rate(const LrSchedule& s, int step, int last_step) {
  const int total = s.total > 0 ? s.total : last_step;
  if (s.kind == LrScheduleKind::cosine) return learning_rate(step, s.lr, s.warmup, total, s.final);
  // DeepSpeed's schedules, in double as Python computes them, rounded once.
  const double i = double(step - 1), w = double(std::max(2, s.warmup)), lr = s.lr, low = s.warmup_min;
  const bool warming = i < w;
  const double gamma = warming ? warmup_gamma(s.log_warmup, i, w) : 1.0;
  switch (s.kind) {
    case LrScheduleKind::ds_warmup: return float(low + (lr - low) * gamma);
    case LrScheduleKind::ds_warmup_decay:
      if (warming) return float(low + (lr - low) * gamma);
      return float(low + (lr - low) * std::max(0.0, (double(total) - i) / std::max(1.0, double(total) - w)));
    case LrScheduleKind::ds_warmup_cosine: {
      if (warming) return float(lr * (low + gamma * (1.0 - low)));
      const double progress = std::min(1.0, (i - w + 1) / std::max(1.0, double(total) - w));
      const double ratio = s.final + (1.0 - s.final) * (1 + std::cos(M_PI * progress)) / 2;
      return float(lr * std::max(0.0, ratio));
    }
    case LrScheduleKind::cosine: break;
  }
  return s.lr;
}

}  // namespace starzero::optim
