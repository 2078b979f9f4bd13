#!/usr/bin/env bash
# Hugging Face folders in and out (docs/huggingface.md), in four parts:
#   foreign   - folders that tests/models/hf_fixture.py writes with Python's struct and json (GPT-2 with a
#               padded vocabulary, sharded with an index, transformer.* names and mask buffers;
#               Llama 3 with permuted q/k rows, single-file and tied): `convert` gives byte for byte
#               the llm.c file the script wrote from the same values, `eval` the same loss on both,
#               and `train --checkpoint-in DIR` trains (the loss falls)
#   roundtrip - llm.c checkpoints of short GPT and Llama 3 runs -> hf -> llm.c are byte-identical
#               (fp32 and bf16), and `eval` on the folder equals `eval` on the file
#   zero      - --checkpoint-format hf of a 2-rank ZeRO-3 run (written a layer at a time) equals,
#               converted, `consolidate`'s llm.c checkpoint of the same run's state files; on one
#               rank in bf16, the llm.c checkpoint of the same seeded run
#   errors    - malformed or mismatched folders: one error line and exit code 2
# Usage: hf_test.sh STARZERO PART
set -euo pipefail
starzero=$1
part=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../lib.sh"
fixture() { python3 "$here/hf_fixture.py" "$@"; }
write_words "$work/data.txt" 7 8000
cpu=(--cuda-workers 0 --cpu-workers 1)

# The mean loss `starzero eval` prints for a checkpoint (file or folder) on the words.
eval_loss() {
  "$starzero" eval --checkpoint "$1" --data "$work/data.txt" --batch 2 --seq 16 --batches 2 "${cpu[@]}" \
    | grep -oE 'mean loss [0-9.]+' | awk '{print $3}'
}

same_loss() {  # WHAT A B
  local a b
  a=$(eval_loss "$2") b=$(eval_loss "$3")
  if [ -z "$a" ] || [ "$a" != "$b" ]; then fail "$1: eval $2 gives '$a', $3 gives '$b'"; else echo "$1: eval loss $a on both"; fi
}

convert() { "$starzero" convert "$@" > /dev/null || fail "convert $*"; }

same_bytes() {  # WHAT A B
  if cmp -s "$2" "$3"; then echo "$1: byte-identical ($(stat -c %s "$2") bytes)"; else fail "$1: $2 and $3 differ"; fi
}

# Trains a few steps from a checkpoint; the last loss must be below the first.
trains_from() {  # WHAT CHECKPOINT [train flags]
  local what=$1 checkpoint=$2 log=$work/train.log
  shift 2
  "$starzero" train --checkpoint-in "$checkpoint" --data "$work/data.txt" --batch 4 --seq 16 --steps 8 --lr 3e-3 \
    --warmup 0 --val-every 0 --sample-tokens 2 "${cpu[@]}" "$@" > "$log" 2>&1 || { tail -5 "$log"; fail "$what: train"; return; }
  local first last
  first=$(losses "$log" | head -1) last=$(losses "$log" | tail -1)
  if python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)"; then
    echo "$what: trains from the folder, loss $first -> $last"
  else
    fail "$what: the loss did not fall ($first -> $last)"
  fi
}

foreign() {
  fixture gpt2 "$work/gpt200" "$work/gpt200.bin" --vocab 200 --sharded --prefix
  convert --from hf "$work/gpt200" --to llmc "$work/gpt200.conv.bin"
  same_bytes "GPT-2 sharded folder (V=200, Vp=256) -> llmc vs Python's llm.c file" "$work/gpt200.bin" "$work/gpt200.conv.bin"
  same_loss "GPT-2 sharded folder vs Python's llm.c file" "$work/gpt200" "$work/gpt200.bin"
  fixture gpt2 "$work/gpt" "$work/gpt.bin"
  convert --from hf "$work/gpt" --to llmc "$work/gpt.conv.bin"
  same_bytes "GPT-2 folder -> llmc" "$work/gpt.bin" "$work/gpt.conv.bin"
  trains_from "GPT-2 folder" "$work/gpt"
  fixture llama "$work/llama" "$work/llama.bin"
  convert --from hf "$work/llama" --to llmc "$work/llama.conv.bin"
  same_bytes "Llama 3 folder (HF's q/k row permutation) -> llmc vs Python's llm.c file" "$work/llama.bin" "$work/llama.conv.bin"
  same_loss "Llama 3 folder vs Python's llm.c file" "$work/llama" "$work/llama.bin"
  trains_from "Llama 3 folder" "$work/llama" --model llama3
  fixture llama "$work/tied" "$work/tied.bin" --sharded --tied
  convert --from hf "$work/tied" --to llmc "$work/tied.conv.bin"
  same_bytes "Llama 3 sharded folder with tied embeddings -> llmc" "$work/tied.bin" "$work/tied.conv.bin"
}

