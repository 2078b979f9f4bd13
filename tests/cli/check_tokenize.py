#!/usr/bin/env python3
"""The checks of tokenize_cli_test.sh, each a subcommand: check_tokenize.py NAME ARGS... exits non-zero
when it fails. The expected tokens come from tests/models/bpe_reference.py, an independent byte-level BPE
(it needs the `regex` module), not from the program.
"""
import json
import os
import random
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import bpe_reference as bpe  # noqa: E402

# Per layout: split pattern, first special id, the specials (end-of-text second), ignore_merges.
LAYOUTS = {
    "gpt2": (bpe.GPT2_PATTERN, 50256, ["<|endoftext|>"], False),
    "llama3": (bpe.LLAMA3_PATTERN, 128000,
               ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(254)], True),
}


def layout(name):
    """The reference encoder, its vocabulary's size, BOS (None for GPT-2) and EOS ids of a layout."""
    pattern, first, specials, llama = LAYOUTS[name]
    rng = random.Random(39)
    corpus = "".join(bpe.random_text(rng, []) for _ in range(200))
    merges = bpe.learn_merges(corpus, pattern, 300)
    vocab = {}
    for p in [bytes([b]) for b in range(256)] + [a + b for a, b in merges]:
        vocab.setdefault(p, len(vocab))
    added = {t: first + i for i, t in enumerate(specials)}
    ref = bpe.Reference(pattern, merges, vocab, added, llama)
    eos = added["<|end_of_text|>" if llama else "<|endoftext|>"]
    return ref, merges, first + len(specials), (added["<|begin_of_text|>"] if llama else None), eos


def tokenizers():
    """DIR: writes DIR/gpt2.json and DIR/llama3.json, tokenizer.json files of GPT-2's and Llama 3's
    layouts (vocabulary sizes 50257 and 128256, special ids, pre-tokenizers, post-processors), with
    merges learnt by the reference; the ids no merge makes are fillers no text encodes to."""
    out = sys.argv[1]
    for name in LAYOUTS:
        pattern, first, specials, llama = LAYOUTS[name]
        ref, merges, size, _, _ = layout(name)
        vocab = {bpe.show(p): i for p, i in ref.vocab.items()}
        for i in range(len(vocab), first):
            vocab["\u0100" + str(i)] = i
        added = [{"id": i, "content": t, "special": True} for t, i in ref.added.items()]
        model = {"type": "BPE", "vocab": vocab, "merges": [[bpe.show(a), bpe.show(b)] for a, b in merges]}
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": not llama}
        if llama:
            model["ignore_merges"] = True
            pre = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, byte_level]}
            bos = {"id": "<|begin_of_text|>", "type_id": 0}
            post = {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": bos}, {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": bos}, {"Sequence": {"id": "A", "type_id": 0}},
                          {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                          {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [ref.added["<|begin_of_text|>"]],
                                                          "tokens": ["<|begin_of_text|>"]}}}]}
        else:
            pre, post = byte_level, byte_level
            vocab["<|endoftext|>"] = first
        assert size == len(vocab) + sum(1 for t in ref.added if t not in vocab)
        doc = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": pre,
               "post_processor": post, "decoder": {"type": "ByteLevel"}, "model": model}
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(doc, f, ensure_ascii=False)


def records():
    """FILE KIND SEED COUNT: COUNT random records of KIND (text or prompt; some prompts empty) of the
    reference's random pieces (Unicode, digits, whitespace runs), as JSON escapes or UTF-8, some with an
    extra key, and blank lines between some."""
    path, kind, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(count):
            text = lambda: "".join(rng.choice(bpe.ATOMS) for _ in range(rng.randint(1, 30)))  # noqa: E731
            record = {"text": text()} if kind == "text" else {"prompt": text() if i % 7 else "", "completion": text()}
            if i % 11 == 3:
                record["id"] = i
            f.write(json.dumps(record, ensure_ascii=i % 2 == 0) + "\n")
            if i % 13 == 5:
                f.write("\n")


