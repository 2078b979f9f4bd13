#!/usr/bin/env bash
# `starzero calibrate`: a real run records every codelet's history-based model for this machine's
# name into DIR/codelets/45 and writes the machine's platform into DIR/bus (with its machine.json,
# which starzero-sim --platform DIR reads); a second run into the same folder keeps them; bad
# input exits 2 with one line.
# Usage: calibrate_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
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
python3 - "$work/cal/bus/box1.machine.json" "$(nproc)" <<'PY' || fail "machine.json: not this machine's cores without GPUs"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["name"] == "box1" and m["gpus"] == 0 and m["cpus"] == min(64, int(sys.argv[2])), m
PY
# A second run into the same folder keeps the models (StarPU merges its samples into them).
"$starzero" calibrate --out "$work/cal" --name box1 "${tiny[@]}" --steps 12 > "$work/cal2.log" 2>&1 \
  || { cat "$work/cal2.log"; fail "calibrate again"; }
[ -s "$work/cal/codelets/45/nn_matmul_forward.box1" ] || fail "second run lost the model"

expect_bad_input "no --out" "$starzero" calibrate "${tiny[@]}"
expect_bad_input "a bad name" "$starzero" calibrate --out "$work/x" --name "a b" "${tiny[@]}"
expect_bad_input "a bad train flag" "$starzero" calibrate --out "$work/y" --no-such-flag
finish "calibrate: passed"
