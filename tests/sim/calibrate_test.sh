#!/usr/bin/env bash
# `starzero calibrate`: a real run records every codelet's history-based model for this machine's
# name into DIR/codelets/45 and writes the machine's platform into DIR/bus (with its machine.json,
# which starzero-sim --platform DIR reads) with StarPU's per-task overhead measured under the run's
# policy; a second run into the same folder keeps them and averages the overheads; bad input
# exits 2 with one line.
# Usage: calibrate_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 13 20000
tiny=(--preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --data "$work/text.txt"
  --cuda-workers 0 --precision fp32 --quiet)
"$starzero" calibrate --out "$work/cal" --name box1 "${tiny[@]}" --steps 12 > "$work/cal.log" 2>&1 \
  || { cat "$work/cal.log"; fail "calibrate"; }
grep -qE "^calibrated: [0-9]+ codelet models in $work/cal/codelets/45 \(\*\.box1\)" "$work/cal.log" \
  || { cat "$work/cal.log"; fail "calibrate: summary line"; }
for codelet in nn_matmul_forward nn_attention_forward nn_layernorm_forward adamw; do
  [ -s "$work/cal/codelets/45/$codelet.box1" ] || fail "no model for $codelet"
done
for file in platform.v4.xml bandwidth latency machine.json; do
  [ -s "$work/cal/bus/box1.$file" ] || fail "no bus/box1.$file"
done
python3 "$here/check_calibrate.py" machine-json "$work/cal/bus/box1.machine.json" "$(nproc)" || fail "machine.json: not this machine's cores without GPUs"
# StarPU's per-task overhead, measured over steps 2..12 under the run's policy, is in the platform
# as the run printed it; a second policy adds its own entry, and a second run under the first
# policy averages with it, weighted by tasks (computed here from the printed figures).
overhead_line='^StarPU.s overhead per task on the CPU workers \(steps 2 on, policy ([a-z]+)\): ([0-9.]+) us over ([0-9]+) tasks; a sleeping worker.s wake-up: ([0-9.]+) us$'
check_overheads() {  # LOG...: the machine.json holds, per policy, the task-weighted mean of the logs' figures
  python3 "$here/check_calibrate.py" overheads "$work/cal/bus/box1.machine.json" "$overhead_line" "$@"
}
if [ "$(nproc)" -ge 2 ]; then
  check_overheads "$work/cal.log" || { cat "$work/cal.log"; fail "the measured overhead in machine.json"; }
else  # one CPU worker: no wake-up to measure
  grep -q "^StarPU's overhead per task: not measured" "$work/cal.log" || fail "one core: the overhead line"
fi
# A second run into the same folder keeps the models (StarPU merges its samples into them).
"$starzero" calibrate --out "$work/cal" --name box1 "${tiny[@]}" --steps 12 --sched dmda > "$work/cal2.log" 2>&1 \
  || { cat "$work/cal2.log"; fail "calibrate again"; }
[ -s "$work/cal/codelets/45/nn_matmul_forward.box1" ] || fail "second run lost the model"
"$starzero" calibrate --out "$work/cal" --name box1 "${tiny[@]}" --steps 12 > "$work/cal3.log" 2>&1 \
  || { cat "$work/cal3.log"; fail "calibrate a third time"; }
if [ "$(nproc)" -ge 2 ]; then
  check_overheads "$work/cal.log" "$work/cal2.log" "$work/cal3.log" \
    || { cat "$work/cal/bus/box1.machine.json"; fail "the overheads of three runs"; }
fi
# One step measures no overhead: the platform keeps what it had.
cp "$work/cal/bus/box1.machine.json" "$work/before.json"
"$starzero" calibrate --out "$work/cal" --name box1 "${tiny[@]}" --steps 1 > "$work/cal4.log" 2>&1 \
  || { cat "$work/cal4.log"; fail "calibrate one step"; }
grep -q "^StarPU's overhead per task: not measured" "$work/cal4.log" || { cat "$work/cal4.log"; fail "one step: the overhead line"; }
cmp -s "$work/cal/bus/box1.machine.json" "$work/before.json" || fail "one step changed the measured overheads"
# A folder whose machine file is broken is refused before training, and left as it is.
mkdir -p "$work/broken/bus"
echo '{"name": "box1", "cpus": 2' > "$work/broken/bus/box1.machine.json"
expect_bad_input "a broken machine file in --out" "$starzero" calibrate --out "$work/broken" --name box1 "${tiny[@]}"
[ "$(cat "$work/broken/bus/box1.machine.json")" = '{"name": "box1", "cpus": 2' ] || fail "the broken machine file was changed"

expect_bad_input "no --out" "$starzero" calibrate "${tiny[@]}"
expect_bad_input "a bad name" "$starzero" calibrate --out "$work/x" --name "a b" "${tiny[@]}"
expect_bad_input "a bad train flag" "$starzero" calibrate --out "$work/y" --no-such-flag
finish "calibrate: passed"
