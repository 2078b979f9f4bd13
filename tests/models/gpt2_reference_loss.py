#!/usr/bin/env python3
"""An independent GPT-2 loss in pure Python (double precision, no numpy): the mean cross-entropy of an
llm.c fp32 checkpoint over the windows `starzero eval` reads from a token shard and its loss mask.

Written from llm.c's definition (train_gpt2.c), not from starzero's code:
  checkpoint  256 int32 header: [0] magic 20240326, [1] version 3 (fp32), [2] maxT, [3] V, [4] L, [5] NH,
              [6] C, [7] Vp; then the parameters as float32, llm.c's 16 tensors one after the other,
              per-layer ones layer-major (layer l's slice of each):
              wte [Vp,C] wpe [maxT,C] ln1w [L,C] ln1b [L,C] qkvw [L,3C,C] qkvb [L,3C] attprojw [L,C,C]
              attprojb [L,C] ln2w [L,C] ln2b [L,C] fcw [L,4C,C] fcb [L,4C] fcprojw [L,C,4C] fcprojb [L,C]
              lnfw [C] lnfb [C]
  forward     x = wte[token] + wpe[position]; per block:
                x += attproj(attention(qkv(ln1(x))))   causal, heads of C/NH channels, scale 1/sqrt(C/NH)
                x += fcproj(gelu(fc(ln2(x))))          gelu in its tanh form
              y = lnf(x); logits[v] = y . wte[v] over v < V (the Vp - V padding rows take no part in the
              softmax); a linear layer W [OC, IC] maps x to W x + b; layernorm: population variance, eps 1e-5
  data        token shard: 256 int32 header, [0] magic 20240520, [1] version 1, [2] count, then uint16
              tokens; mask shard (DIR/train_000000.mask): [0] magic 20261207, [1] version 1, [2] count, then
              uint8 0 or 1
  windows     window w = tokens [w*T, w*T + T]: inputs its first T, targets its last T; target t counts
              when the mask of its token is 1. Batch b = windows [b*B, b*B + B); K batches from the start.
  loss        completion: the mean of -log softmax(logits)[target] over the counted targets of the K
              batches; all: the same over every target.

Usage: gpt2_reference_loss.py CHECKPOINT TOKENS.bin MASK B T K
Prints "completion LOSS all LOSS counted N of M" (the losses with 9 decimals).
"""
import math
import struct
import sys
from operator import mul


