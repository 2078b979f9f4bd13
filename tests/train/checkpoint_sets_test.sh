#!/usr/bin/env bash
# Checkpoint sets (`--checkpoint-dir DIR`, train/checkpoint_sets.hpp): step folders and `latest`,
# --keep-checkpoints, --checkpoint-in DIR and --resume continuing exactly, partial folders of dead
# processes removed at start, a save that hits the file-size limit (a full disk) failing with one
# error line while the previous set stays intact, and the bad-input errors (exit code 2).
# Usage: checkpoint_sets_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 11 20000
tiny=(--preset tiny --layers 1 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --data "$work/text.txt" --precision fp32 --val-every 0 --quiet)
step_losses() { python3 -c "
import json, sys
print(' '.join('%d:%r' % (l['step'], l['loss']) for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step'))" "$1"; }

# Sets every 2 steps, the newest 2 kept.
"$starzero" train "${tiny[@]}" --steps 7 --save-every 2 --checkpoint-dir "$work/sets" --keep-checkpoints 2 \
  --metrics "$work/a.jsonl" > "$work/log" 2>&1 || { cat "$work/log"; fail "run with --checkpoint-dir"; }
[ "$(ls "$work/sets" | tr '\n' ' ')" = "latest step_6 step_7 " ] || { ls -a "$work/sets"; fail "folders after keep 2"; }
[ "$(cat "$work/sets/latest")" = "step_7" ] || fail "latest is not step_7"
[ "$(ls "$work/sets/step_7" | tr '\n' ' ')" = "model.bin model.bin.state " ] || fail "files of a set"
grep -q "wrote $work/sets/step_7 (llm.c version 3" "$work/log" || fail "the summary does not name the set"

# --checkpoint-in DIR starts from its latest set.
"$starzero" train "${tiny[@]}" --steps 3 --checkpoint-in "$work/sets" --metrics "$work/a.jsonl" > "$work/log" 2>&1 \
  || { cat "$work/log"; fail "--checkpoint-in DIR"; }
grep -q "resumed from $work/sets/step_7/model.bin at step 7" "$work/log" || { cat "$work/log"; fail "resume message"; }

# --resume: the same command line continues to the same end (--steps is the total).
resume=("$starzero" train "${tiny[@]}" --steps 10 --save-every 1 --checkpoint-dir "$work/r" --resume
  --metrics "$work/r.jsonl")
"${resume[@]}" --steps 4 > /dev/null 2>&1 || fail "--resume, first part"
[ "$(cat "$work/r/latest")" = step_4 ] || fail "latest after 4 steps"
"${resume[@]}" > "$work/log" 2>&1 || { cat "$work/log"; fail "--resume, second part"; }
grep -q "at step 4" "$work/log" || { cat "$work/log"; fail "--resume did not resume at step 4"; }
"$starzero" train "${tiny[@]}" --steps 10 --metrics "$work/s.jsonl" > /dev/null 2>&1 || fail "straight 10 steps"
[ "$(step_losses "$work/r.jsonl" | cut -d' ' -f5-)" = "$(step_losses "$work/s.jsonl" | cut -d' ' -f5-)" ] \
  || fail "steps 5-10 after --resume differ from a straight run's"
"${resume[@]}" > "$work/log" 2>&1 || fail "--resume at the end"
grep -q "is at step 10 of 10: nothing to train" "$work/log" || { cat "$work/log"; fail "--resume at the end trains"; }
[ "$(ls "$work/r" | wc -l)" -eq 11 ] || fail "keep 0 keeps every set (10 and latest)"

# A partial folder of a dead process goes at start; a running process's stays.
sleep 0 & dead=$!
wait "$dead"
mkdir -p "$work/r/.partial-step_11.$dead" "$work/r/.partial-step_12.$$"
echo x > "$work/r/latest.tmp.$dead"
"${resume[@]}" --steps 11 > "$work/log" 2>&1 || { cat "$work/log"; fail "run over stale partial folders"; }
grep -q "removed $work/r/.partial-step_11.$dead" "$work/log" || { cat "$work/log"; fail "stale partial folder not reported"; }
[ ! -e "$work/r/.partial-step_11.$dead" ] && [ ! -e "$work/r/latest.tmp.$dead" ] || fail "stale leftovers not removed"
[ -d "$work/r/.partial-step_12.$$" ] || fail "a running process's partial folder was removed"
rmdir "$work/r/.partial-step_12.$$"

# Disk full: a save past the file-size limit fails with one line and exit code 1; the previous
# set is intact and `latest` still names it; no partial folder stays.
cp -r "$work/r/step_11" "$work/before"
rc=0
(ulimit -f 64 && "${resume[@]}" --steps 13 > /dev/null 2> "$work/full.log") || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/full.log"; fail "a save past the file-size limit exited $rc, not 1"; }
grep -q "starzero train: failed: .*File too large" "$work/full.log" || { cat "$work/full.log"; fail "no clear error"; }
[ "$(grep -c . "$work/full.log")" -eq 1 ] || { cat "$work/full.log"; fail "more than one error line on a full disk"; }
[ "$(cat "$work/r/latest")" = step_11 ] && diff -r "$work/before" "$work/r/step_11" > /dev/null \
  || fail "the previous set changed after a failed save"
[ -z "$(find "$work/r" -name '.partial-*' -o -name '*.tmp.*')" ] || { find "$work/r"; fail "a failed save left files"; }
"${resume[@]}" --steps 12 > /dev/null 2>&1 && [ "$(cat "$work/r/latest")" = step_12 ] || fail "resume after a full disk"

# Bad input: exit code 2, one line.
expect_usage_error() { local what=$1; shift; expect_bad_input "$what" "$starzero" train "${tiny[@]}" --steps 1 "$@"; }
expect_usage_error "--resume without --checkpoint-dir" --resume
expect_usage_error "--resume with --checkpoint-in" --resume --checkpoint-dir "$work/r" --checkpoint-in "$work/r"
expect_usage_error "--keep-checkpoints without --checkpoint-dir" --keep-checkpoints 2
mkdir "$work/empty"
expect_usage_error "--checkpoint-in a folder without latest" --checkpoint-in "$work/empty"
echo "step_x" > "$work/empty/latest"
expect_usage_error "--checkpoint-in a folder with a malformed latest" --checkpoint-in "$work/empty"
echo "step_99" > "$work/empty/latest"
expect_usage_error "--checkpoint-in a folder whose latest names nothing" --checkpoint-in "$work/empty"
expect_usage_error "--checkpoint-dir a file" --checkpoint-dir "$work/text.txt"
finish "checkpoint sets: passed"
