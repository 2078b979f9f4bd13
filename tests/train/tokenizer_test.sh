#!/usr/bin/env bash
# --tokenizer FILE (models/tokenizer.hpp): a GPT token model's sample printed as text.
# - Without a tokenizer a token model prints no sample (it has no text to show).
# - With a Hugging Face tokenizer.json (written here with Python's json: 50257 byte-level entries,
#   the GPT-2 table's 256 bytes first, then " w<id>" pieces, <|endoftext|> as an added token) or
#   the same vocabulary as llm.c's gpt2_tokenizer.bin, the sample line is those pieces' text: it
#   decodes only to what the vocabulary spells (ids in range), and both files give the same sample.
# - Text --data with a tokenizer.json trains GPT and Llama 3 in its vocabulary (encoding itself:
#   tests/models/tokenizer_encode_test.sh); eval reads text with it; --prompt is encoded.
# - A bad tokenizer file, one too small for the data's vocabulary, --prompt or text with a
#   tokenizer that cannot encode, and a tokenizer whose vocabulary is not the checkpoint's
#   exit 2 with one line.
# Usage: tokenizer_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

python3 "$here/check_tokenizer.py" write-fixtures "$work"

common=(train --data "$work/tokens.bin" --preset tiny --layers 1 --channels 32 --heads 2 --max-seq 16 --seq 16
        --batch 4 --steps 20 --lr 1e-2 --warmup 0 --val-every 0 --sample-tokens 12 --cuda-workers 0 --seed 7)
"$starzero" "${common[@]}" > "$work/none.log" 2>&1 || { tail "$work/none.log"; fail "run without a tokenizer"; }
if grep -q '^sample: ' "$work/none.log"; then fail "a token model printed a sample without a tokenizer"; fi
for t in tokenizer.json gpt2_tokenizer.bin; do
  "$starzero" "${common[@]}" --tokenizer "$work/$t" > "$work/$t.log" 2>&1 || { tail "$work/$t.log"; fail "--tokenizer $t"; continue; }
  python3 "$here/check_tokenizer.py" sample-text "$work/$t.log" || fail "--tokenizer $t: the sample is not the vocabulary's text"
done
[ "$(grep '^sample: ' "$work/tokenizer.json.log")" = "$(grep '^sample: ' "$work/gpt2_tokenizer.bin.log")" ] \
  || fail "the two tokenizer files decode the same sample differently"
expect_bad_input "a tokenizer that is not one" "$starzero" "${common[@]}" --steps 1 --tokenizer "$work/tokens.bin"
expect_bad_input "a tokenizer too small for the data" "$starzero" "${common[@]}" --steps 1 --tokenizer "$work/small.json"
# That tokenizer.json has no pre_tokenizer, llm.c's file no merges: neither encodes a prompt.
expect_bad_input "--prompt with a tokenizer that cannot encode" "$starzero" "${common[@]}" --steps 1 \
  --tokenizer "$work/tokenizer.json" --prompt hello
expect_bad_input "--prompt with llm.c's tokenizer" "$starzero" "${common[@]}" --steps 1 \
  --tokenizer "$work/gpt2_tokenizer.bin" --prompt hello

# Text --data encoded by a tokenizer.json (GPT-2's and Llama 3's layouts, merges learnt by
# tests/models/bpe_reference.py, which needs the `regex` module): the model's vocabulary is the
# tokenizer's, so the first loss is near ln(vocab), not ln 256; the loss falls; --prompt is
# encoded; eval reads the text with the same tokenizer.
python=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import regex' 2> /dev/null; then python=$p; break; fi
done
[ -n "$python" ] || { fail "no python3 with the regex module (apt-get install python3-regex)"; finish ""; }
"$python" "$here/../models/bpe_reference.py" "$work" 1
write_words "$work/words.txt" 3 6000
vocab_of() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(len(d["model"]["vocab"]) + len(d["added_tokens"]))' "$1"; }
text=(train --data "$work/words.txt" --max-seq 16 --seq 16 --batch 4 --steps 40 --lr 1e-2 --warmup 0 --val-every 0
      --sample-tokens 12 --cuda-workers 0 --seed 7 --precision fp32)
check_text_run() {  # LOG TOKENIZER
  python3 "$here/check_tokenizer.py" text-run "$1" "$(vocab_of "$2")" || fail "$1: not trained on the tokenizer's vocabulary"
}
"$starzero" "${text[@]}" --layers 1 --channels 32 --heads 2 --tokenizer "$work/gpt2.json" --prompt "the of and" \
  --checkpoint-out "$work/text.bin" > "$work/text.log" 2>&1 || { tail "$work/text.log"; fail "GPT on text with tokenizer.json"; }
check_text_run "$work/text.log" "$work/gpt2.json"
"$starzero" "${text[@]}" --model llama3 --preset llama3-tiny --layers 1 --tokenizer "$work/llama3.json" \
  --prompt "<|begin_of_text|>the" > "$work/llama.log" 2>&1 || { tail "$work/llama.log"; fail "Llama on text with tokenizer.json"; }
check_text_run "$work/llama.log" "$work/llama3.json"
"$starzero" eval --checkpoint "$work/text.bin" --data "$work/words.txt" --tokenizer "$work/gpt2.json" --batch 4 --seq 16 \
  --cuda-workers 0 > "$work/eval.log" 2>&1 || { tail "$work/eval.log"; fail "eval of text with tokenizer.json"; }
# GPT-2's 50257 ids (part of its real merges: tests/models/gpt2_fixture.py) size a new model's vocabulary.
mkdir "$work/real"
python3 "$here/../models/gpt2_fixture.py" "$here/../models/fixtures/gpt2_vectors.json" "$work/real"
"$starzero" "${text[@]}" --steps 2 --layers 1 --channels 32 --heads 2 --tokenizer "$work/real/gpt2.json" \
  --prompt "Hello world" > "$work/real.log" 2>&1 || { tail "$work/real.log"; fail "GPT on text with GPT-2's ids"; }
grep -q ' V=50257 Vp=50304 ' "$work/real.log" || fail "GPT-2's tokenizer did not make a 50257-token model"
expect_bad_input "eval with a tokenizer of another vocabulary" "$starzero" eval --checkpoint "$work/text.bin" \
  --data "$work/words.txt" --tokenizer "$work/llama3.json" --batch 4 --seq 16 --cuda-workers 0
expect_bad_input "text data with llm.c's tokenizer" "$starzero" "${text[@]}" --steps 1 --tokenizer "$work/gpt2_tokenizer.bin"
finish "tokenizer: samples of a token model print as text; text encodes with tokenizer.json"
