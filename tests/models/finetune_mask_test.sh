#!/usr/bin/env bash
# Fine-tuning on JSONL with loss masks (issue 39's must-show checks), on a tiny GPT (L=2, C=32, NH=2,
# T=32, fp32, CPU workers) with a tokenizer.json fixture of 264 ids (256 bytes, 7 merges,
# <|endoftext|>; check_finetune_mask.py). Records: a prompt of 4 to 12 random letters ending in "?",
# and always the completion " => yes." (3 tokens, then the end-of-text: 4 counted targets a record).
#   masking  - 300 steps at lr 3e-3 with the prompts masked: the printed training loss (the mean over
#              completions) falls from ~ln 264 = 5.6 to below 0.05, and so does `eval --loss-on
#              completion` on held-out records (measured 0.005 to 0.006 for the
#              default seed and seeds 1 to 4).
#              `eval --loss-on all` stays high: at least 1.0 above the same training with --loss-on
#              all (measured 4.4 to 5.8 against 1.65; no model can go much below 1.6 there: 8 random
#              letters and a random length are ~20.6 nats a record of ~12.7 tokens). With the mask
#              ignored the two runs would be one (both checks fail then: tried).
#   reference - tests/models/gpt2_reference_loss.py, GPT-2 in pure Python (double precision) from
#              llm.c's definition, over the shard and mask `starzero tokenize` writes for other
#              held-out records (mixed: first many short prompts, then long prompts with a completion
#              never trained on, so the mean over counted targets is 17-44 % away from the mean of the
#              6 batches' means): eval's mean over counted targets (--loss-on completion) and over all
#              targets (--loss-on all) agree with it within 1e-5 relative + 1e-6, for the masked run at
#              step 30 and at the end and for the --loss-on all run (measured: at most 4e-7 apart, the
#              rounding of the 6 printed decimals; eval's bf16 forward is 4.5e-4 off, a reference with
#              layernorm eps 1e-6 5.6e-5, one without the causal mask 2.3e-4).
#              Eval on the shard folder prints exactly what eval on the JSONL prints (the same stream),
#              and the shard decodes to the records with the prompts' tokens 0 in the mask.
# Usage: finetune_mask_test.sh PATH/TO/starzero
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
check() { python3 "$here/check_finetune_mask.py" "$@"; }

check tokenizer "$work/tok.json"
check records "$work/train.jsonl" 1 2000
check records "$work/held.jsonl" 2 60         # 777 tokens: 24 windows of 33
check records "$work/mixed.jsonl" 3 60 mixed  # 851 tokens: 26 windows
B=4 T=32 K=6

# The mixed records as shards, masked (prompts 0) and not.
for mode in completion all; do
  "$bin" tokenize --data "$work/mixed.jsonl" --tokenizer "$work/tok.json" --out "$work/mixed-$mode" --loss-on $mode \
    > "$work/tokenize.log" 2>&1 || { cat "$work/tokenize.log"; fail "tokenize --loss-on $mode"; }
done
check stream "$work/mixed-completion" "$work/mixed.jsonl" || fail "the shard is not the records with their mask"

model=(--data "$work/train.jsonl" --tokenizer "$work/tok.json" --preset tiny --layers 2 --channels 32 --heads 2
       --max-seq 32 --seq "$T" --batch 8 --cuda-workers 0 --precision fp32 --steps 300 --lr 3e-3
       --val-every 0 --sample-every 0)
"$bin" train "${model[@]}" --checkpoint-dir "$work/masked" --save-every 30 > "$work/masked.log" 2>&1 \
  || { cat "$work/masked.log"; fail "training, --loss-on completion"; exit 1; }
"$bin" train "${model[@]}" --loss-on all --checkpoint-out "$work/all.bin" > "$work/all.log" 2>&1 \
  || { cat "$work/all.log"; fail "training, --loss-on all"; exit 1; }

# The mean loss `eval` prints for CHECKPOINT on DATA (more flags after).
eval_loss() {  # CHECKPOINT DATA FLAGS...
  local checkpoint=$1 data=$2
  shift 2
  "$bin" eval --checkpoint "$checkpoint" --data "$data" --batch $B --seq $T --batches $K --cuda-workers 0 "$@" \
    > "$work/eval.log" 2>&1 || { cat "$work/eval.log" >&2; echo nan; return; }
  sed -nE 's/.*mean loss ([0-9.]+) over.*/\1/p' "$work/eval.log" | grep . || echo nan
}

