#!/usr/bin/env bash
# Tokenizer::encode (models/tokenizer.hpp) against tests/models/bpe_reference.py, an independent BPE in
# Python: a GPT-2-style and a Llama-3-style tokenizer.json with merges learnt there, and random
# texts (multi-byte letters, digits, contractions, runs of whitespace, newlines, added tokens)
# that must encode to the reference's ids and decode back to themselves. And GPT-2's real
# tokenizer: texts with their ids from OpenAI's encoder ("Hello world" is 15496 995), and the part
# of GPT-2's vocabulary and merges they use (tests/models/fixtures/gpt2_vectors.json, made by
# scripts/make-gpt2-fixture.py), in a tokenizer.json of GPT-2's 50257 ids.
# Usage: tokenizer_encode_test.sh TOKENIZER_ENCODE_CHECK
set -euo pipefail
check=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mkdir "$work/real"
python3 "$here/gpt2_fixture.py" "$here/fixtures/gpt2_vectors.json" "$work/real"
"$check" "$work/real/gpt2.json" "$work/real/gpt2.cases" || fail "GPT-2's real encodings differ"

# The reference needs the `regex` module (Debian: python3-regex, installed by scripts/bootstrap.sh).
python=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import regex' 2> /dev/null; then python=$p; break; fi
done
[ -n "$python" ] || { echo "FAIL: no python3 with the regex module (apt-get install python3-regex)"; exit 1; }
"$python" "$here/bpe_reference.py" "$work" 400
for fixture in gpt2 llama3; do
  "$check" "$work/$fixture.json" "$work/$fixture.cases" || fail "$fixture: encodings differ from the reference"
done
finish "tokenizer_encode: GPT-2's vectors and both fixtures encode as their references"
