#!/usr/bin/env bash
# One rank, a model larger than its GPU (issue 28): --offload-params cpu at any stage.
#  1. the same training: with --offload-optimizer cpu, adding --offload-params cpu (the whole
#     model on the host, fetched per layer in the prefetch window; the gradients streamed: homed
#     on the host, on the device only around each backward) gives byte-identical checkpoints and
#     optimizer state, for the tiny GPT and llama3-tiny, with one micro-batch and --grad-accum 2
#     (later micro-batches fetch the gradient back), at stages 0 and 3; and without the optimizer
#     offloaded (parameters fetched, gradients resident);
#  2. the device windows: the placement report's peaks of parameters and gradients in flight are
#     `starzero plan`'s (W+1) and G times the largest layer (prefetch and gradient windows), and
#     the bytes held for good on each place are the plan's;
#  3. several ranks still need ZeRO-3 for --offload-params cpu: exit 2 with one line.
# Usage: one_rank_offload_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 11 12000

base=(train --data "$work/data.txt" --steps 4 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3 --warmup 0
      --sample-tokens 2 --seed 5 --seq 16 --batch 4)
gpt=(--preset tiny --layers 2 --channels 34 --heads 2 --max-seq 16 --precision fp32)
llama=(--model llama3 --preset llama3-tiny --precision bf16)

# run NAME ARGS...: one training run writing $work/NAME.bin(.state) and $work/NAME.log.
run() {
  local name=$1; shift
  if ! timeout 300 "$starzero" "${base[@]}" --checkpoint-out "$work/$name.bin" "$@" > "$work/$name.log" 2>&1; then
    tail -n 20 "$work/$name.log"; fail "$name did not finish"; return 1
  fi
}

# same NAME_A NAME_B WHAT: byte-identical checkpoints, optimizer state and losses.
same() {
  cmp -s "$work/$1.bin" "$work/$2.bin" || { fail "$3: the checkpoints differ"; return; }
  cmp -s "$work/$1.bin.state" "$work/$2.bin.state" || { fail "$3: the optimizer state differs"; return; }
  [ "$(losses "$work/$1.log")" = "$(losses "$work/$2.log")" ] || { fail "$3: the losses differ"; return; }
  echo "  $3: identical ($(losses "$work/$1.log" | tr '\n' ' '))"
}

# --- 1. the same training ------------------------------------------------------------------------
for model in gpt llama; do
  eval "shape=(\"\${$model[@]}\")"
  for accum in 1 2; do
    k=(--grad-accum $accum)
    run "${model}_k${accum}" "${shape[@]}" "${k[@]}" --offload-optimizer cpu || continue
    for stage in 0 3; do
      run "${model}_k${accum}_s${stage}" "${shape[@]}" "${k[@]}" --offload-optimizer cpu --offload-params cpu \
        --stage $stage && same "${model}_k${accum}" "${model}_k${accum}_s${stage}" \
        "$model, --grad-accum $accum, ZeRO-$stage: --offload-params cpu"
    done
  done
  run "${model}_plain" "${shape[@]}" --grad-accum 2 \
    && run "${model}_params" "${shape[@]}" --grad-accum 2 --offload-params cpu --stage 1 \
    && same "${model}_plain" "${model}_params" "$model, no optimizer offload, ZeRO-1: --offload-params cpu"
done
grep -q 'offload: optimizer cpu.*parameters cpu' "$work/gpt_k1_s0.log" || fail "no offload line naming both"

# --- 2. the device windows against the planner ---------------------------------------------------
# plan_json NAME ARGS...: `starzero plan --json` for the run's model and offloads at dp 1.
check_windows() {  # check_windows RUN PLAN_ARGS...
  local name=$1; shift
  "$starzero" plan --json --stage 0 --offload-optimizer cpu --offload-params cpu "$@" > "$work/$name.plan.json" \
    || { fail "$name: starzero plan failed"; return; }
  python3 "$here/check_one_rank_offload.py" device-windows "$work/$name.log" "$work/$name.plan.json" || fail "$name: the device windows are not the plan's"
}
# The GPT's blocks (12C² + 13C = 14314 parameters) are its largest layers, two of them in a row.
check_windows gpt_k2_s0 --layers 2 --hidden 34 --heads 2 --vocab 256 --seq 16 --batch 2 --precision fp32
check_windows llama_k2_s0 --model llama3 --preset llama3-tiny --seq 16 --batch 2 --precision bf16

# --- 3. several ranks: ZeRO-3 only ---------------------------------------------------------------
set +e
"${mpirun[@]}" -np 2 "$starzero" "${base[@]}" "${gpt[@]}" --offload-params cpu --stage 2 > "$work/two.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q 'needs --stage 3 with several ranks' "$work/two.log" && ! grep -q '^step ' "$work/two.log" \
  || { cat "$work/two.log"; fail "two ranks, --offload-params cpu at ZeRO-2: exit $rc"; }

finish "one-rank offload: all checks passed"
