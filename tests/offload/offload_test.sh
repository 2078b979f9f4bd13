#!/usr/bin/env bash
# ZeRO-Offload on real ranks (mpirun on this machine), fp32, a small GPT with padding:
#  1. offloaded training equals plain training: the CPU AdamW (fused SIMD kernel) is
#     bit-identical to the device kernel's CPU path, so one rank gives byte-identical
#     checkpoints; on 2 ranks stages 1-3 with --offload-optimizer cpu, stage 3 with
#     --offload-params cpu, and the NVMe tier (a StarPU disk node under a host-memory limit)
#     give the parameters of plain training at the same stage;
#  2. the placement report's device/host/disk bytes equal `starzero plan`'s formulas for the
#     padded layers;
#  3. the pinned-memory fallback: with CAP_IPC_LOCK dropped and RLIMIT_MEMLOCK at 64 KiB the
#     run warns, uses pageable memory and trains identically;
#  4. --delayed-update: with a warm-up longer than the run it is plain training; after the
#     warm-up it changes the losses (the documented one-step staleness), is the same on 1 and
#     2 ranks, and a run saved and resumed mid-way ends with the uninterrupted run's checkpoint;
#  5. impossible configurations exit 2 before training.
# Usage: offload_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 7 12000

# C = 34: layer sizes are not multiples of 2, so the shards are padded.
L=2; C=34; NH=2; T=16; B=4; STEPS=5
common=(train --data "$work/data.txt" --preset tiny --layers $L --channels $C --heads $NH --max-seq $T --seq $T
        --batch $B --steps $STEPS --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3
        --warmup 0 --sample-tokens 2 --seed 3)

# run NAME NP ARGS...: one training run writing $work/NAME.bin and $work/NAME.log.
run() {
  local name=$1 np=$2; shift 2
  local cmd=("$starzero" "${common[@]}" --checkpoint-out "$work/$name.bin" "$@")
  [ "$np" -gt 1 ] && cmd=("${mpirun[@]}" -np "$np" "${cmd[@]}")
  if ! timeout 300 "${cmd[@]}" > "$work/$name.log" 2>&1; then
    tail -n 20 "$work/$name.log"; fail "$name did not finish"; return 1
  fi
}

# same_params A B TOL: the final parameters of two runs differ by at most TOL (0: bitwise).
same_params() {
  python3 "$here/check_offload.py" same-params "$work/$1.bin" "$work/$2.bin" "$3" "$1 vs $2"
}

# --- 1. one rank: plain, optimizer offload cpu, NVMe tier: byte-identical checkpoints --------
run plain1 1
run cpu1 1 --offload-optimizer cpu
cmp -s "$work/plain1.bin" "$work/cpu1.bin" || fail "one rank: --offload-optimizer cpu changed the checkpoint"
cmp -s "$work/plain1.bin.state" "$work/cpu1.bin.state" || fail "one rank: --offload-optimizer cpu changed the .state"
[ "$(losses "$work/plain1.log")" = "$(losses "$work/cpu1.log")" ] || fail "one rank: offload changed the losses"
grep -q 'offload: optimizer cpu' "$work/cpu1.log" || fail "one rank: no offload line"
# The NVMe tier with StarPU's host-memory limit at its minimum: state goes to and from disk.
run nvme1 1 --offload-optimizer nvme --nvme-path "$work/nvme1" --host-mem-limit 16
cmp -s "$work/plain1.bin" "$work/nvme1.bin" || fail "one rank: --offload-optimizer nvme changed the checkpoint"
left=$(find "$work/nvme1" -type f | wc -l)
[ "$left" -eq 0 ] || fail "nvme: $left state files left behind in --nvme-path"

# A model whose optimizer state (38.75 MB) exceeds the 32 MiB host limit: StarPU must evict it
# to the disk node and read it back every step (its own transfer statistics show it).
big=(--layers 4 --channels 256 --heads 4 --steps 2)
run big_cpu 1 "${big[@]}" --offload-optimizer cpu
STARPU_BUS_STATS=1 run big_nvme 1 "${big[@]}" --offload-optimizer nvme --nvme-path "$work/nvme_big" --host-mem-limit 32 \
  && { cmp -s "$work/big_cpu.bin" "$work/big_nvme.bin" || fail "nvme under eviction changed the checkpoint"; }
python3 "$here/check_offload.py" nvme-traffic "$work/big_nvme.log" || fail "nvme: the optimizer state did not go through the disk node"

# --- 1. two ranks: every stage, offloaded vs plain at the same stage --------------------------
for stage in 1 2 3; do
  run "plain_s$stage" 2 --stage $stage || continue
  run "cpu_s$stage" 2 --stage $stage --offload-optimizer cpu || continue
  same_params "plain_s$stage" "cpu_s$stage" 0 || fail "ZeRO-$stage: --offload-optimizer cpu changed the parameters"
  [ "$(losses "$work/plain_s$stage.log")" = "$(losses "$work/cpu_s$stage.log")" ] \
    || fail "ZeRO-$stage: offload changed the losses"
