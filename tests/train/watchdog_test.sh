#!/usr/bin/env bash
# A stuck run ends instead of hanging (--watchdog SECONDS, runtime/watchdog.hpp):
#   1. one rank: a task that never ends (--debug-hang): the report names it, exit code 3;
#   2. mpirun, 2 ranks, ZeRO-3: rank 1 stopped with SIGSTOP mid-run: rank 0 reports what it waits
#      on (a collective task or the main thread's wait) and the job ends non-zero;
#   3. mpirun, 2 ranks: a task on rank 1 that never ends: both ranks report, rank 1 names it.
# Usage: watchdog_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 9 20000
tiny=(--preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --data "$work/text.txt" --val-every 0 --watchdog 3)

# Runs COMMAND... in the background with output in $work/log; sets $job.
start() { "$@" > "$work/log" 2>&1 & job=$!; }
# Waits for $job at most SECONDS; sets $rc (124 when it was still running, and kills it).
wait_job() {
  local limit=$(($1 * 10))
  for _ in $(seq 1 "$limit"); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    rc=124
    pkill -9 -f -- "--data $work/text.txt" || true
    wait "$job" 2>/dev/null || true
  else
    rc=0
    wait "$job" || rc=$?
  fi
}

# 1. One rank, a task that never ends.
start "$starzero" train "${tiny[@]}" --steps 20 --debug-hang 3
wait_job 30
[ "$rc" -eq 3 ] || { cat "$work/log"; fail "one rank, a hung task: exit code $rc, not 3"; }
grep -q "rank 0 of 1: watchdog: nothing finished for 3 s since step 2" "$work/log" \
  && grep -q "^  CPU [0-9]*: task debug_hang" "$work/log" && grep -q "^  main: step 3: " "$work/log" \
  || { cat "$work/log"; fail "one rank: the report does not name the hung task and the main thread's wait"; }
cp "$work/log" "$work/one-rank.log"

# 2. Two ranks, rank 1 stopped.
start "${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --stage 3 --cpu-workers 1 --steps 100000
for _ in $(seq 1 300); do grep -q "step 3/" "$work/log" 2>/dev/null && break; sleep 0.1; done
mapfile -t ranks < <(pgrep -P "$job" -f "starzero train" || true)
[ "${#ranks[@]}" -eq 2 ] || { cat "$work/log"; fail "SIGSTOP: the two ranks did not start"; }
# The rank whose MPI rank is 1: its environment says so.
victim=
for pid in "${ranks[@]}"; do
  tr '\0' '\n' < "/proc/$pid/environ" | grep -q '^OMPI_COMM_WORLD_RANK=1$' && victim=$pid
done
[ -n "$victim" ] || fail "SIGSTOP: rank 1 not found"
stopped_at=$(date +%s)
kill -STOP "$victim"
wait_job 40
kill -9 "$victim" 2>/dev/null || true
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/log"; fail "SIGSTOP: the job did not end by itself (exit $rc)"; }
tr '\r' '\n' < "$work/log" | grep -q "rank 0 of 2: watchdog: nothing finished for 3 s since step" \
  || { cat "$work/log"; fail "SIGSTOP: rank 0 did not report"; }
tr '\r' '\n' < "$work/log" | grep -qE "^  (CPU [0-9]+: task |main: step )" \
  || { cat "$work/log"; fail "SIGSTOP: rank 0's report names no task or wait"; }
echo "SIGSTOP of rank 1: job ended with exit code $rc $(( $(date +%s) - stopped_at )) s later"
cp "$work/log" "$work/sigstop.log"

# 3. Two ranks, a task on rank 1 never ends: both report.
start "${mpirun[@]}" -np 2 "$starzero" train "${tiny[@]}" --stage 2 --cpu-workers 1 --steps 20 --debug-hang 3:1
wait_job 40
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/log"; fail "hung task on rank 1: exit $rc"; }
tr '\r' '\n' < "$work/log" > "$work/hang.log"
grep -q "rank 1 of 2: watchdog" "$work/hang.log" && grep -q "task debug_hang" "$work/hang.log" \
  || { cat "$work/hang.log"; fail "hung task on rank 1: rank 1's report"; }
grep -q "rank 0 of 2: watchdog" "$work/hang.log" || { cat "$work/hang.log"; fail "hung task on rank 1: rank 0's report"; }
tr '\r' '\n' < "$work/sigstop.log" | grep -A3 "watchdog: nothing" | sed 's/^.*starzero train: rank/starzero train: rank/'
finish "watchdog: passed"
