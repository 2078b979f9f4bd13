#!/usr/bin/env python3
"""The checks of zero_checkpoint_test.sh, each a subcommand: check_zero_checkpoint.py NAME ARGS... exits non-zero when it fails.
"""
import sys


def resumed_losses():
    """FULL PARTS: the losses of 2 ranks then 4, resumed from shards, are the uninterrupted run's."""
    def parse(text):
        items = text.split()
        return {int(items[i].split("/")[0]): float(items[i + 1]) for i in range(0, len(items), 2)}
    full, parts = parse(sys.argv[1]), parse(sys.argv[2])
    print(f"  uninterrupted {full}\n  2 ranks then 4 {parts}")
    ok = sorted(full) == sorted(parts) == list(range(1, 7)) and all(abs(full[k] - parts[k]) <= 2e-4 for k in full)
    sys.exit(0 if ok else 1)


CHECKS = {"resumed-losses": resumed_losses}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
