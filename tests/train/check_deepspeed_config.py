#!/usr/bin/env python3
"""The checks of deepspeed_config_test.sh, each a subcommand: check_deepspeed_config.py NAME ARGS... exits non-zero when it fails.
"""
import json
import math
import sys


def warmup_cosine():
    """METRICS_JSONL: the learning rates follow DeepSpeed's WarmupCosineLR, computed here."""
    lrs = [l["lr"] for l in map(json.loads, open(sys.argv[1])) if l["event"] == "step"]
    def ds(i, lr=3e-3, w=3, total=8, r0=0.1, final=0.05):
        if i < w:
            return lr * (r0 + math.log(i + 1) / math.log(w) * (1 - r0))
        p = min(1.0, (i - w + 1) / max(1, total - w))
        return lr * (final + (1 - final) * (1 + math.cos(math.pi * p)) / 2)
    want = [ds(s - 1) for s in range(1, 7)]
    assert all(abs(a - b) <= 1e-6 * b for a, b in zip(lrs, want)), (lrs, want)


CHECKS = {"warmup-cosine": warmup_cosine}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
