#!/usr/bin/env bash
# Activation recomputation (--recompute none|selective|full, --recompute-window W) and offload
# (--offload-activations cpu): the same kernels on the same inputs, so training is bitwise
# identical to keeping every activation: checkpoints byte-identical after 5 steps, fp32 and bf16,
# 1 and 2 tiles, windows 0-2, and on 2 ranks at every ZeRO stage. The activation bytes the model
# allocates (on the device, and offloaded) equal the formulas of docs/activation-memory.md and
# shrink: full < selective < none. The fetch tasks sit where the window says. Bad input exits 2.
# Usage: recompute_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 13 20000
tiny=(--preset tiny --layers 4 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --data "$work/text.txt" --val-every 0 --quiet --steps 5)
held() { grep -oE "^activations: [0-9.]+ MB" "$1" | grep -oE "[0-9.]+"; }

for precision in fp32 bf16; do
  for tiles in 1 2; do
    run=("$starzero" train "${tiny[@]}" --precision "$precision" --tiles "$tiles")
    "${run[@]}" --checkpoint-out "$work/none.bin" > "$work/none.log" 2>&1 || { cat "$work/none.log"; fail "none"; }
    modes=("selective --recompute-window 0" "selective" "full --recompute-window 0" "full" "full --recompute-window 2"
      "none --offload-activations cpu" "none --offload-activations cpu --recompute-window 0"
      "selective --offload-activations cpu" "full --offload-activations cpu --recompute-window 0")
    check_recompute_modes "$precision, $tiles tile(s)" modes "${run[@]}"
  done
done
grep -qE "^activations: .* plan [0-9.]+ MB$" "$work/none.log" || { cat "$work/none.log"; fail "none: held != plan"; }

# Less memory, full least (window 0: one block's activations alive).
for mode in none selective full; do
  "$starzero" train "${tiny[@]}" --precision fp32 --recompute "$mode" $([ "$mode" = none ] || echo --recompute-window 0) \
    > "$work/$mode.log" 2>&1 || fail "$mode for memory"
done
python3 "$here/check_recompute.py" shrinks "$(held "$work/none.log")" "$(held "$work/selective.log")" "$(held "$work/full.log")" || fail "activation bytes do not shrink: $(held "$work/none.log") $(held "$work/selective.log") $(held "$work/full.log")"

# Offload moves the kept bytes of L − (W + 1) blocks off the device: 4 blocks, window 0: 3 of them.
"$starzero" train "${tiny[@]}" --precision fp32 --offload-activations cpu --recompute-window 0 \
  > "$work/none_offload.log" 2>&1 || { cat "$work/none_offload.log"; fail "none + offload"; }
python3 "$here/check_recompute.py" offload-moves "$(held "$work/none.log")" "$(held "$work/none_offload.log")" \
  "$(grep -oE "^activations offloaded: [0-9.]+" "$work/none_offload.log" | grep -oE "[0-9.]+$")" || fail "offload: device bytes do not drop by the offloaded bytes"
"$starzero" train "${tiny[@]}" --precision fp32 --tiles 1 --recompute full --recompute-window 0 \
  --offload-activations cpu --trace "$work/trace" > "$work/offload.log" 2>&1 || { cat "$work/offload.log"; fail "full + offload"; }
# In the trace: one fetch per offloaded block and step, each after the backward of the block W + 1
# above it (its gate). It only reads, so the recomputation, which reads the same data, does not
# wait for it: nothing orders the two.
python3 "$here/check_recompute.py" fetch-order "$work/trace/tasks.rec" || fail "activation fetch tasks are missing or out of place"

# Two ranks, every stage: each mode equals none.
for stage in 0 1 2 3; do
  "${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --precision fp32 --cpu-workers 1 --stage "$stage" \
    --checkpoint-out "$work/z_none.bin" > "$work/z.log" 2>&1 || { cat "$work/z.log"; fail "stage $stage none"; continue; }
  for mode in selective full "full --offload-activations cpu"; do
    read -r -a flags <<< "--recompute $mode"
    "${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --precision fp32 --cpu-workers 1 --stage "$stage" \
      "${flags[@]}" --checkpoint-out "$work/z_r.bin" > "$work/z.log" 2>&1 || { cat "$work/z.log"; fail "stage $stage $mode"; continue; }
    cmp -s "$work/z_none.bin" "$work/z_r.bin" || fail "2 ranks, ZeRO-$stage, --recompute $mode: checkpoint differs from none"
  done
done

expect_error() { local what=$1; shift; expect_bad_input "$what" "$starzero" train "${tiny[@]}" "$@"; }
expect_error "an unknown mode" --recompute some
expect_error "a window without recomputation or offload" --recompute-window 1
expect_error "an unknown offload place" --offload-activations disk
# A window beyond the model: every block has its own slot, which is what none keeps.
"$starzero" train "${tiny[@]}" --precision fp32 --recompute full --recompute-window 9 --checkpoint-out "$work/w9.bin" \
  > "$work/w9.log" 2>&1 || { cat "$work/w9.log"; fail "window 9 of 4 blocks"; }
grep -qE "^activations: .* plan [0-9.]+ MB$" "$work/w9.log" || { cat "$work/w9.log"; fail "window 9: held != plan"; }
rc=0
"$starzero" train --model mlp --steps 1 --cuda-workers 0 --recompute full > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "the mlp model keeps its activations" "$work/err" || { cat "$work/err"; fail "mlp: exit code $rc"; }
rc=0
"$starzero" train --model mlp --steps 1 --cuda-workers 0 --offload-activations cpu > /dev/null 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "the mlp model keeps its activations" "$work/err" || { cat "$work/err"; fail "mlp offload: exit code $rc"; }
finish "recompute: passed"
