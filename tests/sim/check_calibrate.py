#!/usr/bin/env python3
"""The checks of calibrate_test.sh, each a subcommand: check_calibrate.py NAME ARGS... exits non-zero when it fails.
"""
import json
import re
import sys


def machine_json():
    """MACHINE_JSON CORES: the calibrated machine is this one: its cores (at most 64), no GPU."""
    m = json.load(open(sys.argv[1]))
    assert m["name"] == "box1" and m["gpus"] == 0 and m["cpus"] == min(64, int(sys.argv[2])), m


def overheads():
    """MACHINE_JSON PATTERN LOG...: machine.json holds, per policy, the task-weighted mean of the overheads the logs printed."""
    machine, pattern, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
    want = {}
    for log in logs:
        found = [re.match(pattern, line) for line in open(log).read().splitlines()]
        found = [m for m in found if m]
        assert len(found) == 1, f"{log}: no overhead line"
        policy, us, tasks, wake = found[0].group(1), float(found[0].group(2)), int(found[0].group(3)), float(found[0].group(4))
        assert tasks > 0 and us > 0, (log, us, tasks)
        held = want.setdefault(policy, [0.0, 0.0, 0])
        held[0] += us * tasks; held[1] += wake * tasks; held[2] += tasks
    got = json.load(open(machine)).get("cpu_task_overhead", {})
    assert sorted(got) == sorted(want), (got, want)
    for policy, (us, wake, tasks) in want.items():
        g = got[policy]
        assert g["tasks"] == tasks, (policy, g, tasks)
        # the log prints 0.1 us
        assert abs(g["us_per_task"] - us / tasks) <= 0.051, (policy, g, us / tasks)
        assert abs(g["wake_us"] - wake / tasks) <= 0.051, (policy, g, wake / tasks)


CHECKS = {"machine-json": machine_json, "overheads": overheads}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
