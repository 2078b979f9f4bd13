#!/usr/bin/env bash
# Times two starzero binaries alternately on the same workloads (run on an idle machine):
#   - `bench step` (gpt2-124M, fp32, B=4, T=64 unless BENCH_FLAGS says otherwise): the median step
#     time and MFU against the run's own GEMM probe, RUNS times each, alternating;
#   - the `tiny` demo training (300 steps on this checkout's text): tokens/s, RUNS times each;
#   - the time to the end of step 1 minus that step, from random init and from a checkpoint;
#   - one traced gpt2-124M training of 3 steps each (on TOKENS, an llm.c token shard), read
#     with scripts/trace-steps.py: worker busy share and task kinds of the last step;
#   - PARTS=data (not in the default): gpt2-124M training (fp32, B=4, T=64, 12 steps) on TOKENS,
#     the median step time of steps 2..12, RUNS times each, alternating which goes first: a binary
#     that streams the shard against one that holds it in memory.
# Usage: scripts/bench-compare.sh OLD NEW TOKENS [WORKDIR]   (RUNS=3, NEW_FLAGS= extra flags for NEW,
#        PARTS="bench startup trace": which parts to run, of bench startup trace data)
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: bench-compare.sh OLD NEW TOKENS [WORKDIR]" >&2; exit 2; }
old=$1 new=$2 tokens=$3 work=${4:-$(mktemp -d)}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${RUNS:-3}
read -r -a bench_flags <<< "${BENCH_FLAGS:---preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 3}"
read -r -a new_flags <<< "${NEW_FLAGS:-}"
parts=" ${PARTS:-bench startup trace} "
mkdir -p "$work"
median() { sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "n/a")}'; }
for i in $(seq "$runs"); do
  [[ $parts == *" bench "* ]] || break
  for v in old new; do
    bin=${!v}; extra=(); [ $v = new ] && extra=("${new_flags[@]}")
    echo "bench-compare: bench step $v, run $i" >&2
    "$bin" bench step "${bench_flags[@]}" "${extra[@]}" > "$work/bench-$v-$i.log" 2>&1
    echo "bench-compare: tiny demo $v, run $i" >&2
    "$bin" train --data "$root/README.md" --quiet "${extra[@]}" > "$work/tiny-$v-$i.log" 2>&1
  done
done
for v in old new; do
  [[ $parts == *" trace "* ]] || break
  bin=${!v}; extra=(); [ $v = new ] && extra=("${new_flags[@]}")
  echo "bench-compare: traced gpt2-124M $v" >&2
  rm -rf "$work/trace-$v"
  "$bin" train --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 3 --val-every 0 --sample-every 0 \
    --data "$tokens" --trace "$work/trace-$v" "${extra[@]}" > "$work/trace-$v.log" 2>&1
done
for i in $(seq "$runs"); do
  [[ $parts == *" data "* ]] || break
  order="old new"; (( i % 2 == 0 )) && order="new old"  # ABBA: the machine's drift hits both alike
  for v in $order; do
    bin=${!v}; extra=(); [ $v = new ] && extra=("${new_flags[@]}")
    echo "bench-compare: gpt2-124M training on the token shard $v, run $i" >&2
    "$bin" train --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 12 --val-every 0 --sample-every 0 \
      --data "$tokens" "${extra[@]}" > "$work/data-$v-$i.log" 2>&1
  done
done
# Time to the end of step 1 (gpt2-124M, fp32, B=4, T=64, one step, no validation): process start
# to the end of step 1 minus that step's own time, from random initialisation and from an llm.c
# checkpoint (written by NEW's first run), RUNS times each, alternating.
startup_flags=(train --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 1 --val-every 0 --sample-every 0
               --data "$tokens")
[[ $parts == *" startup "* ]] && "$new" "${startup_flags[@]}" --checkpoint-out "$work/g124.bin" > "$work/checkpoint.log" 2>&1 &&
  rm -f "$work/g124.bin.state"
for i in $(seq "$runs"); do
  [[ $parts == *" startup "* ]] || break
  for v in old new; do
    bin=${!v}
    for from in init checkpoint; do
      from_flags=(); [ $from = checkpoint ] && from_flags=(--checkpoint-in "$work/g124.bin")
      echo "bench-compare: time to step 1 $v from $from, run $i" >&2
      /usr/bin/time -f "wall %e" "$bin" "${startup_flags[@]}" "${from_flags[@]}" > "$work/startup-$v-$from-$i.log" 2>&1
    done
  done
done
# wall − step time of each run, median.
startup() {
  for f in "$work"/startup-$1-$2-*.log; do
    awk '/^step 1\/1/ { for (i = 1; i <= NF; ++i) if ($(i+1) == "ms") ms = $i } /^wall/ { w = $2 }
         END { if (ms != "" && w != "") printf "%.1f\n", w - ms / 1000 }' "$f"
  done | median
}

echo "| | old | new | new/old |"
echo "|---|---|---|---|"
step() { grep -h '^| step time' "$work"/bench-$1-*.log | grep -oE '[0-9.]+ s ' | grep -oE '[0-9.]+' | median; }
mfu() { grep -h '^| MFU vs probe' "$work"/bench-$1-*.log | grep -oE '[0-9.]+ %' | grep -oE '[0-9.]+' | median; }
tiny() { grep -h '^summary' "$work"/tiny-$1-*.log | grep -oE '\([0-9.]+ tok/s' | grep -oE '[0-9.]+' | median; }
step_old=$(step old) step_new=$(step new) mfu_old=$(mfu old) mfu_new=$(mfu new) tiny_old=$(tiny old) tiny_new=$(tiny new)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", b / a; else print "n/a" }'; }
echo "| median step time, s (bench step) | $step_old | $step_new | $(ratio "$step_old" "$step_new") |"
echo "| median MFU vs own GEMM probe, % | $mfu_old | $mfu_new | $(ratio "$mfu_old" "$mfu_new") |"
echo "| tiny demo, median tok/s | $tiny_old | $tiny_new | $(ratio "$tiny_old" "$tiny_new") |"
for from in init checkpoint; do
  so=$(startup old $from) sn=$(startup new $from)
  echo "| time to step 1 minus the step, from $from, s | $so | $sn | $(ratio "$so" "$sn") |"
done
# The median over runs of each run's median step time, steps 2..12 (ms).
data_step() {
  for f in "$work"/data-$1-*.log; do
    tr '\r' '\n' < "$f" | grep -E '^step ([2-9]|1[0-2])/12 ' | grep -oE '[0-9.]+ ms' | grep -oE '[0-9.]+' | median
  done | median
}
if [[ $parts == *" data "* ]]; then
  do_=$(data_step old) dn=$(data_step new)
  echo "| gpt2-124M training on TOKENS, median step, ms | $do_ | $dn | $(ratio "$do_" "$dn") |"
fi
for v in old new; do
  [ -d "$work/trace-$v" ] || continue
  echo; echo "### $v: last step of the traced gpt2-124M run"; echo '```'
  python3 "$root/scripts/trace-steps.py" "$work/trace-$v" --kinds 30; echo '```'
done
