#!/usr/bin/env python3
"""The checks of sweep_test.sh, each a subcommand: check_sweep.py NAME ARGS... exits non-zero when it fails.
"""
import json
import sys


def sweep_json():
    """sweep.json holds what docs/scheduling.md says: every combination, its figures and the best one."""
    j = json.load(open(sys.argv[1]))
    combos = j["combinations"]
    assert len(combos) == 4, len(combos)
    for c in combos:
        assert c["cpu_compute"] == "off", c  # the default
        for k in ("policy", "priorities", "cpu_compute", "step_s", "step_min_s", "step_max_s", "tokens_per_s", "steady_busy_fraction",
                  "adam_concurrent_fraction", "collective_concurrent_fraction", "gpu_transfer_bytes", "runs"):
            assert k in c, k
        assert len(c["runs"]) == 2
        steps = [r["step_s"] for r in c["runs"]]
        assert c["step_min_s"] == min(steps) and c["step_max_s"] == max(steps), c
        assert c["step_min_s"] <= c["step_s"] <= c["step_max_s"]
        assert 0 < c["steady_busy_fraction"] <= 1 and c["tokens_per_s"] > 0
        assert c["collective_concurrent_fraction"] is None  # one rank: no collective ran


def collective_overlap():
    """SWEEP_JSON: a 2-rank sweep measured the overlap of collectives."""
    c = json.load(open(sys.argv[1]))["combinations"][0]
    assert c["collective_concurrent_fraction"] is not None, c


CHECKS = {"sweep-json": sweep_json, "collective-overlap": collective_overlap}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
