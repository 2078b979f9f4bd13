#!/usr/bin/env bash
# ZeRO stages 0-3 across real MPI ranks (mpirun on this machine), fp32, a small GPT:
#  1. every stage gives the losses and final parameters of single-rank training on the same
#     global batch (tolerances below, from fp32 reduction order);
#  2. per-rank memory held per category equals the seeds' formula with the layers padded to a
#     multiple of N, and the unpadded formula is what `starzero plan` prints;
#  3. collective bytes per step equal the ring volumes computed here from the layer sizes;
#  4. gradient accumulation over 2 micro-batches equals one batch (ZeRO-1 and ZeRO-3);
#  5. ZeRO-3 keeps at most W+1 layers in flight for W = 0, 1, 2;
#  6. every rank's trace converts and ViTE parses it with 0 errors.
# Usage: zero_test.sh STARZERO NP
set -euo pipefail
starzero=$1
np=$2
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
write_words "$work/data.txt" 5 12000

# C = 34 makes the block (12C^2 + 13C = 14314) and embedding sizes not multiples of 4: padding.
L=2; C=34; NH=2; T=16; B=4; STEPS=4
common=(train --data "$work/data.txt" --preset tiny --layers $L --channels $C --heads $NH --max-seq $T --seq $T
        --batch $B --steps $STEPS --precision fp32 --cuda-workers 0 --cpu-workers 1 --val-every 0 --lr 1e-3
        --warmup 0 --sample-tokens 2 --seed 11)


"$starzero" "${common[@]}" --checkpoint-out "$work/single.bin" > "$work/single.log" 2>&1 \
  || { cat "$work/single.log"; fail "single-rank run"; exit 1; }

for stage in 0 1 2 3; do
  log=$work/stage$stage.log
  if ! timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${common[@]}" --stage $stage \
       --checkpoint-out "$work/stage$stage.bin" > "$log" 2>&1; then
    tail -n 30 "$log"; fail "ZeRO-$stage on $np ranks did not finish"; continue
  fi
  # 1. Same losses (printed to 4 decimals; reduction order moves them by ~1e-6) ...
  if ! python3 "$here/check_zero.py" same-losses "$(losses "$work/single.log")" "$(losses "$log")"
  then fail "ZeRO-$stage: losses differ from single-rank training"; fi
  # ... and the same final parameters (llm.c checkpoints written by rank 0).
  if ! python3 "$here/check_zero.py" same-params "$work/single.bin" "$work/stage$stage.bin"
  then fail "ZeRO-$stage: final parameters differ from single-rank training"; fi

  # 2 and 3: the report's numbers against formulas computed here.
  if ! python3 "$here/check_zero.py" report "$log" "$np" "$stage" $L $C $T
  then fail "ZeRO-$stage: memory or collective bytes differ from the formulas"; fi
done

# 4. Gradient accumulation: the global batch of 8 split over the ranks and K = 2 micro-batches
#    trains what one rank trains on the whole batch at once (ZeRO-1 accumulates the full gradient
#    and reduces it once; ZeRO-3 reduce-scatters each micro-batch into the shard and adds).
"$starzero" "${common[@]}" --batch 8 --checkpoint-out "$work/single8.bin" > "$work/single8.log" 2>&1 \
  || { cat "$work/single8.log"; fail "single-rank run, batch 8"; }
for stage in 1 3; do
  log=$work/accum$stage.log
  if timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${common[@]}" --batch 8 --grad-accum 2 --stage $stage \
       --checkpoint-out "$work/accum$stage.bin" > "$log" 2>&1; then
    python3 "$here/check_zero.py" accumulation "$(losses "$work/single8.log")" "$(losses "$log")" "$work/single8.bin" "$work/accum$stage.bin" \
      || fail "ZeRO-$stage with --grad-accum 2 differs from single-rank training on the whole batch"
  else
    tail -n 30 "$log"; fail "ZeRO-$stage --grad-accum 2 run"
  fi
done

