#!/usr/bin/env bash
# Runs the same trainings with two starzero binaries and compares their losses and checkpoints
# byte for byte: a refactor that must not change results shows "identical" on every line.
# Usage: scripts/compare-binaries.sh OLD NEW [WORKDIR] [extra train flags for NEW...]
# COMPARE_FLAGS: train flags for both binaries, e.g. COMPARE_FLAGS="--model llama3" to compare
# Llama 3 (llama3-tiny) instead of GPT-2 (tiny).
# Runs: fp32 and bf16 on one rank (with validation), an exact resume, 2 ranks at ZeRO-3 with CPU
# optimizer offload, 2 ranks at ZeRO-2 with gradient accumulation, and the speculative (with clipping)
# and delayed updates under CPU optimizer offload. About 3 minutes on 2 cores.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: compare-binaries.sh OLD NEW [WORKDIR] [extra flags for NEW...]" >&2; exit 2; }
old=$1 new=$2 work=${3:-$(mktemp -d)}
shift 2; [ $# -gt 0 ] && shift
extra=("$@")
read -r -a both <<< "${COMPARE_FLAGS:-}"
for b in "$old" "$new"; do [ -x "$b" ] || { echo "compare-binaries: $b is not an executable" >&2; exit 2; }; done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data=$root/README.md
mkdir -p "$work"
mpirun=(mpirun --oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
run_all() {  # run_all BINARY PREFIX FLAGS...
  local bin=$1 p=$work/$2; shift 2
  echo "compare-binaries: $p-* ($bin $*)" >&2
  "$bin" train --precision fp32 --steps 40 --data "$data" --checkpoint-out "$p-fp32.bin" --val-every 20 --cpu-workers 2 "$@" > "$p-fp32.log" 2>&1
  "$bin" train --steps 40 --data "$data" --checkpoint-out "$p-bf16.bin" --val-every 20 --cpu-workers 2 "$@" > "$p-bf16.log" 2>&1
  "$bin" train --precision fp32 --steps 20 --data "$data" --checkpoint-in "$p-fp32.bin" --checkpoint-out "$p-resumed.bin" \
    --cpu-workers 2 "$@" > "$p-resumed.log" 2>&1
  "${mpirun[@]}" "$bin" train --precision fp32 --stage 3 --offload-optimizer cpu --steps 20 --data "$data" \
    --checkpoint-out "$p-z3.bin" --cpu-workers 1 "$@" > "$p-z3.log" 2>&1
  "${mpirun[@]}" "$bin" train --stage 2 --grad-accum 2 --steps 20 --data "$data" --checkpoint-out "$p-z2.bin" \
    --cpu-workers 1 "$@" > "$p-z2.log" 2>&1
  # The update policies: speculative with clipping (half of the layers speculative, the early steps
  # clipped) and delayed, both with the optimizer on the CPU.
  "$bin" train --precision fp32 --offload-optimizer cpu --speculative-update --speculative-fraction 0.5 --grad-clip 0.5 \
    --steps 20 --data "$data" --checkpoint-out "$p-spec.bin" --cpu-workers 2 "$@" > "$p-spec.log" 2>&1
  "$bin" train --precision fp32 --offload-optimizer cpu --delayed-update 3 --steps 20 --data "$data" \
    --checkpoint-out "$p-delayed.bin" --cpu-workers 2 "$@" > "$p-delayed.log" 2>&1
}
run_all "$old" old "${both[@]}"
run_all "$new" new "${both[@]}" "${extra[@]}"
status=0
for f in fp32.bin fp32.bin.state bf16.bin bf16.bin.state resumed.bin resumed.bin.state z3.bin z3.bin.rank0-of-2.state \
         z3.bin.rank1-of-2.state z2.bin z2.bin.rank0-of-2.state z2.bin.rank1-of-2.state spec.bin spec.bin.state \
         delayed.bin delayed.bin.state; do
  if [ ! -f "$work/new-$f" ] || [ ! -f "$work/old-$f" ]; then echo "MISSING $f"; status=1
  elif cmp -s "$work/old-$f" "$work/new-$f"; then echo "identical $f ($(md5sum < "$work/new-$f" | cut -c1-10))"
  else echo "DIFFER $f"; status=1; fi
done
for l in fp32 bf16 resumed z3 z2 spec delayed; do
  a=$(grep -oE '(loss|validation) [0-9.]+' "$work/old-$l.log"); b=$(grep -oE '(loss|validation) [0-9.]+' "$work/new-$l.log")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "losses identical $l ($(echo "$b" | wc -l) values)"
  else echo "LOSSES DIFFER $l"; status=1; fi
done
exit $status
