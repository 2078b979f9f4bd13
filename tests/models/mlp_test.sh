#!/usr/bin/env bash
# `starzero train --model mlp` (models/mlp.*): a model that is not GPT, trained by the same engine
# and trainer. Validation covers all 64 tokens (4 batches of 16). Two parts:
#   single   - one rank, 200 steps at a constant lr 1e-2: the validation loss over all 64 tokens is
#              below 0.05 and every token is classified correctly (accuracy 1.0); the old
#              starzero-mlp program measured a final loss of 2e-4 with these settings.
#              --offload-optimizer cpu gives the same losses. 100 steps, a checkpoint, and 100
#              resumed steps give the losses and the checkpoint of the uninterrupted run.
#   zero_np2 - two MPI ranks, ZeRO stages 0-3, the same 200 steps on the same global batch: every
#              printed loss equals the single-rank run's within 1e-3 (fp32 reduction order) and
#              the accuracy is the same; ZeRO-3 on 2 ranks saves at step 30 of 60 and resumes on 2
#              ranks to the uninterrupted run's final checkpoint.
# Usage: mlp_test.sh STARZERO single|zero_np2
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mlp=(train --model mlp --batch 16 --lr 1e-2 --warmup 0 --lr-final 1 --val-every 200 --val-batches 4 --cuda-workers 0)
validation() { tr '\r' '\n' < "$1" | grep -oE 'validation loss [0-9.]+, accuracy [0-9.]+' | tail -n 1; }

case $part in
single)
  "$starzero" "${mlp[@]}" --steps 200 --checkpoint-out "$work/full.bin" > "$work/single.log" 2>&1 \
    || { cat "$work/single.log"; fail "run"; exit 1; }
  read -r loss accuracy < <(validation "$work/single.log" | awk '{print $3, $5}' | tr -d ',')
  echo "validation loss $loss, accuracy $accuracy"
  [[ $(losses "$work/single.log" | wc -l) == 200 ]] || fail "expected 200 step lines"
  python3 -c "import sys; sys.exit(0 if float('$loss') < 0.05 else 1)" || fail "validation loss $loss >= 0.05"
  python3 -c "import sys; sys.exit(0 if float('$accuracy') == 1.0 else 1)" || fail "accuracy $accuracy < 1"
  # The engine offloads a model it knows nothing about: CPU AdamW on pinned state, same losses.
  "$starzero" "${mlp[@]}" --steps 200 --offload-optimizer cpu > "$work/offload.log" 2>&1 \
    || { cat "$work/offload.log"; fail "offload run"; }
  [ "$(losses "$work/single.log")" = "$(losses "$work/offload.log")" ] || fail "--offload-optimizer cpu changed the losses"
  # Save at step 100, resume for 100 more: the same losses and the same final checkpoint.
  check_resume "$starzero" "$work" 100 "${mlp[@]}"
  cmp -s "$work/full.bin.state" "$work/resumed.bin.state" || fail "the resumed run's .state differs"
  # The checkpoint defines the shape: a contradicting --channels is one error line, exit 2.
  set +e
  "$starzero" "${mlp[@]}" --steps 1 --checkpoint-in "$work/full.bin" --channels 8 > "$work/bad.log" 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "^starzero train: error: --channels 8 contradicts the checkpoint's 32" "$work/bad.log" \
    || fail "contradicting --channels: exit $rc, $(cat "$work/bad.log")"
  ;;
zero_np2)
  mpirun+=(-np 2)
  # Seed 1: the default seed's run has a loss spike near step 103 (AdamW at lr 1e-2 after it
  # has converged) that magnifies the fp32 reduction-order differences to ~3e-4; here they stay
  # at the printing resolution.
  common=("${mlp[@]}" --steps 200 --seed 1 --cpu-workers 1)
  "$starzero" "${common[@]}" > "$work/single.log" 2>&1 || { cat "$work/single.log"; fail "single-rank run"; exit 1; }
  for stage in 0 1 2 3; do
    log=$work/stage$stage.log
    if ! timeout 120 "${mpirun[@]}" "$starzero" "${common[@]}" --stage $stage > "$log" 2>&1; then
      tail -n 20 "$log"; fail "ZeRO-$stage on 2 ranks did not finish"; continue
    fi
    compare_losses "$work/single.log" "$log" "ZeRO-$stage" 1e-3 || fail "ZeRO-$stage: losses differ"
    single_accuracy=$(validation "$work/single.log" | awk '{print $5}')
    accuracy=$(validation "$log" | awk '{print $5}')
    echo "  accuracy: single $single_accuracy, 2 ranks $accuracy"
    [[ -n $accuracy && $accuracy == "$single_accuracy" ]] || fail "ZeRO-$stage: accuracy $accuracy != $single_accuracy"
  done
  # ZeRO-3 on 2 ranks: save at step 100, resume on 2 ranks: the uninterrupted run's checkpoint.
  z3=("${mpirun[@]}" "$starzero" "${mlp[@]}" --seed 1 --cpu-workers 1 --stage 3)
  timeout 120 "${z3[@]}" --steps 60 --checkpoint-out "$work/z3.bin" > "$work/z3.log" 2>&1 || fail "ZeRO-3 60 steps"
  timeout 120 "${z3[@]}" --steps 30 --checkpoint-out "$work/z3half.bin" > "$work/z3half.log" 2>&1 || fail "ZeRO-3 first half"
  [ -f "$work/z3half.bin.rank0-of-2.state" ] && [ -f "$work/z3half.bin.rank1-of-2.state" ] || fail "ZeRO-3: no per-rank state files"
  timeout 120 "${z3[@]}" --steps 30 --checkpoint-in "$work/z3half.bin" --checkpoint-out "$work/z3resumed.bin" \
    > "$work/z3resumed.log" 2>&1 || fail "ZeRO-3 resumed half"
  cmp -s "$work/z3.bin" "$work/z3resumed.bin" || fail "ZeRO-3: the resumed checkpoint differs from the uninterrupted run's"
  echo "  ZeRO-3 save at 30 + resume: $(md5sum < "$work/z3resumed.bin" | cut -c1-12) vs $(md5sum < "$work/z3.bin" | cut -c1-12)"
  ;;
*)
  echo "usage: mlp_test.sh STARZERO single|zero_np2"; exit 2 ;;
esac

finish "all passed"
