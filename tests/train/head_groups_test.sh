#!/usr/bin/env bash
# Attention by head groups (--head-groups auto|N): each head's math is the same kernel calls in any
# group, so training is bitwise identical whatever the count. Checked on gpt tiny (4 heads), 3
# steps: checkpoints byte-identical for 1, 2 and 3 groups (3: uneven, 1 + 1 + 2 heads), fp32 and
# bf16, micro-batches of 1 and 3 sequences (1 and 2 tiles), keeping every activation and with
# --recompute full --offload-activations cpu (the recomputation runs the attention forward by
# groups again); and under lws, dmdas and eager. The trace holds one attention task per block,
# group and tile (attention_fwd[b][g].t<k>, attention_bwd[b][g]); auto gives 2 groups to one tile
# on 2 CPU workers and 1 group to 2 tiles. Bad counts: one line, exit code 2.
# Usage: head_groups_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 17 20000
tiny=(--preset tiny --seq 32 --steps 3 --cuda-workers 0 --cpu-workers 2 --data "$work/text.txt" --val-every 0
  --sample-every 0 --quiet)

# Byte-identical checkpoints: every count against 1 group.
for precision in fp32 bf16; do
  for batch in 1 3; do
    for mode in "none" "full --offload-activations cpu"; do
      read -r -a flags <<< "--recompute $mode"
      run=("$starzero" train "${tiny[@]}" --precision "$precision" --batch "$batch" "${flags[@]}")
      what="$precision, batch $batch, --recompute $mode"
      "${run[@]}" --head-groups 1 --checkpoint-out "$work/g1.bin" > "$work/g1.log" 2>&1 \
        || { cat "$work/g1.log"; fail "$what, 1 group"; continue; }
      for groups in 2 3; do
        "${run[@]}" --head-groups "$groups" --checkpoint-out "$work/g.bin" > "$work/g.log" 2>&1 \
          || { cat "$work/g.log"; fail "$what, $groups groups"; continue; }
        cmp -s "$work/g1.bin" "$work/g.bin" || fail "$what: $groups head groups give another checkpoint than 1"
      done
    done
  done
done

# Across policies (3 groups, 1 tile): the same bytes as lws with 1 group.
"$starzero" train "${tiny[@]}" --precision fp32 --batch 1 --head-groups 1 --sched lws --checkpoint-out "$work/lws.bin" \
  > /dev/null 2>&1 || fail "lws, 1 group"
for policy in dmdas eager; do
  "$starzero" train "${tiny[@]}" --precision fp32 --batch 1 --head-groups 3 --sched "$policy" \
    --checkpoint-out "$work/p.bin" > "$work/p.log" 2>&1 || { cat "$work/p.log"; fail "$policy, 3 groups"; continue; }
  cmp -s "$work/lws.bin" "$work/p.bin" || fail "$policy with 3 head groups: another checkpoint than lws with 1"
done

# The tasks of a trace: Name lines of tasks.rec, one per task.
names() { grep -oE '^Name: .*' "$1/tasks.rec" | cut -c7- | sort -u; }
"$starzero" train "${tiny[@]}" --batch 3 --tiles 2 --head-groups 3 --recompute full --trace "$work/t3" \
  > "$work/t3.log" 2>&1 || { cat "$work/t3.log"; fail "trace with 3 groups"; }
names "$work/t3" > "$work/t3.txt"
for name in "attention_fwd[0][0].t0" "attention_fwd[3][2].t1" "attention_bwd[1][1].t0" "attention_recompute[2][2].t1"; do
  grep -qxF "$name" "$work/t3.txt" || fail "3 groups, 2 tiles: no task $name"
done
grep -qxF "attention_fwd[0].t0" "$work/t3.txt" && fail "3 groups: a whole-tile attention task ran"
# auto: one tile on 2 CPU workers gets 2 groups; two tiles already keep both busy.
"$starzero" train "${tiny[@]}" --batch 1 --trace "$work/a1" > "$work/a1.log" 2>&1 || { cat "$work/a1.log"; fail "auto, batch 1"; }
names "$work/a1" > "$work/a1.txt"
grep -qxF "attention_fwd[0][1]" "$work/a1.txt" && ! grep -qxF "attention_fwd[0][2]" "$work/a1.txt" \
  || fail "auto, one tile, 2 workers: not 2 head groups: $(grep attention_fwd "$work/a1.txt" | head -3 | tr '\n' ' ')"
"$starzero" train "${tiny[@]}" --batch 2 --trace "$work/a2" > "$work/a2.log" 2>&1 || { cat "$work/a2.log"; fail "auto, batch 2"; }
names "$work/a2" > "$work/a2.txt"
grep -qxF "attention_fwd[0].t1" "$work/a2.txt" || fail "auto, two tiles: not one attention task per tile"

expect_bad_input "--head-groups 0" "$starzero" train "${tiny[@]}" --head-groups 0
expect_bad_input "--head-groups 5 of 4 heads" "$starzero" train "${tiny[@]}" --head-groups 5
expect_bad_input "--head-groups some" "$starzero" train "${tiny[@]}" --head-groups some
expect_bad_input "--head-groups for Llama 3" "$starzero" train --model llama3 --steps 1 --cuda-workers 0 --head-groups 2
expect_bad_input "--tiles over the micro-batch" "$starzero" train "${tiny[@]}" --batch 2 --tiles 3
finish "head groups: passed"
