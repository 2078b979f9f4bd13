#!/usr/bin/env bash
# `starzero train --deepspeed-config FILE` (apps/deepspeed_config.hpp): a config and the flags it
# stands for train identically (every digit of every loss); DeepSpeed's own Getting Started
# sample runs with its one unsupported key (fp16) turned into bf16; one warning lists the keys
# without an equivalent; contradictions with flags, malformed files and unsupported features
# are one-line errors with exit code 2; batch sizes follow DeepSpeed's rule over the ranks.
# Usage: deepspeed_config_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 3 20000
tiny=(--preset tiny --layers 1 --channels 32 --heads 2 --max-seq 32 --seq 16 --cuda-workers 0 --data "$work/text.txt"
  --val-every 0 --quiet)
losses_of() { python3 -c "
import json, sys
print(' '.join(repr(l['loss']) for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step'))" "$1"; }

cat > "$work/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 0.5,
  "steps_per_print": 10,
  "bf16": {"enabled": false},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.85, 0.95], "eps": 1e-7, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"warmup_min_ratio": 0.1, "warmup_num_steps": 3, "total_num_steps": 8, "cos_min_ratio": 0.05}},
  "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "pin_memory": true}, "overlap_comm": true,
                        "contiguous_gradients": true, "reduce_bucket_size": 5e8}
}
JSON
"$starzero" train "${tiny[@]}" --steps 6 --deepspeed-config "$work/ds.json" --metrics "$work/config.jsonl" \
  > "$work/config.log" 2> "$work/config.err" || { cat "$work/config.log" "$work/config.err"; fail "run with a config"; }
"$starzero" train "${tiny[@]}" --steps 6 --batch 4 --grad-accum 2 --grad-clip 0.5 --precision fp32 --stage 1 \
  --offload-optimizer cpu --lr 3e-3 --adam-beta1 0.85 --adam-beta2 0.95 --adam-eps 1e-7 --weight-decay 0.1 \
  --lr-schedule ds-warmup-cosine --warmup 3 --warmup-type log --warmup-min 0.1 --lr-total 8 --lr-final 0.05 \
  --metrics "$work/flags.jsonl" > /dev/null 2>&1 || fail "run with the equivalent flags"
[ -n "$(losses_of "$work/config.jsonl")" ] && [ "$(losses_of "$work/config.jsonl")" = "$(losses_of "$work/flags.jsonl")" ] \
  || fail "a config and its flags train differently: $(losses_of "$work/config.jsonl") vs $(losses_of "$work/flags.jsonl")"
grep -q "^deepspeed config $work/ds.json: --batch 4 --grad-accum 2 --grad-clip 0.5 --precision fp32 --stage 1" "$work/config.log" \
  || { cat "$work/config.log"; fail "the flags a config stands for are not printed"; }
[ "$(cat "$work/config.err")" = "warning: $work/ds.json: ignored, no equivalent here: steps_per_print, zero_optimization.contiguous_gradients, zero_optimization.reduce_bucket_size" ] \
  || { cat "$work/config.err"; fail "the ignored-keys warning"; }
# A learning rate from the schedule: DeepSpeed's WarmupCosineLR (log warm-up from 0.1·lr) at step 2.
python3 "$here/check_deepspeed_config.py" warmup-cosine "$work/config.jsonl" || fail "ds-warmup-cosine learning rates"

# DeepSpeed's Getting Started sample (docs/_tutorials/getting-started.md), unchanged but for
# fp16, which starzero does not do: first as it is (an error), then with bf16.
cat > "$work/getting-started.json" <<'JSON'
{
  "train_batch_size": 8,
  "gradient_accumulation_steps": 1,
  "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 0.00015
    }
  },
  "fp16": {
    "enabled": true
  },
  "zero_optimization": true
}
JSON
rc=0
"$starzero" train "${tiny[@]}" --steps 2 --deepspeed-config "$work/getting-started.json" > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "fp16.enabled: fp16 with loss scaling is not supported" "$work/err" || { cat "$work/err"; fail "fp16"; }
sed -i 's/"fp16"/"bf16"/' "$work/getting-started.json"
"$starzero" train "${tiny[@]}" --steps 2 --deepspeed-config "$work/getting-started.json" > "$work/gs.log" 2>&1 \
  || { cat "$work/gs.log"; fail "the Getting Started sample with bf16"; }