# A short run's llm.c checkpoint in `precision`, then llmc -> hf -> llmc.
round_trip() {  # NAME PRECISION [train flags]
  local name=$1 precision=$2
  shift 2
  "$starzero" train --data "$work/data.txt" --batch 4 --seq 16 --steps 3 --val-every 0 --sample-tokens 2 "${cpu[@]}" \
    --checkpoint-out "$work/$name.bin" --checkpoint-precision "$precision" "$@" > "$work/$name.log" 2>&1 \
    || { tail -5 "$work/$name.log"; fail "$name: train"; return; }
  convert --from llmc "$work/$name.bin" --to hf "$work/$name.hf"
  convert --from hf "$work/$name.hf" --to llmc "$work/$name.back.bin"
  same_bytes "$name: llmc -> hf -> llmc" "$work/$name.bin" "$work/$name.back.bin"
  same_loss "$name: folder vs file" "$work/$name.hf" "$work/$name.bin"
}

roundtrip() {
  round_trip gpt-fp32 fp32 --preset tiny --layers 2
  round_trip gpt-bf16 bf16 --preset tiny --layers 2
  round_trip llama-fp32 fp32 --model llama3 --preset llama3-tiny --layers 2
  round_trip llama-bf16 bf16 --model llama3 --preset llama3-tiny --layers 2
  # A folder of the other precision converts back to the file's.
  convert --from llmc "$work/gpt-fp32.bin" --to hf "$work/gpt-bf16.hf2" --precision bf16
  grep -q '"BF16"' "$work/gpt-bf16.hf2/model.safetensors" || fail "--precision bf16 wrote no BF16 tensor"
}

zero() {
  local base=(train --data "$work/data.txt" --preset tiny --layers 2 --batch 4 --seq 16 --steps 3 --val-every 0
              --sample-tokens 2 "${cpu[@]}")
  local run=("${base[@]}" --stage 3)
  timeout 300 "${mpirun[@]}" -np 2 "$starzero" "${run[@]}" --checkpoint-out "$work/z3" --checkpoint-format hf \
    > "$work/z3.log" 2>&1 || { tail -20 "$work/z3.log"; fail "ZeRO-3 on 2 ranks with --checkpoint-format hf"; return; }
  [ -f "$work/z3/config.json" ] && [ -f "$work/z3/model.safetensors" ] || fail "no folder written"
  "$starzero" consolidate --checkpoint "$work/z3" --out "$work/z3.consolidated.bin" > /dev/null || fail "consolidate"
  convert --from hf "$work/z3" --to llmc "$work/z3.converted.bin"
  same_bytes "ZeRO-3 x2 --checkpoint-format hf, converted, vs consolidate's llm.c file" \
    "$work/z3.consolidated.bin" "$work/z3.converted.bin"
  # One rank, bf16: the folder equals the llm.c file of the same seeded run, converted.
  local one=("${base[@]}" --checkpoint-precision bf16)
  "$starzero" "${one[@]}" --checkpoint-out "$work/one.bin" > /dev/null 2>&1 || fail "one rank, llmc"
  "$starzero" "${one[@]}" --checkpoint-out "$work/one/" --checkpoint-format hf > /dev/null 2>&1 || fail "one rank, hf"
  [ -f "$work/one.state" ] || fail "the optimizer state of --checkpoint-out DIR/ is not DIR.state"
  "$starzero" train --checkpoint-in "$work/one/" --data "$work/data.txt" --batch 4 --seq 16 --steps 1 --val-every 0 \
    --sample-tokens 2 "${cpu[@]}" > "$work/resume.log" 2>&1 || { tail -5 "$work/resume.log"; fail "resume from DIR/"; }
  grep -q "resumed from .* at step 3" "$work/resume.log" || fail "train --checkpoint-in DIR/ did not resume from DIR.state"
  convert --from hf "$work/one" --to llmc "$work/one.converted.bin"
  same_bytes "one rank bf16 --checkpoint-format hf, converted, vs the llm.c file of the same run" \
    "$work/one.bin" "$work/one.converted.bin"
}

# Rewrites DIR/model.safetensors with its header changed by MUTATION (python, on `h`: name ->
# entry, and `data`: the data bytes) into NEW.
mutate() {  # DIR NEW MUTATION
  rm -rf "$2" && cp -r "$1" "$2"
  python3 "$here/mutate_safetensors.py" "$2/model.safetensors" "$3"
}

