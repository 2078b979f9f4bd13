#!/usr/bin/env python3
"""The checks of speculative_test.sh, each a subcommand: check_speculative.py NAME ARGS... exits non-zero when it fails.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402


def partial_layers():
    """LOG: --speculative-fraction makes only the last layers speculative."""
    log = open(sys.argv[1]).read().replace("\r", "\n")
    line = re.search(r"^speculative update: (.*)$", log, re.M).group(1)
    print("  " + line)
    m = re.match(r"layers? (\d+)(?:-(\d+))? speculative \(.*\), layers? (\d+)(?:-(\d+))? synchronous", line)
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    assert last == 3 and first > 0 and int(m.group(3)) == 0 and int(m.group(4) or m.group(3)) == first - 1, line
    reruns = {int(n) for n in re.findall(r"rollback: (\d+) AdamW re-run", log)}
    assert reruns == {last - first + 1}, (reruns, line)


def speculative_graph():
    """TASKS_REC L: no speculative AdamW waits for the norm (only layer 0 for the embedding's backward), every commit does."""
    by_id = tasks_rec.read(sys.argv[1])
    L = int(sys.argv[2])
    ancestors = lambda job: tasks_rec.ancestors(by_id, job)
    named = lambda name: [j for j, r in by_id.items() if r.get("Name") == name]
    encoder, clip = named("encoder_bwd"), named("clip_scale")
    assert len(encoder) == 1 and len(clip) == 1, (encoder, clip)
    adam = {int(r["Name"][6:-1]): j for j, r in by_id.items() if r.get("Name", "").startswith("adamw[")}
    commit = {int(r["Name"][13:-1]): j for j, r in by_id.items() if r.get("Name", "").startswith("adamw_commit[")}
    assert sorted(adam) == sorted(commit) == list(range(L + 2)), (sorted(adam), sorted(commit))
    waiting = [l for l, j in sorted(adam.items()) if encoder[0] in ancestors(j) or clip[0] in ancestors(j)]
    print(f"  speculative AdamW waiting for the embedding's backward or the norm: layers {waiting}")
    # Only the embedding's own group (layer 0) needs the embedding's backward; none needs the norm.
    ok = waiting == [0] and all(clip[0] in ancestors(j) for j in commit.values())
    sys.exit(0 if ok else 1)


def rollback_counts():
    """LOG METRICS_JSONL LAYERS: the step lines, the metrics and the summary count the same rollbacks."""
    log = re.sub(r"\[[#.]*\] |\x1b\[K", "", open(sys.argv[1]).read().replace("\r", "\n"))
    layers = int(sys.argv[3])
    lines = [int(m) if m else 0 for m in re.findall(r"^step \d+/\d+ .*?(?:rollback: (\d+) AdamW re-run)?$", log, re.M)]
    steps = [json.loads(l) for l in open(sys.argv[2]) if '"event":"step"' in l]
    metrics = [s["rollbacks"] for s in steps[-len(lines):]]
    m = re.search(r"speculative update: (\d+) of (\d+) steps clipped and rolled back; commits: (\d+) adopted, (\d+) re-run", log)
    clipped, total, adopted, rerun = map(int, m.groups())
    print(f"  step lines {lines}, metrics {metrics}, summary {clipped}/{total} clipped, {adopted} adopted, {rerun} re-run")
    ok = (lines == metrics and clipped == sum(1 for x in lines if x) and rerun == sum(lines)
          and adopted + rerun == total * layers and all(x in (0, layers) for x in lines))
    sys.exit(0 if ok else 1)


CHECKS = {"partial-layers": partial_layers, "speculative-graph": speculative_graph, "rollback-counts": rollback_counts}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
