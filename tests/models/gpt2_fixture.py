#!/usr/bin/env python3
"""From tests/models/fixtures/gpt2_vectors.json (scripts/make-gpt2-fixture.py: part of GPT-2's real
vocabulary and merges, and texts with their encodings by GPT-2's own tokenizer), writes DIR/gpt2.json,
a tokenizer.json with GPT-2's 50257 ids (the ids the fixture lacks filled with tokens no merge
makes; <|endoftext|> 50256, added), and DIR/gpt2.cases for tokenizer_encode_check.
Usage: gpt2_fixture.py FIXTURE DIR"""
import json
import sys

fixture, out = json.load(open(sys.argv[1])), sys.argv[2]
vocab = dict(fixture["vocab"])
taken = set(vocab.values())
for i in range(50256):
    if i not in taken:
        vocab["\u0100" + str(i)] = i  # byte 0 and digits: no merge of the fixture makes it
doc = {"version": "1.0", "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "decoder": {"type": "ByteLevel"},
       "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
       "model": {"type": "BPE", "vocab": {**vocab, "<|endoftext|>": 50256}, "merges": fixture["merges"]}}
json.dump(doc, open(f"{out}/gpt2.json", "w"), ensure_ascii=False)
with open(f"{out}/gpt2.cases", "w") as f:
    for v in fixture["vectors"]:
        f.write(json.dumps({"hex": v["text"].encode().hex(), "ids": v["ids"]}) + "\n")
