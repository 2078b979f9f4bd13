#!/usr/bin/env bash
# starzero-sim (docs/simulation.md): the training task graph on simulated machines.
# - The named machines give StarPU their workers: h200x1 one CUDA worker, h200x8 eight, a100x1 one;
#   the banner names the machine and every time is labelled predicted.
# - A folder written by `starzero-sim platform` (the same generator as `starzero platform`) is
#   accepted, with its machine's figures.
# - The prediction is deterministic: the same run twice gives the same step times.
# - Durations follow the platform's roofline: an A100 step takes longer than an H200 step.
# - The summary's step bound (and the trace report's) from the machine's figures; no simulated step
#   beats it.
# - Activation offload under a device memory limit (384 MiB: StarPU evicts) moves data both ways over PCIe, and the trace
#   (simulated times) holds the activation_fetch tasks on the CUDA worker, each after its gate.
# - A model whose host state is far larger than this machine's memory (llama3-8B under CPU offload:
#   128 GB) simulates: its host buffers are folded, so it takes address space, not memory.
# - With the speculative update, the CPU AdamW pool goes from layer 0 up once the backward ends,
#   and the predicted step is shorter than the synchronous one.
# - starzero-sim sweep compares policies on the simulated machine.
# - What a simulation cannot do exits 2: saves, validation, an unknown machine.
# Usage: simulation_test.sh STARZERO_SIM
set -euo pipefail
sim=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 13 20000
tiny=(--preset tiny --layers 4 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --data "$work/text.txt"
  --steps 3 --sched dmda)
steps() { grep -oE "^step [0-9]+/[0-9]+ \| lr [0-9.e+-]+ \| predicted [0-9.]+ ms" "$1"; }
last_ms() { steps "$1" | tail -n1 | grep -oE "[0-9.]+ ms" | grep -oE "[0-9.]+"; }

for machine in h200x1:1 h200x8:8 a100x1:1; do
  name=${machine%%:*} gpus=${machine##*:}
  "$sim" train "${tiny[@]}" --platform "$name" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; continue; }
  grep -q "^simulated machine $name: .*every time below is predicted" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: banner"; }
  grep -qE "[0-9]+ CPU \+ $gpus CUDA workers" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: not $gpus CUDA workers"; }
  [ "$(steps "$work/$name.log" | wc -l)" -eq 3 ] || { cat "$work/$name.log"; fail "$name: three predicted steps"; }
  grep -q "^summary (predicted on the simulated machine)" "$work/$name.log" || fail "$name: summary"
  if grep -qE "loss [0-9]" "$work/$name.log"; then fail "$name: a loss printed from a simulation"; fi
done

# Deterministic: the same prediction twice.
"$sim" train "${tiny[@]}" --platform h200x1 > "$work/again.log" 2>&1 || fail "h200x1 again"
[ "$(steps "$work/h200x1.log")" = "$(steps "$work/again.log")" ] || fail "two runs predict different times"

# A platform folder with its machine; a bigger model, where the GPUs' figures matter.
"$sim" platform a100x1 --out "$work/platforms" > /dev/null || fail "starzero-sim platform"
bigger=(--preset tiny --layers 4 --channels 512 --heads 8 --max-seq 256 --seq 256 --batch 8 --data "$work/text.txt"
  --steps 3 --sched dmda)
"$sim" train "${bigger[@]}" --platform "$work/platforms" > "$work/dir.log" 2>&1 || { cat "$work/dir.log"; fail "--platform DIR"; }
grep -q "^simulated machine a100x1:" "$work/dir.log" || { cat "$work/dir.log"; fail "--platform DIR: not the a100x1 machine"; }
"$sim" train "${bigger[@]}" --platform h200x1 > "$work/h200.log" 2>&1 || fail "bigger on h200x1"
python3 - "$(last_ms "$work/dir.log")" "$(last_ms "$work/h200.log")" <<'PY' || fail "an A100 step is not slower than an H200 step: $(last_ms "$work/dir.log") vs $(last_ms "$work/h200.log") ms"
import sys
a100, h200 = map(float, sys.argv[1:])
assert a100 > h200, (a100, h200)
PY

# The step bound (docs/simulation.md, "Step bound") of the bigger model with the optimizer on the
# host of h200x1: each resource's time from figures written out here, the CPU AdamW (62 of 64 cores)
# binds, and no simulated step beats its bound. The trace report's bound comes from the same
# figures (step_bound.json) and the CUDA worker's tasks' FLOPs.
"$sim" train "${bigger[@]}" --steps 4 --platform h200x1 --offload-optimizer cpu --trace "$work/bound" \
  > "$work/bound.log" 2>&1 || { cat "$work/bound.log"; fail "bigger with the optimizer offloaded"; }
