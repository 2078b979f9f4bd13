#!/usr/bin/env python3
"""docs/llama.md's formulas for plan_cli_test.sh: llama_formulas.py EXPRESSION prints its value, e.g.
`psi(shape(L=80, C=8192, NH=64, H=28672))`."""
import sys

def shape(L=32, C=4096, NH=32, NKV=8, H=14336, V=128256):
    return dict(L=L, C=C, NH=NH, NKV=NKV, H=H, V=V)

def psi(s):  # 2·V·C + C + L·(2C + Q·C + C² + 3·C·H)
    C, H, V = s["C"], s["H"], s["V"]
    Q = (s["NH"] + 2 * s["NKV"]) * (C // s["NH"])
    return 2 * V * C + C + s["L"] * (2 * C + Q * C + C * C + 3 * C * H)

def act(s, T, B, e, mode="none", W=1, offload=False):  # LlamaModel's activation buffers, "Activation memory"
    L, C, NH, H, V = s["L"], s["C"], s["NH"], s["H"], s["V"]
    hs = C // NH
    Q = (NH + 2 * s["NKV"]) * hs
    A = 4 * NH  # one fp32 log-sum-exp per query head (memory-efficient attention)
    forward = (7 * C + Q + 3 * H) * e + 8 + A  # all of one block's forward tensors
    kept = {"none": forward - 2 * C * e, "selective": (2 * C + Q + 2 * H) * e, "full": C * e}[mode]
    slots = 1 if mode == "none" else min(L, W + 1)  # recomputed (or, for none, attproj/mlpproj) slots
    gradients = min(L, 2) * (7 * C + 2 * Q + 3 * H) * e  # two gradient slots
    embedding = 8 + 2 * C * e
    head = 2 * C * e + 4 + 2 * V * e + 4 * V + 4
    return B * T * ((L - offloaded(s, W, offload)) * kept + slots * (forward - kept) + gradients + embedding + head) + 2 * T * C * e + 4 * T * hs

def offloaded(s, W, offload):  # blocks whose kept tensors live in host memory
    return max(0, s["L"] - (W + 1)) if offload else 0

def host(s, T, B, e, mode="none", W=1, offload=False):  # the offloaded blocks' kept tensors
    C, NH, H = s["C"], s["NH"], s["H"]
    Q = (NH + 2 * s["NKV"]) * (C // NH)
    forward = (7 * C + Q + 3 * H) * e + 8 + 4 * NH
    kept = {"none": forward - 2 * C * e, "selective": (2 * C + Q + 2 * H) * e, "full": C * e}[mode]
    return B * T * offloaded(s, W, offload) * kept

if __name__ == "__main__":
    print(eval(sys.argv[1]))
