#!/usr/bin/env python3
"""An independent byte-level BPE tokenizer, to check models/tokenizer.cpp's encoder against.

Writes into DIR tokenizer.json fixtures, in Hugging Face's format, with merges learnt here from a
small corpus, and for each a cases file of random texts with their encodings by this reference:
- gpt2.json: GPT-2's layout (ByteLevel pre_tokenizer with its regex, merges as "a b" strings,
  <|endoftext|> added last);
- llama3.json: Llama 3's layout (a Sequence of a Split with the cl100k regex and a ByteLevel
  without, merges as [a, b] pairs, ignore_merges, <|begin_of_text|> and other added tokens).
The reference cuts text with the third-party `regex` module (which has \\p{L} and \\p{N}) and the
patterns as the files state them, splits at added tokens first (leftmost, longest), and merges as
GPT-2's encoder.py does (the lowest-ranked pair, every occurrence, until none is left).
Usage: bpe_reference.py DIR [CASES_PER_FIXTURE]
"""
import json
import random
import sys

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHAR = bytes_to_unicode()


def show(token):  # bytes -> the vocabulary's string
    return "".join(BYTE_CHAR[b] for b in token)


def learn_merges(corpus, pattern, count):
    """BPE training: merge the most frequent adjacent pair within the pre-token pieces."""
    words = {}
    for piece in regex.findall(pattern, corpus):
        key = tuple(bytes([b]) for b in piece.encode())
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(count):
        pairs = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        words = {merge_word(w, best): n for w, n in words.items()}
    return merges


def merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


class Reference:
    def __init__(self, pattern, merges, vocab, added, ignore_merges):
        self.pattern, self.vocab, self.added, self.ignore_merges = pattern, vocab, added, ignore_merges
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}

    def bpe(self, piece):
        if self.ignore_merges and piece in self.vocab:
            return [self.vocab[piece]]
        word = tuple(bytes([b]) for b in piece)
        while len(word) > 1:
            pairs = [p for p in zip(word, word[1:]) if p in self.ranks]
            if not pairs:
                break
            word = merge_word(word, min(pairs, key=lambda p: self.ranks[p]))
        return [self.vocab[t] for t in word]

    def encode(self, text):
        ids, plain, i = [], "", 0
        while i < len(text):
            hit = max((t for t in self.added if text.startswith(t, i)), key=len, default=None)
            if hit is None:
                plain += text[i]
                i += 1
                continue
            ids += self.encode_plain(plain) + [self.added[hit]]
            plain, i = "", i + len(hit)
        return ids + self.encode_plain(plain)

    def encode_plain(self, text):
        return [i for piece in regex.findall(self.pattern, text) for i in self.bpe(piece.encode())]


# Pieces random texts are made of: ASCII words and capitals, digits, contractions in both cases,
# runs of spaces, tabs and newlines (\n, \r\n), punctuation, Latin-1 and other scripts' letters,
# numbers of categories Nd, Nl and No, Unicode spaces, symbols and emoji (neither L nor N).
ATOMS = ["the", "The", " quick", "brown", "fox", "HELLO", "world", "don't", "I'M", "we'LL", "you're", "'ve", "'d",
         "'x", "''", "0", "7", "42", "12345", "3.14", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "!", "?!",
         "...", ",", "(", ")", "{", "}", "<", ">", "<|", "|>", "=", "-", "_", "#", "/*", "café", "naïve", "Ærø",
         "straße", "Ελληνικά", "русский", "日本語", "中文", "한국어", "عربي", "٣٤٥", "²", "Ⅻ", "½", "\u00a0",
         "\u3000", "\u2003", "€", "©", "😀", "👍🏽", "∑", "→", "\u0301", "ǅ"]


def random_text(rng, specials):
    atoms = ATOMS + specials
    return "".join(rng.choice(atoms) for _ in range(rng.randint(0, 40)))


def write_fixture(path, pattern, merges, specials, pair_merges, llama):
    pieces = [bytes([b]) for b in range(256)] + [a + b for a, b in merges]
    vocab = {}
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    added = {t: len(vocab) + i for i, t in enumerate(specials)}
    model = {"type": "BPE", "vocab": {show(p): i for p, i in vocab.items()},
             "merges": [[show(a), show(b)] if pair_merges else show(a) + " " + show(b) for a, b in merges]}
    if llama:
        model["ignore_merges"] = True
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    else:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {"version": "1.0", "normalizer": None, "pre_tokenizer": pre, "decoder": {"type": "ByteLevel"},
           "added_tokens": [{"id": i, "content": t, "special": True} for t, i in added.items()], "model": model}
    with open(path, "w") as f:
        json.dump(doc, f, ensure_ascii=False)
    return Reference(pattern, merges, vocab, added, llama)


def main():
    out, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 400
    rng = random.Random(30)
    fixtures = [("gpt2", GPT2_PATTERN, ["<|endoftext|>"], False),
                ("llama3", LLAMA3_PATTERN, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eot|>"], True)]
    for name, pattern, specials, llama in fixtures:
        corpus = "".join(random_text(rng, []) for _ in range(300))
        ref = write_fixture(f"{out}/{name}.json", pattern, learn_merges(corpus, pattern, 400), specials, llama, llama)
        with open(f"{out}/{name}.cases", "w") as f:
            for i in range(count):
                text = random_text(rng, specials) if i else ""
                f.write(json.dumps({"hex": text.encode().hex(), "ids": ref.encode(text)}) + "\n")


if __name__ == "__main__":
    main()
