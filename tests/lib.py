#!/usr/bin/env python3
"""The Python of lib.sh's helpers, each a subcommand: lib.py NAME ARGS... exits non-zero when it fails.
"""
import random
import sys


def write_words():
    """FILE SEED COUNT: writes COUNT words drawn with SEED from a fixed list (a training text that does not change as the checkout does)."""
    random.seed(int(sys.argv[2]))
    words = "the of and to in is that for it as with was on be by this are from at or an which".split()
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(random.choice(words) for _ in range(int(sys.argv[3]))))


def compare_losses():
    """LOSSES_A LOSSES_B WHAT TOLERANCE: the same number of losses, none further apart than TOLERANCE."""
    a = [float(x) for x in sys.argv[1].split()]
    b = [float(x) for x in sys.argv[2].split()]
    assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
    worst, step = max((abs(x - y), i + 1) for i, (x, y) in enumerate(zip(a, b)))
    print(f"  {sys.argv[3]}: {len(b)} losses, max |diff| {worst:.1e} (step {step})")
    sys.exit(0 if worst <= float(sys.argv[4]) else 1)


CHECKS = {"write-words": write_words, "compare-losses": compare_losses}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
