#!/usr/bin/env bash
# How well starzero-sim predicts this machine (docs/sim.md, "Validation"), in one sitting:
# for each case below it calibrates the training on this machine (`starzero calibrate`), then for
# each policy (lws, dmda, dmdas) runs it for real REPEATS times (STEPS steps each; the median of
# the steps after the first, over all repeats) and simulates it on the calibrated platform. The
# real runs of the policies are interleaved, each repeat in a rotated order (lws dmda dmdas, dmda
# dmdas lws, ...): a machine that drifts (they do, by several percent over minutes) then favours no
# policy, which running each policy's steps in a block did. The measured runs calibrate too (their
# task durations join the calibration run's), unless --calibration gives one. Prints a table of measured and predicted
# steady step times with their error, whether the simulated ranking of the policies equals the
# measured one wherever they differ by more than 10 %, and, as its last line,
#   predicted X s, measured Y s, error Z %
# for gpt2-124M fp32 under lws.
#
# Usage: scripts/sim-validate.sh STARZERO STARZERO_SIM [options]
#   --steps N           steps per measured and simulated run (default 6)
#   --repeats N         real runs per case and policy, interleaved (default 3)
#   --data FILE         training data (default: the trainer's own default text)
#   --calibration DIR   simulate with this calibration (e.g. sim/calibrations/this-machine) instead of
#                       calibrating now (the measured runs then leave it as it is)
#   --save-calibration DIR   keep the calibration made now in DIR (every case's models, one machine:
#                       what sim/calibrations/this-machine holds)
#   --cases LIST        comma-separated subset of: tiny, gpt2-124M, gpt2-124M-offload (default all)
# The machine should be idle: the comparison is only as good as the measured times.
set -euo pipefail
usage() { echo "usage: sim-validate.sh STARZERO STARZERO_SIM [--steps N] [--repeats N] [--data FILE] [--calibration DIR] [--save-calibration DIR] [--cases LIST]" >&2; exit 2; }
[ $# -ge 2 ] || usage
starzero=$1 sim=$2
shift 2
steps=6 repeats=3 data=() calibration= save= cases=tiny,gpt2-124M,gpt2-124M-offload
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=${2:?}; shift 2 ;;
    --repeats) repeats=${2:?}; shift 2 ;;
    --data) data=(--data "${2:?}"); shift 2 ;;
    --calibration) calibration=$(cd "${2:?}" && pwd); shift 2 ;;
    --save-calibration) save=${2:?}; shift 2 ;;
    --cases) cases=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[ -x "$starzero" ] && [ -x "$sim" ] || { echo "sim-validate: '$starzero' or '$sim' is not a program" >&2; exit 2; }
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 3 ] || { echo "sim-validate: --steps must be at least 3" >&2; exit 2; }
[[ $repeats =~ ^[0-9]+$ ]] && [ "$repeats" -ge 1 ] || { echo "sim-validate: --repeats must be at least 1" >&2; exit 2; }
policies=(lws dmda dmdas)
declare -A flags=(
  [tiny]="--preset tiny --batch 8 --seq 64"
  [gpt2-124M]="--preset gpt2-124M --batch 4 --seq 64 --precision fp32"
  [gpt2-124M-offload]="--preset gpt2-124M --batch 4 --seq 64 --precision fp32 --offload-optimizer cpu"
)
IFS=, read -r -a chosen <<< "$cases"
for c in "${chosen[@]}"; do [ -n "${flags[$c]:-}" ] || { echo "sim-validate: unknown case '$c'" >&2; exit 2; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cal=${calibration:-$work/cal}
# Calibrating now: the measured runs add their task durations to the calibration too, so that
# the simulation's durations are the machine's over the same minutes as the times it is compared
# with (a VM's speed drifts by up to 10 % between minutes; the calibration run alone is a snapshot).
measure=(train)
[ -n "$calibration" ] || measure=(calibrate --out "$cal")
results=$work/results.tsv
for c in "${chosen[@]}"; do
  read -r -a f <<< "${flags[$c]}"
  if [ -z "$calibration" ]; then
    echo "sim-validate: $c: calibrating ..." >&2
    "$starzero" calibrate --out "$cal" "${f[@]}" "${data[@]}" --cuda-workers 0 --sched lws \
      --steps "${CALIBRATION_STEPS:-12}" --quiet > "$work/cal-$c.log" 2>&1 || { cat "$work/cal-$c.log"; exit 1; }
  fi
  for ((r = 0; r < repeats; r++)); do
    for ((i = 0; i < ${#policies[@]}; i++)); do
      policy=${policies[$(((i + r) % ${#policies[@]}))]}
      echo "sim-validate: $c, $policy: measuring (repeat $((r + 1))/$repeats) ..." >&2
      "$starzero" "${measure[@]}" "${f[@]}" "${data[@]}" --cuda-workers 0 --sched "$policy" --steps "$steps" \
        --val-every 0 --quiet --metrics "$work/real-$c-$policy-$r.jsonl" > "$work/real-$c-$policy-$r.log" 2>&1 ||
        { cat "$work/real-$c-$policy-$r.log"; exit 1; }
    done
  done
  for policy in "${policies[@]}"; do
    echo "sim-validate: $c, $policy: simulating ..." >&2
    "$sim" train "${f[@]}" "${data[@]}" --sched "$policy" --steps "$steps" --platform "$cal" \
      > "$work/sim-$c-$policy.log" 2>&1 || { cat "$work/sim-$c-$policy.log"; exit 1; }
    printf '%s\t%s\t%s\t%s\n' "$c" "$policy" "$work/real-$c-$policy" "$work/sim-$c-$policy.log" >> "$results"
  done
done
if [ -n "$save" ]; then
  mkdir -p "$save"
  cp -r "$cal/." "$save/"
  echo "sim-validate: calibration kept in $save" >&2
fi
python3 - "$results" <<'PY'
import glob, itertools, json, re, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
def measured(prefix):
    """The median steady step over every repeat, and the range of the repeats' own medians."""
    steady, medians = [], []
    for path in sorted(glob.glob(prefix + "-*.jsonl")):
        steps = [l["step_seconds"] for l in map(json.loads, open(path)) if l.get("event") == "step"][1:]
        steady += steps
        medians.append(statistics.median(steps))
    return statistics.median(steady), min(medians), max(medians)
def predicted(path):
    text = open(path).read()
    steps = [float(m) / 1e3 for m in re.findall(r"^step \d+/\d+ \| lr \S+ \| predicted ([0-9.]+) ms", text, re.M)]
    share = re.search(r"task durations: ([0-9.]+) % of the estimates from calibration", text)
    return statistics.median(steps[1:]), float(share.group(1)) if share else float("nan")
table = {}
print("| case | policy | measured s | repeats' medians s | predicted s | error | calibrated estimates |")
print("|---|---|---:|---:|---:|---:|---:|")
for case, policy, real, sim in rows:
    (m, low, high), (p, share) = measured(real), predicted(sim)
    table[case, policy] = (m, p)
    print(f"| {case} | {policy} | {m:.4f} | {low:.4f}-{high:.4f} | {p:.4f} | {100 * (p - m) / m:+.1f} % | {share:.1f} % |")
worst = max(abs(p - m) / m for m, p in table.values())
print(f"largest error: {100 * worst:.1f} % (target: within 15 %)")
for case in dict.fromkeys(c for c, _ in table):
    policies = [p for c, p in table if c == case]
    for a, b in itertools.combinations(policies, 2):
        (ma, pa), (mb, pb) = table[case, a], table[case, b]
        if abs(ma - mb) / min(ma, mb) <= 0.10:
            print(f"ranking {case}: {a} and {b} measured within 10 % ({ma:.4f} vs {mb:.4f} s): not compared")
            continue
        agree = (ma < mb) == (pa < pb)
        print(f"ranking {case}: measured {a if ma < mb else b} faster; simulated "
              f"{a if pa < pb else b} faster: {'agrees' if agree else 'DISAGREES'}")
if ("gpt2-124M", "lws") in table:
    m, p = table["gpt2-124M", "lws"]
    print(f"predicted {p:.4f} s, measured {m:.4f} s, error {100 * (p - m) / m:+.1f} %")
PY
