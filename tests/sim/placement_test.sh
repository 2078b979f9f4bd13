#!/usr/bin/env bash
# Placement with a GPU (runtime/placement.hpp, docs/scheduling.md "Placement with a GPU"), on a
# simulated H200 with 32 cores under --offload-optimizer cpu and dmda, read from each run's trace
# (tasks.rec's codelet per task, `starzero trace --json`'s worker kinds):
# - by default no model compute task (a task of an nn_* or llama_* codelet: forward, backward,
#   recomputation, loss, embedding) runs on a CPU worker, for GPT and Llama 3; the banner says so;
#   the support work still does (ZeRO-Offload's CPU AdamW);
# - with --cpu-compute on, dmda gives this GPT shape's ln1_fwd to the idle CPU workers (as it gave
#   a 13B's before the default changed): the opt-in really lets CPU workers compute;
# - `starzero-sim sweep --cpu-compute off,on` runs both and reports each (sweep.json's cpu_compute);
# - on a machine without a GPU every model task runs on the CPU workers, whichever the flag;
# - a bad --cpu-compute value exits 2 with one line.
# Usage: placement_test.sh STARZERO_SIM
set -euo pipefail
sim=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/text.txt" 19 20000
"$sim" platform h200x1 --cpus 32 --out "$work/h200" > /dev/null || fail "an H200 with 32 cores"

# A wide, shallow GPT: C=4096 gives a 10 ms CPU layernorm that dmda prefers to the GPU's queue.
gpt=(--preset tiny --layers 2 --channels 4096 --heads 32 --max-seq 1024 --seq 1024 --batch 8 --data "$work/text.txt"
  --steps 3 --sched dmda --recompute full --offload-optimizer cpu --platform "$work/h200")
llama=(--model llama3 --layers 2 --channels 1024 --heads 8 --max-seq 256 --seq 256 --batch 8 --data "$work/text.txt"
  --steps 3 --sched dmda --offload-optimizer cpu --platform "$work/h200")

# run NAME ARGS...: a traced run and its trace report.
run() {
  local name=$1
  shift
  "$sim" train "$@" --trace "$work/$name" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; return 1; }
  "$sim" trace "$work/$name" --json > "$work/$name.json" 2> "$work/$name.err" || { cat "$work/$name.err"; fail "$name: trace"; return 1; }
}

# placement TRACE_DIR [REPORT]: "<model tasks on CPU workers> <model tasks> <adamw_cpu tasks on CPU
# workers> <their kinds on CPU>" (REPORT: the trace's `starzero trace --json`, default TRACE_DIR.json).
placement() {
  python3 "$here/check_placement.py" placement "$1/tasks.rec" "${2:-$1.json}"
}

# ---- the default with a GPU: the model on the GPU only ----------------------------------------------
for model in gpt llama; do
  declare -n flags=$model
  run "$model-default" "${flags[@]}" || continue
  grep -qE "[0-9]+ CPU \+ 1 CUDA workers, model tasks on CUDA workers only" "$work/$model-default.log" \
    || { head -n 3 "$work/$model-default.log"; fail "$model: the banner does not say where model tasks run"; }
  read -r on_cpu total adam kinds <<< "$(placement "$work/$model-default")"
  echo "$model, default: $on_cpu of $total model tasks on CPU workers ($kinds); $adam CPU AdamW tasks on CPU workers"
  [ "$total" -gt 0 ] || fail "$model: no model task ran"
  [ "$on_cpu" -eq 0 ] || fail "$model, default: $on_cpu model tasks ran on CPU workers ($kinds)"
  [ "$adam" -gt 0 ] || fail "$model, default: the CPU AdamW did not run on CPU workers"
done

# ---- --cpu-compute on: CPU workers may compute, and here they do ----------------------------------------
if run gpt-on "${gpt[@]}" --cpu-compute on; then
  grep -q "model tasks on CPU and CUDA workers" "$work/gpt-on.log" || fail "--cpu-compute on: banner"
  read -r on_cpu total adam kinds <<< "$(placement "$work/gpt-on")"
  echo "gpt, --cpu-compute on: $on_cpu of $total model tasks on CPU workers ($kinds)"
  [ "$on_cpu" -gt 0 ] || fail "--cpu-compute on: no model task ran on a CPU worker"
fi

# ---- the sweep: both placements side by side -----------------------------------------------------------------
# (SimGrid takes the `--` off the command line; a bare `train` starts the training's flags.)
sweep_train=()
for a in "${gpt[@]}"; do [ "$a" = --sched ] || [ "$a" = dmda ] || sweep_train+=("$a"); done
if "$sim" sweep --sched dmda --priorities none --cpu-compute off,on --repeat 1 --out "$work/sweep" -- train \
  "${sweep_train[@]}" > "$work/sweep.log" 2>&1; then
  python3 "$here/check_placement.py" cpu-compute-sweep "$work/sweep/sweep.json" || fail "sweep --cpu-compute off,on: sweep.json"
  # Each run's report, as the sweep read it.
  read -r on_cpu total adam kinds <<< "$(placement "$work/sweep/runs/dmda_none_cpu-off_r1")"
  [ "$on_cpu" -eq 0 ] || fail "sweep, cpu compute off: $on_cpu model tasks on CPU workers ($kinds)"
  read -r on_cpu total adam kinds <<< "$(placement "$work/sweep/runs/dmda_none_cpu-on_r1")"
  [ "$on_cpu" -gt 0 ] || fail "sweep, cpu compute on: no model task on a CPU worker"
else
  cat "$work/sweep.log"
  fail "sweep --cpu-compute off,on"
fi

# ---- no GPU: everything on the CPU workers, whichever the flag --------------------------------------------
"$sim" platform custom --cpus 4 --name cpu4 --out "$work/cpu4" > /dev/null || fail "a CPU machine"
small=(--preset tiny --layers 2 --channels 64 --heads 2 --max-seq 32 --seq 32 --batch 4 --data "$work/text.txt"
  --steps 2 --sched dmda --platform "$work/cpu4")
for cc in off on; do
  run "cpu-$cc" "${small[@]}" --cpu-compute "$cc" || continue
  grep -qE "[0-9]+ CPU \+ 0 CUDA workers$" "$work/cpu-$cc.log" || fail "no GPU, --cpu-compute $cc: banner"
  read -r on_cpu total adam kinds <<< "$(placement "$work/cpu-$cc")"
  [ "$total" -gt 0 ] && [ "$on_cpu" -eq "$total" ] || fail "no GPU, --cpu-compute $cc: $on_cpu of $total model tasks on CPU workers"
done

expect_bad_input "--cpu-compute yes" "$sim" train "${small[@]}" --cpu-compute yes
expect_bad_input "--cpu-compute empty" "$sim" train "${small[@]}" --cpu-compute=
finish "placement: all checks passed"
