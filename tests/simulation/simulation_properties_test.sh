#!/usr/bin/env bash
# starzero-sim's deterministic properties (docs/simulation.md):
# - Simulated ranks (--simulate-ranks 8, ZeRO-3): on h200x8 the banner says it is rank 0 of 8 over
#   NVLink and that collectives are an approximation, there is one CUDA worker, the collectives run
#   on it and the same run twice predicts the same steps; on a CPU-only machine every collective
#   task lasts exactly the ring formula for its shard, (N-1) latencies + (N-1) shards / bandwidth;
#   on both, rank 0 sends the bytes the ZeRO report expects, and the last step's tasks add up to
#   them.
# - PCIe bytes per step under --offload-optimizer cpu: one more step moves every layer's bf16
#   gradient down and its parameters up once, 2 bytes per parameter each way, as `starzero plan`'s
#   offload traffic says (read from the trace's transfers by size).
# - The GPU memory StarPU allocates (the trace's peak) never exceeds the platform's memory, and
#   under optimizer offload it is the plan's to 10 %.
# - Every task lasts what the simulation executed it for (durations.rec) from step 2 on; the
#   trace report lists the tasks that ran longer (step 1's first allocations).
# - A model whose parameters, gradients and optimizer state do not fit the GPU is refused (exit
#   2, naming the offload flags), and the same model with --offload-optimizer cpu runs.
# - --platform this-machine: the committed calibration gives the durations of a calibrated shape.
# - StarPU's per-task overhead a platform carries: every CPU task's execution is longer by the
#   per-task figure, plus the wake-up figure exactly when its worker idled before it (checked on
#   the trace's timeline); the same run twice predicts the same steps; an unmeasured policy is
#   charged the measured policies' mean; the summary says what was charged.
# - A delayed update flushed at the end of training under dmda with a GPU exits cleanly, with a trace.
# - `starzero-sim train --help` prints starzero's options; bad --simulate-ranks values exit 2.
# Usage: simulation_properties_test.sh STARZERO_SIM
set -euo pipefail
sim=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 17 20000
steps() { grep -oE "^step [0-9]+/[0-9]+ \| lr [0-9.e+-]+ \| predicted [0-9.]+ ms" "$1"; }

# ---- simulated ranks ------------------------------------------------------------------------------
ranks=(--preset tiny --layers 4 --channels 128 --heads 4 --max-seq 64 --seq 64 --batch 16 --data "$work/text.txt"
  --steps 3 --sched dmda --stage 3 --simulate-ranks 8)
# On 8 H200s: the collectives are NCCL's, on the CUDA worker; the link is NVLink.
"$sim" train "${ranks[@]}" --platform h200x8 --trace "$work/ranks" > "$work/ranks.log" 2>&1 || { cat "$work/ranks.log"; fail "--simulate-ranks 8"; }
grep -q "^simulated data parallel: this is rank 0 of 8 ranks, ZeRO-3, 2 sequences per rank.*over NVLink (450 GB/s, 5.0 us per ring step): an approximation" \
  "$work/ranks.log" || { cat "$work/ranks.log"; fail "simulated ranks: banner"; }
grep -qE "[0-9]+ CPU \+ 1 CUDA workers" "$work/ranks.log" || { cat "$work/ranks.log"; fail "simulated ranks: one GPU per rank"; }
"$sim" train "${ranks[@]}" --platform h200x8 > "$work/ranks2.log" 2>&1 || fail "--simulate-ranks 8, again"
[ "$(steps "$work/ranks.log")" = "$(steps "$work/ranks2.log")" ] || fail "simulated ranks: two runs predict different times"
# On a machine of 8 CPU cores and no GPU the collectives are MPI's, on CPU workers, where a task
# lasts exactly its model's time (an asynchronous CUDA task's trace time also holds its wait in the
# stream): each one's is the ring formula for its shard, over host memory (25 GB/s, 1 us a step).
"$sim" platform custom --cpus 8 --name cpu8 --out "$work/cpu8" > /dev/null || fail "a CPU machine"
"$sim" train "${ranks[@]}" --platform "$work/cpu8" --trace "$work/ranks-cpu" > "$work/ranks-cpu.log" 2>&1 \
  || { cat "$work/ranks-cpu.log"; fail "--simulate-ranks 8 on CPUs"; }
