#!/usr/bin/env bash
# `starzero trace DIR` on real traced training runs (a tiny GPT on the CPU, 3 steps), checked
# against the trace files read independently by Python (its own tasks.rec and paje.trace parser):
#   single - one rank, and one with the NVMe tier (RAM -> disk transfers): every worker's busy
#            seconds equal the sum of its task durations in tasks.rec (to 1e-6 s), 3 steps whose
#            wall times match tasks.rec, every documented JSON key (docs/trace-report.md), the
#            transfer bytes of paje.trace, the markdown sections, --svg through gnuplot, ViTE
#            still reads paje.trace with 0 errors; bad input (missing DIR, DIR without tasks.rec,
#            a truncated tasks.rec, an unknown flag) exits 2 with one line on stderr, a missing
#            gnuplot exits 1 with one line.
#   ranks  - 2 MPI ranks at ZeRO-2: {"ranks": [...]} with each rank's numbers from its own
#            rank<r>/tasks.rec, collectives measured, rank sections in markdown, one chart.
# Usage: trace_report_test.sh STARZERO single|ranks
set -euo pipefail
starzero=$1
part=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 11 20000
tiny=(train --data "$work/data.txt" --preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16
      --batch 4 --steps 3 --cuda-workers 0 --val-every 0 --sample-every 0 --quiet)

# check_report JSON DIR...: the report against each rank folder's own files (Python, no C++).
check_report() {
  python3 - "$@" <<'PY'
import json, math, sys

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
            if line.startswith("#"):
                continue
            key, _, value = line.partition(":")
            rec[key] = value.strip()
    assert not rec, f"{path}: unterminated last record"

def transfers_between(path, begin, end):
    # Bytes per (source, destination) of the links that start in [begin, end) ms. The runs here have
    # CPU workers only: memory manager mm0 is RAM, any other (mm1) the disk node, DISK0.
    name = lambda container: "RAM" if container == "mm0" else "DISK0"
    types, started, total = set(), {}, {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("%"):
                continue
            if w[0] == "5" and w[3:5] == ["Mm", "Mm"]:
                types.add(w[1])
            elif w[0] == "18" and w[2] in types:
                started[w[2] + w[6]] = (float(w[1]), w[5], int(w[4]))
            elif w[0] == "19" and w[2] in types and (w[2] + w[6]) in started:
                start, src, size = started.pop(w[2] + w[6])
                if begin <= start < end:
                    link = (name(src), name(w[5]))
                    total[link] = total.get(link, 0) + size
    return total

def transfer_bytes(path):
    # Links of types defined between memory managers (StarPU: F, PF, IF); byte counts of the
    # links that both start and end.
    return sum(transfers_between(path, -math.inf, math.inf).values())

keys = {  # docs/trace-report.md
    "": ["dir", "wall_s", "tasks_executed", "steady_from", "steps", "workers", "task_kinds", "transfers", "overlap",
         "bound"],
    "steps": ["step", "tasks", "tasks_executed", "wall_s", "critical_path_s", "critical_path"],
    "workers": ["id", "name", "kind", "tasks", "window_s", "busy_s", "overhead_s", "idle_s", "sleeping_s",
                "busy_fraction", "overhead_fraction", "idle_fraction", "steady_window_s", "steady_busy_s",
                "steady_overhead_s", "steady_idle_s", "steady_busy_fraction", "steady_overhead_fraction",
                "steady_idle_fraction"],
    "task_kinds": ["name", "count", "total_s", "share", "mean_s"],
    "transfers": ["src", "dst", "bytes", "count", "time_s", "hidden_fraction"],
    "overlap": ["adam_tasks", "adam_s", "adam_concurrent_fraction", "collective_tasks", "collective_s",
                "collective_concurrent_fraction"],
    "bound": ["compute_s", "cpu_adam_s", "pcie_to_gpu_s", "pcie_to_host_s", "disk_s", "bound_s", "binding",
              "steady_step_s", "efficiency", "compute_device", "compute_flops", "compute_flops_per_s", "adam_threads",
              "adam_bytes", "adam_bytes_per_s", "host_to_gpu_bytes", "host_to_gpu_Bps", "gpu_to_host_bytes",
              "gpu_to_host_Bps", "disk_read_bytes", "disk_read_Bps", "disk_write_bytes", "disk_write_Bps",
              "rates_source", "steady_steps", "compute_from", "adam_from"],
}

def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))