def read_checkpoint(path):
    data = open(path, "rb").read()
    magic, version, max_t, vocab, layers, heads, channels, padded = struct.unpack("<8i", data[:32])
    assert magic == 20240326 and version == 3, f"{path}: not an llm.c fp32 checkpoint ({magic}, {version})"
    C, L, Vp = channels, layers, padded
    sizes = [("wte", Vp * C), ("wpe", max_t * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
             ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
             ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
             ("lnfw", C), ("lnfb", C)]
    total = sum(n for _, n in sizes)
    assert len(data) == 1024 + 4 * total, f"{path}: {len(data)} bytes, want {1024 + 4 * total}"
    values = struct.unpack(f"<{total}f", data[1024:])
    params, at = {}, 0
    for name, n in sizes:
        params[name] = values[at:at + n]
        at += n
    shape = {"maxT": max_t, "V": vocab, "L": L, "NH": heads, "C": C, "Vp": Vp}
    return shape, params


def rows(flat, count, width, first=0):
    """`count` rows of `width` values of `flat` from row `first`, as lists."""
    return [list(flat[(first + r) * width:(first + r + 1) * width]) for r in range(count)]


def linear(x, w, b):
    return [sum(map(mul, row, x)) + bias for row, bias in zip(w, b)]


def layernorm(x, w, b):
    n = len(x)
    mean = sum(x) / n
    var = sum((v - mean) ** 2 for v in x) / n
    rstd = 1.0 / math.sqrt(var + 1e-5)
    return [(v - mean) * rstd * wi + bi for v, wi, bi in zip(x, w, b)]


def gelu(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Gpt2:
    def __init__(self, path):
        s, p = read_checkpoint(path)
        self.shape = s
        C, L = s["C"], s["L"]
        self.wte = rows(p["wte"], s["V"], C)  # the padding rows are not needed
        self.wpe = rows(p["wpe"], s["maxT"], C)
        self.blocks = []
        for l in range(L):
            self.blocks.append({
                "ln1w": p["ln1w"][l * C:(l + 1) * C], "ln1b": p["ln1b"][l * C:(l + 1) * C],
                "qkvw": rows(p["qkvw"], 3 * C, C, l * 3 * C), "qkvb": p["qkvb"][l * 3 * C:(l + 1) * 3 * C],
                "attprojw": rows(p["attprojw"], C, C, l * C), "attprojb": p["attprojb"][l * C:(l + 1) * C],
                "ln2w": p["ln2w"][l * C:(l + 1) * C], "ln2b": p["ln2b"][l * C:(l + 1) * C],
                "fcw": rows(p["fcw"], 4 * C, C, l * 4 * C), "fcb": p["fcb"][l * 4 * C:(l + 1) * 4 * C],
                "fcprojw": rows(p["fcprojw"], C, 4 * C, l * C), "fcprojb": p["fcprojb"][l * C:(l + 1) * C]})
        self.lnfw, self.lnfb = p["lnfw"], p["lnfb"]

    def attention(self, qkv):
        """Causal multi-head attention over one sequence's [T][3C] q, k, v."""
        C, NH = self.shape["C"], self.shape["NH"]
        hs = C // NH
        scale = 1.0 / math.sqrt(hs)
        out = [[0.0] * C for _ in qkv]
        for h in range(NH):
            q = [r[h * hs:(h + 1) * hs] for r in qkv]
            k = [r[C + h * hs:C + (h + 1) * hs] for r in qkv]
            v = [r[2 * C + h * hs:2 * C + (h + 1) * hs] for r in qkv]
            for t in range(len(qkv)):
                scores = [sum(map(mul, q[t], k[u])) * scale for u in range(t + 1)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                z = sum(e)
                for i in range(hs):
                    out[t][h * hs + i] = sum(e[u] * v[u][i] for u in range(t + 1)) / z
        return out

    def losses(self, inputs, targets):
        """-log p(target) at each position of one sequence."""
        x = [[a + b for a, b in zip(self.wte[tok], self.wpe[t])] for t, tok in enumerate(inputs)]
        for blk in self.blocks:
            qkv = [linear(layernorm(r, blk["ln1w"], blk["ln1b"]), blk["qkvw"], blk["qkvb"]) for r in x]
            att = self.attention(qkv)
            x = [[a + b for a, b in zip(r, linear(o, blk["attprojw"], blk["attprojb"]))] for r, o in zip(x, att)]
            for t, r in enumerate(x):
                u = [gelu(v) for v in linear(layernorm(r, blk["ln2w"], blk["ln2b"]), blk["fcw"], blk["fcb"])]
                x[t] = [a + b for a, b in zip(r, linear(u, blk["fcprojw"], blk["fcprojb"]))]
        out = []
        for r, target in zip(x, targets):
            y = layernorm(r, self.lnfw, self.lnfb)
            logits = [sum(map(mul, y, w)) for w in self.wte]
            top = max(logits)
            out.append(top + math.log(sum(math.exp(v - top) for v in logits)) - logits[target])
        return out


def read_shard(path, magic, code):
    data = open(path, "rb").read()
    got_magic, version, count = struct.unpack("<3i", data[:12])
    assert got_magic == magic and version == 1, f"{path}: magic {got_magic} version {version}"
    assert len(data) == 1024 + count * struct.calcsize(code), f"{path}: size disagrees with count {count}"
    return struct.unpack(f"<{count}{code}", data[1024:])


def main():
    checkpoint, tokens_path, mask_path = sys.argv[1:4]
    B, T, K = (int(a) for a in sys.argv[4:7])
    model = Gpt2(checkpoint)
    tokens = read_shard(tokens_path, 20240520, "H")
    counted = read_shard(mask_path, 20261207, "B")
    assert len(tokens) == len(counted)
    windows = (len(tokens) - 1) // T
    assert K * B <= windows, f"{K} batches of {B} need {K * B} windows of {T + 1} tokens; the data holds {windows}"
    assert T <= model.shape["maxT"] and max(tokens) < model.shape["V"]
    masked_sum, masked_n, all_sum, all_n = 0.0, 0, 0.0, 0
    for w in range(K * B):  # batch b = windows [b*B, b*B + B): together, the first K*B windows in order
        window = tokens[w * T:w * T + T + 1]
        for loss, c in zip(model.losses(window[:T], window[1:]), counted[w * T + 1:w * T + T + 1]):
            all_sum += loss
            all_n += 1
            if c:
                masked_sum += loss
                masked_n += 1
    assert masked_n > 0, "no counted target"
    print(f"completion {masked_sum / masked_n:.9f} all {all_sum / all_n:.9f} counted {masked_n} of {all_n}")


if __name__ == "__main__":
    main()
