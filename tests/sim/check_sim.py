#!/usr/bin/env python3
"""The checks of sim_test.sh, each a subcommand: check_sim.py NAME ARGS... exits non-zero when it fails.
"""
import collections
import json
import os
import re
import statistics
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402


def a100_slower():
    """A100_MS H200_MS: an A100 step is slower than an H200 step."""
    a100, h200 = map(float, sys.argv[1:])
    assert a100 > h200, (a100, h200)


def step_bound():
    """LOG REPORT_JSON: the step bound against each resource's time computed here, and the trace report's."""
    log = open(sys.argv[1]).read()
    L, C, T, B, Vp, N = 4, 512, 256, 8, 256, 8 * 256
    psi = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    flops = L * (72 * N * C * C + 14 * B * T * T * C) + 6 * N * Vp * C
    want = {"CPU AdamW": 28 * psi / (62 * 307.2e9 / 64 * 0.8),
            "PCIe host->GPU": 2 * psi / 55e9, "PCIe GPU->host": 2 * psi / 55e9, "disk": 0.0}
    lines = log[log.index("step bound per rank, from h200x1's figures"):].splitlines()
    for name, line in zip(want, lines[2:6]):
        m = re.match(r"  %s +([0-9.e+-]+) s " % re.escape(name), line)
        assert m, line
        assert abs(float(m.group(1)) - want[name]) <= 5e-5 * want[name] + 5e-5, (name, m.group(1), want[name])
    # GPU compute: the step's kernels by cost class (docs/sim.md, "GPU cost classes"), their sum;
    # the GEMMs no faster than the measured large-GEMM rate, 0.78 of 989 TFLOP/s; and the same
    # classes as the simulation charged its GPU tasks (the summary's per-step line).
    m = re.match(r"  GPU compute +([0-9.e+-]+) s +GPU kernels by cost class: (.*)$", lines[1])
    assert m, lines[1]
    planned = {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.e+-]+) s", m.group(2))}
    assert abs(float(m.group(1)) - sum(planned.values())) <= 2e-4, (m.group(1), planned)
    matmul_flops = L * 72 * N * C * C + 6 * N * Vp * C
    assert planned["gemm"] >= matmul_flops / (989e12 * 0.78), (planned, matmul_flops)
    charged = {k: float(v) / 1e3 for k, v in re.findall(r"(\w+) ([0-9.]+) ms", re.search(
        r"^GPU time per step by cost class[^:]*: (.*)$", log, re.M).group(1))}
    for kind in ("gemm", "cudnn_attention"):
        assert abs(charged[kind] - planned[kind]) <= 0.02 * planned[kind] + 1e-4, (kind, charged, planned)
    assert lines[2].endswith("<- bound"), lines[2]
    m = re.fullmatch(r"steady step ([0-9.]+) s, bound ([0-9.e+-]+) s \(CPU AdamW\), efficiency ([0-9.]+) %", lines[6])
    assert m, lines[6]
    steps = [float(x) / 1e3 for x in re.findall(r"^step [2-4]/4 \|.*\| predicted ([0-9.]+) ms", log, re.M)]
    assert len(steps) == 3 and abs(float(m.group(1)) - statistics.median(steps)) <= 1e-4, (m.group(1), steps)
    assert float(m.group(3)) <= 100.0, "a simulated step beat its bound: " + lines[6]
    bound = json.load(open(sys.argv[2]))["bound"]
    # On a GPU the report bounds compute by the plan's kernels and their classes, as the run did.
    assert bound["compute_device"] == "GPU" and bound["compute_from"] == "plan" and bound["adam_from"] == "trace", bound
    assert abs(bound["adam_bytes"] - 28 * psi) <= 1e-3 * 28 * psi, (bound["adam_bytes"], 28 * psi)
    # The tasks' declared FLOPs: the formula's matmuls and attention, plus the element-wise tasks it
    # leaves out (0.4 % here).
    assert flops <= bound["compute_flops"] <= 1.01 * flops, (bound["compute_flops"], flops)
    assert bound["efficiency"] <= 1.0 and bound["binding"] == "cpu_adam", bound


