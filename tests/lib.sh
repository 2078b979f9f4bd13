# Shared by the multi-rank shell tests; source it after `set -euo pipefail`.
# Gives: mpirun (array: as root, more ranks than cores), work (a temporary folder removed on
# exit), fail MESSAGE (counts failures), write_words FILE SEED COUNT (a fixed training text: the
# checkout's own files change as people edit), losses LOG (the step losses a run printed, as
# plain lines or as a \r-separated progress bar: --progress bar, or a terminal),
# expect_bad_input WHAT COMMAND... (COMMAND must exit 2 with one line on stderr),
# check_recompute_modes (every --recompute mode trains to the same checkpoint as none),
# short_run_flags (sets short_run: a 3-step `train` of a 2-layer GPT for tests of what a run
# prints or traces) and
# finish MESSAGE (exit 1 if anything failed, else print MESSAGE), and here (the sourcing test's
# folder, where its Python checks live).
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # lib.py: the Python of these helpers
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

write_words() {
  python3 "$tests_dir/lib.py" write-words "$1" "$2" "$3"
}

losses() { tr '\r' '\n' < "$1" | grep -oE 'step [0-9]+/[0-9]+ \| loss [0-9.]+' | awk '{print $NF}'; }

# The step losses of two logs agree within TOLERANCE (same count, max |difference|).
compare_losses() {  # LOG_A LOG_B WHAT TOLERANCE
  python3 "$tests_dir/lib.py" compare-losses "$(losses "$1")" "$(losses "$2")" "$3" "$4"
}
# Exact resume: STARZERO FLAGS... run for HALF steps, then HALF more from its checkpoint, must print
# the losses of WORK/single.log (2·HALF steps) and write WORK/full.bin's checkpoint.
check_resume() {  # STARZERO WORK HALF FLAGS...
  local bin=$1 dir=$2 half=$3
  shift 3
  "$bin" "$@" --steps "$half" --checkpoint-out "$dir/half.bin" > "$dir/half.log" 2>&1 \
    || { cat "$dir/half.log"; fail "first half"; }
  "$bin" "$@" --steps "$half" --checkpoint-in "$dir/half.bin" --checkpoint-out "$dir/resumed.bin" \
    > "$dir/resumed.log" 2>&1 || { cat "$dir/resumed.log"; fail "resumed half"; }
  grep -q "resumed from .* at step $half" "$dir/resumed.log" || fail "the second half did not resume at step $half"
  [ "$( (losses "$dir/half.log"; losses "$dir/resumed.log") )" = "$(losses "$dir/single.log")" ] \
    || fail "$half + $half resumed steps differ from $((2 * half)) steps"
  cmp -s "$dir/full.bin" "$dir/resumed.bin" || fail "the resumed run's checkpoint differs from the uninterrupted run's"
}
# Each MODE (the words after --recompute, e.g. "full --offload-activations cpu") added to the
# training command COMMAND... writes WORK/none.bin's checkpoint, and the run's printed activation
# bytes (held, and offloaded for an offload mode) are the plan's. LABEL names the case in failures.
check_recompute_modes() {  # LABEL MODES_ARRAY_NAME COMMAND...
  local label=$1 mode flags
  local -n recompute_modes=$2
  shift 2
  for mode in "${recompute_modes[@]}"; do
    read -r -a flags <<< "--recompute $mode"
    "$@" "${flags[@]}" --checkpoint-out "$work/r.bin" > "$work/r.log" 2>&1 || { cat "$work/r.log"; fail "$mode"; continue; }
    cmp -s "$work/none.bin" "$work/r.bin" || fail "$label, --recompute $mode: the checkpoint differs from none's"
    grep -qE "^activations: .* plan [0-9.]+ MB$" "$work/r.log" || { cat "$work/r.log"; fail "$mode: held != plan"; }
    case $mode in *offload*)
      grep -qE "^activations offloaded: [0-9.]+ MB .* plan [0-9.]+ MB$" "$work/r.log" \
        || { cat "$work/r.log"; fail "$mode: offloaded != plan"; } ;;
    esac
  done
}
# short_run (array): `train` of a 2-layer GPT (C=32, 2 heads) for 3 steps of 4 rows of 16 tokens
# of WORK/data.txt (written here), CPU workers only, no validation and no samples.
short_run_flags() {
  write_words "$work/data.txt" 11 20000
  short_run=(train --data "$work/data.txt" --preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16
             --batch 4 --steps 3 --cuda-workers 0 --val-every 0 --sample-every 0)
}
expect_bad_input() {
  local what=$1 rc=0
  shift
  "$@" > /dev/null 2> "$work/err" || rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] || { cat "$work/err"; fail "$what: exit code $rc"; }
}

finish() {
  if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
  echo "$1"
}
