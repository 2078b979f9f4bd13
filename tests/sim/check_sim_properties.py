#!/usr/bin/env python3
"""The checks of sim_properties_test.sh, each a subcommand: check_sim_properties.py NAME ARGS... exits non-zero when it fails.
"""
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402


def sim_ranks():
    """RANKS_LOG RANKS_TASKS_REC CPU_LOG CPU_TASKS_REC: collective bytes and durations of simulated ranks."""
    def tasks(path):
        out, ran = [], []
        for record in open(path).read().split("\n\n"):
            f = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
            if "StartTime" in f:
                ran.append(f)
        # A CUDA task queued behind another (StarPU's pipeline of asynchronous tasks) runs from the
        # moment that one ends, but StarPU records its start only after handling that end (up to
        # 1 us later in simulation): its kernel ran from the earlier of the two.
        previous_end = {}
        for f in sorted(ran, key=lambda f: (f["WorkerId"], float(f["StartTime"]), float(f["EndTime"]))):
            start = min(float(f["StartTime"]), previous_end.get(f["WorkerId"], float(f["StartTime"])))
            previous_end[f["WorkerId"]] = float(f["EndTime"])
            if "Name" in f and re.match(r"(all_gather|reduce_scatter|all_reduce)", f["Name"]):
                f["us"] = (float(f["EndTime"]) - float(f["StartTime"])) * 1e3
                f["running_us"] = (float(f["EndTime"]) - start) * 1e3
                f["sizes"] = list(map(int, f["Sizes"].split()))
                out.append(f)
        return out
    def check(log_path, rec_path, link, on_cuda):
        log = open(log_path).read()
        sent = re.search(r"rank 0: all-gather (\d+), reduce-scatter (\d+), all-reduce (\d+)", log)
        expected = re.search(r"expected with padding: all-gather (\d+), reduce-scatter (\d+)", log)
        assert sent and expected, "no ZeRO report"
        assert sent.groups()[:2] == expected.groups(), (sent.groups(), expected.groups())
        m = re.search(rf"over {link} \(([0-9.]+) GB/s, ([0-9.]+) us per ring step\)", log)
        assert m, f"the banner names no {link} link"
        bps, step_us = float(m.group(1)) * 1e9, float(m.group(2))
        collective = tasks(rec_path)
        last = max(int(t["Iteration"]) for t in collective)
        totals = {"all_gather": 0, "reduce_scatter": 0}
        for t in collective:
            if on_cuda:  # StarPU numbers the CUDA worker first
                assert t["WorkerId"] == "0", ("not on the CUDA worker", t["Name"], t["WorkerId"])
            kind = "all_reduce" if t["Name"].startswith("all_reduce") else t["Name"].split("_")[0] + "_" + t["Name"].split("_")[1]
            if kind == "all_reduce":  # one fp32 value: 14 latencies, the bytes next to nothing
                formula = 14 * step_us
            else:
                shard = t["sizes"][0] if kind == "all_gather" else t["sizes"][1]
                formula = 7 * step_us + 7 * shard / bps * 1e6
                if int(t["Iteration"]) == last: totals[kind] += 7 * shard
            if on_cuda:  # the stream's wait comes on top; the previous task's end is itself recorded
                # up to 1 us late (above), so its kernel may have run up to 1 us longer than recorded
                assert t["running_us"] >= formula - 1.0, (t["Name"], t["us"], t["running_us"], formula)
            else:
                assert abs(t["us"] - formula) <= 0.01, (t["Name"], t["us"], formula)
        assert totals == {"all_gather": int(sent.group(1)), "reduce_scatter": int(sent.group(2))}, (totals, sent.groups())
        print(f"{link}: {len(collective)} collective tasks, each as long as the ring formula; last step {totals}")
    check(sys.argv[1], sys.argv[2], "NVLink", True)
    check(sys.argv[3], sys.argv[4], "host memory", False)