"$sim" trace "$work/bound" --json > "$work/bound.json" || fail "trace report of the offloaded run"
python3 - "$work/bound.log" "$work/bound.json" <<'PY' || fail "the step bound: $(grep -A6 '^step bound' "$work/bound.log")"
import json, re, statistics, sys
log = open(sys.argv[1]).read()
L, C, T, B, Vp, N = 4, 512, 256, 8, 256, 8 * 256
psi = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops = L * (72 * N * C * C + 14 * B * T * T * C) + 6 * N * Vp * C
want = {"GPU compute": flops / (989e12 * 0.75), "CPU AdamW": 28 * psi / (62 * 307.2e9 / 64 * 0.8),
        "PCIe host->GPU": 2 * psi / 55e9, "PCIe GPU->host": 2 * psi / 55e9, "disk": 0.0}
lines = log[log.index("step bound per rank, from h200x1's figures"):].splitlines()
for name, line in zip(want, lines[1:6]):
    m = re.match(r"  %s +([0-9.e+-]+) s " % re.escape(name), line)
    assert m, line
    assert abs(float(m.group(1)) - want[name]) <= 5e-5 * want[name] + 5e-5, (name, m.group(1), want[name])
assert lines[2].endswith("<- bound"), lines[2]
m = re.fullmatch(r"steady step ([0-9.]+) s, bound ([0-9.e+-]+) s \(CPU AdamW\), efficiency ([0-9.]+) %", lines[6])
assert m, lines[6]
steps = [float(x) / 1e3 for x in re.findall(r"^step [2-4]/4 \|.*\| predicted ([0-9.]+) ms", log, re.M)]
assert len(steps) == 3 and abs(float(m.group(1)) - statistics.median(steps)) <= 1e-4, (m.group(1), steps)
assert float(m.group(3)) <= 100.0, "a simulated step beat its bound: " + lines[6]
bound = json.load(open(sys.argv[2]))["bound"]
assert bound["compute_device"] == "GPU" and bound["compute_from"] == "trace" and bound["adam_from"] == "trace", bound
assert abs(bound["adam_bytes"] - 28 * psi) <= 1e-3 * 28 * psi, (bound["adam_bytes"], 28 * psi)
# The tasks' declared FLOPs: the formula's matmuls and attention, plus the element-wise tasks it
# leaves out (0.4 % here).
assert flops <= bound["compute_flops"] <= 1.01 * flops, (bound["compute_flops"], flops)
assert bound["efficiency"] <= 1.0 and bound["binding"] == "cpu_adam", bound
PY

# The same run with the speculative update: each layer's CPU AdamW starts once its gradient is
# reduced, and the layers still waiting for the pool when the backward ends take it from layer 0 up
# (CpuAdamPool::turn), so that the next forward starts on the first one done: here layer 1's
# gradient arrives before layer 0's and its AdamW still runs after layer 0's, every step. The
# predicted step is shorter than the synchronous one.
"$sim" train "${bigger[@]}" --steps 4 --platform h200x1 --offload-optimizer cpu --speculative-update \
  --trace "$work/speculative" > "$work/speculative.log" 2>&1 || { cat "$work/speculative.log"; fail "speculative update"; }
"$sim" trace "$work/speculative" --json > "$work/speculative.json" || fail "trace report of the speculative run"
PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")/.." python3 - "$work/speculative/tasks.rec" "$work/bound.log" \
  "$work/speculative.log" "$work/bound.json" "$work/speculative.json" <<'PY' || fail "speculative update: the CPU AdamW pool's turns, the step or the overlap"
import re, sys
import tasks_rec
orders = tasks_rec.update_order(tasks_rec.read(sys.argv[1]))
print(f"  speculative AdamW start order per step: {orders}")
assert len(orders) == 4 and all(o.index(0) < o.index(1) for o in orders.values()), orders
sync, spec = (float(re.search(r"^steady step ([0-9.]+) s", open(f).read(), re.M).group(1)) for f in sys.argv[2:4])
print(f"  steady step: synchronous {sync} s, speculative {spec} s (predicted)")
assert spec < sync, (spec, sync)
# The trace report's share of the steady steps' CPU AdamW under the GPU's tasks: more of it with
# the speculative update; and the same figure computed here from tasks.rec.
import json
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
PY

# Activation offload under a device limit: write-backs and fetches cross PCIe; the fetch tasks
# run on the CUDA worker, after the gate block's backward.
offload=(--preset tiny --layers 6 --channels 256 --heads 4 --max-seq 256 --seq 256 --batch 16 --data "$work/text.txt"
  --steps 2 --sched dmda --precision fp32 --platform h200x1)
