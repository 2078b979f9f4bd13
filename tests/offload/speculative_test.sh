#!/usr/bin/env bash
# --speculative-update (docs/architecture.md, "Exact clipping"): the CPU AdamW runs before the
# global norm is known and a commit adopts it, re-runs it clipped or discards it. The claim is
# exactness, so every check is against the synchronous run (the same flags without it):
#  1. byte-identical checkpoints (parameters and the .state optimizer file) with a --grad-clip
#     that clips some steps and not others (the step lines must show both kinds), for the fp32
#     GPT and llama3-tiny, bf16, --grad-accum, 2 ranks at ZeRO-1 and ZeRO-3, part of the state
#     on the device (--offload-optimizer-fraction), only the last layers speculative
#     (--speculative-fraction, 1 and 2 ranks), and a NaN gradient
#     (the step is skipped: the commit discards);
#  2. a run saved mid-way and resumed ends with the synchronous run's checkpoint;
#  3. the graph: the AdamW of the top layers no longer waits for the embedding's backward (the
#     last one), each commit waits for clip_scale (tasks.rec DependsOn);
#  4. the commit counts in the summary and the rollbacks in --metrics match the step lines;
#  5. impossible combinations exit 2 with one line.
# Usage: speculative_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 7 12000

L=2; C=34; NH=2; T=16; B=4; STEPS=6
common=(train --data "$work/data.txt" --preset tiny --layers $L --channels $C --heads $NH --max-seq $T --seq $T
        --batch $B --steps $STEPS --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3
        --warmup 0 --sample-tokens 2 --seed 3 --offload-optimizer cpu)
llama=(train --model llama3 --preset llama3-tiny --layers 2 --data "$work/data.txt" --seq 32 --batch 4
       --steps $STEPS --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3 --warmup 0
       --sample-tokens 2 --seed 3 --offload-optimizer cpu)

# run NAME NP ARGS...: one training run writing $work/NAME.bin and $work/NAME.log.
run() {
  local name=$1 np=$2; shift 2
  local cmd=("$starzero" "$@" --checkpoint-out "$work/$name.bin")
  [ "$np" -gt 1 ] && cmd=("${mpirun[@]}" -np "$np" "${cmd[@]}")
  if ! timeout 300 "${cmd[@]}" > "$work/$name.log" 2>&1; then
    tail -n 20 "$work/$name.log"; fail "$name did not finish"; return 1
  fi
}

# step_lines LOG: the step lines a run printed (a progress bar's \r-separated frames, if any).
step_lines() { tr '\r' '\n' < "$1" | sed 's/^\[[#.]*\] //; s/\x1b\[K//g' | grep '^step [0-9]' || true; }

# pair NAME NP ARGS...: the synchronous and the speculative run (with "${spec_extra[@]}" too);
# their checkpoints and losses must be the same bytes. Prints how many steps each kind of commit had.
spec_extra=()
pair() {
  local name=$1 np=$2; shift 2
  run "${name}_sync" "$np" "$@" || return 0
  run "${name}_spec" "$np" "$@" --speculative-update "${spec_extra[@]}" || return 0
  local a="$work/${name}_sync" b="$work/${name}_spec"
  cmp -s "$a.bin" "$b.bin" || fail "$name: the speculative update changed the parameters"
  for state in "$a".bin*.state; do
    cmp -s "$state" "$b${state#"$a"}" || fail "$name: the speculative update changed ${state##*/}"
  done
  [ "$(losses "$a.log")" = "$(losses "$b.log")" ] || fail "$name: the speculative update changed the losses"
  grep -q 'speculative update (exact)' "$b.log" || fail "$name: no speculative update in the offload line"
  local clipped plain
  clipped=$(step_lines "$b.log" | grep -c 'rollback: ' || true)
  plain=$(step_lines "$b.log" | grep -vc 'rollback: ' || true)
  echo "  $name: identical; $clipped steps rolled back (clipped), $plain adopted or skipped"
  echo "$clipped $plain" > "$work/$name.kinds"
}

# both_kinds NAME: the pair saw clipped and unclipped steps (else it tested only one path).
both_kinds() {
  read -r clipped plain < "$work/$1.kinds" || { fail "$1: no step counts"; return; }
  [ "$clipped" -gt 0 ] && [ "$plain" -gt 0 ] || fail "$1: needs clipped and unclipped steps, got $clipped and $plain"
}

