#!/usr/bin/env bash
# starzero-sim's deterministic properties (docs/sim.md):
# - Simulated ranks (--sim-ranks 8, ZeRO-3): on h200x8 the banner says it is rank 0 of 8 over
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
# - `starzero-sim train --help` prints starzero's options; bad --sim-ranks values exit 2.
# Usage: sim_properties_test.sh STARZERO_SIM
set -euo pipefail
sim=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 17 20000
steps() { grep -oE "^step [0-9]+/[0-9]+ \| lr [0-9.e+-]+ \| predicted [0-9.]+ ms" "$1"; }

# ---- simulated ranks ------------------------------------------------------------------------------
ranks=(--preset tiny --layers 4 --channels 128 --heads 4 --max-seq 64 --seq 64 --batch 16 --data "$work/text.txt"
  --steps 3 --sched dmda --stage 3 --sim-ranks 8)
# On 8 H200s: the collectives are NCCL's, on the CUDA worker; the link is NVLink.
"$sim" train "${ranks[@]}" --platform h200x8 --trace "$work/ranks" > "$work/ranks.log" 2>&1 || { cat "$work/ranks.log"; fail "--sim-ranks 8"; }
grep -q "^simulated data parallel: this is rank 0 of 8 ranks, ZeRO-3, 2 sequences per rank.*over NVLink (450 GB/s, 5.0 us per ring step): an approximation" \
  "$work/ranks.log" || { cat "$work/ranks.log"; fail "simulated ranks: banner"; }
grep -qE "[0-9]+ CPU \+ 1 CUDA workers" "$work/ranks.log" || { cat "$work/ranks.log"; fail "simulated ranks: one GPU per rank"; }
"$sim" train "${ranks[@]}" --platform h200x8 > "$work/ranks2.log" 2>&1 || fail "--sim-ranks 8, again"
[ "$(steps "$work/ranks.log")" = "$(steps "$work/ranks2.log")" ] || fail "simulated ranks: two runs predict different times"
# On a machine of 8 CPU cores and no GPU the collectives are MPI's, on CPU workers, where a task
# lasts exactly its model's time (an asynchronous CUDA task's trace time also holds its wait in the
# stream): each one's is the ring formula for its shard, over host memory (25 GB/s, 1 us a step).
"$sim" platform custom --cpus 8 --name cpu8 --out "$work/cpu8" > /dev/null || fail "a CPU machine"
"$sim" train "${ranks[@]}" --platform "$work/cpu8" --trace "$work/ranks-cpu" > "$work/ranks-cpu.log" 2>&1 \
  || { cat "$work/ranks-cpu.log"; fail "--sim-ranks 8 on CPUs"; }
python3 "$here/check_sim_properties.py" sim-ranks "$work/ranks.log" "$work/ranks/tasks.rec" "$work/ranks-cpu.log" "$work/ranks-cpu/tasks.rec" || fail "simulated ranks: collective bytes or durations"

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
python3 "$here/check_sim_properties.py" pcie-bytes "$work/off2/paje.trace" "$work/off3/paje.trace" "$work/plan.json" "$work/off3.log" || fail "PCIe bytes per step differ from the plan's"

# ---- GPU memory never above the platform's ----------------------------------------------------------
"$sim" platform h200x1 --gpu-mem 1GB --out "$work/small" > /dev/null || fail "a 1 GB H200"
small=(--preset tiny --layers 6 --channels 256 --heads 4 --max-seq 256 --seq 256 --batch 16 --data "$work/text.txt"
  --steps 2 --sched dmda --precision fp32 --platform "$work/small")
"$sim" train "${small[@]}" --trace "$work/small-run" > "$work/small.log" 2>&1 || { cat "$work/small.log"; fail "1 GB GPU"; }
"$sim" trace "$work/small-run" --json > "$work/small.json" 2> /dev/null || fail "trace report, 1 GB GPU"
python3 "$here/check_sim_properties.py" gpu-memory "$work/small.json" || fail "GPU memory above the platform's"

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
python3 "$here/check_sim_properties.py" task-durations "$work/timed" "$work/timed.json" "$work/timed.log" || fail "task durations or GPU memory against the simulation's"

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
  python3 "$here/check_sim_properties.py" set-overhead "$1/bus/oh.machine.json" "$2" "$3"
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
python3 "$here/check_sim_properties.py" charged-overhead "$work/oh0-trace/tasks.rec" "$work/oh-task-trace/tasks.rec" "$work/oh-wake-trace/tasks.rec" \
  || fail "overhead: the charged durations"
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
grep -q -- "--sim-ranks N" "$work/help.txt" || { head -5 "$work/help.txt"; fail "train --help: not starzero's options"; }

expect_bad_input "--sim-ranks 0" "$sim" train "${ranks[@]}" --sim-ranks 0
expect_bad_input "--sim-ranks x" "$sim" train "${ranks[@]}" --sim-ranks x
expect_bad_input "a batch the simulated ranks cannot share" "$sim" train "${ranks[@]}" --batch 12
finish "simulation properties: passed"