def check_bound(bound, ran, run_file, transfers_in_window, want, tag):
    # The bound of steps 2 and 3 (docs/trace-report.md, "Bound"), from tasks.rec and step_bound.json.
    try:
        run = json.load(open(run_file))
    except FileNotFoundError:
        want(bound is None, f"{tag}a bound without {run_file}")
        return
    want(bound is not None, f"{tag}no bound beside {run_file}")
    if bound is None:
        return
    want(list(bound) == keys["bound"], f"{tag}bound keys {list(bound)}")
    steady = [t for t in ran if "Iteration" in t and int(t["Iteration"].split()[0]) >= 2]
    begin = min(float(t["StartTime"]) for t in steady)
    end = max(float(t["EndTime"]) for t in steady)
    want(bound["steady_steps"] == 2, f"{tag}steady_steps {bound['steady_steps']}")
    want(close(bound["steady_step_s"], (end - begin) / 2 / 1e3), f"{tag}steady_step_s {bound['steady_step_s']}")
    compute = sum(float(t["GFlop"]) * 1e9 for t in steady if t.get("Model") != "adamw_cpu" and "GFlop" in t) / 2
    want(bound["compute_from"] == "trace" and close(bound["compute_flops"], compute),
         f"{tag}compute_flops {bound['compute_flops']}, tasks.rec's GFlop give {compute}")
    adam = [t for t in steady if t.get("Model") == "adamw_cpu"]
    adam_bytes = sum(int(size) * (mode.count("R") + mode.count("W"))
                     for t in adam for size, mode in zip(t["Sizes"].split(), t["Modes"].split())) / 2
    want(close(bound["adam_bytes"], adam_bytes if adam else run["planned_adam_bytes"]),
         f"{tag}adam_bytes {bound['adam_bytes']}, tasks.rec's Sizes and Modes give {adam_bytes}")
    want(bound["adam_from"] == ("trace" if adam else "plan"), f"{tag}adam_from {bound['adam_from']}")
    for key in ("compute_flops_per_s", "adam_bytes_per_s", "host_to_gpu_Bps", "gpu_to_host_Bps", "disk_read_Bps",
                "disk_write_Bps", "compute_device", "adam_threads", "rates_source"):
        want(bound[key] == run[key], f"{tag}{key} {bound[key]} != step_bound.json's {run[key]}")
    want(close(bound["compute_s"], bound["compute_flops"] / bound["compute_flops_per_s"]), f"{tag}compute_s")
    disk = transfers_in_window(begin, end)
    want(close(bound["disk_write_bytes"], disk.get(("RAM", "DISK0"), 0) / 2), f"{tag}disk_write_bytes")
    want(close(bound["disk_read_bytes"], disk.get(("DISK0", "RAM"), 0) / 2), f"{tag}disk_read_bytes")
    times = {k: bound[k + "_s"] for k in ("compute", "cpu_adam", "pcie_to_gpu", "pcie_to_host", "disk")}
    known = {k: v for k, v in times.items() if v is not None}
    want(bound["binding"] == max(known, key=known.get) and bound["bound_s"] == max(known.values()),
         f"{tag}binding {bound['binding']} {bound['bound_s']} of {times}")
    want(close(bound["efficiency"], bound["bound_s"] / bound["steady_step_s"]), f"{tag}efficiency")
report = json.load(open(sys.argv[1]))
dirs = sys.argv[2:]
ranks = report["ranks"] if len(dirs) > 1 else [report]
assert len(ranks) == len(dirs), (len(ranks), dirs)
problems = []
def want(cond, what):
    if not cond:
        problems.append(what)
