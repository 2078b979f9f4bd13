#!/usr/bin/env bash
# How well starzero-sim predicts this machine (docs/simulation.md, "Validation"): calibrates the
# given training (starzero calibrate, CALIBRATION_STEPS steps), runs it for real (STEPS steps, the
# median of the steps after the first), and simulates it on the calibrated platform, in one
# sitting; prints measured and predicted step times and their ratio, then the roofline's
# prediction on the same platform without the calibration.
# Usage: scripts/sim-validate.sh STARZERO STARZERO_SIM [STEPS] -- train flags (CPU workers only)
#   e.g. scripts/sim-validate.sh build/apps/starzero build-sim/apps/starzero-sim 6 -- \
#          --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --data train.bin
set -euo pipefail
starzero=${1:?usage: sim-validate.sh STARZERO STARZERO_SIM [STEPS] -- train flags}
sim=${2:?usage: sim-validate.sh STARZERO STARZERO_SIM [STEPS] -- train flags}
steps=6
shift 2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then steps=$1; shift; fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "sim-validate: calibrating ..." >&2
"$starzero" calibrate --out "$work/cal" "${flags[@]}" --cuda-workers 0 --steps "${CALIBRATION_STEPS:-12}" --quiet \
  > "$work/cal.log" 2>&1 || { cat "$work/cal.log"; exit 1; }
echo "sim-validate: measuring ..." >&2
"$starzero" train "${flags[@]}" --cuda-workers 0 --steps "$steps" --val-every 0 --quiet --metrics "$work/real.jsonl" \
  > "$work/real.log" 2>&1 || { cat "$work/real.log"; exit 1; }
echo "sim-validate: simulating ..." >&2
"$sim" train "${flags[@]}" --steps "$steps" --platform "$work/cal" > "$work/sim.log" 2>&1 || { cat "$work/sim.log"; exit 1; }
# The roofline alone: the same platform without its codelet models.
mkdir -p "$work/roofline" && cp -r "$work/cal/bus" "$work/roofline/"
"$sim" train "${flags[@]}" --steps "$steps" --platform "$work/roofline" > "$work/roof.log" 2>&1 || { cat "$work/roof.log"; exit 1; }
python3 - "$work" <<'PY'
import json, re, statistics, sys
work = sys.argv[1]
real = [l["step_seconds"] for l in map(json.loads, open(f"{work}/real.jsonl")) if l.get("event") == "step"]
def predicted(log):
    return [float(m) / 1e3 for m in re.findall(r"^step \d+/\d+ \| lr \S+ \| predicted ([0-9.]+) ms", open(log).read(), re.M)]
sim, roof = predicted(f"{work}/sim.log"), predicted(f"{work}/roof.log")
share = re.search(r"task durations: ([0-9.]+) % of the estimates from calibration", open(f"{work}/sim.log").read())
m, p, r = statistics.median(real[1:]), statistics.median(sim[1:]), statistics.median(roof[1:])
print(f"measured step (median of steps 2..{len(real)}): {m:.4f} s")
print(f"predicted, calibrated ({share.group(1) if share else '?'} % of estimates calibrated): {p:.4f} s  ratio {p / m:.3f}")
print(f"predicted, roofline only: {r:.4f} s  ratio {r / m:.3f}")
PY