"$sim" train "${offload[@]}" --trace "$work/plain" > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; fail "plain"; }
"$sim" train "${offload[@]}" --recompute full --recompute-window 0 --offload-activations cpu --cuda-mem-limit 384 \
  --trace "$work/off" > "$work/off.log" 2>&1 || { cat "$work/off.log"; fail "offload under a limit"; }
python3 - "$work/plain/tasks.rec" "$work/off/tasks.rec" <<'PY' || fail "activation offload: tasks or transfers not as expected"
import collections, sys
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
PY
for kind in plain off; do "$sim" trace "$work/$kind" > "$work/$kind.report" 2>&1 || fail "trace report of $kind"; done
bytes() { grep -E "^\| $1 \|" "$2" | awk -F'|' '{print $3}' | tr -d ' '; }
down_plain=$(bytes "GPU0 → RAM" "$work/plain.report") down_off=$(bytes "GPU0 → RAM" "$work/off.report")
up_off=$(bytes "RAM → GPU0" "$work/off.report")
[ -n "$down_off" ] && [ -n "$up_off" ] || { cat "$work/off.report"; fail "offload: no transfers in the report"; }
echo "GPU0 → RAM: $down_plain without offload, $down_off with offload under 384 MiB; RAM → GPU0: $up_off"

# Larger than this machine: llama3-8B with its optimizer on the host. /usr/bin/time's maximum RSS counts
# every mapping of the fold (the whole 110 GB), so the memory the run takes is sampled from
# /proc: anonymous pages and page tables.
python3 - "$work/llama.bin" <<'PY'
import struct, sys
n = 4096
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240801, 7, n, *[0] * 253))
    f.write(struct.pack("<%dI" % n, *[(i * 7919) % 128256 for i in range(n)]))
PY
"$sim" train --model llama3 --preset llama3-8B --batch 1 --seq 16 --data "$work/llama.bin" --steps 1 --sched dmda \
  --platform h200x1 --offload-optimizer cpu > "$work/8b.log" 2>&1 &
pid=$! start=$SECONDS peak_kb=0
while kill -0 "$pid" 2> /dev/null; do
  kb=$(awk '/^(RssAnon|RssShmem|VmPTE):/ {s += $2} END {print s + 0}' "/proc/$pid/status" 2> /dev/null || echo 0)
  if [ "$kb" -gt "$peak_kb" ]; then peak_kb=$kb; fi
  if [ $((SECONDS - start)) -gt 120 ]; then kill "$pid"; fi
  sleep 0.2
done
if wait "$pid"; then
  host=$(awk '$1 == "0" && $2 == "host" {print $NF}' "$work/8b.log")
  [ "$(steps "$work/8b.log" | wc -l)" -eq 1 ] || { cat "$work/8b.log"; fail "llama3-8B: one predicted step"; }
  [ "${host:-0}" -gt 100000000000 ] || { cat "$work/8b.log"; fail "llama3-8B: ${host:-no} host bytes, not 128 GB"; }
  [ "$peak_kb" -lt 8000000 ] || fail "llama3-8B: $((peak_kb / 1024)) MiB of memory, folded buffers take none"
  echo "llama3-8B: ${host} host bytes simulated in $((SECONDS - start)) s with at most $((peak_kb / 1024)) MiB"
else
  cat "$work/8b.log"
  fail "llama3-8B larger than this machine (killed after 120 s?)"
fi

# starzero-sim sweep: each policy's simulated training, compared (SimGrid takes the `--` off the
# command line, so a bare `train` starts the training's flags too).
"$sim" sweep --sched dmda,eager --priorities none --repeat 1 --out "$work/sweep" -- train --preset tiny --layers 2 \
  --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --data "$work/text.txt" --steps 3 --platform h200x1 \
  > "$work/sweep.log" 2>&1 || { cat "$work/sweep.log"; fail "starzero-sim sweep"; }
python3 - "$work/sweep/sweep.json" <<'PY' || { cat "$work/sweep.log"; fail "sweep.json: not one row per policy"; }
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["combinations"] if isinstance(rows, dict) and "combinations" in rows else rows
text = json.dumps(rows)
assert "dmda" in text and "eager" in text, text[:400]
PY

expect_bad_input "an unknown machine" "$sim" train "${tiny[@]}" --platform h900x3
expect_bad_input "a folder without a machine" "$sim" train "${tiny[@]}" --platform "$work"
expect_bad_input "a save" "$sim" train "${tiny[@]}" --checkpoint-out "$work/x.bin"
expect_bad_input "validation" "$sim" train "${tiny[@]}" --val-every 2
finish "simulation: passed"
