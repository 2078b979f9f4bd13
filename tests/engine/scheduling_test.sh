#!/usr/bin/env bash
# `--sched`, `--priorities` and policy plugins end to end (tiny GPT, CPU workers).
# Usage: scheduling_test.sh PATH/TO/starzero PATH/TO/libcentral_priority_policy.so
#   1. `--sched help` lists every policy StarPU offers, marks those that order by priority, exit 0
#   2. bad --sched / --priorities / --sched-alpha / --sched-plugin: one line, exit code 2
#   3. the same training under lws, dmdas, prio, heteroprio, modular-heft-prio and the example
#      plugin, with and without critical-path priorities: bitwise identical checkpoints
#   4. critical-path: tasks.rec has no priority in step 1 (nothing recorded yet), priorities in
#      step 2 that rank the backward of layer l above the AdamW of layer l+1; none: all 0
#   5. ZeRO-3 on 2 ranks: the backward's prefetch gathers outrank the AdamW of the last layer
#   6. gradient pieces: with 2 tiles on one rank the parameter-gradient tasks run per tile and
#      piece (fc_bwd_weight[0][1].t1, fc_bwd_bias[0].t0, ...); at ZeRO-3 (a gradient per use, not
#      held) and with --tiles 1 they stay one task over the whole gradient
set -euo pipefail
STARZERO=${1:?usage: scheduling_test.sh STARZERO PLUGIN}
PLUGIN=${2:?usage: scheduling_test.sh STARZERO PLUGIN}
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

write_words "$work/text.txt" 7 4000
RUN=(--data "$work/text.txt" --layers 2 --channels 64 --heads 2 --batch 4 --seq 32 --steps 3 --val-every 0
     --sample-every 0 --quiet --precision fp32 --cuda-workers 0 --cpu-workers 2 --grad-clip 0)

# 1.
"$STARZERO" train --sched help >"$work/help.txt" || fail "--sched help exited $?"
for p in eager prio lws ws dm dmda dmdas dmdasd heteroprio modular-heft modular-heft-prio modular-heteroprio peager; do
  grep -qE "^  $p( |$)" "$work/help.txt" || fail "--sched help does not list $p"
done
grep -qE "^  dmdas \*" "$work/help.txt" || fail "--sched help does not mark dmdas as using priorities"
grep -qE "^  dmda  " "$work/help.txt" || fail "--sched help marks dmda as using priorities"
"$STARZERO" train --sched help --sched-plugin "$PLUGIN" | grep -q "^  central-priority \*" \
  || fail "--sched help with the plugin does not list central-priority"

# 2.
bad() {
  local what=$1
  shift
  set +e
  "$STARZERO" train "${RUN[@]}" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" = 2 ] || fail "$what: exit code $rc, not 2"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$what: stderr is not one line: $(cat "$work/err")"
}
bad "unknown policy" --sched no-such-policy
bad "unknown scheme" --priorities fastest
bad "negative alpha" --sched-alpha -1
bad "text beta" --sched-beta x
bad "missing plugin" --sched-plugin "$work/none.so" --sched central-priority
bad "plugin policy without the plugin" --sched central-priority

# 3.
run() {
  local name=$1
  shift
  "$STARZERO" train "${RUN[@]}" --checkpoint-out "$work/$name.bin" "$@" >"$work/$name.log" 2>&1 \
    || fail "train $* exited $?: $(tail -1 "$work/$name.log")"
}
run reference --sched lws --priorities none
for p in lws dmdas prio heteroprio modular-heft-prio; do
  run "$p-cp" --sched "$p" --priorities critical-path --sched-alpha 1 --sched-beta 2
  cmp -s "$work/reference.bin" "$work/$p-cp.bin" || fail "$p with critical-path priorities changes the checkpoint"
done
run plugin --sched-plugin "$PLUGIN" --sched central-priority --priorities critical-path
cmp -s "$work/reference.bin" "$work/plugin.bin" || fail "the plugin policy changes the checkpoint"

