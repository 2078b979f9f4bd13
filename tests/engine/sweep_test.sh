#!/usr/bin/env bash
# `starzero sweep` end to end on a small GPT: the table, the JSON, the chart, the alternating
# order of the runs, --ranks 2 under mpirun, and its usage errors. (--cpu-compute off,on as a
# dimension: placement_test.sh, on a simulated GPU.)
# Usage: sweep_test.sh PATH/TO/starzero
set -euo pipefail
STARZERO=${1:?usage: sweep_test.sh STARZERO}
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

write_words "$work/text.txt" 11 4000
TRAIN=(train --data "$work/text.txt" --layers 2 --channels 64 --heads 2 --batch 4 --seq 32 --steps 3
       --val-every 0 --sample-every 0 --cuda-workers 0)

"$STARZERO" sweep --sched lws,prio --priorities none,critical-path --repeat 2 --out "$work/sw" -- "${TRAIN[@]}" \
  >"$work/table.md" 2>"$work/progress.txt" || fail "sweep exited $?: $(tail -1 "$work/progress.txt")"
[ "$(grep -c '^| lws \|^| prio ' "$work/table.md")" = 4 ] || fail "the table does not have 4 combinations: $(cat "$work/table.md")"
[ "$(grep -c '^sweep: \[[0-9]/8\]' "$work/progress.txt")" = 8 ] || fail "not 8 progress lines"
# Repeat 2 runs the combinations in the reverse order of repeat 1.
first=$(grep '^sweep: \[1/8\]' "$work/progress.txt" | sed 's/^sweep: \[1\/8\] \(.*\), run 1:.*/\1/')
last=$(grep '^sweep: \[8/8\]' "$work/progress.txt" | sed 's/^sweep: \[8\/8\] \(.*\), run 2:.*/\1/')
[ -n "$first" ] && [ "$first" = "$last" ] || fail "repeat 2 does not end with repeat 1's first combination ('$first', '$last')"
python3 - "$work/sw/sweep.json" <<'PY' || fail "sweep.json is not what docs/scheduling.md says"
import json, sys
j = json.load(open(sys.argv[1]))
combos = j["combinations"]
assert len(combos) == 4, len(combos)
for c in combos:
    assert c["cpu_compute"] == "off", c  # the default
    for k in ("policy", "priorities", "cpu_compute", "step_s", "step_min_s", "step_max_s", "tokens_per_s", "steady_busy_fraction",
              "adam_concurrent_fraction", "collective_concurrent_fraction", "gpu_transfer_bytes", "runs"):
        assert k in c, k
    assert len(c["runs"]) == 2
    steps = [r["step_s"] for r in c["runs"]]
    assert c["step_min_s"] == min(steps) and c["step_max_s"] == max(steps), c
    assert c["step_min_s"] <= c["step_s"] <= c["step_max_s"]
    assert 0 < c["steady_busy_fraction"] <= 1 and c["tokens_per_s"] > 0
    assert c["collective_concurrent_fraction"] is None  # one rank: no collective ran
PY
grep -q '<svg' "$work/sw/sweep.svg" && grep -qi 'gnuplot' "$work/sw/sweep.svg" || fail "sweep.svg is not a gnuplot SVG"
[ "$(ls "$work/sw/runs" | grep -c '\.log$')" = 8 ] || fail "runs/ does not keep the 8 logs"

# Two ranks under mpirun: rank 0's trace reports, collectives overlap figures appear.
"$STARZERO" sweep --sched lws --priorities critical-path --repeat 1 --ranks 2 --out "$work/sw2" -- "${TRAIN[@]}" \
  --cpu-workers 1 --stage 2 >"$work/table2.md" 2>"$work/progress2.txt" || fail "sweep --ranks 2 exited $?: $(tail -1 "$work/progress2.txt")"
python3 - "$work/sw2/sweep.json" <<'PY' || fail "sweep --ranks 2: no collective overlap in sweep.json"
import json, sys
c = json.load(open(sys.argv[1]))["combinations"][0]
assert c["collective_concurrent_fraction"] is not None, c
PY

# Usage errors: one line, exit code 2.
bad() {
  local what=$1
  shift
  set +e
  "$STARZERO" sweep --out "$work/bad" "$@" >/dev/null 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" = 2 ] || fail "$what: exit code $rc, not 2"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$what: stderr is not one line: $(cat "$work/err")"
}
bad "no training" --sched lws
bad "not train" --sched lws -- eval --data x
bad "train sets --sched" -- "${TRAIN[@]}" --sched dmdas
bad "train sets --cpu-compute" -- "${TRAIN[@]}" --cpu-compute on
bad "unknown --cpu-compute" --cpu-compute off,maybe -- "${TRAIN[@]}"
bad "unknown policy" --sched lws,nope -- "${TRAIN[@]}"
bad "unknown scheme" --priorities fast -- "${TRAIN[@]}"
bad "empty name" --sched lws,,prio -- "${TRAIN[@]}"
bad "repeat 0" --repeat 0 -- "${TRAIN[@]}"

finish "sweep: all checks passed"
