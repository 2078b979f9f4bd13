#!/usr/bin/env bash
# `starzero train --metrics FILE.jsonl` and `starzero plot`: one JSON object per step with the
# numbers the step line printed (exactly: the file has every digit), validation lines, the
# summary naming the file, appending on resume, peak bytes; the SVG gnuplot draws from it; bad
# metrics files give exit code 2.
# Usage: metrics_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 7 20000
tiny=(--preset tiny --layers 1 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --data "$work/text.txt" --precision fp32 --val-every 3 --sample-tokens 4)

"$starzero" train "${tiny[@]}" --steps 6 --metrics "$work/m.jsonl" --checkpoint-out "$work/ck.bin" > "$work/log" 2>&1 \
  || { cat "$work/log"; fail "train --metrics exited non-zero"; }
grep -q "^metrics: $work/m.jsonl (10 lines" "$work/log" || fail "the summary does not name the metrics file with its 10 lines"
python3 "$here/check_metrics.py" metrics-file "$work/m.jsonl" "$work/log" || fail "metrics file content"

# A resumed run appends: its steps 7-9 follow, and a 9-step run's losses are the same numbers.
"$starzero" train "${tiny[@]}" --steps 3 --checkpoint-in "$work/ck.bin" --metrics "$work/m.jsonl" > "$work/log2" 2>&1 \
  || { cat "$work/log2"; fail "resumed run exited non-zero"; }
"$starzero" train "${tiny[@]}" --steps 9 --metrics "$work/straight.jsonl" > "$work/log3" 2>&1 \
  || fail "9-step run exited non-zero"
python3 "$here/check_metrics.py" resumed "$work/m.jsonl" "$work/straight.jsonl" || fail "resumed metrics"

# The chart.
"$starzero" plot "$work/m.jsonl" --out "$work/loss.svg" > "$work/plot.log" 2>&1 || { cat "$work/plot.log"; fail "plot failed"; }
grep -q "(9 steps, 3 validation points, 2 runs)" "$work/plot.log" || { cat "$work/plot.log"; fail "plot summary"; }
grep -q "<svg" "$work/loss.svg" && grep -q "training loss" "$work/loss.svg" && grep -q "tokens/s" "$work/loss.svg" \
  || fail "the SVG has no chart"

# Bad input: exit code 2 and one line.
expect_usage_error() { local what=$1; shift; expect_bad_input "$what" "$starzero" "$@"; }  # WHAT ARGS...
printf '{"event":"step","step":1,"loss":2.0,"tokens_per_second":3}\n{"event":"step","step' > "$work/cut.jsonl"
expect_usage_error "truncated metrics file" plot "$work/cut.jsonl" --out "$work/x.svg"
printf '{"event":"start"}\n' > "$work/nosteps.jsonl"
expect_usage_error "metrics file without steps" plot "$work/nosteps.jsonl" --out "$work/x.svg"
printf '{"event":"step","step":1,"loss":"low"}\n' > "$work/badloss.jsonl"
expect_usage_error "loss that is not a number" plot "$work/badloss.jsonl" --out "$work/x.svg"
expect_usage_error "no --out" plot "$work/m.jsonl"
expect_usage_error "no file" plot --out "$work/x.svg"
expect_usage_error "missing file" plot "$work/none.jsonl" --out "$work/x.svg"
expect_usage_error "--metrics in a missing folder" train "${tiny[@]}" --steps 1 --metrics "$work/no/m.jsonl"
[ ! -e "$work/x.svg" ] || fail "a failed plot wrote its SVG"
finish "metrics: passed"
