#!/usr/bin/env python3
"""The checks of tokenizer_test.sh, each a subcommand: check_tokenizer.py NAME ARGS... exits non-zero when it fails.
"""
import json
import math
import random
import re
import struct
import sys


def write_fixtures():
    """WORK: writes a GPT-2-sized tokenizer.json (every id a piece " w<id>"), the same vocabulary as llm.c's gpt2_tokenizer.bin, a small.json and a token shard over a few ids."""
    work = sys.argv[1]
    # GPT-2's bytes_to_unicode, from its definition.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    byte_char = dict(zip(bs, map(chr, cs)))
    V = 50257
    pieces = [bytes([b]) for b in range(256)] + [b" w%d" % i for i in range(256, V - 1)] + [b"<|endoftext|>"]
    vocab = {"".join(byte_char[b] for b in p): i for i, p in enumerate(pieces[:-1])}
    doc = {"version": "1.0", "added_tokens": [{"id": V - 1, "content": "<|endoftext|>", "special": True}],
           "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    json.dump(doc, open(f"{work}/tokenizer.json", "w"), ensure_ascii=False)
    with open(f"{work}/gpt2_tokenizer.bin", "wb") as f:
        f.write(struct.pack("<256I", 20240328, 2, V, V - 1, *[0] * 252))
        for p in pieces:
            f.write(bytes([len(p)]) + p)
    json.dump({"model": {"type": "BPE", "vocab": {"a": 0}}}, open(f"{work}/small.json", "w"))
    # A token shard over a few ids, so a short run learns them.
    random.seed(5)
    tokens = [random.choice([300, 301, 302, 303, V - 1]) for _ in range(20000)]
    with open(f"{work}/tokens.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def sample_text():
    """LOG: the run printed one sample, the vocabulary's text of at most 12 tokens."""
    lines = [l[len("sample: "):].rstrip("\n") for l in open(sys.argv[1]) if l.startswith("sample: ")]
    assert len(lines) == 1, lines
    text = lines[0]
    print(f"  sample: {text!r}")
    # 12 tokens, each " w<id>", <|endoftext|>, or one byte (control bytes shown as spaces)
    pieces = re.findall(r" w\d+|<\|endoftext\|>", text)
    assert pieces and len(pieces) <= 12, pieces
    assert re.fullmatch(r"( w\d+|<\|endoftext\|>|[\s\S])*", text)
    assert all(256 <= int(p[2:]) < 50256 for p in pieces if p.startswith(" w")), pieces


def text_run():
    """LOG VOCAB: trained on the tokenizer's vocabulary: the first loss near ln(VOCAB), then falling, and a sample."""
    log = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
    losses = [float(x) for x in re.findall(r"step \d+/\d+ \| loss ([0-9.]+)", log)]
    vocab = int(sys.argv[2])
    print(f"  vocab {vocab}: ln {math.log(vocab):.3f}, losses {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert abs(losses[0] - math.log(vocab)) < 0.5, "first loss not near ln(vocab)"
    assert losses[-1] < losses[0] - 1, "the loss did not fall"
    assert re.search(r"^sample: ", log, re.M), "no sample"


CHECKS = {"write-fixtures": write_fixtures, "sample-text": sample_text, "text-run": text_run}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