python3 - "$work/ranks.log" "$work/ranks/tasks.rec" "$work/ranks-cpu.log" "$work/ranks-cpu/tasks.rec" <<'PY' || fail "simulated ranks: collective bytes or durations"
import re, sys
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
        if on_cuda:  # the stream's wait comes on top
            assert t["running_us"] >= formula - 0.01, (t["Name"], t["us"], t["running_us"], formula)
        else:
            assert abs(t["us"] - formula) <= 0.01, (t["Name"], t["us"], formula)
    assert totals == {"all_gather": int(sent.group(1)), "reduce_scatter": int(sent.group(2))}, (totals, sent.groups())
    print(f"{link}: {len(collective)} collective tasks, each as long as the ring formula; last step {totals}")
check(sys.argv[1], sys.argv[2], "NVLink", True)
check(sys.argv[3], sys.argv[4], "host memory", False)
PY

# ---- PCIe bytes per step with the optimizer on the host -------------------------------------------
# A wide model with few tokens, so that the layers' transfers stand out by size: one more step
# (3 steps against 2) moves each layer's bf16 gradient down once and its bf16 parameters up once,
# 2 bytes per parameter each way, as `starzero plan`'s offload traffic says. What else crosses is
# the activations of the small tasks dmda runs on the CPU workers (printed, not checked).
offload=(--preset tiny --layers 4 --channels 512 --heads 8 --max-seq 16 --seq 16 --batch 1 --data "$work/text.txt"
  --sched dmda --platform h200x1 --offload-optimizer cpu)
for n in 2 3; do
  "$sim" train "${offload[@]}" --steps "$n" --trace "$work/off$n" > "$work/off$n.log" 2>&1 || { cat "$work/off$n.log"; fail "offload, $n steps"; }
done
"$sim" plan --layers 4 --hidden 512 --heads 8 --vocab 256 --seq 16 --batch 1 --stage 0 --offload-optimizer cpu --json \
  > "$work/plan.json" 2> "$work/plan.err" || { cat "$work/plan.err"; fail "plan --json"; }
python3 - "$work/off2/paje.trace" "$work/off3/paje.trace" "$work/plan.json" "$work/off3.log" <<'PY' || fail "PCIe bytes per step differ from the plan's"
import collections, json, re, sys
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
PY

# ---- GPU memory never above the platform's ----------------------------------------------------------
"$sim" platform h200x1 --gpu-mem 1GB --out "$work/small" > /dev/null || fail "a 1 GB H200"
small=(--preset tiny --layers 6 --channels 256 --heads 4 --max-seq 256 --seq 256 --batch 16 --data "$work/text.txt"
  --steps 2 --sched dmda --precision fp32 --platform "$work/small")
"$sim" train "${small[@]}" --trace "$work/small-run" > "$work/small.log" 2>&1 || { cat "$work/small.log"; fail "1 GB GPU"; }
"$sim" trace "$work/small-run" --json > "$work/small.json" 2> /dev/null || fail "trace report, 1 GB GPU"
python3 - "$work/small.json" <<'PY' || fail "GPU memory above the platform's"
import json, sys
memory = {m["node"]: m["peak_bytes"] for m in json.load(open(sys.argv[1]))["memory"]}
assert "GPU0" in memory, memory
assert 0 < memory["GPU0"] <= 1e9, memory
print(f"GPU0 peak {memory['GPU0'] / 1e6:.0f} MB of 1000 MB")
PY

# ---- every task lasts what the simulation executed it for; GPU memory as planned --------------------
# durations.rec holds what each task was simulated for; a task whose traced time is longer spent
# the rest inside the task (allocating or pinning memory, evicting, waiting) and `starzero trace`
# must say so. From step 2 on none may be: the lazily pinned host copy of an offloaded gradient
# once stretched tasks by 0.65 ms per MB (8.8 ms here, 390 ms per layer of a 13B model). Step 1
# pays for the first GPU allocations (zero_grad, about 0.18 ms each): the report must list those.
# Under the same offload run, the GPU's peak allocation is the plan's parameters, gradients and
# activations to 10 %.
timed=(--preset gpt2-124M --batch 4 --seq 256 --data "$work/text.txt" --steps 3 --sched dmda --platform h200x1
  --precision bf16 --offload-optimizer cpu)