done
# One rank at ZeRO-3 with the parameters on the host: fetched per layer, the same result.
run params1 1 --stage 3 --offload-params cpu && { cmp -s "$work/plain1.bin" "$work/params1.bin" \
  || fail "one rank: --offload-params cpu changed the checkpoint"; }
run params_s3 2 --stage 3 --offload-params cpu --offload-optimizer cpu \
  && { same_params plain_s3 params_s3 0 || fail "ZeRO-3: --offload-params cpu changed the parameters"; }
run nvme_s2 2 --stage 2 --offload-optimizer nvme --nvme-path "$work/nvme2" --host-mem-limit 16 \
  && { same_params plain_s2 nvme_s2 0 || fail "ZeRO-2: --offload-optimizer nvme changed the parameters"; }

# --- 2. the placement report against the planner's formulas with padded layers ---------------
check_report() {  # check_report LOG NP STAGE OPT PARAMS
  python3 "$here/check_offload.py" placement-report "$work/$1.log" "$2" "$3" "$4" "$5" $L $C $T
}
check_report cpu1 1 0 cpu none || fail "placement report, one rank"
for stage in 1 2 3; do check_report "cpu_s$stage" 2 $stage cpu none || fail "placement report, ZeRO-$stage"; done
check_report params_s3 2 3 cpu cpu || fail "placement report, ZeRO-3 with parameter offload"
check_report nvme_s2 2 2 nvme none || fail "placement report, nvme"

# --- 3. pinned-memory fallback -----------------------------------------------------------------
# Root's CAP_IPC_LOCK ignores RLIMIT_MEMLOCK: drop it, then lower the limit to 64 KiB.
if setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock prlimit --memlock=65536 \
     "$starzero" "${common[@]}" --checkpoint-out "$work/nopin.bin" --offload-optimizer cpu \
     > "$work/nopin.log" 2>&1; then
  grep -q 'warning: cannot pin' "$work/nopin.log" || fail "fallback: no warning about pinning"
  [ "$(grep -c 'warning: cannot pin' "$work/nopin.log")" -eq 1 ] || fail "fallback: the warning is repeated"
  grep -qE 'pinned host memory: 0\.0 MB pinned, [0-9.]+ MB pageable \(fallbacks: [1-9]' "$work/nopin.log" \
    || fail "fallback: the report does not show pageable memory"
  cmp -s "$work/plain1.bin" "$work/nopin.bin" || fail "fallback: pageable memory changed the checkpoint"
else
  tail -n 20 "$work/nopin.log"; fail "fallback: the run failed instead of falling back"
fi

# --- 4. delayed update ----------------------------------------------------------------------------
run delay_never 1 --offload-optimizer cpu --delayed-update 100
cmp -s "$work/plain1.bin" "$work/delay_never.bin" || fail "delayed update inside its warm-up is not plain training"
run delay1 1 --offload-optimizer cpu --delayed-update 2
run delay2 2 --stage 3 --offload-optimizer cpu --delayed-update 2
la=$(losses "$work/plain1.log" | tr '\n' ' '); lb=$(losses "$work/delay1.log" | tr '\n' ' ')
echo "  losses plain:   $la"; echo "  losses delayed: $lb"
python3 "$here/check_offload.py" delayed-losses "$la" "$lb" || fail "delayed update: losses not as documented"
same_params delay1 delay2 1e-5 || fail "delayed update: 2 ranks at ZeRO-3 differ from one rank"
# Without offload the delayed update takes the device kernel's paths (a separate parameter buffer
# at ZeRO-0, the parameter shard at ZeRO-1/2): the same parameters.
for stage in 0 1 2; do
  run "delay_plain_s$stage" 2 --stage $stage --delayed-update 2 \
    && { same_params delay1 "delay_plain_s$stage" 1e-5 || fail "delayed update: ZeRO-$stage without offload"; }
done
[ "$(losses "$work/delay1.log" | tr '\n' ' ')" = "$(losses "$work/delay2.log" | tr '\n' ' ')" ] \
  || echo "  (losses of 1 and 2 ranks differ in the 4th decimal: reduction order)"
# The staleness, exactly: on a text whose training split is one window (18 bytes: 17 train + 1
# validation, B = 1, T = 16) every step sees the same batch, so a loss is a function of the
# parameters alone. With warm-up 2, step 4 computes on the parameters after update 2 (plain step
# 3's) and step 5 on those after update 3 (plain step 4's, since update 3's gradient was taken on
# the same parameters in both runs).
printf 'the cat sat on it.' > "$work/one_window.txt"
one=(--data "$work/one_window.txt" --batch 1 --offload-optimizer cpu)
run window_plain 1 "${one[@]}" && run window_delayed 1 "${one[@]}" --delayed-update 2 \
  && python3 "$here/check_offload.py" one-window-losses "$(losses "$work/window_plain.log")" "$(losses "$work/window_delayed.log")" \
  || fail "delayed update: the losses do not show exactly one step of staleness"