# --- 1. bitwise against the synchronous update ----------------------------------------------------
# The tiny GPT's norms fall from about 4.7 to 2.1 over 6 steps: 2.4 clips the first ones only.
pair gpt 1 "${common[@]}" --grad-clip 2.4 --metrics "$work/gpt.jsonl"
both_kinds gpt
pair gpt_bf16 1 "${common[@]}" --grad-clip 2.4 --precision bf16
both_kinds gpt_bf16
pair gpt_accum 1 "${common[@]}" --grad-clip 2.4 --grad-accum 2
both_kinds gpt_accum
pair gpt_bf16_fp32accum 1 "${common[@]}" --grad-clip 2.4 --precision bf16 --grad-accum 2 --fp32-grad-accum
pair llama 1 "${llama[@]}" --grad-clip 3.1
both_kinds llama
for stage in 1 3; do
  pair "gpt_zero$stage" 2 "${common[@]}" --grad-clip 2.4 --stage $stage
  both_kinds "gpt_zero$stage"
done
# Half the state on the "device" (--offload-optimizer-fraction): those layers update after the
# norm, the others speculatively.
pair gpt_split 1 "${common[@]}" --grad-clip 2.4 --offload-optimizer-fraction 0.5
both_kinds gpt_split
pair gpt_split_zero1 2 "${common[@]}" --grad-clip 2.4 --offload-optimizer-fraction 0.5 --stage 1
pair gpt_zero2_accum 2 "${common[@]}" --grad-clip 2.4 --stage 2 --grad-accum 2
# Only the last layers speculative (--speculative-fraction): the others' CPU AdamW waits for the
# norm, as synchronous; a clipped step re-runs the speculative ones only.
for np in 1 2; do
  spec_extra=(--speculative-fraction 0.3)
  pair "gpt_partial_$np" "$np" "${common[@]}" --grad-clip 2.4 --stage $((np - 1))
  spec_extra=()
  both_kinds "gpt_partial_$np"
  python3 "$here/check_speculative.py" partial-layers "$work/gpt_partial_${np}_spec.log" || fail "--speculative-fraction 0.3 ($np rank(s)): not the last layers only"
done
# A NaN gradient at step 3: the step is skipped, the speculative result discarded.
pair gpt_nan 1 "${common[@]}" --grad-clip 2.4 --debug-nan-gradient 3:1
grep -q " $((L + 2)) discarded" "$work/gpt_nan_spec.log" || fail "NaN gradient: not every commit of step 3 discarded"

# --- 2. saved and resumed mid-way: the uninterrupted synchronous run's checkpoint --------------------
resume=("${common[@]}" --grad-clip 2.4 --lr-final 1)
run whole_sync 1 "${resume[@]}"
run part_spec 1 "${resume[@]}" --steps 3 --speculative-update
"$starzero" "${resume[@]}" --steps 3 --speculative-update --checkpoint-in "$work/part_spec.bin" \
  --checkpoint-out "$work/resumed_spec.bin" > "$work/resumed_spec.log" 2>&1 || fail "resume failed"
cmp -s "$work/whole_sync.bin" "$work/resumed_spec.bin" || fail "a resumed speculative run does not continue exactly"
cmp -s "$work/whole_sync.bin.state" "$work/resumed_spec.bin.state" || fail "resumed: the .state differs"

# --- 3. the graph, from StarPU's task records -------------------------------------------------------
"$starzero" "${common[@]}" --steps 1 --cpu-workers 2 --grad-clip 1 --speculative-update --trace "$work/trace" \
  > "$work/trace.log" 2>&1 || { tail -n 20 "$work/trace.log"; fail "traced run"; }
python3 "$here/check_speculative.py" speculative-graph "$work/trace/tasks.rec" $L \
  || fail "the speculative graph is not as documented"

# --- 4. counts: summary, metrics and step lines agree ------------------------------------------------
python3 "$here/check_speculative.py" rollback-counts "$work/gpt_spec.log" "$work/gpt.jsonl" $((L + 2)) || fail "rollback counts disagree"

# --- 5. impossible combinations ---------------------------------------------------------------------
plain=(train --data "$work/data.txt" --preset tiny --layers $L --channels $C --heads $NH --max-seq $T --seq $T
       --batch $B --steps 1 --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0)
expect_bad_input "--speculative-update without offload" "$starzero" "${plain[@]}" --speculative-update
expect_bad_input "--speculative-update with nvme" "$starzero" "${plain[@]}" --speculative-update \
  --offload-optimizer nvme --nvme-path "$work/nvme"
expect_bad_input "--speculative-update without clipping" "$starzero" "${plain[@]}" --speculative-update \
  --offload-optimizer cpu --grad-clip 0
expect_bad_input "--speculative-update with --delayed-update" "$starzero" "${plain[@]}" --speculative-update \
  --offload-optimizer cpu --delayed-update 1
expect_bad_input "--speculative-fraction without --speculative-update" "$starzero" "${plain[@]}" \
  --offload-optimizer cpu --speculative-fraction 0.5
expect_bad_input "--speculative-fraction 1.5" "$starzero" "${plain[@]}" --offload-optimizer cpu --speculative-update \
  --speculative-fraction 1.5

finish "speculative update: bit-identical to the synchronous update"
