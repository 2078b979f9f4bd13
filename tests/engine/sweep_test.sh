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
python3 "$here/check_sweep.py" sweep-json "$work/sw/sweep.json" || fail "sweep.json is not what docs/scheduling.md says"
grep -q '<svg' "$work/sw/sweep.svg" && grep -qi 'gnuplot' "$work/sw/sweep.svg" || fail "sweep.svg is not a gnuplot SVG"
[ "$(ls "$work/sw/runs" | grep -c '\.log$')" = 8 ] || fail "runs/ does not keep the 8 logs"

# Two ranks under mpirun: rank 0's trace reports, collectives overlap figures appear.
"$STARZERO" sweep --sched lws --priorities critical-path --repeat 1 --ranks 2 --out "$work/sw2" -- "${TRAIN[@]}" \
  --cpu-workers 1 --stage 2 >"$work/table2.md" 2>"$work/progress2.txt" || fail "sweep --ranks 2 exited $?: $(tail -1 "$work/progress2.txt")"
python3 "$here/check_sweep.py" collective-overlap "$work/sw2/sweep.json" || fail "sweep --ranks 2: no collective overlap in sweep.json"

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
