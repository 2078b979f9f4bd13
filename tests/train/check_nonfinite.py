#!/usr/bin/env python3
"""The checks of nonfinite_test.sh, each a subcommand: check_nonfinite.py NAME ARGS... exits non-zero when it fails.
"""
import json
import os
import sys


def same_moments():
    """SET_A SET_B: two checkpoint sets hold the same AdamW moments (the last 2·4·n bytes of each .state file)."""
    a, b = sys.argv[1], sys.argv[2]
    n = (os.path.getsize(a + "/model.bin") - 1024) // 4
    def moments(d):
        files = sorted(f for f in os.listdir(d) if f.endswith(".state"))
        return [open(os.path.join(d, f), "rb").read()[-8 * (n // max(1, len(files))):] for f in files]
    sys.exit(0 if moments(a) == moments(b) else 1)


def skipped_step():
    """METRICS_JSONL: the metrics of 5 steps mark step 3 skipped, its gradient norm null (NaN)."""
    s = [l for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step']
    assert [l['skipped'] for l in s] == [False, False, True, False, False], s
    assert s[2]['grad_norm'] is None  # NaN is null in JSON


CHECKS = {"same-moments": same_moments, "skipped-step": skipped_step}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