def pcie_bytes():
    """PAJE_2 PAJE_3 PLAN_JSON LOG: the PCIe bytes per step are the plan's."""
    def transfers(path):  # (source container, destination container, bytes) -> count, from the Paje links
        fields, current, started, count = {}, None, {}, collections.Counter()
        for line in open(path):
            words = line.split()
            if line.startswith("%EventDef"):
                current = words[2]
                fields[current] = [words[1], []]
            elif line.startswith("%EndEventDef"):
                current = None
            elif line.startswith("%") and current:
                fields[current][1].append(words[1])
            elif words and words[0] in fields and fields[words[0]][0] in ("PajeStartLink", "PajeEndLink"):
                f = dict(zip(fields[words[0]][1], words[1:]))
                if fields[words[0]][0] == "PajeStartLink":
                    started[f["Key"]] = (f["StartContainer"], int(float(f["Value"])))
                elif f["Key"] in started:
                    src, size = started.pop(f["Key"])
                    count[src, f["EndContainer"], size] += 1
        return count
    two, three = transfers(sys.argv[1]), transfers(sys.argv[2])
    step = {k: three[k] - two[k] for k in three if three[k] != two[k]}
    def find(node, key):
        if isinstance(node, dict):
            if key in node: return node[key]
            node = list(node.values())
        if isinstance(node, list):
            for v in node:
                r = find(v, key)
                if r is not None: return r
    traffic = find(json.load(open(sys.argv[3])), "offload_transfer_bytes")
    psi = int(re.search(r", (\d+) parameters", open(sys.argv[4]).read()).group(1))
    C, L, V, T = 512, 4, 256, 16
    layers = {2 * (12 * C * C + 13 * C): L, 2 * (V + T) * C: 1, 2 * 2 * C: 1}  # bf16 bytes per layer: blocks, embeddings, final norm
    assert sum(b * n for b, n in layers.items()) == 2 * psi == traffic / 2, (layers, psi, traffic)
    for src, dst, what in (("mm1", "mm0", "gradients down"), ("mm0", "mm1", "parameters up")):
        for size, n in layers.items():
            assert step.get((src, dst, size), 0) >= n, (what, size, step.get((src, dst, size), 0), n)
        rest = sum(b * n for (s, d, b), n in step.items() if (s, d) == (src, dst) and b not in layers)
        print(f"one step, {what}: every layer once, {2 * psi} bytes = the plan's {traffic / 2:.0f}; besides, {rest} bytes of activations")
    assert step.get(("mm1", "mm0", 2 * (12 * C * C + 13 * C)), 0) == L, "a block's gradient came down more than once"


def gpu_memory():
    """REPORT_JSON: the GPU memory peak stays under the platform's 1 GB."""
    memory = {m["node"]: m["peak_bytes"] for m in json.load(open(sys.argv[1]))["memory"]}
    assert "GPU0" in memory, memory
    assert 0 < memory["GPU0"] <= 1e9, memory
    print(f"GPU0 peak {memory['GPU0'] / 1e6:.0f} MB of 1000 MB")


def task_durations():
    """DIR REPORT_JSON LOG: task durations and GPU memory against the simulation's."""
    folder, report, log = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).read()
    executed = {r["JobId"]: float(r["ExecutedUs"]) for r in tasks_rec.records(f"{folder}/durations.rec")}
    ran = [r for r in tasks_rec.records(f"{folder}/tasks.rec") if "StartTime" in r]
    assert ran and all(r["JobId"] in executed for r in ran), "a task that ran has no executed duration"
    excess = {r["JobId"]: (float(r["EndTime"]) - float(r["StartTime"])) * 1e3 - executed[r["JobId"]] for r in ran}
    steady = [r for r in ran if r.get("Iteration", "0") not in ("0", "1")]
    worst = max(steady, key=lambda r: excess[r["JobId"]])
    assert excess[worst["JobId"]] < 1000, f"{worst['Name']} ran {excess[worst['JobId']]:.0f} us longer than simulated"
    print(f"steps 2-3: {len(steady)} tasks, the longest excess {excess[worst['JobId']]:.1f} us ({worst['Name']})")
    # The report's rule (20 us + 1 % of the execution), counted here from the files.
    stretched = [r for r in ran if excess[r["JobId"]] > 20 + 0.01 * executed[r["JobId"]]]
    s = report["stretched"]
    assert s["predicted_tasks"] == len(ran) and s["stretched_tasks"] == len(stretched), (s["stretched_tasks"], len(stretched))
    first = {k["name"]: k for k in s["kinds"]}
    assert "zero_grad" in first and first["zero_grad"]["max_excess_s"] > 1e-4, "step 1's first allocations not reported"
    # GPU memory: the placement's device row (parameters, gradients, optimizer) plus the activations.
    row = re.search(r"^\s+0\s+device\s+(\d+)\s+(\d+)\s+(\d+) \|", log, re.M)
    acts = re.search(r"^activations: ([0-9.]+) MB per micro-batch held", log, re.M)
    plan = sum(map(int, row.groups())) + float(acts.group(1)) * 1e6
    peak = {m["node"]: m["peak_bytes"] for m in report["memory"]}["GPU0"]
    assert abs(peak / plan - 1) <= 0.10, f"GPU peak {peak / 1e6:.0f} MB, plan {plan / 1e6:.0f} MB"
    print(f"GPU peak {peak / 1e6:.1f} MB, plan {plan / 1e6:.1f} MB ({100 * (peak / plan - 1):+.1f} %)")


