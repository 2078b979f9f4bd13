#pragma once
// Learning-rate schedules by optimizer step (1-based): starzero's own (llm.c's warm-up + cosine)
// and the three of DeepSpeed's `scheduler` section (deepspeed/runtime/lr_schedules.py), so that a
// DeepSpeed config runs with the schedule it names (docs/deepspeed-config.md). DeepSpeed's
// formulas take the scheduler's iteration i; optimizer step s uses i = s − 1.
//   cosine            s ≤ W: lr·s/W; then cosine from lr to lr·final at step `total`
//   ds-warmup         WarmupLR: i < W: min + (lr − min)·γ(i); then lr
//   ds-warmup-decay   WarmupDecayLR: as ds-warmup, then min + (lr − min)·max(0, (total − i)/max(1, total − W))
//   ds-warmup-cosine  WarmupCosineLR, ratios of lr: i < W: lr·(r0 + (1 − r0)·γ(i)); then
//                     lr·(final + (1 − final)·(1 + cos(π·min(1, (i − W + 1)/max(1, total − W))))/2)
// with γ(i) = log(i + 1)/log(W) (warm-up "log", DeepSpeed's default) or i/W ("linear"); the
// DeepSpeed schedules take W = max(2, warmup) as DeepSpeed does.
#include <string_view>

namespace starzero::optim {

enum class LrScheduleKind { cosine, ds_warmup, ds_warmup_decay, ds_warmup_cosine };
// By name: "cosine", "ds-warmup", "ds-warmup-decay", "ds-warmup-cosine"; false for any other.
bool lr_schedule_from_name(std::string_view name, LrScheduleKind& kind);
std::string_view lr_schedule_name(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  float lr = 1e-3f;        // the peak (DeepSpeed: warmup_max_lr, or the optimizer's lr for ds-warmup-cosine)
  int warmup = 20;         // W
  float final = 0.1f;      // cosine: lr·final at the end; ds-warmup-cosine: cos_min_ratio
  float warmup_min = 0;    // ds-warmup(-decay): warmup_min_lr; ds-warmup-cosine: warmup_min_ratio (r0)
  bool log_warmup = true;  // DeepSpeed schedules: warmup_type "log" (else "linear")
  int total = 0;           // where the decay ends (total_num_steps); 0: the run's last step
};

// The learning rate of optimizer step `step` (1-based) of a run whose last step is `last_step`.
float learning_rate(const LrSchedule& schedule, int step, int last_step);

}  // namespace starzero::optim