# ---- masking: completions learned, prompts not ------------------------------------------------------
first=$(losses "$work/masked.log" | head -n 1)
last=$(losses "$work/masked.log" | tail -n 1)
final=$work/masked/step_300/model.bin
completion=$(eval_loss "$final" "$work/held.jsonl" --tokenizer "$work/tok.json" --loss-on completion)
all=$(eval_loss "$final" "$work/held.jsonl" --tokenizer "$work/tok.json" --loss-on all)
control_all=$(eval_loss "$work/all.bin" "$work/held.jsonl" --tokenizer "$work/tok.json" --loss-on all)
echo "masked training: loss $first -> $last; held out: completion $completion, all $all;" \
     "trained with --loss-on all: all $control_all"
check above "the first training loss" "$first" 4 || fail "the first training loss"
check below "the last training loss (completions)" "$last" 0.05 || fail "completion training loss"
check below "eval --loss-on completion" "$completion" 0.05 || fail "held-out completion loss"
check apart "eval --loss-on all, masked training against --loss-on all training" "$all" "$control_all" 1.0 \
  || fail "the prompts were learned"

# ---- eval against the Python reference ------------------------------------------------------------
for checkpoint in "$work/masked/step_30/model.bin" "$final" "$work/all.bin"; do
  name=${checkpoint#"$work/"}
  reference=$(python3 "$here/gpt2_reference_loss.py" "$checkpoint" "$work/mixed-completion/train_000000.bin" \
                "$work/mixed-completion/train_000000.mask" $B $T $K) || { fail "the reference on $name"; continue; }
  read -r _ ref_completion _ ref_all _ counted _ targets <<< "$reference"
  for mode in completion all; do
    from_jsonl=$(eval_loss "$checkpoint" "$work/mixed.jsonl" --tokenizer "$work/tok.json" --loss-on $mode)
    from_shards=$(eval_loss "$checkpoint" "$work/mixed-$mode")
    want=$ref_completion
    [ $mode = all ] && want=$ref_all
    echo "  $name --loss-on $mode: eval $from_jsonl (JSONL), $from_shards (shards); reference $want" \
         "($counted of $targets targets counted)"
    [ "$from_jsonl" = "$from_shards" ] || fail "$name --loss-on $mode: the shards' loss differs from the JSONL's"
    check close "$name --loss-on $mode" "$from_jsonl" "$want" 1e-5 1e-6 || fail "$name --loss-on $mode: eval != reference"
  done
done

# ---- training on tokenized shards of a small tokenizer ------------------------------------------
# GPT-2's uint16 shard format holds any vocabulary up to 65536: with --tokenizer, the data's
# vocabulary is the tokenizer's 264, and the run's loss is the JSONL run's (the same stream).
"$bin" train --data "$work/mixed-completion" --tokenizer "$work/tok.json" --preset tiny --layers 2 --channels 32 \
  --heads 2 --max-seq 32 --seq "$T" --batch 8 --cuda-workers 0 --precision fp32 --steps 3 --val-every 0 \
  --sample-every 0 > "$work/shards.log" 2>&1 || { cat "$work/shards.log"; fail "training on the tokenized shards"; }
grep -q " V=264 " "$work/shards.log" || { head -n 2 "$work/shards.log"; fail "the shards' model is not the tokenizer's vocabulary"; }
"$bin" train --data "$work/mixed.jsonl" --tokenizer "$work/tok.json" --preset tiny --layers 2 --channels 32 \
  --heads 2 --max-seq 32 --seq "$T" --batch 8 --cuda-workers 0 --precision fp32 --steps 3 --val-every 0 \
  --sample-every 0 > "$work/jsonl3.log" 2>&1 || { cat "$work/jsonl3.log"; fail "training on the JSONL"; }
[ "$(losses "$work/shards.log")" = "$(losses "$work/jsonl3.log")" ] || fail "the tokenized shards train differently from the JSONL"

finish "all passed"
