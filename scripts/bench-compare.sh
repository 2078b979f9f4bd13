#!/usr/bin/env bash
# Times two starzero binaries alternately on the same workloads (run on an idle machine):
#   - `bench step` (gpt2-124M, fp32, B=4, T=64 unless BENCH_FLAGS says otherwise): the median step
#     time and MFU against the run's own GEMM probe, RUNS times each, alternating;
#   - the `tiny` demo training (300 steps on this checkout's text): tokens/s, RUNS times each;
#   - one traced gpt2-124M training of 3 steps each (on TOKENS, an llm.c token shard), read
#     with scripts/trace-steps.py: worker busy share and task kinds of the last step.
# Usage: scripts/bench-compare.sh OLD NEW TOKENS [WORKDIR]   (RUNS=3, NEW_FLAGS= extra flags for NEW)
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: bench-compare.sh OLD NEW TOKENS [WORKDIR]" >&2; exit 2; }
old=$1 new=$2 tokens=$3 work=${4:-$(mktemp -d)}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${RUNS:-3}
read -r -a bench_flags <<< "${BENCH_FLAGS:---preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 3}"
read -r -a new_flags <<< "${NEW_FLAGS:-}"
mkdir -p "$work"
median() { sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "n/a")}'; }
for i in $(seq "$runs"); do
  for v in old new; do
    bin=${!v}; extra=(); [ $v = new ] && extra=("${new_flags[@]}")
    echo "bench-compare: bench step $v, run $i" >&2
    "$bin" bench step "${bench_flags[@]}" "${extra[@]}" > "$work/bench-$v-$i.log" 2>&1
    echo "bench-compare: tiny demo $v, run $i" >&2
    "$bin" train --data "$root/README.md" --quiet "${extra[@]}" > "$work/tiny-$v-$i.log" 2>&1
  done
done
for v in old new; do
  bin=${!v}; extra=(); [ $v = new ] && extra=("${new_flags[@]}")
  echo "bench-compare: traced gpt2-124M $v" >&2
  rm -rf "$work/trace-$v"
  "$bin" train --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 3 --val-every 0 --sample-every 0 \
    --data "$tokens" --trace "$work/trace-$v" "${extra[@]}" > "$work/trace-$v.log" 2>&1
done
echo "| | old | new | new/old |"
echo "|---|---|---|---|"
step() { grep -h '^| step time' "$work"/bench-$1-*.log | grep -oE '[0-9.]+ s ' | grep -oE '[0-9.]+' | median; }
mfu() { grep -h '^| MFU vs probe' "$work"/bench-$1-*.log | grep -oE '[0-9.]+ %' | grep -oE '[0-9.]+' | median; }
tiny() { grep -h '^summary' "$work"/tiny-$1-*.log | grep -oE '\([0-9.]+ tok/s' | grep -oE '[0-9.]+' | median; }
step_old=$(step old) step_new=$(step new) mfu_old=$(mfu old) mfu_new=$(mfu new) tiny_old=$(tiny old) tiny_new=$(tiny new)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "n/a" }'; }
echo "| median step time, s (bench step) | $step_old | $step_new | $(ratio "$step_old" "$step_new") |"
echo "| median MFU vs own GEMM probe, % | $mfu_old | $mfu_new | $(ratio "$mfu_old" "$mfu_new") |"
echo "| tiny demo, median tok/s | $tiny_old | $tiny_new | $(ratio "$tiny_old" "$tiny_new") |"
for v in old new; do
  echo; echo "### $v: last step of the traced gpt2-124M run"; echo '```'
  python3 "$root/scripts/trace-steps.py" "$work/trace-$v" --kinds 30; echo '```'
done