for r, (rank, d) in enumerate(zip(ranks, dirs)):
    tag = f"rank {r}: " if len(dirs) > 1 else ""
    if len(dirs) > 1:
        want(rank.get("rank") == r, f"{tag}rank field {rank.get('rank')}")
    for k in keys[""]:
        want(k in rank, f"{tag}missing key {k}")
    for section in ("steps", "workers", "task_kinds", "transfers"):
        for item in rank.get(section, []):
            for k in keys[section]:
                want(k in item, f"{tag}{section}[] lacks {k}")
    for k in keys["overlap"]:
        want(k in rank.get("overlap", {}), f"{tag}overlap lacks {k}")
    ran = [t for t in records(d + "/tasks.rec") if "StartTime" in t]
    busy, steps = {}, {}
    for t in ran:
        w = int(t["WorkerId"])
        busy[w] = busy.get(w, 0.0) + (float(t["EndTime"]) - float(t["StartTime"])) / 1e3
        if "Iteration" in t:
            s = steps.setdefault(int(t["Iteration"].split()[0]), [math.inf, -math.inf])
            s[0] = min(s[0], float(t["StartTime"]))
            s[1] = max(s[1], float(t["EndTime"]))
    workers = {w["id"]: w for w in rank["workers"]}
    for w, seconds in busy.items():
        got = workers.get(w, {}).get("busy_s")
        want(got is not None and abs(got - seconds) <= 1e-6, f"{tag}worker {w}: busy_s {got}, tasks.rec says {seconds}")
    for w in rank["workers"]:
        want(w["kind"] == "cpu" and w["name"] == f"CPU{w['id']}", f"{tag}worker {w['id']}: {w['name']} {w['kind']}")
        want(w["steady_busy_fraction"] is not None and 0 < w["steady_busy_fraction"] <= 1, f"{tag}steady busy")
        total = w["busy_s"] + w["overhead_s"] + w["idle_s"]
        want(abs(total - w["window_s"]) < 1e-9, f"{tag}worker {w['id']}: busy+overhead+idle {total} != {w['window_s']}")
    want(sorted(steps) == [1, 2, 3], f"{tag}tasks.rec steps {sorted(steps)}")
    want([s["step"] for s in rank["steps"]] == sorted(steps), f"{tag}report steps {[s['step'] for s in rank['steps']]}")
    for s in rank["steps"]:
        begin, end = steps.get(s["step"], (0, 0))
        want(abs(s["wall_s"] - (end - begin) / 1e3) < 1e-9, f"{tag}step {s['step']}: wall_s {s['wall_s']}")
        want(0 < s["critical_path_s"] <= s["wall_s"] * 1.0001, f"{tag}step {s['step']}: critical path {s['critical_path_s']}")
        want(len(s["critical_path"]) > 0, f"{tag}step {s['step']}: empty critical path")
    want(rank["tasks_executed"] == len(ran), f"{tag}tasks_executed {rank['tasks_executed']} != {len(ran)}")
    want(sum(k["count"] for k in rank["task_kinds"]) == len(ran), f"{tag}task kind counts")
    want(abs(rank["wall_s"] - (max(float(t["EndTime"]) for t in ran) - min(float(t["StartTime"]) for t in ran)) / 1e3) < 1e-9,
         f"{tag}wall_s {rank['wall_s']}")
    want(rank["steady_from"] == 2, f"{tag}steady_from {rank['steady_from']}")
    want(rank["overlap"]["adam_tasks"] > 0 and rank["overlap"]["adam_concurrent_fraction"] is not None, f"{tag}AdamW")
    collectives = len(dirs) > 1
    want((rank["overlap"]["collective_concurrent_fraction"] is not None) == collectives, f"{tag}collective fraction")
    check_bound(rank["bound"], ran, d + "/step_bound.json",
                lambda begin, end: transfers_between(d + "/paje.trace", begin, end), want, tag)
    paje_bytes = transfer_bytes(d + "/paje.trace")
    want(sum(t["bytes"] for t in rank["transfers"]) == paje_bytes,
         f"{tag}transfer bytes {sum(t['bytes'] for t in rank['transfers'])} != paje.trace's {paje_bytes}")
