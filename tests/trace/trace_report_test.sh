#!/usr/bin/env bash
# `starzero trace DIR` on real traced training runs (a tiny GPT on the CPU, 3 steps), checked
# against the trace files read independently by Python (its own tasks.rec and paje.trace parser):
#   single - one rank, and one with the NVMe tier (RAM -> disk transfers): every worker's busy
#            seconds equal the sum of its task durations in tasks.rec (to 1e-6 s), 3 steps whose
#            wall times match tasks.rec, every documented JSON key (docs/trace-report.md), the
#            transfer bytes of paje.trace, the markdown sections, --svg through gnuplot, ViTE
#            still reads paje.trace with 0 errors; bad input (missing DIR, DIR without tasks.rec,
#            a truncated tasks.rec, an unknown flag) exits 2 with one line on stderr, a missing
#            gnuplot exits 1 with one line.
#   ranks  - 2 MPI ranks at ZeRO-2: {"ranks": [...]} with each rank's numbers from its own
#            rank<r>/tasks.rec, collectives measured, rank sections in markdown, one chart.
# Usage: trace_report_test.sh STARZERO single|ranks
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
short_run_flags
tiny=("${short_run[@]}" --quiet)

# check_report JSON DIR...: the report against each rank folder's own files (Python, no C++).
check_report() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/check_trace_report.py" report "$@"
}

# expect_error CODE WHAT ARGS...: `starzero trace ARGS` exits CODE with one line on stderr.
expect_error() {
  local code=$1 what=$2 rc=0
  shift 2
  "$starzero" trace "$@" > "$work/err.out" 2> "$work/err.txt" || rc=$?
  if [ "$rc" -ne "$code" ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ]; then
    fail "$what: exit $rc (want $code), stderr: $(head -c 300 "$work/err.txt")"
  else
    echo "  $what: exit $rc: $(cat "$work/err.txt")"
  fi
}

# cut_mid_line FILE OUT: the first half of FILE, cut inside a line (as a killed writer leaves it).
cut_mid_line() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/check_trace_report.py" cut-mid-line "$1" "$2"
}

# expect_svg SVG: gnuplot's SVG, not empty.
expect_svg() {
  [ -s "$1" ] && grep -q '<svg' "$1" && grep -q 'Produced by GNUPLOT' "$1" || fail "$1 is not an SVG written by gnuplot"
}