def expected_stream(name, jsonl, loss_on, seq, long_records):
    """The documents of JSONL by the reference: [(tokens, counted)] kept, and the number dropped/split."""
    ref, _, _, bos, eos = layout(name)
    docs, split, dropped = [], 0, 0
    for line in open(jsonl, encoding="utf-8"):
        if not line.strip():
            continue
        r = json.loads(line)
        before = [bos] if bos is not None else []
        if "text" in r:
            body, mask = ref.encode(r["text"]), None
            mask = [1] * len(body)
        else:
            p, c = ref.encode(r["prompt"]), ref.encode(r["completion"])
            body, mask = p + c, [int(loss_on == "all")] * len(p) + [1] * len(c)
        tokens, counted = before + body + [eos], [0] * len(before) + mask + [1]
        if seq and len(tokens) > seq + 1:
            if long_records == "drop":
                dropped += 1
                continue
            split += 1
        docs.append((tokens, counted))
    return docs, split, dropped


def read_shard(path, magic, version, elem):
    data = open(path, "rb").read()
    header = struct.unpack("256i", data[:1024])
    assert header[0] == magic and header[1] == version, (path, header[:3])
    assert all(h == 0 for h in header[3:]), path
    count = header[2]
    assert len(data) == 1024 + count * elem, (path, len(data), count)
    return list(struct.unpack(f"{count}{'H' if elem == 2 else 'I' if elem == 4 else 'B'}", data[1024:]))


def shards():
    """DIR LAYOUT JSONL LOSS_ON SHARD_TOKENS SEQ LONG LOG: DIR's train_NNNNNN.bin and .mask are the
    reference's documents, in the layout's format (GPT-2: magic 20240520 v1 uint16; Llama 3: 20240801
    v7 uint32), masks (20261207 v1) of the same counts, shards of whole documents up to SHARD_TOKENS
    (a longer document continues in the next ones); LOG's counts are those."""
    out, name, jsonl, loss_on, limit, seq, long_records, log = sys.argv[1:9]
    limit, seq = int(limit), int(seq)
    docs, split, dropped = expected_stream(name, jsonl, loss_on, seq, long_records)
    # The packing rule, derived here: a document goes into the current shard when it fits, else
    # starts a new one; full shards are cut at LIMIT.
    sizes, current = [], 0
    for tokens, _ in docs:
        if current and current + len(tokens) > limit:
            sizes.append(current)
            current = 0
        current += len(tokens)
        while current >= limit:
            sizes.append(limit)
            current -= limit
    if current:
        sizes.append(current)
    names = sorted(os.listdir(out))
    want_names = sorted(f"train_{i:06d}.{ext}" for i in range(len(sizes)) for ext in ("bin", "mask"))
    assert names == want_names, (names, want_names)
    magic, version, elem = (20240801, 7, 4) if name == "llama3" else (20240520, 1, 2)
    tokens, counted = [], []
    for i, size in enumerate(sizes):
        t = read_shard(os.path.join(out, f"train_{i:06d}.bin"), magic, version, elem)
        m = read_shard(os.path.join(out, f"train_{i:06d}.mask"), 20261207, 1, 1)
        assert len(t) == len(m) == size, (i, len(t), len(m), size)
        assert set(m) <= {0, 1}
        tokens += t
        counted += m
    want_tokens = [x for d in docs for x in d[0]]
    want_counted = [x for d in docs for x in d[1]]
    assert tokens == want_tokens, "tokens differ from the reference's"
    assert counted == want_counted, "masks differ from the reference's"
    text = open(log).read()
    records = sum(1 for line in open(jsonl) if line.strip())
    want = (f"records {records}: kept {len(docs)}, split {split}, dropped {dropped}, bad 0",
            f"tokens {len(want_tokens)}, counted {sum(want_counted)}")
    for w in want:
        assert w in text, (w, text)
    print(f"  {name}: {len(docs)} documents, {len(want_tokens)} tokens in {len(sizes)} shards, "
          f"{sum(want_counted)} counted, {split} split, {dropped} dropped")


CHECKS = {"tokenizers": tokenizers, "records": records, "shards": shards}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    check()
