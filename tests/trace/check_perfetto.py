#!/usr/bin/env python3
"""The checks of trace_perfetto_test.sh, each a subcommand: check_perfetto.py NAME ARGS... exits non-zero when it fails.
"""
import json
import os
import shlex
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402


def perfetto():
    """JSON DIR...: the trace-event file against each rank folder's own tasks.rec and paje.trace: tracks, events, durations, transfers and step marks."""
    def paje_transfers(path):
        # Completed links between memory managers (link types whose containers are Mm and Mm), as
        # (source container, destination container, bytes); fields by name from the %EventDef header.
        defs, current = {}, None
        types, started, done = set(), {}, []
        with open(path) as f:
            for line in f:
                if line.startswith("%"):
                    w = line[1:].split()
                    if w and w[0] == "EventDef":
                        current = w[2]
                        defs[current] = (w[1], [])
                    elif w and w[0] == "EndEventDef":
                        current = None
                    elif w and current is not None:
                        defs[current][1].append(w[0])
                    continue
                w = shlex.split(line) if '"' in line else line.split()  # a quoted value is one field
                if not w:
                    continue
                if w[0] not in defs:
                    continue
                event, names = defs[w[0]]
                v = dict(zip(names, w[1:]))
                if event == "PajeDefineLinkType" and v.get("StartContainerType") == "Mm" and v.get("EndContainerType") == "Mm":
                    types.add(v["Alias"])
                elif event == "PajeStartLink" and v["Type"] in types:
                    started[(v["Type"], v["Key"])] = (v["StartContainer"], int(v["Value"]))
                elif event == "PajeEndLink" and v["Type"] in types and (v["Type"], v["Key"]) in started:
                    src, size = started.pop((v["Type"], v["Key"]))
                    done.append((src, v["EndContainer"], size))
        return done

    trace = json.load(open(sys.argv[1]))
    dirs = sys.argv[2:]
    problems = []
    def want(cond, what):
        if not cond:
            problems.append(what)
    def close(a, b, tolerance=1e-3):  # µs
        return abs(a - b) <= tolerance

    events = trace["traceEvents"]
    want(trace.get("displayTimeUnit") == "ms", "displayTimeUnit")
    process_names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    want(len(process_names) == len(dirs), f"{len(process_names)} processes for {len(dirs)} trace folder(s)")
    for e in events:
        if e["ph"] != "M":
            want((e["pid"], e["tid"]) in thread_names, f"an event on the unnamed track {e['pid']}/{e['tid']}")
    # Complete events of one track never overlap (a track's events must nest; they are disjoint).
    by_track = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            want(e["dur"] >= 0, f"negative dur {e}")
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            want(start >= end - 1e-6, f"track {thread_names.get(track)}: events overlap ({start} < {end})")

    ranks = sorted(process_names)
    for r, (pid, d) in enumerate(zip(ranks, dirs)):
        tag = f"rank {r}: " if len(dirs) > 1 else ""
        if len(dirs) > 1:
            want(process_names[pid] == f"rank {r}", f"{tag}process name {process_names[pid]}")
        ran = {job: t for job, t in tasks_rec.read(d + "/tasks.rec").items() if "StartTime" in t}
        tasks = [e for e in events if e["pid"] == pid and e.get("cat") == "task"]
        want(all(e["ph"] == "X" for e in tasks), f"{tag}a task event that is not a complete event")
        want(len(tasks) == len(ran), f"{tag}{len(tasks)} task events, tasks.rec has {len(ran)} tasks that ran")
        count, busy = defaultdict(int), defaultdict(float)
        for t in ran.values():
            count[int(t["WorkerId"])] += 1
            busy[int(t["WorkerId"])] += (float(t["EndTime"]) - float(t["StartTime"])) * 1e3
        got_count, got_busy, seen = defaultdict(int), defaultdict(float), set()
        for e in tasks:
            job = e["args"]["job_id"]
            t = ran.get(job)
            if t is None:
                want(False, f"{tag}event of job {job}, which did not run in tasks.rec")
                continue
            seen.add(job)
            name = t.get("Name", t.get("Model", "unnamed"))
            step = int(t["Iteration"].split()[0]) if "Iteration" in t else None
            want(e["name"] == name, f"{tag}job {job}: name {e['name']} != {name}")
            want(e["args"]["step"] == step, f"{tag}job {job}: step {e['args']['step']} != {step}")
            want(close(e["ts"], float(t["StartTime"]) * 1e3), f"{tag}job {job}: ts {e['ts']} != {t['StartTime']} ms")
            want(close(e["dur"], (float(t["EndTime"]) - float(t["StartTime"])) * 1e3), f"{tag}job {job}: dur {e['dur']}")
            worker = int(t["WorkerId"])
            want(e["args"]["worker"] == worker, f"{tag}job {job}: worker {e['args']['worker']} != {worker}")
            want(thread_names[(pid, e["tid"])].split(" #")[0] == f"CPU{worker}",
                 f"{tag}job {job} on track {thread_names[(pid, e['tid'])]}, tasks.rec says worker {worker}")
            got_count[worker] += 1
            got_busy[worker] += e["dur"]
        want(len(seen) == len(ran), f"{tag}{len(ran) - len(seen)} tasks without their event")
        want(dict(got_count) == dict(count), f"{tag}tasks per worker {dict(got_count)} != tasks.rec's {dict(count)}")
        for w in busy:
            want(close(got_busy[w], busy[w], 1e-6 * max(1.0, busy[w])), f"{tag}worker {w}: {got_busy[w]} µs != {busy[w]}")
        # Steps: one instant event each, at its first task's start.
        first = {}
        for t in ran.values():
            if "Iteration" in t:
                s = int(t["Iteration"].split()[0])
                first[s] = min(first.get(s, float("inf")), float(t["StartTime"]) * 1e3)
        marks = {e["args"]["step"]: e for e in events if e["pid"] == pid and e["ph"] == "i"}
        want(sorted(marks) == sorted(first) == [1, 2, 3], f"{tag}step marks {sorted(marks)}, tasks.rec steps {sorted(first)}")
        for s, e in marks.items():
            want(e["name"] == f"step {s}" and close(e["ts"], first.get(s, -1)), f"{tag}step {s} mark at {e['ts']}")
        # Transfers: one event per completed link between memory managers, bytes per link.
        node = lambda container: "RAM" if container.endswith("mm0") else "DISK0"  # CPU-only runs
        links = defaultdict(lambda: [0, 0])
        for src, dst, size in paje_transfers(d + "/paje.trace"):
            link = links[f"{node(src)}->{node(dst)}"]
            link[0] += 1
            link[1] += size
        got = defaultdict(lambda: [0, 0])
        for e in events:
            if e["pid"] == pid and e.get("cat") == "transfer":
                label = thread_names[(pid, e["tid"])].split(" #")[0]
                want(label == f"{e['args']['src']}->{e['args']['dst']}", f"{tag}transfer on track {label}: {e['args']}")
                got[label][0] += 1
                got[label][1] += e["args"]["bytes"]
        want(dict(got) == dict(links), f"{tag}transfers (count, bytes) per link {dict(got)} != paje.trace's {dict(links)}")
        print(f"  {tag}{len(tasks)} task events, {len(marks)} step marks, transfers {dict(got)}")
    for p in problems[:20]:
        print("  " + p)
    print(f"  {sys.argv[1]} checked against tasks.rec and paje.trace: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


def nvme_transfers():
    """JSON: the NVMe run's trace-event file has RAM -> DISK0 transfer events."""
    events = json.load(open(sys.argv[1]))["traceEvents"]
    sys.exit(0 if any(e.get("cat") == "transfer" and e["args"]["dst"] == "DISK0" and e["args"]["bytes"] > 0
                      for e in events) else 1)


CHECKS = {"perfetto": perfetto, "nvme-transfers": nvme_transfers}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