"$sim" train "${timed[@]}" --trace "$work/timed" > "$work/timed.log" 2>&1 || { cat "$work/timed.log"; fail "timed run"; }
"$sim" trace "$work/timed" --json > "$work/timed.json" 2> /dev/null || fail "trace report, timed run"
python3 - "$work/timed" "$work/timed.json" "$work/timed.log" <<'PY' || fail "task durations or GPU memory against the simulation's"
import json, re, sys
folder, report, log = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).read()
def records(path):
    for block in open(path).read().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            yield fields
executed = {r["JobId"]: float(r["ExecutedUs"]) for r in records(f"{folder}/durations.rec")}
ran = [r for r in records(f"{folder}/tasks.rec") if "StartTime" in r]
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
PY

# ---- a model that does not fit without offload ------------------------------------------------------
big=(--preset tiny --layers 8 --channels 2048 --heads 16 --max-seq 64 --seq 64 --batch 1 --data "$work/text.txt"
  --steps 2 --sched dmda --platform "$work/small")
rc=0
"$sim" train "${big[@]}" > "$work/big.log" 2> "$work/big.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "offload-optimizer cpu" "$work/big.err" || { cat "$work/big.err"; fail "a model too large: exit $rc"; }
"$sim" train "${big[@]}" --stage 3 --offload-optimizer cpu --offload-params cpu > "$work/big-off.log" 2>&1 \
  || { cat "$work/big-off.log"; fail "the model too large, offloaded"; }
# One rank at ZeRO-0: the whole model on the host, the gradients streamed; the device holds none of
# the model states for good, only the two windows (their peaks are W+1 and G blocks of 12C² + 13C).
"$sim" train "${big[@]}" --offload-optimizer cpu --offload-params cpu > "$work/big-one.log" 2>&1 \
  || { cat "$work/big-one.log"; fail "the model too large, on the host at ZeRO-0"; }
block=$(( (12 * 2048 * 2048 + 13 * 2048) * 2 ))
grep -qE "^ +0 +device +0 +0 +0 \|" "$work/big-one.log" \
  && grep -q "parameters peak $((2 * block)) bytes, 2 layers (prefetch window W+1 = 2); gradients streamed, peak $((2 * block)) bytes" "$work/big-one.log" \
  || { cat "$work/big-one.log"; fail "one rank on the host: the device windows"; }

# ---- this-machine: the committed calibration -----------------------------------------------------------
"$sim" train --preset tiny --batch 8 --seq 64 --data "$work/text.txt" --steps 3 --sched lws --platform this-machine \
  > "$work/this.log" 2>&1 || { cat "$work/this.log"; fail "--platform this-machine"; }
share=$(grep -oE "task durations: [0-9.]+ % of the estimates from calibration" "$work/this.log" | grep -oE "[0-9.]+" | head -n1)
python3 -c "import sys; assert float(sys.argv[1]) > 50" "${share:-0}" || { cat "$work/this.log"; fail "this-machine: ${share:-no} % calibrated"; }

# ---- StarPU's per-task overhead, as calibrate measures it ------------------------------------------------
# A 2-core machine whose platform carries a measured overhead for lws (machine.json, as `starzero
# calibrate` writes it). Against the same run without it, every CPU task's execution in the trace
# is longer by the per-task figure, plus the wake-up figure exactly when its worker sat idle before
# it (read from the trace's timeline here); the summary names what it charged; dmda, not measured,
# is charged the mean of the measured policies.
"$sim" platform custom --cpus 2 --name oh --out "$work/oh0" > /dev/null || fail "a 2-core machine"
with_overhead() {  # DIR US WAKE: the 2-core machine with a measured overhead under lws
  cp -r "$work/oh0" "$1"
  python3 - "$1/bus/oh.machine.json" "$2" "$3" <<'PY'
import json, sys
path, us, wake = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
m = json.load(open(path))
m["cpu_task_overhead"] = {"lws": {"us_per_task": us, "wake_us": wake, "tasks": 100}}
json.dump(m, open(path, "w"))
PY
}
with_overhead "$work/oh-task" 2000 0
with_overhead "$work/oh-wake" 0 5000
small_cpu=(--preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --data "$work/text.txt"
  --precision fp32 --steps 3 --sched lws)