grep -q "deepspeed config .*: --batch 8 --grad-accum 1 --grad-clip 0 --precision bf16 --stage 1 --lr 0.00015" "$work/gs.log" \
  || { cat "$work/gs.log"; fail "Getting Started flags"; }

# Two ranks: train_batch_size = micro x accumulation x ranks.
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}' > "$work/ranks.json"
"${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --cpu-workers 1 --steps 1 --deepspeed-config "$work/ranks.json" \
  > "$work/np2.log" 2>&1 || { cat "$work/np2.log"; fail "2 ranks with a config"; }
grep -q "B=8 " "$work/np2.log" && [ "$(grep -c "^deepspeed config" "$work/np2.log")" -eq 1 ] \
  || { cat "$work/np2.log"; fail "2 ranks: batch 8, one config line"; }

expect_error() {  # WHAT JSON [FLAGS...]
  local what=$1
  printf '%s' "$2" > "$work/bad.json"
  shift 2
  expect_bad_input "$what" "$starzero" train "${tiny[@]}" --steps 1 --deepspeed-config "$work/bad.json" "$@"
}
# activation_checkpointing: --recompute full.
printf '{"activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": false}}' > "$work/ac.json"
"$starzero" train "${tiny[@]}" --steps 1 --deepspeed-config "$work/ac.json" > "$work/ac.log" 2> "$work/ac.err" \
  || { cat "$work/ac.log" "$work/ac.err"; fail "activation_checkpointing"; }
grep -q -- "--recompute full" "$work/ac.log" && grep -q "activations: .*(--recompute full, window 1)" "$work/ac.log" \
  || { cat "$work/ac.log"; fail "activation_checkpointing is not --recompute full"; }
grep -q "activation_checkpointing.partition_activations" "$work/ac.err" || { cat "$work/ac.err"; fail "partition_activations not listed"; }
# cpu_checkpointing: --offload-activations cpu.
printf '{"activation_checkpointing": {"cpu_checkpointing": true}}' > "$work/acc.json"
"$starzero" train "${tiny[@]}" --steps 1 --deepspeed-config "$work/acc.json" > "$work/acc.log" 2> "$work/acc.err" \
  || { cat "$work/acc.log" "$work/acc.err"; fail "cpu_checkpointing"; }
grep -q "activations: .*(--recompute full, window 1, --offload-activations cpu)" "$work/acc.log" \
  || { cat "$work/acc.log"; fail "cpu_checkpointing is not --offload-activations cpu"; }
expect_error "a flag that contradicts the file" '{"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' --lr 0.002
expect_error "malformed JSON" '{"train_batch_size": 8,'
expect_error "not an object" '[1, 2]'
expect_error "a stage that is not a number" '{"zero_optimization": {"stage": "two"}}'
expect_error "stage 4" '{"zero_optimization": {"stage": 4}}'
expect_error "inconsistent batch sizes" '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1}'
expect_error "another optimizer" '{"optimizer": {"type": "Lamb", "params": {"lr": 0.001}}}'
expect_error "Adam with L2" '{"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}}'
expect_error "another scheduler" '{"scheduler": {"type": "OneCycle", "params": {}}}'
expect_error "parameter offload to NVMe" '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}'
expect_error "betas of the wrong shape" '{"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}}'
expect_error "negative clipping" '{"gradient_clipping": -1}'
rc=0
"$starzero" train "${tiny[@]}" --steps 1 --deepspeed-config "$work/none.json" > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] || { cat "$work/err"; fail "a missing config: exit code $rc"; }
finish "deepspeed config: passed"
