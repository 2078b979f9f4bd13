// optimizers/lr_schedule: starzero's warm-up + cosine and DeepSpeed's three schedules, at hand-
// worked points (DeepSpeed's formulas from deepspeed/runtime/lr_schedules.py, written here
// independently with iteration i = step - 1), and the schedule names.
#include <catch2/catch.hpp>

#include <cmath>

#include "optimizers/lr_schedule.hpp"

using namespace starzero::optim;

namespace {
LrSchedule ds(LrScheduleKind kind, float lr, int warmup, float low, bool log, int total, float final = 0.1f) {
  LrSchedule s;
  s.kind = kind;
  s.lr = lr;
  s.warmup = warmup;
  s.warmup_min = low;
  s.log_warmup = log;
  s.total = total;
  s.final = final;
  return s;
}
}  // namespace

TEST_CASE("cosine: linear warm-up from lr/W, cosine to lr*final at the run's end", "[lr]") {
  LrSchedule s;  // lr 1e-3, warm-up 20, final 0.1
  CHECK(learning_rate(s, 1, 100) == Approx(1e-3 / 20));
  CHECK(learning_rate(s, 20, 100) == Approx(1e-3));
  CHECK(learning_rate(s, 60, 100) == Approx(1e-4 + 0.5 * (1e-3 - 1e-4)));  // half way: cos = 0
  CHECK(learning_rate(s, 100, 100) == Approx(1e-4));
  s.total = 60;  // --lr-total: the decay ends there, then stays
  CHECK(learning_rate(s, 60, 100) == Approx(1e-4));
  CHECK(learning_rate(s, 90, 100) == Approx(1e-4));
}

TEST_CASE("ds-warmup (WarmupLR): log or linear warm-up from warmup_min_lr, then constant", "[lr]") {
  const LrSchedule log_warmup = ds(LrScheduleKind::ds_warmup, 1e-3f, 10, 1e-5f, true, 0);
  CHECK(learning_rate(log_warmup, 1, 50) == Approx(1e-5));                                  // i = 0: log 1 = 0
  CHECK(learning_rate(log_warmup, 4, 50) == Approx(1e-5 + (1e-3 - 1e-5) * std::log(4.0) / std::log(10.0)));
  CHECK(learning_rate(log_warmup, 11, 50) == Approx(1e-3));
  CHECK(learning_rate(log_warmup, 50, 50) == Approx(1e-3));
  const LrSchedule linear = ds(LrScheduleKind::ds_warmup, 1e-3f, 10, 0, false, 0);
  CHECK(learning_rate(linear, 6, 50) == Approx(5e-4));  // i = 5 of 10
  // DeepSpeed takes at least 2 warm-up steps.
  CHECK(learning_rate(ds(LrScheduleKind::ds_warmup, 1e-3f, 0, 0, false, 0), 2, 50) == Approx(5e-4));
}

TEST_CASE("ds-warmup-decay (WarmupDecayLR): linear decay to warmup_min_lr at total_num_steps", "[lr]") {
  const LrSchedule s = ds(LrScheduleKind::ds_warmup_decay, 2e-3f, 4, 0, false, 12);
  CHECK(learning_rate(s, 3, 12) == Approx(1e-3));                   // i = 2 of 4
  CHECK(learning_rate(s, 5, 12) == Approx(2e-3));                   // i = 4: (12-4)/(12-4)
  CHECK(learning_rate(s, 9, 12) == Approx(2e-3 * (12 - 8) / 8.0));  // i = 8
  CHECK(learning_rate(s, 13, 20) == Approx(0).margin(1e-12));       // past the end: 0, not negative
}

TEST_CASE("ds-warmup-cosine (WarmupCosineLR): ratios of lr, cosine to cos_min_ratio", "[lr]") {
  const LrSchedule s = ds(LrScheduleKind::ds_warmup_cosine, 1e-3f, 5, 0.2f, false, 15, 0.01f);
  CHECK(learning_rate(s, 1, 15) == Approx(1e-3 * 0.2));
  CHECK(learning_rate(s, 3, 15) == Approx(1e-3 * (0.2 + 0.4 * 0.8)));  // i = 2 of 5
  // i = 9: progress (9 - 5 + 1)/(15 - 5) = 0.5, cosine ratio (1 + cos(pi/2))/2 = 0.5.
  CHECK(learning_rate(s, 10, 15) == Approx(1e-3 * (0.01 + 0.99 * 0.5)));
  CHECK(learning_rate(s, 30, 30) == Approx(1e-3 * 0.01));  // clamped at the floor
}

TEST_CASE("schedule names round-trip, unknown names are refused", "[lr]") {
  for (const LrScheduleKind k : {LrScheduleKind::cosine, LrScheduleKind::ds_warmup, LrScheduleKind::ds_warmup_decay,
                                 LrScheduleKind::ds_warmup_cosine}) {
    LrScheduleKind back = LrScheduleKind::cosine;
    REQUIRE(lr_schedule_from_name(lr_schedule_name(k), back));
    CHECK(back == k);
  }
  LrScheduleKind kind{};
  CHECK_FALSE(lr_schedule_from_name("WarmupLR", kind));
  CHECK_FALSE(lr_schedule_from_name("", kind));
}