for p in problems:
    print("  " + p)
print(f"  {len(ranks)} report(s) checked against tasks.rec and paje.trace: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
}

# expect_error CODE WHAT ARGS...: `starzero trace ARGS` exits CODE with one line on stderr.
expect_error() {
  local code=$1 what=$2 rc=0
  shift 2
  "$starzero" trace "$@" > "$work/err.out" 2> "$work/err.txt" || rc=$?
  if [ "$rc" -ne "$code" ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ]; then
    fail "$what: exit $rc (want $code), stderr: $(head -c 300 "$work/err.txt")"
  else
    echo "  $what: exit $rc: $(cat "$work/err.txt")"
  fi
}

# cut_mid_line FILE OUT: the first half of FILE, cut inside a line (as a killed writer leaves it).
cut_mid_line() {
  python3 - "$1" "$2" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
cut = len(data) // 2
while data[cut - 1:cut + 1].count(b"\n"):
    cut += 1
open(sys.argv[2], "wb").write(data[:cut])
PY
}

# expect_svg SVG: gnuplot's SVG, not empty.
expect_svg() {
  [ -s "$1" ] && grep -q '<svg' "$1" && grep -q 'Produced by GNUPLOT' "$1" || fail "$1 is not an SVG written by gnuplot"
}

case $part in
single)
  "$starzero" "${tiny[@]}" --trace "$work/trace" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "traced run"; exit 1; }
  "$starzero" trace "$work/trace" --json > "$work/report.json" || fail "starzero trace --json"
  check_report "$work/report.json" "$work/trace" || fail "the report disagrees with the trace files"
  # The NVMe tier: optimizer state on a StarPU disk node, so paje.trace has RAM -> DISK0 links.
  mkdir "$work/nvme"
  "$starzero" "${tiny[@]}" --offload-optimizer nvme --nvme-path "$work/nvme" --host-mem-limit 64 \
    --trace "$work/nvme-trace" > "$work/nvme.log" 2>&1 || { cat "$work/nvme.log"; fail "traced NVMe run"; exit 1; }
  "$starzero" trace "$work/nvme-trace" --json > "$work/nvme.json" || fail "starzero trace --json (NVMe)"
  check_report "$work/nvme.json" "$work/nvme-trace" || fail "the NVMe report disagrees with the trace files"
  python3 - "$work/nvme.json" <<'PY' || fail "no RAM -> DISK0 transfers in the NVMe report"
