#!/usr/bin/env bash
# `starzero trace DIR --perfetto FILE` on real traced training runs (a tiny GPT on the CPU, 3
# steps), the JSON read by Python's json module and checked against tasks.rec and paje.trace
# read by Python too (tests/tasks_rec.py and a Paje reader here, no C++):
#   single - one rank, and one with the NVMe tier (RAM -> DISK0 transfers): one complete event
#            per task that ran, with its tasks.rec name, step, start (ts) and duration (dur, to
#            1e-3 µs), per-worker event counts and summed durations equal to tasks.rec's; one
#            event per completed transfer with its paje.trace bytes, per link; one instant event
#            per step at its first task's start; every track and process named by metadata, the
#            events of a track disjoint; bad input (missing DIR, a folder that does not exist, an
#            output that is a folder or on a file system that cannot be written, --perfetto
#            without a value) exits 2 with one line on stderr and writes nothing.
#   ranks  - 2 MPI ranks at ZeRO-2: one process per rank ("rank 0", "rank 1"), each rank's
#            events from its own rank<r>/tasks.rec.
# Usage: trace_perfetto_test.sh STARZERO single|ranks
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
short_run_flags
tiny=("${short_run[@]}" --quiet)

# check_perfetto JSON DIR...: the trace-event file against each rank folder's own files.
check_perfetto() {
  python3 "$here/check_perfetto.py" perfetto "$@"
}

# expect_error WHAT ARGS...: `starzero trace ARGS` exits 2 with one line on stderr.
expect_error() {
  local what=$1 rc=0
  shift
  "$starzero" trace "$@" > /dev/null 2> "$work/err.txt" || rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ]; then
    fail "$what: exit $rc (want 2), stderr: $(head -c 300 "$work/err.txt")"
  else
    echo "  $what: exit $rc: $(cat "$work/err.txt")"
  fi
}

case $part in
single)
  "$starzero" "${tiny[@]}" --trace "$work/trace" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "traced run"; exit 1; }
  "$starzero" trace "$work/trace" --perfetto "$work/trace.json" > "$work/report.md" || fail "starzero trace --perfetto"
  grep -q "^# Trace report" "$work/report.md" || fail "no report beside --perfetto"
  check_perfetto "$work/trace.json" "$work/trace" || fail "the Perfetto JSON disagrees with the trace files"
  # The NVMe tier: optimizer state on a StarPU disk node, so paje.trace has RAM <-> DISK0 links.
  mkdir "$work/nvme"
  "$starzero" "${tiny[@]}" --offload-optimizer nvme --nvme-path "$work/nvme" --host-mem-limit 64 \
    --trace "$work/nvme-trace" > "$work/nvme.log" 2>&1 || { cat "$work/nvme.log"; fail "traced NVMe run"; exit 1; }
  "$starzero" trace "$work/nvme-trace" --json --perfetto "$work/nvme.json" > /dev/null \
    || fail "starzero trace --perfetto (NVMe)"
  check_perfetto "$work/nvme.json" "$work/nvme-trace" || fail "the NVMe Perfetto JSON disagrees with the trace files"
  python3 "$here/check_perfetto.py" nvme-transfers "$work/nvme.json" || fail "no RAM->DISK0 transfer events in the NVMe trace"
  # Bad input: one line, exit 2, nothing written.
  expect_error "missing DIR" "$work/no-such-dir" --perfetto "$work/out.json"
  [ ! -e "$work/out.json" ] || fail "a missing DIR left $work/out.json"
  expect_error "output folder missing" "$work/trace" --perfetto "$work/no-such-folder/out.json"
  mkdir "$work/a-folder"
  expect_error "output is a folder" "$work/trace" --perfetto "$work/a-folder"
  expect_error "output on /proc" "$work/trace" --perfetto /proc/starzero-perfetto.json
  expect_error "--perfetto without FILE" "$work/trace" --perfetto
  if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
    mkdir "$work/read-only" && chmod 555 "$work/read-only"
    expect_error "read-only output folder" "$work/trace" --perfetto "$work/read-only/out.json"
  fi
  ;;
ranks)
  "${mpirun[@]}" -np 2 "$starzero" "${tiny[@]}" --stage 2 --cpu-workers 1 --trace "$work/trace" > "$work/train.log" 2>&1 \
    || { cat "$work/train.log"; fail "traced 2-rank run"; exit 1; }
  "$starzero" trace "$work/trace" --perfetto "$work/trace.json" > /dev/null || fail "starzero trace --perfetto (2 ranks)"
  check_perfetto "$work/trace.json" "$work/trace/rank0" "$work/trace/rank1" || fail "the 2-rank Perfetto JSON disagrees"
  ;;
*)
  echo "trace_perfetto_test.sh: unknown part '$part' (single, ranks)" >&2
  exit 2
  ;;
esac
finish "trace perfetto: part $part passed"