def speculative_turns():
    """TASKS_REC BOUND_LOG SPECULATIVE_LOG BOUND_JSON SPECULATIVE_JSON: the speculative layers left go from layer 0 up, the step beats the synchronous one, the hidden fraction from tasks.rec."""
    orders = tasks_rec.update_order(tasks_rec.read(sys.argv[1]))
    print(f"  speculative AdamW start order per step: {orders}")
    assert len(orders) == 4 and all(o.index(0) < o.index(1) for o in orders.values()), orders
    sync, spec = (float(re.search(r"^steady step ([0-9.]+) s", open(f).read(), re.M).group(1)) for f in sys.argv[2:4])
    print(f"  steady step: synchronous {sync} s, speculative {spec} s (predicted)")
    assert spec < sync, (spec, sync)
    # The trace report's share of the steady steps' CPU AdamW under the GPU's tasks: more of it with
    # the speculative update; and the same figure computed here from tasks.rec.
    def hidden(report, rec):
        o = json.load(open(report))["overlap"]
        by = tasks_rec.read(rec)
        ran = [r for r in by.values() if "StartTime" in r]
        cuda = {r["WorkerId"] for r in ran if r.get("MemoryNode", "0") != "0"}
        gpu = sorted((float(r["StartTime"]), float(r["EndTime"])) for r in ran if r["WorkerId"] in cuda)
        merged = []
        for a, b in gpu:
            if merged and a <= merged[-1][1]: merged[-1][1] = max(merged[-1][1], b)
            else: merged.append([a, b])
        first = min(int(r["Iteration"]) for r in ran)
        adam = [(float(r["StartTime"]), float(r["EndTime"])) for r in ran if r["Name"].startswith("adamw")
                and r["WorkerId"] not in cuda and int(r["Iteration"]) > first]
        total = sum(b - a for a, b in adam)
        under = sum(max(0.0, min(b, y) - max(a, x)) for a, b in adam for x, y in merged)
        assert abs(o["cpu_adam_hidden_fraction"] - under / total) < 1e-6, (o, under / total)
        return o["cpu_adam_hidden_fraction"]
    h_sync, h_spec = hidden(sys.argv[4], sys.argv[1].replace("speculative/", "bound/")), hidden(sys.argv[5], sys.argv[1])
    print(f"  CPU AdamW of the steady steps under the GPU's tasks: synchronous {h_sync:.0%}, speculative {h_spec:.0%}")
    assert h_spec > h_sync, (h_spec, h_sync)


def activation_offload():
    """PLAIN_TASKS_REC OFFLOAD_TASKS_REC: activation offload adds its fetch tasks and transfers."""
    def tasks(path):
        spans = collections.defaultdict(list)
        for record in open(path).read().split("\n\n"):
            f = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
            if "Name" in f and "StartTime" in f:
                spans[f["Name"]].append((float(f["StartTime"]), float(f["EndTime"]), f.get("WorkerId")))
        return spans
    plain, off = tasks(sys.argv[1]), tasks(sys.argv[2])
    assert not any(n.startswith("activation_fetch") for n in plain), "fetch tasks without offload"
    fetches = {n: s for n, s in off.items() if n.startswith("activation_fetch")}
    assert sorted(fetches) == ["activation_fetch[%d]" % b for b in range(5)], sorted(fetches)
    for block in range(5):
        for (start, end, worker), gate, recompute in zip(sorted(fetches["activation_fetch[%d]" % block]),
                                                         sorted(off["ln1_bwd_input[%d]" % (block + 1)]),
                                                         sorted(off["ln1_recompute[%d]" % block])):
            assert worker == "0", ("not on the CUDA worker", worker)
            assert gate[1] <= start, (block, gate, start, end, recompute)


def write_llama_shard():
    """FILE: writes a Llama 3 token shard of 4096 tokens."""
    n = 4096
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<256i", 20240801, 7, n, *[0] * 253))
        f.write(struct.pack("<%dI" % n, *[(i * 7919) % 128256 for i in range(n)]))


def sweep_rows():
    """SWEEP_JSON: one row per policy."""
    rows = json.load(open(sys.argv[1]))
    rows = rows["combinations"] if isinstance(rows, dict) and "combinations" in rows else rows
    text = json.dumps(rows)
    assert "dmda" in text and "eager" in text, text[:400]


CHECKS = {"a100-slower": a100_slower, "step-bound": step_bound, "speculative-turns": speculative_turns, "activation-offload": activation_offload, "write-llama-shard": write_llama_shard, "sweep-rows": sweep_rows}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
