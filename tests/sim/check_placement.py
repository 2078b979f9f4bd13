#!/usr/bin/env python3
"""The checks of placement_test.sh, each a subcommand: check_placement.py NAME ARGS... exits non-zero when it fails.
"""
import collections
import json
import re
import sys


def placement():
    """TASKS_REC REPORT_JSON: prints the model tasks on CPU workers, the model tasks, the CPU AdamW tasks on CPU workers and their kinds."""
    kinds = {w["id"]: w["kind"] for w in json.load(open(sys.argv[2]))["workers"]}
    model = on_cpu = adam_on_cpu = 0
    names = collections.Counter()
    for record in open(sys.argv[1]).read().split("\n\n"):
        f = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
        if "StartTime" not in f:  # marks and partitions run nowhere
            continue
        cpu = kinds[int(f["WorkerId"])] == "cpu"
        if f["Model"].startswith(("nn_", "llama_")):
            model += 1
            if cpu:
                on_cpu += 1
                names[re.sub(r"\[.*", "", f["Name"])] += 1
        elif f["Model"] == "adamw_cpu" and cpu:
            adam_on_cpu += 1
    print(on_cpu, model, adam_on_cpu, ",".join(f"{k}:{n}" for k, n in sorted(names.items())) or "-")


def cpu_compute_sweep():
    """SWEEP_JSON: a sweep over --cpu-compute off,on has one row each."""
    rows = json.load(open(sys.argv[1]))["combinations"]
    assert [r["cpu_compute"] for r in rows] == ["off", "on"], rows
    assert all(r["step_s"] > 0 and len(r["runs"]) == 1 for r in rows), rows
    print("sweep: " + ", ".join(f"cpu compute {r['cpu_compute']} {r['step_s'] * 1e3:.1f} ms" for r in rows))


CHECKS = {"placement": placement, "cpu-compute-sweep": cpu_compute_sweep}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
