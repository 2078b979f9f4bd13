#!/usr/bin/env bash
# Memory and time of each --recompute mode, with and without --offload-activations cpu, measured
# in one sitting (docs/activation-memory.md): trains the same model for STEPS steps per mode and
# prints, per mode, the activation bytes the model holds on the device (and the plan's), those
# it offloads to pinned host memory, the process's peak RSS, and the median step time of the
# steps after the first, each with its ratio to `none`. Without a GPU the offloaded bytes are in
# main memory like the rest: the RSS does not drop, and the time shows the cost of the fetch tasks.
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
modes=("none" "selective" "full" "full --recompute-window 0" "none --offload-activations cpu"
  "full --offload-activations cpu")
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
    offloaded = re.search(r"activations offloaded: ([0-9.]+) MB", log)
    offloaded = float(offloaded.group(1)) if offloaded else 0.0
    step_s = statistics.median(s["step_seconds"] for s in steps[1:]) if len(steps) > 1 else steps[0]["step_seconds"]
    rss = max(s["peak_bytes"]["rss"] for s in steps)
    rows.append((mode, float(held), float(plan), offloaded, rss / 1e6, step_s, [s["loss"] for s in steps]))
base = rows[0]
print(f"{'--recompute':<46} {'device MB':>10} {'plan MB':>9} {'ratio':>6} {'offloaded MB':>13} {'peak RSS MB':>12} "
      f"{'ratio':>6} {'step s':>8} {'ratio':>6}  losses")
for mode, held, plan, offloaded, rss, step_s, losses in rows:
    same = "same as none" if losses == base[6] else "DIFFER from none"
    print(f"{mode:<46} {held:>10.1f} {plan:>9.1f} {held / base[1]:>6.3f} {offloaded:>13.1f} {rss:>12.1f} "
          f"{rss / base[4]:>6.3f} {step_s:>8.2f} {step_s / base[5]:>6.3f}  {same}")
PY