# 4b. bf16 with the fp32 gradient-accumulation buffer: the report's gradient bytes include it
#     exactly as the planner counts it (4Ψ at ZeRO-1, 4Ψ/N at ZeRO-2), and training matches one
#     rank within bf16 tolerance.
bf16=("${common[@]}" --precision bf16 --batch 8 --grad-accum 2 --fp32-grad-accum)
"$starzero" "${bf16[@]}" > "$work/bf16_single.log" 2>&1 || { tail -n 20 "$work/bf16_single.log"; fail "bf16 single rank with --fp32-grad-accum"; }
for stage in 1 2; do
  log=$work/bf16_accum$stage.log
  if timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${bf16[@]}" --stage $stage > "$log" 2>&1; then
    python3 "$here/check_zero.py" fp32-grad-buffer "$log" "$(losses "$work/bf16_single.log")" "$(losses "$log")" \
      || fail "ZeRO-$stage --fp32-grad-accum: report or losses"
  else
    tail -n 30 "$log"; fail "ZeRO-$stage --fp32-grad-accum run"
  fi
done

# 5. ZeRO-3 prefetch window: at most W+1 layers in flight.
for W in 0 1 2; do
  log=$work/window$W.log
  if timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${common[@]}" --stage 3 --prefetch-depth $W --steps 2 \
       > "$log" 2>&1; then
    peak=$(grep -oE 'peak [0-9]+ layers in flight' "$log" | awk '{print $2}' | sort -n | tail -n1)
    echo "  prefetch depth $W: peak $peak layers in flight"
    if [ -z "$peak" ] || [ "$peak" -gt $((W + 1)) ] || [ "$peak" -lt 1 ]; then
      fail "ZeRO-3 W=$W: peak layers in flight '$peak' is not within 1..$((W + 1))"
    fi
  else
    tail -n 30 "$log"; fail "ZeRO-3 W=$W run"
  fi
done

# 5b. ZeRO-2 gradient window: with --grad-window G the peak of gradient bytes is the shard plus
#     the embedding's full gradient (alive through the whole backward: the tied classifier
#     touches it first) plus G blocks' full gradients; the parameters do not depend on G.
for G in 1 2; do
  log=$work/gwindow$G.log
  if timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${common[@]}" --stage 2 --grad-window $G \
       --checkpoint-out "$work/gwindow$G.bin" > "$log" 2>&1; then
    peak=$(tr '\r' '\n' < "$log" | grep -oE 'peak gradients [0-9]+' | awk '{print $3}' | sort -n | tail -n1)
    expected=$(python3 -c "
N, L, C, T, G = $np, $L, $C, $T, $G
layers = [256 * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C]
pad = lambda n: -(-n // N) * N
shard = sum(pad(n) // N for n in layers)
print(4 * (shard + pad(layers[0]) + min(G, L) * pad(layers[1])))")
    echo "  gradient window $G: peak gradients $peak bytes, expected $expected"
    [ "$peak" = "$expected" ] || fail "ZeRO-2 --grad-window $G: peak gradients $peak, expected $expected"
  else
    tail -n 30 "$log"; fail "ZeRO-2 --grad-window $G run"
  fi
done
cmp -s "$work/gwindow1.bin" "$work/gwindow2.bin" || fail "ZeRO-2: the gradient window changed the parameters"

# 6. Traces: every rank's FxT trace converts to its own paje.trace; ViTE reads each with 0 errors
#    and the collective tasks are in it.
if timeout 300 "${mpirun[@]}" -np "$np" "$starzero" "${common[@]}" --stage 3 --steps 2 --trace "$work/trace" \
     > "$work/trace.log" 2>&1; then
  for r in $(seq 0 $((np - 1))); do
    paje=$work/trace/rank$r/paje.trace
    [ -f "$paje" ] || { fail "rank $r: no $paje"; continue; }
    grep -q "all_gather" "$paje" || fail "rank $r: no all_gather task in the trace"
    if summary=$(cd "$work/trace/rank$r" && QT_QPA_PLATFORM=offscreen timeout 120 vite -f paje.trace -e out.svg 2>&1 \
                 | grep -oE '[0-9]+ errors? and [0-9]+ warnings?'); then
      case $summary in
        "0 error"*) echo "  rank $r trace: $summary" ;;
        *) fail "rank $r: ViTE says '$summary'" ;;
      esac
    else
      fail "rank $r: ViTE printed no error count"
    fi
  done
else
  tail -n 30 "$work/trace.log"; fail "traced ZeRO-3 run"
fi

finish "all ZeRO checks passed on $np ranks"
