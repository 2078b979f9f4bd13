#!/usr/bin/env python3
"""Per-worker busy time and per-task-kind time of the last training step, from a --trace DIR's
tasks.rec (StarPU's record of every task: worker, start and end in microseconds).

The last step is the window from the start of the last `load_inputs` task submitted before the
last AdamW task (the first task of the last training step) to the end of the last task submitted
up to that AdamW task: evaluation and sampling passes after it are left out. Times in tasks.rec
are in milliseconds. Worker busy time is the sum of its tasks'
durations inside that window; task kinds are task names without their [index] suffixes.
`scripts/bench-compare.sh` uses it because it also reads traces of older binaries, which have no
step marks; for everything else use `starzero trace DIR` (docs/trace-report.md).

Usage: scripts/trace-steps.py DIR [--kinds N]
"""
import re
import sys


def records(path):
    rec = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if rec:
                    yield rec
                rec = {}
                continue
            key, _, value = line.partition(": ")
            rec[key] = value
    if rec:
        yield rec


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: trace-steps.py DIR [--kinds N]")
    kinds_shown = int(sys.argv[sys.argv.index("--kinds") + 1]) if "--kinds" in sys.argv else 25
    tasks = [r for r in records(sys.argv[1] + "/tasks.rec") if "StartTime" in r and "WorkerId" in r]
    if not tasks:
        sys.exit("trace-steps: no executed tasks in tasks.rec")
    order = lambda t: int(t["SubmitOrder"])
    adamw = [order(t) for t in tasks if t["Name"].startswith("adamw")]
    last = max(adamw) if adamw else max(order(t) for t in tasks)
    loads = [t for t in tasks if t["Name"] == "load_inputs" and order(t) < last]
    first = max(order(t) for t in loads) if loads else 0
    tasks = [t for t in tasks if first <= order(t) <= last]
    begin = min(float(t["StartTime"]) for t in tasks)
    end = max(float(t["EndTime"]) for t in tasks)
    wall = end - begin
    busy, kinds = {}, {}
    for t in tasks:
        s, e = max(float(t["StartTime"]), begin), float(t["EndTime"])
        if e <= s:
            continue
        busy[t["WorkerId"]] = busy.get(t["WorkerId"], 0.0) + (e - s)
        kind = re.sub(r"\[[^\]]*\]|\.t[0-9]+$", "", t["Name"])
        k = kinds.setdefault(kind, [0, 0.0])
        k[0] += 1
        k[1] += e - s
    total_busy = sum(busy.values())
    print(f"last step: {wall:.1f} ms wall, {len(busy)} workers")
    for w in sorted(busy, key=int):
        print(f"  worker {w}: busy {busy[w]:.1f} ms = {100 * busy[w] / wall:.1f} %")
    print(f"  all workers: {100 * total_busy / (wall * len(busy)):.1f} % busy")
    print(f"{'task kind':28} {'count':>6} {'total ms':>10} {'share':>7} {'mean ms':>9}")
    for name, (count, time) in sorted(kinds.items(), key=lambda kv: -kv[1][1])[:kinds_shown]:
        print(f"{name:28} {count:6d} {time:10.1f} {100 * time / total_busy:6.1f}% {time / count:9.3f}")


if __name__ == "__main__":
    main()