for run in oh0 oh-task oh-wake; do
  "$sim" train "${small_cpu[@]}" --platform "$work/$run" --trace "$work/$run-trace" > "$work/$run.log" 2>&1 \
    || { cat "$work/$run.log"; fail "overhead: $run"; }
done
grep -q "StarPU's overhead per task on a CPU worker: none (not measured on this platform)" "$work/oh0.log" \
  || fail "overhead: the summary of a platform without one"
grep -q "StarPU's overhead per task on a CPU worker: 2000.0 us, + 0.0 us after idling, as measured under lws" \
  "$work/oh-task.log" || { grep "task durations" "$work/oh-task.log"; fail "overhead: the summary names it"; }
python3 - "$work/oh0-trace/tasks.rec" "$work/oh-task-trace/tasks.rec" "$work/oh-wake-trace/tasks.rec" <<'PY' \
  || fail "overhead: the charged durations"
import sys
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
PY
"$sim" train "${small_cpu[@]}" --platform "$work/oh-wake" > "$work/oh-wake2.log" 2>&1 || fail "overhead: again"
[ "$(steps "$work/oh-wake.log")" = "$(steps "$work/oh-wake2.log")" ] || fail "overhead: two runs predict different times"
"$sim" train "${small_cpu[@]}" --platform "$work/oh-task" --sched dmda > "$work/oh-dmda.log" 2>&1 || fail "overhead: dmda"
grep -q "2000.0 us, + 0.0 us after idling, as measured under the other policies" "$work/oh-dmda.log" \
  || { grep "task durations" "$work/oh-dmda.log"; fail "overhead: an unmeasured policy"; }
# A platform whose overhead is malformed or negative is refused with one line.
with_overhead "$work/oh-negative" -1 0
expect_bad_input "a negative overhead" "$sim" train "${small_cpu[@]}" --platform "$work/oh-negative"
cp -r "$work/oh0" "$work/oh-broken"
sed -i 's/"disk_latency_s"/"cpu_task_overhead": {"lws": {"us_per_task": 1}}, "disk_latency_s"/' \
  "$work/oh-broken/bus/oh.machine.json"
expect_bad_input "an overhead without its fields" "$sim" train "${small_cpu[@]}" --platform "$work/oh-broken"

# ---- a delayed update under dmda with a GPU ------------------------------------------------------------
# The end of training flushes the last step's delayed update; StarPU 1.3.10 used to abort at
# shutdown on a prefetch still queued for a tensor whose unregistration it had postponed
# (runtime/tensor.cpp). The run ends cleanly and leaves its trace.
"$sim" train --preset gpt2-124M --batch 8 --seq 1024 --data "$work/text.txt" --sched dmda --platform h200x1 \
  --offload-optimizer cpu --steps 1 --delayed-update 0 --trace "$work/delayed" > "$work/delayed.log" 2>&1 \
  || { tail -3 "$work/delayed.log"; fail "--delayed-update under dmda: exit code"; }
[ -s "$work/delayed/tasks.rec" ] || fail "--delayed-update under dmda: no trace"

# --help is the program's (SimGrid would answer a bare --help with its own options).
"$sim" train --help > "$work/help.txt" 2>&1 || fail "train --help"
grep -q -- "--simulate-ranks N" "$work/help.txt" || { head -5 "$work/help.txt"; fail "train --help: not starzero's options"; }

expect_bad_input "--simulate-ranks 0" "$sim" train "${ranks[@]}" --simulate-ranks 0
expect_bad_input "--simulate-ranks x" "$sim" train "${ranks[@]}" --simulate-ranks x
expect_bad_input "a batch the simulated ranks cannot share" "$sim" train "${ranks[@]}" --batch 12
finish "simulation properties: passed"
