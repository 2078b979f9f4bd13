#!/usr/bin/env python3
"""The checks of finetune_recipe_test.sh, each a subcommand: check_finetune_recipe.py NAME ARGS... exits
non-zero when it fails. Token counts come from tests/models/bpe_reference.py through
tests/cli/check_tokenize.py (an independent byte-level BPE and the JSONL document rule), not from the
program; the Hugging Face folder is read with Python's struct and json.
"""
import json
import os
import random
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import check_tokenize  # noqa: E402

NAMES = ["apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "rocket", "garden", "silver"]


def records():
    """FILE COUNT SEED: COUNT prompt/completion records whose completion follows from the prompt (the
    parity of its number, then its word), so that a few steps of fine-tuning lower the completion loss."""
    path, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            name, n = rng.choice(NAMES), rng.randint(10, 99)
            answer = "even" if n % 2 == 0 else "odd"
            f.write(json.dumps({"prompt": f"{name} {n}?", "completion": f" {answer}, {name}."}) + "\n")


def data_line():
    """LOG TRAIN HELD SEQ: the run's data line names TRAIN's prompt/completion records, none split, dropped
    or skipped, and the tokens and counted tokens of TRAIN and HELD that the reference makes of them
    (Llama 3's layout: begin-of-text, prompt, completion, end-of-text; the completion and the
    end-of-text counted)."""
    log, train, held, seq = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def counts(jsonl):
        docs, split, dropped = check_tokenize.expected_stream("llama3", jsonl, "completion", seq, "split")
        return len(docs), split, dropped, sum(len(t) for t, _ in docs), sum(sum(c) for _, c in docs)

    kept, split, dropped, tokens, counted = counts(train)
    records = sum(1 for line in open(train) if line.strip())
    assert kept == records and split == 0 and dropped == 0, (records, kept, split, dropped)
    held_tokens = counts(held)[3]
    want = (f"data: {os.path.basename(train)}: {kept} prompt/completion records (0 split, 0 dropped, "
            f"0 bad skipped), {tokens} tokens, {counted} counted: {tokens} training and {held_tokens} "
            f"validation tokens (vocabulary 128256)")
    lines = [line for line in open(log, errors="replace") if line.startswith("data:")]
    assert lines and lines[0].strip() == want, f"data line {lines[:1]}, want {want!r}"
    print(f"  data line: {kept} records, {tokens} tokens, {counted} counted, {held_tokens} held-out tokens")


def read_safetensors(path):
    """The header's tensors {name: (dtype, shape)}, after checking that they tile the data region."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    sizes = {"F32": 4, "BF16": 2, "F16": 2}
    offset = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        assert begin == offset and end - begin == count * sizes[t["dtype"]], (path, name, t)
        offset = end
    assert 8 + n + offset == len(data), (path, 8 + n + offset, len(data))
    return {name: (t["dtype"], t["shape"]) for name, t in header.items()}


SHAPE_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rope_theta",
              "rope_scaling"]


def hf_folder():
    """OUT ORIGINAL DTYPE: OUT is a Hugging Face Llama folder of ORIGINAL's model: config.json with
    ORIGINAL's shape fields, LlamaForCausalLM; model.safetensors whose tensors tile the file and have
    ORIGINAL's names and shapes, all of DTYPE."""
    out, original, dtype = sys.argv[1:4]
    got, want = (json.load(open(os.path.join(d, "config.json"))) for d in (out, original))
    for key in SHAPE_KEYS:
        assert got.get(key) == want.get(key), (key, got.get(key), want.get(key))
    assert got["architectures"] == ["LlamaForCausalLM"], got["architectures"]
    assert abs(got["rms_norm_eps"] - want["rms_norm_eps"]) < 1e-9, (got["rms_norm_eps"], want["rms_norm_eps"])
    tensors, reference = (read_safetensors(os.path.join(d, "model.safetensors")) for d in (out, original))
    assert sorted(tensors) == sorted(reference), sorted(set(tensors) ^ set(reference))
    for name, (kind, shape) in tensors.items():
        assert shape == reference[name][1] and kind == dtype, (name, kind, shape, reference[name])
    print(f"  {out}: a Llama folder of {len(tensors)} {dtype} tensors, the original's names and shapes")


def below():
    """A B WHAT: the loss A (after) is a number below B (before)."""
    after, before, what = sys.argv[1:4]
    assert re.fullmatch(r"[0-9.]+", after) and re.fullmatch(r"[0-9.]+", before), f"{what}: '{before}' -> '{after}'"
    assert float(after) < float(before), f"{what} did not fall: {before} -> {after}"
    print(f"  {what}: {before} -> {after}")


CHECKS = {"records": records, "data-line": data_line, "hf-folder": hf_folder, "below": below}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    try:
        check()
    except AssertionError as e:
        print(f"  {check.__name__}: {e}")
        sys.exit(1)
