#!/usr/bin/env python3
"""The fixtures and checks of finetune_mask_test.sh, each a subcommand: check_finetune_mask.py NAME ARGS...
exits non-zero when a check fails.

The data: prompt/completion records whose prompt is random lowercase letters ending in "?" and whose
completion is always COMPLETION. Only the completion follows from what comes before it ("?" starts it,
each of its tokens fixes the next, "." is followed by the end-of-text), so a model that learns only
completions can bring their loss to 0, while the prompts' letters stay unpredictable.
"""
import json
import math
import os
import random
import struct
import sys

COMPLETION = " => yes."
OTHER = " => no."  # held-out records of check_finetune_mask.py records ... mixed
LETTERS = "abcdfghijk"  # no "e", "s", "y": the completion's merges never meet a prompt's
# Merges in rank order: two that prompts use, the rest make the completion 3 tokens: " =>", " yes", ".".
MERGES = [("a", "b"), ("c", "d"), ("e", "s"), ("Ġ", "y"), ("Ġy", "es"), ("=", ">"), ("Ġ", "=>")]
EOS = "<|endoftext|>"


def byte_characters():
    """GPT-2's bytes_to_unicode: byte -> the printable character standing for it (written out here
    from its definition, not taken from the program)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def vocabulary():
    """token string -> id: the 256 bytes (id = byte value), the merges' results, then <|endoftext|>."""
    chars = byte_characters()
    vocab = {chars[b]: b for b in range(256)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    vocab[EOS] = len(vocab)
    return vocab


def tokenizer():
    """FILE: writes a GPT-2-style byte-level BPE tokenizer.json with vocabulary() (264 ids, <|endoftext|>
    the last) and MERGES; no begin-of-text (ByteLevel post-processor)."""
    vocab = vocabulary()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {"version": "1.0", "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level,
           "decoder": {"type": "ByteLevel"},
           "added_tokens": [{"id": vocab[EOS], "content": EOS, "special": True}],
           "model": {"type": "BPE", "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]}}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, ensure_ascii=False)


def records():
    """FILE SEED COUNT [mixed]: COUNT records {"prompt": 4 to 12 random LETTERS + "?", "completion":
    COMPLETION}. mixed: the first two thirds with prompts of 2 to 4 letters, the rest with prompts of 16 to
    24 letters and the completion OTHER, which the model never sees in training: batches whose counted
    targets are few and hard, and batches whose counted targets are many and easy, so that the mean over
    the counted targets is far from the mean of the batches' means."""
    path, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mixed = sys.argv[4:] == ["mixed"]
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(count):
            short = i < count * 2 // 3
            low, high = ((2, 4) if short else (16, 24)) if mixed else (4, 12)
            prompt = "".join(rng.choice(LETTERS) for _ in range(rng.randint(low, high))) + "?"
            completion = OTHER if mixed and not short else COMPLETION
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def read_shard(path, magic, version, code):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == magic and header[1] == version, (path, header[:3])
    count = header[2]
    assert len(data) == 1024 + count * struct.calcsize(code), (path, len(data), count)
    return list(struct.unpack(f"<{count}{code}", data[1024:]))


def stream():
    """DIR JSONL: DIR holds one GPT-2 token shard train_000000.bin and its .mask, and they are JSONL's
    records in order, each decoded by vocabulary(): the tokens of mask 0 spell the prompt, those of mask 1
    the completion and then <|endoftext|>. The counts are printed."""
    out, jsonl = sys.argv[1], sys.argv[2]
    assert sorted(os.listdir(out)) == ["train_000000.bin", "train_000000.mask"], os.listdir(out)
    tokens = read_shard(os.path.join(out, "train_000000.bin"), 20240520, 1, "H")
    counted = read_shard(os.path.join(out, "train_000000.mask"), 20261207, 1, "B")
    assert len(tokens) == len(counted)
    vocab = vocabulary()
    eos = vocab[EOS]
    unicode_byte = {c: b for b, c in byte_characters().items()}
    text = {i: bytes(unicode_byte[c] for c in s) for s, i in vocab.items() if s != EOS}
    want = [json.loads(line) for line in open(jsonl) if line.strip()]
    i = 0
    for n, r in enumerate(want):
        prompt, completion = b"", b""
        while counted[i] == 0:
            prompt += text[tokens[i]]
            i += 1
        while tokens[i] != eos:
            assert counted[i] == 1, (n, i)
            completion += text[tokens[i]]
            i += 1
        assert counted[i] == 1, (n, i, "end-of-text not counted")
        i += 1
        assert (prompt.decode(), completion.decode()) == (r["prompt"], r["completion"]), (n, prompt, completion)
    assert i == len(tokens), (i, len(tokens))
    print(f"  {len(want)} records -> {len(tokens)} tokens, {sum(counted)} counted")


def below():
    """WHAT VALUE LIMIT: VALUE < LIMIT."""
    what, value, limit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    assert math.isfinite(value) and value < limit, f"{what}: {value} is not below {limit}"


def above():
    """WHAT VALUE LIMIT: VALUE > LIMIT."""
    what, value, limit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    assert math.isfinite(value) and value > limit, f"{what}: {value} is not above {limit}"


def apart():
    """WHAT HIGH LOW MARGIN: HIGH > LOW + MARGIN."""
    what, high, low, margin = sys.argv[1], *(float(a) for a in sys.argv[2:5])
    assert math.isfinite(high) and math.isfinite(low) and high > low + margin, \
        f"{what}: {high} is not more than {margin} above {low}"


def close():
    """WHAT GOT WANT RTOL ATOL: |GOT - WANT| <= RTOL * |WANT| + ATOL."""
    what, got, want, rtol, atol = sys.argv[1], *(float(a) for a in sys.argv[2:6])
    assert math.isfinite(got) and abs(got - want) <= rtol * abs(want) + atol, \
        f"{what}: {got} differs from {want} by {abs(got - want):.3g} (allowed {rtol * abs(want) + atol:.3g})"


CHECKS = {"tokenizer": tokenizer, "records": records, "stream": stream, "below": below, "above": above,
          "apart": apart, "close": close}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    check()
