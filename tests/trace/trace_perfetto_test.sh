#!/usr/bin/env bash
# `starzero trace DIR --perfetto FILE` on real traced training runs (a tiny GPT on the CPU, 3
# steps), the JSON read by Python's json module and checked against tasks.rec and paje.trace
# read by Python too (tests/tasks_rec.py and a Paje reader here, no C++):
#   single - one rank, and one with the NVMe tier (RAM -> DISK0 transfers): one complete event
#            per task that ran, with its tasks.rec name, step, start (ts) and duration (dur, to
#            1e-3 µs), per-worker event counts and summed durations equal to tasks.rec's; one
#            event per completed transfer with its paje.trace bytes, per link; one instant event
#            per step at its first task's start; every track and process named by metadata, the
#            events of a track disjoint; bad input (missing DIR, a folder that does not exist, an
#            output that is a folder or on a file system that cannot be written, --perfetto
#            without a value) exits 2 with one line on stderr and writes nothing.
#   ranks  - 2 MPI ranks at ZeRO-2: one process per rank ("rank 0", "rank 1"), each rank's
#            events from its own rank<r>/tasks.rec.
# Usage: trace_perfetto_test.sh STARZERO single|ranks
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 11 20000
tiny=(train --data "$work/data.txt" --preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16
      --batch 4 --steps 3 --cuda-workers 0 --val-every 0 --sample-every 0 --quiet)

# check_perfetto JSON DIR...: the trace-event file against each rank folder's own files.
check_perfetto() {
  PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")/.." python3 - "$@" <<'PY'
import json, shlex, sys
from collections import defaultdict

import tasks_rec

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
PY
}

# expect_error WHAT ARGS...: `starzero trace ARGS` exits 2 with one line on stderr.
expect_error() {
  local what=$1 rc=0
  shift
  "$starzero" trace "$@" > /dev/null 2> "$work/err.txt" || rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ]; then
    fail "$what: exit $rc (want 2), stderr: $(head -c 300 "$work/err.txt")"
  else
    echo "  $what: exit $rc: $(cat "$work/err.txt")"
  fi
}

case $part in
single)
  "$starzero" "${tiny[@]}" --trace "$work/trace" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "traced run"; exit 1; }
  "$starzero" trace "$work/trace" --perfetto "$work/trace.json" > "$work/report.md" || fail "starzero trace --perfetto"
  grep -q "^# Trace report" "$work/report.md" || fail "no report beside --perfetto"
  check_perfetto "$work/trace.json" "$work/trace" || fail "the Perfetto JSON disagrees with the trace files"
  # The NVMe tier: optimizer state on a StarPU disk node, so paje.trace has RAM <-> DISK0 links.
  mkdir "$work/nvme"
  "$starzero" "${tiny[@]}" --offload-optimizer nvme --nvme-path "$work/nvme" --host-mem-limit 64 \
    --trace "$work/nvme-trace" > "$work/nvme.log" 2>&1 || { cat "$work/nvme.log"; fail "traced NVMe run"; exit 1; }
  "$starzero" trace "$work/nvme-trace" --json --perfetto "$work/nvme.json" > /dev/null \
    || fail "starzero trace --perfetto (NVMe)"
  check_perfetto "$work/nvme.json" "$work/nvme-trace" || fail "the NVMe Perfetto JSON disagrees with the trace files"
  python3 - "$work/nvme.json" <<'PY' || fail "no RAM->DISK0 transfer events in the NVMe trace"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
sys.exit(0 if any(e.get("cat") == "transfer" and e["args"]["dst"] == "DISK0" and e["args"]["bytes"] > 0
                  for e in events) else 1)
PY
  # Bad input: one line, exit 2, nothing written.
  expect_error "missing DIR" "$work/no-such-dir" --perfetto "$work/out.json"
  [ ! -e "$work/out.json" ] || fail "a missing DIR left $work/out.json"
  expect_error "output folder missing" "$work/trace" --perfetto "$work/no-such-folder/out.json"
  mkdir "$work/a-folder"
  expect_error "output is a folder" "$work/trace" --perfetto "$work/a-folder"
  expect_error "output on /proc" "$work/trace" --perfetto /proc/starzero-perfetto.json
  expect_error "--perfetto without FILE" "$work/trace" --perfetto
  if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
    mkdir "$work/read-only" && chmod 555 "$work/read-only"
    expect_error "read-only output folder" "$work/trace" --perfetto "$work/read-only/out.json"
  fi
  ;;
ranks)
  "${mpirun[@]}" -np 2 "$starzero" "${tiny[@]}" --stage 2 --cpu-workers 1 --trace "$work/trace" > "$work/train.log" 2>&1 \
    || { cat "$work/train.log"; fail "traced 2-rank run"; exit 1; }
  "$starzero" trace "$work/trace" --perfetto "$work/trace.json" > /dev/null || fail "starzero trace --perfetto (2 ranks)"
  check_perfetto "$work/trace.json" "$work/trace/rank0" "$work/trace/rank1" || fail "the 2-rank Perfetto JSON disagrees"
  ;;
*)
  echo "trace_perfetto_test.sh: unknown part '$part' (single, ranks)" >&2
  exit 2
  ;;
esac
finish "trace perfetto: part $part passed"
