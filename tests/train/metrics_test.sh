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
python3 - "$work/m.jsonl" "$work/log" <<'PY' || fail "metrics file content"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
events = [l["event"] for l in lines]
assert events == ["start", "step", "step", "step", "validation", "step", "step", "step", "validation", "end"], events
printed = [float(x) for x in re.findall(r"step \d+/\d+ \| loss ([0-9.]+)", open(sys.argv[2]).read())]
steps = [l for l in lines if l["event"] == "step"]
assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
for s, p in zip(steps, printed):
    assert abs(s["loss"] - p) <= 5e-5, (s["loss"], p)          # the line rounds to 4 digits
    assert s["step_seconds"] > 0 and s["tokens_per_second"] > 0 and s["grad_norm"] > 0
    assert 0 < s["lr"] <= 1e-3
    pb = s["peak_bytes"]
    assert pb["device"] >= 4 * 3 * 4 * 1 and pb["host"] == 0 and pb["disk"] == 0 and pb["rss"] > pb["device"], pb
assert steps[1]["loss"] != steps[0]["loss"]
assert [v["step"] for v in lines if v["event"] == "validation"] == [3, 6]
assert lines[0]["first_step"] == 1 and lines[0]["steps"] == 6 and lines[0]["precision"] == "fp32"
assert lines[-1]["steps"] == 6
print("metrics file: %d lines as expected" % len(lines))
PY

# A resumed run appends: its steps 7-9 follow, and a 9-step run's losses are the same numbers.
"$starzero" train "${tiny[@]}" --steps 3 --checkpoint-in "$work/ck.bin" --metrics "$work/m.jsonl" > "$work/log2" 2>&1 \
  || { cat "$work/log2"; fail "resumed run exited non-zero"; }
"$starzero" train "${tiny[@]}" --steps 9 --metrics "$work/straight.jsonl" > "$work/log3" 2>&1 \
  || fail "9-step run exited non-zero"
python3 - "$work/m.jsonl" "$work/straight.jsonl" <<'PY' || fail "resumed metrics"
import json, sys
def losses(path):
    return {l["step"]: l["loss"] for l in map(json.loads, open(path)) if l["event"] == "step"}
resumed, straight = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(resumed) == list(range(1, 10)), sorted(resumed)
# The file has every digit: resume is exact, so the losses are equal as numbers.
assert resumed == straight, [(k, resumed[k], straight[k]) for k in resumed if resumed[k] != straight.get(k)]
starts = [l for l in map(json.loads, open(sys.argv[1])) if l["event"] == "start"]
assert [s["first_step"] for s in starts] == [1, 7], starts
print("resumed metrics equal the straight run's, to the last digit")
PY

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
