#!/usr/bin/env python3
"""The checks of trace_report_test.sh, reading the trace files independently of starzero (its own
tasks.rec and paje.trace parsers, no C++).

Usage: check_trace_report.py report JSON DIR...   the report against each rank folder's files
       check_trace_report.py nvme-links JSON      RAM -> DISK0 transfers in an NVMe run's report
       check_trace_report.py cut-mid-line FILE OUT   FILE's first half, cut inside a line
"""
import json, math, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402

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
              "rates_source", "compute_s_by_gpu_class", "steady_steps", "compute_from", "adam_from"],
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
    want(close(bound["compute_flops"], compute), f"{tag}compute_flops {bound['compute_flops']}, tasks.rec's GFlop give {compute}")
    # On a simulated GPU the compute time is the plan's kernels by cost class (docs/sim.md); else the
    # tasks' FLOPs at the run's rate.
    by_class = run.get("planned_gpu_kernel_s")
    if bound["compute_device"] == "GPU" and by_class:
        want(bound["compute_from"] == "plan" and close(bound["compute_s"], sum(by_class.values())) and
             bound["compute_s_by_gpu_class"] == by_class, f"{tag}compute by class {bound['compute_s_by_gpu_class']}, "
             f"the run's plan gives {by_class}")
    else:
        want(bound["compute_from"] == "trace" and bound["compute_s_by_gpu_class"] is None,
             f"{tag}compute_from {bound['compute_from']}")
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


def check_report(argv):
    """JSON DIR...: the report against each rank folder's own tasks.rec, paje.trace and step_bound.json."""
    report = json.load(open(argv[0]))
    dirs = argv[1:]
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
        ran = [t for t in tasks_rec.records(d + "/tasks.rec", terminated=True) if "StartTime" in t]
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
    return 1 if problems else 0


def cut_mid_line(argv):
    """FILE OUT: the first half of FILE, cut inside a line (as a killed writer leaves it)."""
    data = open(argv[0], "rb").read()
    cut = len(data) // 2
    while data[cut - 1:cut + 1].count(b"\n"):
        cut += 1
    open(argv[1], "wb").write(data[:cut])
    return 0


def nvme_links(argv):
    """JSON: the NVMe run's report has RAM -> DISK0 transfers."""
    links = {(t["src"], t["dst"]): t for t in json.load(open(argv[0]))["transfers"]}
    t = links.get(("RAM", "DISK0"))
    print(f"  NVMe run links: {sorted(links)}")
    return 0 if t and t["bytes"] > 0 and t["count"] > 0 and 0 <= t["hidden_fraction"] <= 1 else 1


if __name__ == "__main__":
    checks = {"report": check_report, "nvme-links": nvme_links, "cut-mid-line": cut_mid_line}
    sys.exit(checks[sys.argv[1]](sys.argv[2:]))