# 4.
priorities() {  # tasks.rec -> "iteration priority name" per task that ran in a step
  awk 'BEGIN { RS = ""; FS = "\n" }
       { n = ""; p = ""; it = ""; w = ""
         for (i = 1; i <= NF; i++) {
           if ($i ~ /^Name: /) n = substr($i, 7)
           if ($i ~ /^Priority: /) p = substr($i, 11)
           if ($i ~ /^Iteration: /) it = substr($i, 12)
           if ($i ~ /^WorkerId: /) w = 1 }
         if (it != "" && w != "") print it, p, n }' "$1"
}
"$STARZERO" train "${RUN[@]}" --sched dmdas --priorities critical-path --trace "$work/cp" >/dev/null 2>&1
priorities "$work/cp/tasks.rec" >"$work/cp.txt"
[ "$(awk '$1 == 1 && $2 != 0' "$work/cp.txt" | wc -l)" = 0 ] || fail "step 1 has priorities before any step was recorded"
[ "$(awk '$1 == 2 && $2 > 0' "$work/cp.txt" | wc -l)" -gt 20 ] || fail "step 2 has (almost) no priorities"
prio_of() { awk -v s="$2" -v n="$3" '$1 == s && $3 == n { print $2; exit }' "$1"; }
for b in 0; do  # block 0 is layer 1; the AdamW of layer 2 (block 1) is free once block 1's backward ends
  bwd=$(prio_of "$work/cp.txt" 2 "ln1_bwd_input[$b].t0")
  adam=$(prio_of "$work/cp.txt" 2 "adamw[$((b + 2))]")
  [ -n "$bwd" ] && [ -n "$adam" ] && [ "$bwd" -gt "$adam" ] \
    || fail "ln1_bwd_input[$b] (priority '$bwd') does not outrank adamw[$((b + 2))] ('$adam')"
done
"$STARZERO" train "${RUN[@]}" --sched dmdas --trace "$work/none" >/dev/null 2>&1
priorities "$work/none/tasks.rec" >"$work/none.txt"
[ "$(awk '$2 != 0' "$work/none.txt" | wc -l)" = 0 ] || fail "--priorities none gave a task a priority"
[ "$(awk '$1 == 3' "$work/none.txt" | wc -l)" -gt 20 ] || fail "step 3 is not marked in tasks.rec"

# 5.
"${mpirun[@]}" -np 2 "$STARZERO" train "${RUN[@]}" --cpu-workers 1 --stage 3 --sched dmdas \
  --priorities critical-path --trace "$work/z3" >"$work/z3.log" 2>&1 || fail "ZeRO-3 run failed: $(tail -1 "$work/z3.log")"
priorities "$work/z3/rank0/tasks.rec" >"$work/z3.txt"
last_adam=$(prio_of "$work/z3.txt" 2 "adamw[3]")  # layer L+1 = 3: its backward ends first
for g in 1 2; do
  gather=$(prio_of "$work/z3.txt" 2 "all_gather_bwd[$g]")
  [ -n "$gather" ] && [ -n "$last_adam" ] && [ "$gather" -gt "$last_adam" ] \
    || fail "all_gather_bwd[$g] (priority '$gather') does not outrank adamw[3] ('$last_adam')"
done

# 6.
ran_in_step() { awk -v s="$2" -v n="$3" '$1 == s && $3 == n { found = 1 } END { exit !found }' "$1"; }
for name in "fc_bwd_weight[0][0].t0" "fc_bwd_weight[0][1].t1" "qkv_bwd_weight[1][1].t0" "fc_bwd_bias[0].t1" \
            "ln2_bwd_params[0].t0" "classifier_bwd_weight[1].t1"; do
  ran_in_step "$work/none.txt" 3 "$name" || fail "2 tiles, one rank: no task $name in step 3"
done
ran_in_step "$work/none.txt" 3 "fc_bwd_weight[0]" && fail "2 tiles, one rank: the whole-gradient fc_bwd_weight[0] ran"
ran_in_step "$work/z3.txt" 2 "fc_bwd_weight[0]" || fail "ZeRO-3: fc_bwd_weight[0] is not one task on the whole gradient"
"$STARZERO" train "${RUN[@]}" --tiles 1 --trace "$work/one" >/dev/null 2>&1
priorities "$work/one/tasks.rec" >"$work/one.txt"
ran_in_step "$work/one.txt" 3 "fc_bwd_weight[0]" || fail "--tiles 1: fc_bwd_weight[0] is not one task"
[ "$(grep -c 'bwd_bias' "$work/one.txt")" = 0 ] || fail "--tiles 1: bias tasks of their own ran"

finish "scheduling: all checks passed"
