#!/usr/bin/env bash
# Memory and time of each --recompute mode, measured in one sitting (docs/activation-memory.md):
# trains the same model for STEPS steps per mode and prints, per mode, the activation bytes the
# model holds (and the plan's), the process's peak RSS, and the median step time of the steps
# after the first, each with its ratio to `none`.
# Usage: scripts/recompute-bench.sh STARZERO DATA [STEPS] [-- extra train flags]
#   default model: --preset gpt2-124M --batch 4 --seq 1024 --precision fp32 (DATA: an llm.c token shard)
set -euo pipefail
starzero=${1:?usage: recompute-bench.sh STARZERO DATA [STEPS] [-- train flags]}
data=${2:?usage: recompute-bench.sh STARZERO DATA [STEPS] [-- train flags]}
steps=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
model=(--preset gpt2-124M --batch 4 --seq 1024 --precision fp32)
[ $# -gt 0 ] && model=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
modes=("none" "selective" "full" "full --recompute-window 0")
for mode in "${modes[@]}"; do
  read -r -a flags <<< "--recompute $mode"
  [ "$mode" = none ] && flags=()
  tag=${mode// /_}
  echo "recompute-bench: $mode ..." >&2
  "$starzero" train "${model[@]}" --data "$data" --steps "$steps" --val-every 0 --quiet --warmup 0 \
    "${flags[@]}" --metrics "$work/$tag.jsonl" > "$work/$tag.log" 2>&1 || { cat "$work/$tag.log"; exit 1; }
done
python3 - "$work" "${modes[@]}" <<'PY'
import json, re, statistics, sys
work, modes = sys.argv[1], sys.argv[2:]
rows = []
for mode in modes:
    tag = mode.replace(" ", "_")
    steps = [l for l in map(json.loads, open(f"{work}/{tag}.jsonl")) if l["event"] == "step"]
    log = open(f"{work}/{tag}.log").read()
    held, plan = re.search(r"activations: ([0-9.]+) MB per micro-batch held .*plan ([0-9.]+) MB", log).groups()
    step_s = statistics.median(s["step_seconds"] for s in steps[1:]) if len(steps) > 1 else steps[0]["step_seconds"]
    rss = max(s["peak_bytes"]["rss"] for s in steps)
    rows.append((mode, float(held), float(plan), rss / 1e6, step_s, [s["loss"] for s in steps]))
base = rows[0]
print(f"{'--recompute':<26} {'activations MB':>15} {'plan MB':>9} {'ratio':>6} {'peak RSS MB':>12} {'ratio':>6} {'step s':>8} {'ratio':>6}  losses")
for mode, held, plan, rss, step_s, losses in rows:
    same = "same as none" if losses == base[5] else "DIFFER from none"
    print(f"{mode:<26} {held:>15.1f} {plan:>9.1f} {held / base[1]:>6.3f} {rss:>12.1f} {rss / base[3]:>6.3f} "
          f"{step_s:>8.2f} {step_s / base[4]:>6.3f}  {same}")
PY
