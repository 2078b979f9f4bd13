#!/usr/bin/env bash
# ZeRO checkpoints: each rank saves its shard; `starzero consolidate` merges the shards into the
# llm.c checkpoint rank 0 writes (byte for byte); a resume with a different number of ranks
# re-shards the optimizer state and continues with the losses of an uninterrupted run.
# Usage: zero_checkpoint_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 7 10000
# A constant learning rate (--warmup 0 --lr-final 1): the schedule does not depend on the total.
common=(train --data "$work/data.txt" --preset tiny --layers 2 --channels 34 --heads 2 --max-seq 16 --seq 16
        --batch 4 --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3 --warmup 0
        --lr-final 1 --sample-tokens 2 --seed 3)
# Step numbers with the losses: the resumed runs start at a later step.
step_losses() { tr '\r' '\n' < "$1" | grep -oE 'step [0-9]+/[0-9]+ \| loss [0-9.]+' | awk '{print $2, $NF}'; }

# Uninterrupted: 6 steps on 2 ranks, ZeRO-2.
"${mpirun[@]}" -np 2 "$starzero" "${common[@]}" --stage 2 --steps 6 > "$work/full.log" 2>&1 || { cat "$work/full.log"; exit 1; }
# Interrupted: 3 steps on 2 ranks (shards saved), then 3 more on 4 ranks with ZeRO-3.
"${mpirun[@]}" -np 2 "$starzero" "${common[@]}" --stage 2 --steps 3 --checkpoint-out "$work/ck.bin" \
  > "$work/part1.log" 2>&1 || { cat "$work/part1.log"; exit 1; }
for r in 0 1; do [ -f "$work/ck.bin.rank$r-of-2.state" ] || fail "rank $r wrote no shard"; done

# consolidate: the shards give exactly the checkpoint rank 0 wrote from the gathered parameters.
"$starzero" consolidate --checkpoint "$work/ck.bin" --out "$work/merged.bin" > "$work/consolidate.log" 2>&1 \
  || { cat "$work/consolidate.log"; fail "consolidate"; }
cmp -s "$work/ck.bin" "$work/merged.bin" && echo "  consolidate: identical to rank 0's checkpoint" \
  || fail "consolidated checkpoint differs from the gathered one"
"$starzero" consolidate --checkpoint "$work/nothing.bin" --out "$work/x.bin" > /dev/null 2>&1 && fail "consolidate without shards succeeded"
[ -e "$work/x.bin" ] && fail "consolidate without shards wrote a file"

"${mpirun[@]}" -np 4 "$starzero" "${common[@]}" --stage 3 --steps 3 --checkpoint-in "$work/ck.bin" \
  --checkpoint-out "$work/ck2.bin" > "$work/part2.log" 2>&1 || { cat "$work/part2.log"; exit 1; }
grep -q "resumed from .* at step 3 (optimizer state of 2 ranks)" "$work/part2.log" || fail "part 2 did not resume at step 3"
if ! python3 "$here/check_zero_checkpoint.py" resumed-losses "$(step_losses "$work/full.log")" "$(step_losses "$work/part1.log") $(step_losses "$work/part2.log")"
then fail "resume on 4 ranks from 2 ranks' shards does not continue the losses"; fi
# The 4-rank save replaced the 2-rank shards (no mixing on a later resume).
ls "$work"/ck2.bin.rank*-of-4.state > /dev/null 2>&1 || fail "4-rank shards missing"

finish "passed"