import json, sys
links = {(t["src"], t["dst"]): t for t in json.load(open(sys.argv[1]))["transfers"]}
t = links.get(("RAM", "DISK0"))
print(f"  NVMe run links: {sorted(links)}")
sys.exit(0 if t and t["bytes"] > 0 and t["count"] > 0 and 0 <= t["hidden_fraction"] <= 1 else 1)
PY
  # Markdown and the chart.
  "$starzero" trace "$work/trace" --svg "$work/chart.svg" > "$work/report.md" || fail "starzero trace --svg"
  for section in "# Trace report" "## Steps" "## Workers" "## Task kinds" "## Transfers" "## Overlap" "## Bound" \
                 "## Critical paths"; do
    grep -q "^$section" "$work/report.md" || fail "markdown lacks '$section'"
  done
  expect_svg "$work/chart.svg"
  grep -q 'CPU1' "$work/chart.svg" || fail "the chart has no CPU1 lane"
  grep -q "fill = 'rgb( *32, *32, *32)'" "$work/chart.svg" || fail "the chart has no critical-path band (#202020)"
  "$starzero" trace "$work/nvme-trace" --svg "$work/nvme.svg" --steady-from 3 > /dev/null || fail "--svg of the NVMe run"
  expect_svg "$work/nvme.svg"
  grep -q 'RAM-&gt;DISK0\|RAM->DISK0' "$work/nvme.svg" || fail "the NVMe chart has no RAM->DISK0 lane"
  # ViTE still reads the trace.
  vite_rc=0
  (cd "$work/trace" && QT_QPA_PLATFORM=offscreen timeout -k 5 120 vite -f paje.trace -e vite.svg) > "$work/vite.log" 2>&1 \
    || vite_rc=$?
  summary=$(grep -Eo '[0-9]+ errors? and [0-9]+ warnings?' "$work/vite.log" | tail -n 1)
  [ "$vite_rc" -eq 0 ] && [ -n "$summary" ] && [ "${summary%% *}" = 0 ] \
    || fail "ViTE (exit $vite_rc): '${summary:-no summary}': $(tail -n 3 "$work/vite.log")"
  echo "  ViTE: $summary"
  # Bad input.
  expect_error 2 "missing DIR" "$work/no-such-dir"
  mkdir "$work/empty"
  expect_error 2 "DIR without tasks.rec" "$work/empty"
  for file in tasks.rec trace.rec paje.trace; do
    cp -r "$work/trace" "$work/cut-$file"
    cut_mid_line "$work/trace/$file" "$work/cut-$file/$file"
    expect_error 2 "$file cut in the middle of a line" "$work/cut-$file"
  done
  cp -r "$work/trace" "$work/bad-paje"
  printf '18\t1.0\tF\n' >> "$work/bad-paje/paje.trace"
  expect_error 2 "paje.trace with a short link line" "$work/bad-paje"
  cp -r "$work/trace" "$work/bad-bound"
  sed -i 's/"compute_device": "CPU"/"compute_device": 7/' "$work/bad-bound/step_bound.json"
  expect_error 2 "a malformed step_bound.json" "$work/bad-bound"
  # Without the run's figures the report has no bound, and says why.
  cp -r "$work/trace" "$work/no-bound"
  rm "$work/no-bound/step_bound.json"
  "$starzero" trace "$work/no-bound" > "$work/no-bound.md" || fail "starzero trace without step_bound.json"
  grep -q "^No bound: no step_bound.json beside the trace" "$work/no-bound.md" || fail "no 'No bound' line"
  expect_error 2 "unknown flag" "$work/trace" --no-such-flag
  expect_error 2 "--steady-from past the last step" "$work/trace" --steady-from 4
  mkdir "$work/bin"
  rc=0
  PATH="$work/bin" "$starzero" trace "$work/trace" --svg "$work/none.svg" > /dev/null 2> "$work/err.txt" || rc=$?
  [ "$rc" -eq 1 ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] && [ ! -e "$work/none.svg" ] \
    || fail "without gnuplot: exit $rc, stderr: $(cat "$work/err.txt")"
  echo "  no gnuplot: exit $rc: $(cat "$work/err.txt")"
  ;;
ranks)
  "${mpirun[@]}" -np 2 "$starzero" "${tiny[@]}" --stage 2 --cpu-workers 1 --trace "$work/trace" > "$work/train.log" 2>&1 \
    || { cat "$work/train.log"; fail "traced 2-rank run"; exit 1; }
  "$starzero" trace "$work/trace" --json > "$work/report.json" || fail "starzero trace --json (2 ranks)"
  check_report "$work/report.json" "$work/trace/rank0" "$work/trace/rank1" || fail "the 2-rank report disagrees"
  "$starzero" trace "$work/trace" --svg "$work/chart.svg" > "$work/report.md" || fail "starzero trace --svg (2 ranks)"
  grep -q "^## Rank 0" "$work/report.md" && grep -q "^## Rank 1" "$work/report.md" || fail "markdown lacks rank sections"
  grep -q "^### Critical paths" "$work/report.md" || fail "markdown lacks the ranks' subsections"
  expect_svg "$work/chart.svg"
  grep -q 'r1 CPU0' "$work/chart.svg" || fail "the chart has no lane of rank 1"
  ;;
*)
  echo "trace_report_test.sh: unknown part '$part' (single, ranks)" >&2
  exit 2
  ;;
esac
finish "trace report: part $part passed"
