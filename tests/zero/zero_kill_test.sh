#!/usr/bin/env bash
# A rank that dies mid-run ends the whole job with an error, never a hang: kill -9 one rank of a
# 2-rank ZeRO-3 run and require mpirun to exit non-zero within 60 s.
# Usage: zero_kill_test.sh STARZERO
set -euo pipefail
starzero=$1
work=$(mktemp -d)
trap 'rm -rf "$work"; [ -n "${job:-}" ] && kill -9 "$job" 2>/dev/null; true' EXIT
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$starzero" train --preset tiny --layers 2 \
  --channels 32 --heads 2 --steps 100000 --batch 4 --seq 16 --cuda-workers 0 --cpu-workers 1 --stage 3 \
  --val-every 0 --quiet > "$work/log" 2>&1 &
job=$!
# Wait until both ranks run, then kill one.
for _ in $(seq 1 100); do
  # The ranks are mpirun's children (not mpirun itself, whose command line matches too).
  ranks=()
  if pids=$(pgrep -P "$job" -f "starzero train"); then mapfile -t ranks <<< "$pids"; fi
  [ "${#ranks[@]}" -ge 2 ] && break
  sleep 0.2
done
[ "${#ranks[@]}" -ge 2 ] || { echo "FAIL: the ranks did not start"; cat "$work/log"; exit 1; }
sleep 2
kill -9 "${ranks[1]}"
start=$(date +%s)
status=0
for _ in $(seq 1 600); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then echo "FAIL: the job still runs 60 s after a rank died (a hang)"; exit 1; fi
wait "$job" || status=$?
job=
echo "mpirun exited with status $status $(( $(date +%s) - start )) s after rank pid ${ranks[1]} was killed"
[ "$status" -ne 0 ] || { echo "FAIL: the job exited 0 although a rank died"; exit 1; }
# mpirun itself names the dead rank.
grep -q "process rank [0-9]* .*exited on signal 9" "$work/log" || { echo "FAIL: no message naming the rank"; cat "$work/log"; exit 1; }
echo "passed"
