#!/usr/bin/env bash
# starzero-sim (docs/sim.md): the training task graph on simulated machines.
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
# Usage: sim_test.sh STARZERO_SIM
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
python3 "$here/check_sim.py" a100-slower "$(last_ms "$work/dir.log")" "$(last_ms "$work/h200.log")" || fail "an A100 step is not slower than an H200 step: $(last_ms "$work/dir.log") vs $(last_ms "$work/h200.log") ms"

# The step bound (docs/sim.md, "Step bound") of the bigger model with the optimizer on the
# host of h200x1: each resource's time from figures written out here, the CPU AdamW (62 of 64 cores)
# binds, and no simulated step beats its bound. The trace report's bound comes from the same
# figures (step_bound.json) and the CUDA worker's tasks' FLOPs.
"$sim" train "${bigger[@]}" --steps 4 --platform h200x1 --offload-optimizer cpu --trace "$work/bound" \
  > "$work/bound.log" 2>&1 || { cat "$work/bound.log"; fail "bigger with the optimizer offloaded"; }
"$sim" trace "$work/bound" --json > "$work/bound.json" || fail "trace report of the offloaded run"
python3 "$here/check_sim.py" step-bound "$work/bound.log" "$work/bound.json" || fail "the step bound: $(grep -A6 '^step bound' "$work/bound.log")"

# The same run with the speculative update: each layer's CPU AdamW starts once its gradient is
# reduced, and the layers still waiting for the pool when the backward ends take it from layer 0 up
# (CpuAdamPool::turn), so that the next forward starts on the first one done: here layer 1's
# gradient arrives before layer 0's and its AdamW still runs after layer 0's, every step. The
# predicted step is shorter than the synchronous one.
"$sim" train "${bigger[@]}" --steps 4 --platform h200x1 --offload-optimizer cpu --speculative-update \
  --trace "$work/speculative" > "$work/speculative.log" 2>&1 || { cat "$work/speculative.log"; fail "speculative update"; }
"$sim" trace "$work/speculative" --json > "$work/speculative.json" || fail "trace report of the speculative run"
python3 "$here/check_sim.py" speculative-turns "$work/speculative/tasks.rec" "$work/bound.log" \
  "$work/speculative.log" "$work/bound.json" "$work/speculative.json" || fail "speculative update: the CPU AdamW pool's turns, the step or the overlap"

# Activation offload under a device limit: write-backs and fetches cross PCIe; the fetch tasks
# run on the CUDA worker, after the gate block's backward.
offload=(--preset tiny --layers 6 --channels 256 --heads 4 --max-seq 256 --seq 256 --batch 16 --data "$work/text.txt"
  --steps 2 --sched dmda --precision fp32 --platform h200x1)
"$sim" train "${offload[@]}" --trace "$work/plain" > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; fail "plain"; }
"$sim" train "${offload[@]}" --recompute full --recompute-window 0 --offload-activations cpu --cuda-mem-limit 384 \
  --trace "$work/off" > "$work/off.log" 2>&1 || { cat "$work/off.log"; fail "offload under a limit"; }
python3 "$here/check_sim.py" activation-offload "$work/plain/tasks.rec" "$work/off/tasks.rec" || fail "activation offload: tasks or transfers not as expected"
for kind in plain off; do "$sim" trace "$work/$kind" > "$work/$kind.report" 2>&1 || fail "trace report of $kind"; done
bytes() { grep -E "^\| $1 \|" "$2" | awk -F'|' '{print $3}' | tr -d ' '; }
down_plain=$(bytes "GPU0 → RAM" "$work/plain.report") down_off=$(bytes "GPU0 → RAM" "$work/off.report")
up_off=$(bytes "RAM → GPU0" "$work/off.report")
[ -n "$down_off" ] && [ -n "$up_off" ] || { cat "$work/off.report"; fail "offload: no transfers in the report"; }
echo "GPU0 → RAM: $down_plain without offload, $down_off with offload under 384 MiB; RAM → GPU0: $up_off"

# Larger than this machine: llama3-8B with its optimizer on the host. /usr/bin/time's maximum RSS counts
# every mapping of the fold (the whole 110 GB), so the memory the run takes is sampled from
# /proc: anonymous pages and page tables.
python3 "$here/check_sim.py" write-llama-shard "$work/llama.bin"
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
python3 "$here/check_sim.py" sweep-rows "$work/sweep/sweep.json" || { cat "$work/sweep.log"; fail "sweep.json: not one row per policy"; }

expect_bad_input "an unknown machine" "$sim" train "${tiny[@]}" --platform h900x3
expect_bad_input "a folder without a machine" "$sim" train "${tiny[@]}" --platform "$work"
expect_bad_input "a save" "$sim" train "${tiny[@]}" --checkpoint-out "$work/x.bin"
expect_bad_input "validation" "$sim" train "${tiny[@]}" --val-every 2
finish "simulation: passed"