case $part in
single)
  "$starzero" "${tiny[@]}" --trace "$work/trace" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "traced run"; exit 1; }
  "$starzero" trace "$work/trace" --json > "$work/report.json" || fail "starzero trace --json"
  check_report "$work/report.json" "$work/trace" || fail "the report disagrees with the trace files"
  # The NVMe tier: optimizer state on a StarPU disk node, so paje.trace has RAM -> DISK0 links.
  mkdir "$work/nvme"
  "$starzero" "${tiny[@]}" --offload-optimizer nvme --nvme-path "$work/nvme" --host-mem-limit 64 \
    --trace "$work/nvme-trace" > "$work/nvme.log" 2>&1 || { cat "$work/nvme.log"; fail "traced NVMe run"; exit 1; }
  "$starzero" trace "$work/nvme-trace" --json > "$work/nvme.json" || fail "starzero trace --json (NVMe)"
  check_report "$work/nvme.json" "$work/nvme-trace" || fail "the NVMe report disagrees with the trace files"
  python3 "$(dirname "${BASH_SOURCE[0]}")/check_trace_report.py" nvme-links "$work/nvme.json" \
    || fail "no RAM -> DISK0 transfers in the NVMe report"
  # Markdown and the chart.
  "$starzero" trace "$work/trace" --svg "$work/chart.svg" > "$work/report.md" || fail "starzero trace --svg"
  for section in "# Trace report" "## Steps" "## Workers" "## Task kinds" "## Transfers" "## Overlap" "## Bound" \
                 "## Critical paths"; do
    grep -q "^$section" "$work/report.md" || fail "markdown lacks '$section'"
  done
  expect_svg "$work/chart.svg"
  grep -q 'CPU1' "$work/chart.svg" || fail "the chart has no CPU1 lane"
  grep -q "fill = 'rgb( *32, *32, *32)'" "$work/chart.svg" || fail "the chart has no critical-path band (#202020)"
  "$starzero" trace "$work/nvme-trace" --svg "$work/nvme.svg" --steady-from 3 > /dev/null || fail "--svg of the NVMe run"
  expect_svg "$work/nvme.svg"
  grep -q 'RAM-&gt;DISK0\|RAM->DISK0' "$work/nvme.svg" || fail "the NVMe chart has no RAM->DISK0 lane"
  # ViTE still reads the trace.
  vite_rc=0
  (cd "$work/trace" && QT_QPA_PLATFORM=offscreen timeout -k 5 120 vite -f paje.trace -e vite.svg) > "$work/vite.log" 2>&1 \
    || vite_rc=$?
  summary=$(grep -Eo '[0-9]+ errors? and [0-9]+ warnings?' "$work/vite.log" | tail -n 1)
  [ "$vite_rc" -eq 0 ] && [ -n "$summary" ] && [ "${summary%% *}" = 0 ] \
    || fail "ViTE (exit $vite_rc): '${summary:-no summary}': $(tail -n 3 "$work/vite.log")"
  echo "  ViTE: $summary"
  # Bad input.
  expect_error 2 "missing DIR" "$work/no-such-dir"
  mkdir "$work/empty"
  expect_error 2 "DIR without tasks.rec" "$work/empty"
  for file in tasks.rec trace.rec paje.trace; do
    cp -r "$work/trace" "$work/cut-$file"
    cut_mid_line "$work/trace/$file" "$work/cut-$file/$file"
    expect_error 2 "$file cut in the middle of a line" "$work/cut-$file"
  done
  cp -r "$work/trace" "$work/bad-paje"
  printf '18\t1.0\tF\n' >> "$work/bad-paje/paje.trace"
  expect_error 2 "paje.trace with a short link line" "$work/bad-paje"
  cp -r "$work/trace" "$work/bad-bound"
  sed -i 's/"compute_device": "CPU"/"compute_device": 7/' "$work/bad-bound/step_bound.json"
  expect_error 2 "a malformed step_bound.json" "$work/bad-bound"
  # Without the run's figures the report has no bound, and says why.
  cp -r "$work/trace" "$work/no-bound"
  rm "$work/no-bound/step_bound.json"
  "$starzero" trace "$work/no-bound" > "$work/no-bound.md" || fail "starzero trace without step_bound.json"
  grep -q "^No bound: no step_bound.json beside the trace" "$work/no-bound.md" || fail "no 'No bound' line"
  expect_error 2 "unknown flag" "$work/trace" --no-such-flag
  expect_error 2 "--steady-from past the last step" "$work/trace" --steady-from 4
  mkdir "$work/bin"
  rc=0
  PATH="$work/bin" "$starzero" trace "$work/trace" --svg "$work/none.svg" > /dev/null 2> "$work/err.txt" || rc=$?
  [ "$rc" -eq 1 ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] && [ ! -e "$work/none.svg" ] \
    || fail "without gnuplot: exit $rc, stderr: $(cat "$work/err.txt")"
  echo "  no gnuplot: exit $rc: $(cat "$work/err.txt")"
  ;;
ranks)
  "${mpirun[@]}" -np 2 "$starzero" "${tiny[@]}" --stage 2 --cpu-workers 1 --trace "$work/trace" > "$work/train.log" 2>&1 \
    || { cat "$work/train.log"; fail "traced 2-rank run"; exit 1; }
  "$starzero" trace "$work/trace" --json > "$work/report.json" || fail "starzero trace --json (2 ranks)"
  check_report "$work/report.json" "$work/trace/rank0" "$work/trace/rank1" || fail "the 2-rank report disagrees"
  "$starzero" trace "$work/trace" --svg "$work/chart.svg" > "$work/report.md" || fail "starzero trace --svg (2 ranks)"
  grep -q "^## Rank 0" "$work/report.md" && grep -q "^## Rank 1" "$work/report.md" || fail "markdown lacks rank sections"
  grep -q "^### Critical paths" "$work/report.md" || fail "markdown lacks the ranks' subsections"
  expect_svg "$work/chart.svg"
  grep -q 'r1 CPU0' "$work/chart.svg" || fail "the chart has no lane of rank 1"
  ;;
*)
  echo "trace_report_test.sh: unknown part '$part' (single, ranks)" >&2
  exit 2
  ;;
esac
finish "trace report: part $part passed"