# Saved at step 3 (the pending update is applied before writing), resumed for 2 more steps:
# the same as an uninterrupted run that also saves at step 3.
run delay_saved 1 --offload-optimizer cpu --delayed-update 2 --save-every 3 --lr-final 1
run delay_part 1 --offload-optimizer cpu --delayed-update 2 --steps 3 --lr-final 1
"$starzero" "${common[@]}" --offload-optimizer cpu --delayed-update 2 --steps 2 --lr-final 1 --checkpoint-in "$work/delay_part.bin" \
  --checkpoint-out "$work/delay_resumed.bin" > "$work/delay_resumed.log" 2>&1 || fail "delayed update: resume failed"
# The resumed run's schedule ends at its own step 5 = the uninterrupted run's last step.
cmp -s "$work/delay_saved.bin" "$work/delay_resumed.bin" || fail "delayed update: resume does not continue exactly"

# --- 4b. overlap comes from the graph: with --grad-clip 0 the AdamW of the top layers does not
#     depend on the backward of layer 0 (the embedding, computed last); with exact clipping every
#     AdamW does (the global norm). Read from StarPU's own task records (tasks.rec DependsOn).
overlap() {  # overlap NAME CLIP
  "$starzero" "${common[@]}" --steps 1 --offload-optimizer cpu --cpu-workers 2 --grad-clip "$2" \
    --trace "$work/$1" > "$work/$1.log" 2>&1 || { tail -n 20 "$work/$1.log"; fail "$1: traced run"; return 1; }
  python3 "$here/check_offload.py" adamw-waits "$work/$1/tasks.rec" "$2" $L
}
overlap trace_clip 1 || fail "exact clipping: some AdamW does not wait for the whole backward"
overlap trace_noclip 0 || fail "--grad-clip 0: AdamW still waits for the whole backward"

# --- 4c. the CPU AdamW pool's turns: the tasks waiting for it take it layer by layer in the order
#     their update is waited for (offload/engine.hpp cpu_adam_pool): from layer 0 up when the next
#     forward waits (one of them, the first to be ready, may go before the rest); from the top down
#     for a delayed update, whose gradients the next backward overwrites from the top down.
turns() {  # turns NAME ascending|descending FLAGS...
  local name=$1 direction=$2; shift 2
  "$starzero" "${common[@]}" --steps 3 --offload-optimizer cpu --cpu-workers 2 "$@" \
    --trace "$work/$name" > "$work/$name.log" 2>&1 || { tail -n 20 "$work/$name.log"; fail "$name: traced run"; return 1; }
  python3 "$here/check_offload.py" adamw-turns "$work/$name/tasks.rec" "$direction"
}
turns turns_sync ascending || fail "synchronous CPU AdamW: the pool is not taken from layer 0 up"
turns turns_delayed descending --delayed-update 0 || fail "delayed CPU AdamW: the pool is not taken from the top down"

# --- 5. impossible configurations: exit 2, one line, before training ---------------------------
expect_usage() {  # expect_usage PATTERN ARGS...
  local pattern=$1; shift
  set +e; "$starzero" "${common[@]}" "$@" > "$work/usage.log" 2>&1; local rc=$?; set -e
  [ $rc -eq 2 ] || { cat "$work/usage.log"; fail "exit $rc (not 2) for: $*"; return; }
  grep -q -- "$pattern" "$work/usage.log" || { cat "$work/usage.log"; fail "no '$pattern' for: $*"; }
  ! grep -q '^step ' "$work/usage.log" || fail "trained before rejecting: $*"
}
# (several ranks need ZeRO-3 for --offload-params cpu: tests/offload/one_rank_offload_test.sh)
expect_usage 'needs --nvme-path' --offload-optimizer nvme
expect_usage 'only for --offload-optimizer nvme' --nvme-path "$work/x"
expect_usage 'is not one of\|must be one of\|--offload-optimizer' --offload-optimizer gpu
expect_usage 'too little host memory' --layers 48 --channels 4096 --heads 32 --offload-optimizer cpu
expect_usage 'is for --precision bf16' --fp32-grad-accum
expect_usage '--collectives' --collectives gloo
touch "$work/a_file"
expect_usage 'nvme-path' --offload-optimizer nvme --nvme-path "$work/a_file/sub"

# NCCL collectives need a CUDA worker on every rank: on a CPU-only machine that is an error.
set +e
"${mpirun[@]}" -np 2 "$starzero" "${common[@]}" --stage 2 --collectives nccl > "$work/nccl.log" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] && grep -q 'needs a CUDA worker on every rank' "$work/nccl.log" \
  || { cat "$work/nccl.log"; fail "--collectives nccl without GPUs: exit $rc"; }

finish "offload: all checks passed"
