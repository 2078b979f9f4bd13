#!/usr/bin/env bash
# The recipe of docs/manual.md, "Fine-tuning a Hugging Face Llama 3 on JSONL", run as written with the
# fixture's sizes: a Hugging Face Llama 3 folder (tests/models/hf_fixture.py with Llama 3's vocabulary of
# 128256) and its tokenizer.json (tests/cli/check_tokenize.py tokenizers: Llama 3's layout, special ids
# and begin-of-text post-processor), fine-tuned on prompt/completion JSONL with --offload-optimizer cpu
# and written back as a Hugging Face folder, then evaluated on held-out JSONL with --loss-on completion.
# Checks: the data line's counts are the reference BPE's (check_finetune_recipe.py), the run starts from
# the folder with the optimizer state on the host, the written folder is a Llama folder of the
# original's tensors that `starzero eval` reads, and the held-out completion loss falls.
# Usage: finetune_recipe_test.sh STARZERO
set -euo pipefail
starzero=$(readlink -f "$1")  # the test runs in its work folder
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../lib.sh"
check() { python3 "$here/check_finetune_recipe.py" "$@" || fail "check_finetune_recipe.py $1"; }

# What a Hugging Face Llama 3 folder holds, tiny: config.json, model.safetensors, tokenizer.json.
cd "$work"
python3 "$here/hf_fixture.py" llama Llama-3-fixture fixture.bin --vocab 128256
python3 "$here/../cli/check_tokenize.py" tokenizers "$work"
mv llama3.json Llama-3-fixture/tokenizer.json
check records train.jsonl 64 1
check records held.jsonl 24 2

# The recipe (docs/manual.md): the same commands and flags, the fixture's sizes, and no GPU.
cpu=(--cuda-workers 0)
starzero_eval() {  # FOLDER: the held-out completion loss
  "$starzero" eval --checkpoint "$1" --data held.jsonl --tokenizer "$1/tokenizer.json" --loss-on completion \
    --seq 32 --batch 4 --batches 4 "${cpu[@]}"
}
eval_loss() { grep -oE 'mean loss [0-9.]+' "$1" | awk '{print $3}'; }
starzero_eval Llama-3-fixture/ > before.log 2>&1 || { cat before.log; fail "eval of the original folder"; finish ""; }
"$starzero" train --model llama3 --checkpoint-in Llama-3-fixture/ \
  --data train.jsonl --val-data held.jsonl --tokenizer Llama-3-fixture/tokenizer.json --loss-on completion \
  --seq 32 --batch 4 --grad-accum 2 --steps 10 --lr 3e-3 --warmup 2 --val-every 5 --val-batches 2 \
  --offload-optimizer cpu \
  --checkpoint-out Llama-3-fixture-ft/ --checkpoint-format hf --checkpoint-precision bf16 "${cpu[@]}" \
  > train.log 2>&1 || { tail -20 train.log; fail "train"; finish ""; }
cp Llama-3-fixture/tokenizer*.json Llama-3-fixture-ft/
starzero_eval Llama-3-fixture-ft/ > after.log 2>&1 || { cat after.log; fail "eval of the written folder"; finish ""; }
grep -a -E '^(data|offload|initialised|step|  validation|wrote|summary)' train.log || true
cat before.log after.log

check data-line train.log train.jsonl held.jsonl 32
grep -aq '^initialised from Llama-3-fixture (no .state beside it: fresh optimizer)' train.log \
  || fail "the run did not start from the folder"
grep -aq '^offload: optimizer cpu' train.log || fail "the optimizer state was not offloaded to the CPU"
grep -aq '^wrote Llama-3-fixture-ft (Hugging Face Llama 3 folder, BF16)' train.log \
  || fail "the run did not write a bf16 Hugging Face folder"
first=$(losses train.log | head -1 || true) last=$(losses train.log | tail -1 || true)
check below "$last" "$first" "the training loss on completions"
check hf-folder Llama-3-fixture-ft Llama-3-fixture BF16
check below "$(eval_loss after.log)" "$(eval_loss before.log)" "the held-out completion loss (eval)"
finish "finetune recipe: ok (training loss $first -> $last)"