def set_overhead():
    """MACHINE_JSON US WAKE: writes a measured per-task overhead under lws into machine.json."""
    path, us, wake = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    m = json.load(open(path))
    m["cpu_task_overhead"] = {"lws": {"us_per_task": us, "wake_us": wake, "tasks": 100}}
    json.dump(m, open(path, "w"))


def charged_overhead():
    """TASKS_REC_0 TASKS_REC_TASK TASKS_REC_WAKE: the durations charged with a per-task and a wake-up overhead."""
    def jobs(path):  # every job by id: its fields, times in ms
        out = {}
        for record in open(path).read().split("\n\n"):
            f = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
            if "JobId" in f:
                out[int(f["JobId"])] = f
        return out
    def executed(run):  # the jobs a worker executed
        return {j: f for j, f in run.items() if "StartTime" in f and "WorkerId" in f}
    base = {}
    for f in executed(jobs(sys.argv[1])).values():
        base.setdefault((f["Name"], f.get("Sizes", "")), []).append(float(f["EndTime"]) - float(f["StartTime"]))
    # The roofline gives one duration per task and shape (the trace rounds times to the ns).
    assert base and all(max(d) - min(d) < 3e-6 for d in base.values()), "durations vary"
    def charged(path, us, wake):
        run = jobs(path)
        def deps(j):
            return [int(d) for d in run[j].get("DependsOn", "").split() if int(d) in run]
        def internal(j):  # one of StarPU's own jobs (an unpartition): the trace holds no end for it
            return "EndTime" not in run[j]
        def ready(j):  # at the earliest: submitted, and every job it depends on ended (StarPU's own
            # jobs end once ready at the earliest; the simulation may charge them time)
            return max([float(run[j]["SubmitTime"])] + [ready(d) if internal(d) else float(run[d]["EndTime"])
                                                        for d in deps(j)])
        timeline, checked, idled, behind_internal = {}, 0, 0, 0
        for j, f in sorted(executed(run).items(), key=lambda item: float(item[1]["StartTime"])):
            timeline.setdefault(f["WorkerId"], []).append(j)
        for worker, ids in timeline.items():
            previous_end = 0.0
            for j in ids:
                f = run[j]
                start, end = float(f["StartTime"]), float(f["EndTime"])
                roofline = base[(f["Name"], f.get("Sizes", ""))][0]
                extra = (end - start - roofline) * 1e3  # us
                previous, previous_end = previous_end, end
                checked += 1
                assert abs(extra - us) < 1 or abs(extra - us - wake) < 1, (path, j, f["Name"], extra)
                idle = ready(j) > previous + 0.0005  # ms: ready after the worker's last task ended
                if not idle and any(internal(d) for d in deps(j)):
                    behind_internal += 1  # it may have waited for StarPU's own job: either charge
                    continue
                assert abs(extra - us - (wake if idle else 0)) < 1, (path, j, f["Name"], extra, idle)
                idled += idle
        # Both kinds occur: tasks queued while their worker ran the one before, and tasks it waited for.
        assert 0 < idled < checked - behind_internal, (path, idled, checked, behind_internal)
        return checked, idled, behind_internal
    n, _, _ = charged(sys.argv[2], 2000, 0)
    m, idled, either = charged(sys.argv[3], 0, 5000)
    print(f"overhead: {n} and {m} task durations as charged ({idled} found their worker idle, {either} behind StarPU's own jobs)")


CHECKS = {"sim-ranks": sim_ranks, "pcie-bytes": pcie_bytes, "gpu-memory": gpu_memory, "task-durations": task_durations, "set-overhead": set_overhead, "charged-overhead": charged_overhead}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
