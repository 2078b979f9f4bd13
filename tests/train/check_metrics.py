#!/usr/bin/env python3
"""The checks of metrics_test.sh, each a subcommand: check_metrics.py NAME ARGS... exits non-zero when it fails.
"""
import json
import re
import sys


def metrics_file():
    """METRICS_JSONL LOG: the events, fields and values of a metrics file against the run's log."""
    lines = [json.loads(l) for l in open(sys.argv[1])]
    events = [l["event"] for l in lines]
    assert events == ["start", "step", "step", "step", "validation", "step", "step", "step", "validation", "end"], events
    printed = [float(x) for x in re.findall(r"step \d+/\d+ \| loss ([0-9.]+)", open(sys.argv[2]).read())]
    steps = [l for l in lines if l["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    for s, p in zip(steps, printed):
        assert abs(s["loss"] - p) <= 5e-5, (s["loss"], p)          # the line rounds to 4 digits
        assert s["step_seconds"] > 0 and s["tokens_per_second"] > 0 and s["grad_norm"] > 0
        assert 0 < s["lr"] <= 1e-3
        pb = s["peak_bytes"]
        assert pb["device"] >= 4 * 3 * 4 * 1 and pb["host"] == 0 and pb["disk"] == 0 and pb["rss"] > pb["device"], pb
    assert steps[1]["loss"] != steps[0]["loss"]
    assert [v["step"] for v in lines if v["event"] == "validation"] == [3, 6]
    assert lines[0]["first_step"] == 1 and lines[0]["steps"] == 6 and lines[0]["precision"] == "fp32"
    assert lines[-1]["steps"] == 6
    print("metrics file: %d lines as expected" % len(lines))


def resumed():
    """RESUMED_JSONL STRAIGHT_JSONL: a resumed run appends the losses an uninterrupted run gives."""
    def losses(path):
        return {l["step"]: l["loss"] for l in map(json.loads, open(path)) if l["event"] == "step"}
    resumed, straight = losses(sys.argv[1]), losses(sys.argv[2])
    assert sorted(resumed) == list(range(1, 10)), sorted(resumed)
    # The file has every digit: resume is exact, so the losses are equal as numbers.
    assert resumed == straight, [(k, resumed[k], straight[k]) for k in resumed if resumed[k] != straight.get(k)]
    starts = [l for l in map(json.loads, open(sys.argv[1])) if l["event"] == "start"]
    assert [s["first_step"] for s in starts] == [1, 7], starts
    print("resumed metrics equal the straight run's, to the last digit")


CHECKS = {"metrics-file": metrics_file, "resumed": resumed}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
