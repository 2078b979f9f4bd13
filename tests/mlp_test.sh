#!/usr/bin/env bash
# `starzero-mlp` (examples/mlp_example.cpp): a model that is not GPT, defined in the program
# itself, trained by the ZeRO engine. Two parts:
#   single   - one rank, 200 steps (defaults): the final loss over all 64 tokens is below
#              0.05 and every token is classified correctly (accuracy 1.0). Seen on 2 CPU cores:
#              final loss 1e-4..5e-3 over seeds 1-12 and 1337, accuracy 1.0 for all (< 1 s).
#              With --offload-optimizer cpu every loss is the same.
#   zero_np2 - two MPI ranks, ZeRO stages 0-3, the same 200 steps on the same global batch: every printed loss equals the single-rank
#              run's within 1e-3 (fp32 reduction order: seen ~1e-6) and the accuracy is the same.
# Usage: mlp_test.sh STARZERO_MLP single|zero_np2
set -euo pipefail
mlp=$1
part=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

losses() { grep -oE '^step [0-9]+ \| loss [0-9.]+' "$1" | awk '{print $NF}'; }
value() { grep -oE "^$2 [0-9.]+" "$1" | awk '{print $NF}'; }

case $part in
single)
  "$mlp" --steps 200 --cuda-workers 0 > "$work/single.log" 2>&1 || { cat "$work/single.log"; fail "run"; exit 1; }
  loss=$(value "$work/single.log" "final loss")
  accuracy=$(value "$work/single.log" accuracy)
  echo "final loss $loss, accuracy $accuracy"
  [[ $(losses "$work/single.log" | wc -l) == 200 ]] || fail "expected 200 step lines"
  python3 -c "import sys; sys.exit(0 if float('$loss') < 0.05 else 1)" || fail "final loss $loss >= 0.05"
  python3 -c "import sys; sys.exit(0 if float('$accuracy') == 1.0 else 1)" || fail "accuracy $accuracy < 1"
  # The engine offloads a model it knows nothing about: CPU AdamW on pinned state, same losses.
  "$mlp" --steps 200 --cuda-workers 0 --offload-optimizer cpu > "$work/offload.log" 2>&1 \
    || { cat "$work/offload.log"; fail "offload run"; }
  [ "$(losses "$work/single.log")" = "$(losses "$work/offload.log")" ] || fail "--offload-optimizer cpu changed the losses"
  ;;
zero_np2)
  mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
  # Seed 1: the default seed's run has a loss spike near step 103 (AdamW at lr 1e-2 after it
  # has converged) that magnifies the fp32 reduction-order differences to ~3e-4; here they stay
  # at the printing resolution.
  common=(--steps 200 --seed 1 --cuda-workers 0 --cpu-workers 1)
  "$mlp" "${common[@]}" > "$work/single.log" 2>&1 || { cat "$work/single.log"; fail "single-rank run"; exit 1; }
  for run in 0 1 2 3; do
    log=$work/stage$run.log
    if ! timeout 120 "${mpirun[@]}" "$mlp" "${common[@]}" --stage $run > "$log" 2>&1; then
      tail -n 20 "$log"; fail "ZeRO-$run on 2 ranks did not finish"; continue
    fi
    python3 - "$(losses "$work/single.log")" "$(losses "$log")" "ZeRO-$run" <<'PY' || fail "ZeRO-$run: losses differ"
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
assert len(a) == len(b) == 200, (len(a), len(b))
worst, step = max((abs(x - y), i + 1) for i, (x, y) in enumerate(zip(a, b)))
print(f"  {sys.argv[3]}: {len(b)} losses, max |diff| {worst:.1e} (step {step})")
sys.exit(0 if worst <= 1e-3 else 1)
PY
    single_accuracy=$(value "$work/single.log" accuracy)
    accuracy=$(value "$log" accuracy)
    echo "  accuracy: single $single_accuracy, 2 ranks $accuracy"
    [[ -n $accuracy && $accuracy == "$single_accuracy" ]] || fail "ZeRO-$run: accuracy $accuracy != $single_accuracy"
  done
  ;;
*)
  echo "usage: mlp_test.sh STARZERO_MLP single|zero_np2"; exit 2 ;;
esac

if (( failures > 0 )); then echo "$failures failure(s)"; exit 1; fi
echo "all passed"