errors() {
  fixture gpt2 "$work/good" "$work/good.bin" --vocab 200
  local out=$work/out.bin cases=(
    "out-of-range|k = by_offset[-1]; h[k]['data_offsets'] = [x + 64 for x in h[k]['data_offsets']]"
    "overlap|k = by_offset[3]; h[k]['data_offsets'] = [x - 2 for x in h[k]['data_offsets']]"
    "dtype|h[by_offset[0]]['dtype'] = 'F64'"
    "shape|h['h.0.attn.c_attn.weight']['shape'] = [96, 32]"
    "span|h['ln_f.bias']['shape'] = [31]"
    "missing|k = by_offset[-1]; b = h[k]['data_offsets'][0]; del h[k]; data = data[:b]"
    "unknown|h['h.0.attn.extra'] = h.pop('h.0.attn.bias')"
    "header-too-large|n_override = 200 << 20"
    "header-past-end|n_override = len(raw)"
    "bad-json|h = b'{\"wte.weight\": [1, 2'"
    "truncated|data = data[:-10]"
  )
  for c in "${cases[@]}"; do
    local name=${c%%|*} mutation="n_override = None; ${c#*|}"
    mutate "$work/good" "$work/bad-$name" "$mutation"
    expect_bad_input "convert: $name" "$starzero" convert --from hf "$work/bad-$name" --to llmc "$out"
  done
  # config.json contradicting the tensors, or invalid.
  rm -rf "$work/bad-config" && cp -r "$work/good" "$work/bad-config"
  sed -i 's/"n_embd": 32/"n_embd": 64/' "$work/bad-config/config.json"
  expect_bad_input "config n_embd contradicts the tensors" "$starzero" convert --from hf "$work/bad-config" --to llmc "$out"
  expect_bad_input "eval: config contradicts" "$starzero" eval --checkpoint "$work/bad-config" --data "$work/data.txt" \
    --batch 2 --seq 16 "${cpu[@]}"
  sed -i 's/"n_embd": 64/"n_embd": "wide"/' "$work/bad-config/config.json"
  expect_bad_input "config n_embd not a number" "$starzero" convert --from hf "$work/bad-config" --to llmc "$out"
  sed -i 's/"model_type": "gpt2"/"model_type": "bert"/' "$work/good/config.json"
  expect_bad_input "model_type bert" "$starzero" convert --from hf "$work/good" --to llmc "$out"
  fixture gpt2 "$work/good256" "$work/good256.bin"
  mutate "$work/good256" "$work/bad-missing256" "n_override = None; k = by_offset[-1]; b = h[k]['data_offsets'][0]; del h[k]; data = data[:b]"
  expect_bad_input "train: a missing tensor" "$starzero" train --checkpoint-in "$work/bad-missing256" \
    --data "$work/data.txt" --steps 1 "${cpu[@]}"
  expect_bad_input "train: --layers contradicts config.json" "$starzero" train --checkpoint-in "$work/good256" \
    --layers 3 --data "$work/data.txt" --steps 1 "${cpu[@]}"
  fixture llama "$work/llama" "$work/llama.bin"
  sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$work/llama/config.json"
  expect_bad_input "Llama config num_key_value_heads contradicts k_proj" "$starzero" eval --checkpoint "$work/llama" \
    --data "$work/data.txt" --batch 2 --seq 16 "${cpu[@]}"
  sed -i 's/"num_key_value_heads": 4/"num_key_value_heads": 3/' "$work/llama/config.json"
  expect_bad_input "Llama config heads not a multiple of KV heads" "$starzero" convert --from hf "$work/llama" \
    --to llmc "$out"
  # A sharded folder whose index names a file that is not there.
  fixture gpt2 "$work/shards" "$work/shards.bin" --sharded
  rm "$work/shards/model-00002-of-00002.safetensors"
  expect_bad_input "index names a missing shard" "$starzero" convert --from hf "$work/shards" --to llmc "$out"
  expect_bad_input "no such folder" "$starzero" convert --from hf "$work/none" --to llmc "$out"
  expect_bad_input "--from hf with a file" "$starzero" convert --from hf "$work/good.bin" --to llmc "$out"
  expect_bad_input "--checkpoint-format xyz" "$starzero" train --checkpoint-out "$work/x" --checkpoint-format xyz
  expect_bad_input "--checkpoint-format hf for the mlp" "$starzero" train --model mlp --steps 1 \
    --checkpoint-out "$work/x" --checkpoint-format hf "${cpu[@]}"
  [ ! -e "$out" ] || fail "a failed conversion left $out behind"
}

case $part in
  foreign) foreign ;;
  roundtrip) roundtrip ;;
  zero) zero ;;
  errors) errors ;;
  *) echo "usage: hf_test.sh STARZERO foreign|roundtrip|zero|errors" >&2; exit 2 ;;
esac
finish "hf $part: ok"
