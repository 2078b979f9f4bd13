#!/usr/bin/env bash
# `starzero train --progress auto|bar|lines` (a tiny GPT on the CPU, 3 steps): what the step lines
# look like in a log file, on a terminal and under a launcher.
#   local  - stdout to a file: one plain line per step, no carriage return, no escape (auto, and
#            auto with OMPI_COMM_WORLD_SIZE=1 set); --progress bar forced into the file: one
#            "\r[###...] step k/3" frame per step and a final newline. On a pseudo-terminal
#            (Python's pty, no `script`): the bar under auto; one line per step with --progress
#            lines, and under auto when any of OMPI_COMM_WORLD_SIZE, PMI_RANK, PMIX_RANK,
#            SLURM_PROCID is set. A bad --progress value exits 2 with one line on stderr.
#   mpirun - `mpirun -np 2 starzero train` into a log file (mpirun gives its ranks a
#            pseudo-terminal): one line per step, no frames.
# Usage: progress_test.sh STARZERO local|mpirun
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
short_run_flags
tiny=("${short_run[@]}" --sample-tokens 4)
# No launcher variables from whoever runs the test.
unset OMPI_COMM_WORLD_SIZE PMI_RANK PMIX_RANK SLURM_PROCID

# expect_output FILE lines|bar WHAT: FILE holds the 3 steps as plain lines, or as bar frames.
expect_output() {
  python3 "$here/check_progress.py" output "$@" || fail "$3"
}

# on_terminal OUT ENV... -- ARGS...: runs starzero ARGS with ENV on a pseudo-terminal, its output in OUT.
on_terminal() {
  local out=$1
  shift
  python3 "$here/check_progress.py" on-terminal "$out" "$starzero" "$@"
}

case $part in
local)
  "$starzero" "${tiny[@]}" > "$work/auto.log" 2>&1 || { cat "$work/auto.log"; fail "run into a file"; }
  expect_output "$work/auto.log" lines "auto into a file"
  OMPI_COMM_WORLD_SIZE=1 "$starzero" "${tiny[@]}" > "$work/ompi.log" 2>&1 || { cat "$work/ompi.log"; fail "run"; }
  expect_output "$work/ompi.log" lines "auto into a file, OMPI_COMM_WORLD_SIZE=1"
  OMPI_COMM_WORLD_SIZE=1 "$starzero" "${tiny[@]}" --progress bar > "$work/bar.log" 2>&1 || { cat "$work/bar.log"; fail "run"; }
  expect_output "$work/bar.log" bar "--progress bar into a file, OMPI_COMM_WORLD_SIZE=1"
  on_terminal "$work/tty.log" -- "${tiny[@]}" || { cat "$work/tty.log"; fail "run on a terminal"; }
  expect_output "$work/tty.log" bar "auto on a terminal"
  on_terminal "$work/tty-lines.log" -- "${tiny[@]}" --progress lines || fail "run on a terminal, lines"
  expect_output "$work/tty-lines.log" lines "--progress lines on a terminal"
  for variable in OMPI_COMM_WORLD_SIZE PMI_RANK PMIX_RANK SLURM_PROCID; do
    on_terminal "$work/tty-$variable.log" "$variable=0" -- "${tiny[@]}" || fail "run on a terminal, $variable"
    expect_output "$work/tty-$variable.log" lines "auto on a terminal with $variable set"
  done
  expect_bad_input "--progress fancy" "$starzero" "${tiny[@]}" --progress fancy
  expect_bad_input "--progress without a value" "$starzero" "${tiny[@]}" --progress
  ;;
mpirun)
  "${mpirun[@]}" -np 2 "$starzero" "${tiny[@]}" > "$work/mpirun.log" 2>&1 || { cat "$work/mpirun.log"; fail "mpirun"; }
  expect_output "$work/mpirun.log" lines "mpirun -np 2 into a file"
  ;;
*)
  echo "progress_test.sh: unknown part '$part' (local, mpirun)" >&2
  exit 2
  ;;
esac
finish "progress: part $part passed"
