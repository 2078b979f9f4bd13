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
  if ! python3 - "$(losses "$work/single.log")" "$(losses "$log")" <<'EOF'
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
assert len(a) == len(b) and len(a) > 0, (a, b)
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"  losses single {a} vs ranks {b}: max diff {worst:.1e}")
sys.exit(0 if worst <= 2e-4 else 1)
EOF
  then fail "ZeRO-$stage: losses differ from single-rank training"; fi
  # ... and the same final parameters (llm.c checkpoints written by rank 0).
  if ! python3 - "$work/single.bin" "$work/stage$stage.bin" <<'EOF'
import struct, sys
def params(path):
    data = open(path, "rb").read()
    return struct.unpack(f"{(len(data) - 1024) // 4}f", data[1024:])
a, b = params(sys.argv[1]), params(sys.argv[2])
assert len(a) == len(b)
diffs = sorted(abs(x - y) for x, y in zip(a, b))
worst = diffs[-1]
print(f"  parameters: {len(a)}, max |diff| {worst:.2e}")
# Adam normalises each gradient element: after 4 steps at lr 1e-3 a parameter moves by at most
# ~4e-3; fp32 reduction order changes the updates by far less than 1e-5.
sys.exit(0 if worst <= 1e-5 else 1)
EOF
  then fail "ZeRO-$stage: final parameters differ from single-rank training"; fi

  # 2 and 3: the report's numbers against formulas computed here.
  if ! python3 - "$log" "$np" "$stage" $L $C $T <<'EOF'
import re, sys
log, N, stage, L, C, T = open(sys.argv[1]).read(), *map(int, sys.argv[2:])
Vp = 256
layers = [Vp * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C]
psi = sum(layers)
shards = [(n + N - 1) // N for n in layers]
psi_pad = sum(s * N for s in shards)
b = 4  # fp32
ok = True
def expect(what, got, want):
    global ok
    if got != want:
        print(f"  {what}: got {got}, want {want}"); ok = False
# memory held for good, per rank: params grads optimizer | plan (3) | plan+pad (3)
rows = re.findall(r"^  (\d+) +(\d+) +(\d+) +(\d+) \| +(\d+) +(\d+) +(\d+) \| +(\d+) +(\d+) +(\d+)$", log, re.M)
expect("report rows", len(rows), N)
formula = {0: (b, b, 12), 1: (b, b, 12 / N), 2: (b, b / N, 12 / N), 3: (b / N, b / N, 12 / N)}[stage]
for row in rows:
    measured = [int(x) for x in row[1:4]]
    expect(f"rank {row[0]} bytes held", measured, [round(f * psi_pad) for f in formula])
    expect(f"rank {row[0]} plan (seeds' formula)", [int(x) for x in row[4:7]], [round(f * psi) for f in formula])
# collective bytes per rank per step
traffic = [tuple(map(int, t)) for t in
           re.findall(r"rank (\d+): all-gather (\d+), reduce-scatter (\d+), all-reduce (\d+)", log)]
expect("traffic rows", len(traffic), N)
ring = (N - 1) * sum(shards) * b  # (N-1)/N of the padded layers
if stage == 0:
    expect("all-gather+reduce-scatter bytes", sum(t[1] + t[2] for t in traffic), 0)
    expect("all-reduce bytes over all ranks", sum(t[3] for t in traffic), 2 * (N - 1) * psi_pad * b)
else:
    regather = 2 * (N - 1) * shards[0] * b if stage == 3 else 0  # tied embedding, fwd and bwd
    for r, ag, rs, ar in traffic:
        expect(f"rank {r} all-gather", ag, (2 if stage == 3 else 1) * ring + regather)
        expect(f"rank {r} reduce-scatter", rs, ring)
        expect(f"rank {r} all-reduce (norm: one fp32 value)", ar <= 8, True)
print(f"  memory and traffic match (Ψ={psi}, padded {psi_pad})" if ok else "  mismatch")
sys.exit(0 if ok else 1)
EOF
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
    python3 - "$(losses "$work/single8.log")" "$(losses "$log")" "$work/single8.bin" "$work/accum$stage.bin" <<'EOF2' \
      || fail "ZeRO-$stage with --grad-accum 2 differs from single-rank training on the whole batch"
import struct, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
def params(path):
    data = open(path, "rb").read()
    return struct.unpack(f"{(len(data) - 1024) // 4}f", data[1024:])
worst = max(abs(x - y) for x, y in zip(params(sys.argv[3]), params(sys.argv[4])))
print(f"  grad-accum 2: losses {a} vs {b}, parameters max |diff| {worst:.1e}")
sys.exit(0 if len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b)) <= 2e-4 and worst <= 1e-5 else 1)
EOF2
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
    python3 - "$log" "$(losses "$work/bf16_single.log")" "$(losses "$log")" <<'EOF' \
      || fail "ZeRO-$stage --fp32-grad-accum: report or losses"
import re, sys
log = open(sys.argv[1]).read().replace("\r", "\n")
rows = re.findall(r"^\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\S+\s+\S+\s+\S+\s+\|\s+(\d+)\s+(\d+)\s+(\d+)\s*$", log, re.M)
assert rows, "no report rows"
a = [float(x) for x in sys.argv[2].split()]
b = [float(x) for x in sys.argv[3].split()]
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"  fp32 gradient buffer: grads {rows[0][1]} bytes, plan+pad {rows[0][4]}; losses vs one rank: max diff {worst:.1e}")
assert all(r[1] == r[4] for r in rows), rows
sys.exit(0 if len(a) == len(b) and worst <= 2e-2 else 1)
EOF
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
