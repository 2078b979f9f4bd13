#!/usr/bin/env bash
# Non-finite gradients (issue 14): a step whose gradient norm is NaN skips its update (parameters
# and AdamW moments byte-identical to the step before), warns naming the step and the first layer
# with a non-finite gradient, and is marked in the step line and the metrics file; K such steps in
# a row stop training with exit code 1 and no checkpoint; without clipping, where AdamW does not
# wait for the norm, the first one stops training and no checkpoint with NaN is written. On 2
# ranks (ZeRO-2) every rank skips. The NaN comes from --debug-nan-gradient STEP:LAYER.
# Usage: nonfinite_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 5 20000
tiny=(--preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --data "$work/text.txt" --precision fp32 --val-every 0 --quiet --save-every 1)
# The AdamW moments of a state file: its last 2·4·n bytes (n from the model file's size).
same_optimizer_state() {  # SET_A SET_B
  python3 "$here/check_nonfinite.py" same-moments "$1" "$2"
}

"$starzero" train "${tiny[@]}" --steps 5 --checkpoint-dir "$work/s" --debug-nan-gradient 3:1 \
  --metrics "$work/m.jsonl" > "$work/log" 2> "$work/err" || { cat "$work/log" "$work/err"; fail "a skipped step failed the run"; }
grep -q "^warning: step 3: gradient norm nan (first non-finite gradient: layer 1, block0): update skipped (1 in a row; training stops at 5)$" \
  "$work/err" || { cat "$work/err"; fail "no warning naming step 3 and layer 1"; }
cmp -s "$work/s/step_2/model.bin" "$work/s/step_3/model.bin" || fail "parameters changed in the skipped step"
same_optimizer_state "$work/s/step_2" "$work/s/step_3" || fail "AdamW moments changed in the skipped step"
cmp -s "$work/s/step_3/model.bin" "$work/s/step_4/model.bin" && fail "the step after a skipped one did not update"
python3 "$here/check_nonfinite.py" skipped-step "$work/m.jsonl" || fail "metrics do not mark the skipped step"

# K in a row stop the run; nothing from the failing steps is saved.
rc=0
"$starzero" train "${tiny[@]}" --steps 6 --checkpoint-dir "$work/k" --debug-nan-gradient 2:1,3:0,4:1 \
  --max-skipped-steps 3 > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 1 ] || fail "3 skipped steps in a row exited $rc, not 1"
grep -q "failed: step 4: .*3 steps in a row skipped (--max-skipped-steps): stopping" "$work/err" || { cat "$work/err"; fail "stop message"; }
[ "$(cat "$work/k/latest")" = step_3 ] || fail "latest is $(cat "$work/k/latest"), not step_3"

# Without clipping the NaN has been applied: stop at once, never save it.
rc=0
"$starzero" train "${tiny[@]}" --steps 4 --grad-clip 0 --checkpoint-dir "$work/c" --debug-nan-gradient 2:0 \
  > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "without clipping (--grad-clip 0)" "$work/err" || { cat "$work/err"; fail "--grad-clip 0 with a NaN gradient"; }
[ "$(cat "$work/c/latest")" = step_1 ] && [ ! -e "$work/c/step_2" ] || fail "a NaN set was written"

# Two ranks, ZeRO-2: the skip is global; parameters after the skipped step are unchanged.
"${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --cpu-workers 1 --stage 2 --steps 3 --checkpoint-dir "$work/z" \
  --debug-nan-gradient 2:1 > "$work/zlog" 2>&1 || { cat "$work/zlog"; fail "ZeRO-2 on 2 ranks with a skipped step"; }
grep -q "warning: step 2: gradient norm nan (first non-finite gradient: layer 1" "$work/zlog" || { cat "$work/zlog"; fail "no warning on 2 ranks"; }
cmp -s "$work/z/step_1/model.bin" "$work/z/step_2/model.bin" || fail "ZeRO-2: parameters changed in the skipped step"
same_optimizer_state "$work/z/step_1" "$work/z/step_2" || fail "ZeRO-2: moments changed in the skipped step"

expect_error() { local what=$1; shift; expect_bad_input "$what" "$starzero" train "${tiny[@]}" --steps 1 "$@"; }
expect_error "--max-skipped-steps 0" --max-skipped-steps 0
expect_error "--debug-nan-gradient without a colon" --debug-nan-gradient 3
expect_error "--debug-nan-gradient layer out of range" --debug-nan-gradient 1:9 --checkpoint-dir "$work/e"
finish "non-finite gradients: passed"
