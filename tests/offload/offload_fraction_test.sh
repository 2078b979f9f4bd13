#!/usr/bin/env bash
# The optimizer state split between the device and the host (--offload-optimizer-fraction), on
# this CPU-only machine, where the device AdamW is its CPU implementation (the fused SIMD kernel
# of the CPU AdamW: optimizers/adamw_codelet.cpp):
#  1. a split state trains bit for bit as all-CPU AdamW (F = 1): byte-identical checkpoints and
#     .state files on one rank (fp32 and bf16, with clipping and without, the delayed update, the
#     NVMe tier, GPT and Llama 3), and the same parameters on two ranks at ZeRO-1, 2 and 3; F = 0 too;
#  2. the split follows the rule (the last layers holding at least F·Ψ are offloaded), the banner
#     and the placement report name both sides, and the bytes each place holds for good equal
#     the rule's layers and `starzero plan`'s figures (plan+pad);
#  3. auto on a machine without a GPU offloads all of it (F = 1);
#  4. bad values exit 2 with one line, before training.
# Usage: offload_fraction_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 13 12000

# C = 34: the shards of two ranks are padded. Layers: embedding 256·34 + 16·34, two blocks, lnf.
L=2; C=34; T=16
common=(train --data "$work/data.txt" --preset tiny --layers $L --channels $C --heads 2 --max-seq $T --seq $T
        --batch 4 --steps 4 --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3
        --warmup 0 --sample-tokens 2 --seed 5)

run() {  # run NAME NP ARGS...: a training run writing $work/NAME.bin and $work/NAME.log
  local name=$1 np=$2; shift 2
  local cmd=("$starzero" "${common[@]}" --checkpoint-out "$work/$name.bin" "$@")
  [ "$np" -gt 1 ] && cmd=("${mpirun[@]}" -np "$np" "${cmd[@]}")
  if ! timeout 300 "${cmd[@]}" > "$work/$name.log" 2>&1; then
    tail -n 20 "$work/$name.log"; fail "$name did not finish"; return 1
  fi
}
identical() {  # identical A B WHAT: byte-identical checkpoints and .state files
  cmp -s "$work/$1.bin" "$work/$2.bin" || fail "$3: the checkpoint differs ($1 vs $2)"
  cmp -s "$work/$1.bin.state" "$work/$2.bin.state" || fail "$3: the .state differs ($1 vs $2)"
  [ "$(losses "$work/$1.log")" = "$(losses "$work/$2.log")" ] || fail "$3: the losses differ ($1 vs $2)"
}

# --- 1. bitwise: a split state against all-CPU AdamW -----------------------------------------
run all1 1 --offload-optimizer cpu
run half1 1 --offload-optimizer cpu --offload-optimizer-fraction 0.5 && identical all1 half1 "fp32, F = 0.5"
run zero1 1 --offload-optimizer cpu --offload-optimizer-fraction 0 && identical all1 zero1 "fp32, F = 0"
run noclip_all 1 --offload-optimizer cpu --grad-clip 0
run noclip_half 1 --offload-optimizer cpu --offload-optimizer-fraction 0.3 --grad-clip 0 \
  && identical noclip_all noclip_half "--grad-clip 0, F = 0.3"
run delayed_all 1 --offload-optimizer cpu --delayed-update 1
run delayed_half 1 --offload-optimizer cpu --delayed-update 1 --offload-optimizer-fraction 0.5 \
  && identical delayed_all delayed_half "--delayed-update 1, F = 0.5"
run bf16_all 1 --offload-optimizer cpu --precision bf16
run bf16_half 1 --offload-optimizer cpu --precision bf16 --offload-optimizer-fraction 0.5 \
  && identical bf16_all bf16_half "bf16, F = 0.5"
run nvme_half 1 --offload-optimizer nvme --nvme-path "$work/nvme" --host-mem-limit 16 --offload-optimizer-fraction 0.5 \
  && identical all1 nvme_half "nvme, F = 0.5"
llama=(train --model llama3 --preset llama3-tiny --layers 2 --data "$work/data.txt" --seq 32 --batch 4 --steps 3
       --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 3e-3 --warmup 0 --sample-tokens 2 --seed 11)
for f in 1 0.5; do
  timeout 300 "$starzero" "${llama[@]}" --offload-optimizer cpu --offload-optimizer-fraction $f \
    --checkpoint-out "$work/llama_$f.bin" > "$work/llama_$f.log" 2>&1 || { tail -n 20 "$work/llama_$f.log"; fail "llama F = $f"; }
done
identical llama_1 llama_0.5 "Llama 3, F = 0.5"
for stage in 1 2 3; do
  run "all_s$stage" 2 --stage $stage --offload-optimizer cpu || continue
  run "half_s$stage" 2 --stage $stage --offload-optimizer cpu --offload-optimizer-fraction 0.5 || continue
  cmp -s "$work/all_s$stage.bin" "$work/half_s$stage.bin" || fail "ZeRO-$stage on 2 ranks: F = 0.5 changed the parameters"
  [ "$(losses "$work/all_s$stage.log")" = "$(losses "$work/half_s$stage.log")" ] || fail "ZeRO-$stage: the losses differ"
done

# --- 2. which layers, the banner and the placement report --------------------------------------
check_split() {  # check_split LOG NP STAGE FRACTION
  python3 "$here/check_offload_fraction.py" split "$work/$1.log" "$2" "$3" "$4" $L $C $T
}
check_split half1 1 0 0.5 || fail "F = 0.5, one rank: the split or the report"
check_split noclip_half 1 0 0.3 || fail "F = 0.3, one rank: the split or the report"
check_split half_s2 2 2 0.5 || fail "F = 0.5, ZeRO-2 on 2 ranks: the split or the report"
grep -q '^optimizer state: no layer on the host' "$work/zero1.log" || fail "F = 0: the banner does not say so"
grep -q '^optimizer state: layers 0-3 on the host.*none on the device' "$work/all1.log" \
  || fail "F = 1: the banner does not say every layer is offloaded"

# --- 3. auto without a GPU: all of it --------------------------------------------------------
run auto1 1 --offload-optimizer cpu --offload-optimizer-fraction auto && identical all1 auto1 "auto without a GPU"
grep -q 'offload-optimizer-fraction auto: F = 1 .*no GPU' "$work/auto1.log" || fail "auto: no line saying F = 1"

# --- 4. bad values: exit 2, one line -------------------------------------------------------------
for bad in 1.5 -0.2 abc 1K ""; do
  expect_bad_input "--offload-optimizer-fraction '$bad'" "$starzero" "${common[@]}" --offload-optimizer cpu \
    --offload-optimizer-fraction "$bad"
done
expect_bad_input "a fraction without --offload-optimizer" "$starzero" "${common[@]}" --offload-optimizer-fraction 0.5
grep -q 'is for --offload-optimizer cpu|nvme' "$work/err" || fail "without --offload-optimizer: not said why"

finish "offload fraction: all checks passed"
