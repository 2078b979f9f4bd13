#!/usr/bin/env bash
# `starzero tokenize`: JSONL records to llm.c token shards with mask shards. Tokenizers of Llama 3's
# and GPT-2's layouts with merges learnt by tests/models/bpe_reference.py, random records, and the
# shards checked against that reference's tokens, the packing rule and the formats' headers
# (check_tokenize.py); the counts printed. Bad flags and a bad record: exit 2 and one line, the
# shards already in the folder left as they were; --bad-records skip goes on.
# Usage: tokenize_cli_test.sh PATH/TO/starzero
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
check() { python3 "$here/check_tokenize.py" "$@"; }

check tokenizers "$work"
check records "$work/pc.jsonl" prompt 1 150
check records "$work/text.jsonl" text 2 150

# Llama 3, prompt/completion: uint32 shards, BOS first, the prompt's tokens not counted.
"$bin" tokenize --data "$work/pc.jsonl" --tokenizer "$work/llama3.json" --out "$work/llama" --shard-tokens 1000 \
  --seq 40 > "$work/llama.log" 2>&1 || { cat "$work/llama.log"; fail "tokenize (Llama 3, prompt/completion)"; }
check shards "$work/llama" llama3 "$work/pc.jsonl" completion 1000 40 split "$work/llama.log" \
  || fail "Llama 3 shards"
grep -q "(prompt/completion records) -> $work/llama: .* shards, Llama 3 (uint32) format" "$work/llama.log" \
  || fail "Llama 3: no summary line"
"$bin" tokenize --data "$work/pc.jsonl" --tokenizer "$work/llama3.json" --out "$work/llama-all" --loss-on all \
  > "$work/llama-all.log" 2>&1 || { cat "$work/llama-all.log"; fail "tokenize --loss-on all"; }
check shards "$work/llama-all" llama3 "$work/pc.jsonl" all 100000000 0 split "$work/llama-all.log" \
  || fail "Llama 3 shards, --loss-on all"

# GPT-2, text: uint16 shards, no BOS; long records dropped.
"$bin" tokenize --data "$work/text.jsonl" --tokenizer "$work/gpt2.json" --out "$work/gpt2" --shard-tokens 500 \
  --seq 24 --long-records drop > "$work/gpt2.log" 2>&1 || { cat "$work/gpt2.log"; fail "tokenize (GPT-2, text)"; }
check shards "$work/gpt2" gpt2 "$work/text.jsonl" completion 500 24 drop "$work/gpt2.log" || fail "GPT-2 shards"
grep -q "GPT-2 (uint16) format" "$work/gpt2.log" || fail "GPT-2: no summary line"

# Bad flags and files: exit 2, one line.
t=(--tokenizer "$work/gpt2.json")
expect_bad_input "no --data" "$bin" tokenize "${t[@]}" --out "$work/x"
expect_bad_input "no --out" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl"
expect_bad_input "no --tokenizer" "$bin" tokenize --data "$work/text.jsonl" --out "$work/x"
expect_bad_input "--loss-on prompt" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --loss-on prompt
expect_bad_input "--long-records cut" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --long-records cut
expect_bad_input "--bad-records warn" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --bad-records warn
expect_bad_input "--long-records drop without --seq" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" \
  --long-records drop
expect_bad_input "--seq 0" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --seq 0
expect_bad_input "--shard-tokens 0" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --shard-tokens 0
expect_bad_input "--shard-tokens 3G" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --shard-tokens 3G
expect_bad_input "unknown flag" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/x" --pack
expect_bad_input "missing data" "$bin" tokenize "${t[@]}" --data "$work/absent.jsonl" --out "$work/x"
expect_bad_input "missing tokenizer" "$bin" tokenize --tokenizer "$work/absent.json" --data "$work/text.jsonl" --out "$work/x"
expect_bad_input "--out a file" "$bin" tokenize "${t[@]}" --data "$work/text.jsonl" --out "$work/text.jsonl"
[ ! -e "$work/x" ] || fail "a refused command created its --out folder"

# A bad record: its file:line and reason, the folder's shards as they were.
cp "$work/text.jsonl" "$work/bad.jsonl"
printf '{"text": "ok"}\n{"prompt": "a"}\n' >> "$work/bad.jsonl"
lines=$(wc -l < "$work/bad.jsonl")
before=$(cat "$work/gpt2"/* | cksum)
expect_bad_input "a bad record" "$bin" tokenize "${t[@]}" --data "$work/bad.jsonl" --out "$work/gpt2" --shard-tokens 10
[ "$(cat "$work/err")" = "starzero tokenize: error: $work/bad.jsonl:$lines: \"prompt\" without \"completion\"" ] \
  || fail "bad record message: $(cat "$work/err")"
[ "$(cat "$work/gpt2"/* | cksum)" = "$before" ] && [ "$(ls -A "$work/gpt2" | wc -l)" = "$(ls "$work/gpt2" | wc -l)" ] \
  || fail "a failed run changed the folder"
# Skipped: counted and printed, exit 0.
"$bin" tokenize "${t[@]}" --data "$work/bad.jsonl" --out "$work/skip" --bad-records skip > "$work/skip.log" 2> "$work/skip.err" \
  || { cat "$work/skip.err"; fail "--bad-records skip"; }
[ "$(cat "$work/skip.err")" = "starzero tokenize: skipped $work/bad.jsonl:$lines: \"prompt\" without \"completion\"" ] \
  || fail "skip message: $(cat "$work/skip.err")"
grep -q "records 152: kept 151, split 0, dropped 0, bad 1" "$work/skip.log" || fail "skip counts: $(cat "$work/skip.log")"

"$bin" tokenize --help > "$work/help" || fail "--help"
grep -q "^usage: starzero tokenize --data FILE.jsonl" "$work/help" || fail "--help's usage line"
finish "tokenize_cli: Llama 3 and GPT-2 shards as the reference's, masks, counts; bad input one line, exit 2"
