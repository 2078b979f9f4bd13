#!/usr/bin/env bash
# `starzero platform` end to end: every named machine's five files (the SimGrid platform parsed by
# Python's xml.etree: hosts, memsize, memcpy_peer, links and routes; the .bandwidth and .latency
# matrices: 32 x 32, MB/s and us computed here from the figures in Bps and s, nan past the
# machine's nodes; .config and .affinity), user numbers over a named machine and over `custom`,
# --list, and one-line usage errors with exit code 2. docs/sim.md, "Platforms".
# Usage: platform_test.sh PATH/TO/starzero
set -euo pipefail
STARZERO=${1:?usage: platform_test.sh PATH/TO/starzero}
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# check_platform DIR NAME CPUS GPUS MEMSIZE H2D D2H PCIE_LAT NVLINK NVLINK_LAT HOST_BW
#   (bytes, bytes/s and seconds, as a machine's data sheet gives them; NVLINK 0 = none)
check_platform() {
  python3 "$here/check_platform.py" platform "$@"
}

# run WHAT ARGS...: `starzero platform ARGS` must exit 0 without stderr.
run() {
  local what=$1 rc=0
  shift
  "$STARZERO" platform "$@" > "$work/out" 2> "$work/err" || rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$work/err" ]; then
    cat "$work/err"
    fail "$what: exit code $rc"
  fi
}

# ---- the named machines (figures from the data sheets, docs/sim.md) --------------------
out=$work/named
run "h200x1" h200x1 --out "$out"
grep -qx "  export STARPU_PERF_MODEL_DIR=$out" "$work/out" || fail "h200x1: no STARPU_PERF_MODEL_DIR=$out line"
grep -qx "  export STARPU_HOSTNAME=h200x1" "$work/out" || fail "h200x1: no STARPU_HOSTNAME line"
grep -qx "wrote $out/bus/h200x1.platform.v4.xml" "$work/out" || fail "h200x1: no 'wrote' line"
check_platform "$out" h200x1 64 1 141000000000 55e9 55e9 10e-6 450e9 5e-6 307.2e9 || fail "h200x1 files"
run "h200x8" h200x8 --out "$out"
check_platform "$out" h200x8 64 8 141000000000 55e9 55e9 10e-6 450e9 5e-6 614.4e9 || fail "h200x8 files"
run "a100x1" a100x1 --out "$out"
check_platform "$out" a100x1 32 1 80000000000 25e9 25e9 10e-6 300e9 5e-6 204.8e9 || fail "a100x1 files"
# Writing again replaces the files.
run "h200x8 again" h200x8 --out "$out"
check_platform "$out" h200x8 64 8 141000000000 55e9 55e9 10e-6 450e9 5e-6 614.4e9 || fail "h200x8 rewritten"

# ---- user numbers --------------------------------------------------------------------------------
run "h200x1 overridden" h200x1 --out "$work/o" --gpus 2 --cpus 16 --gpu-mem 80GiB --pcie 30GB/s --nvlink 0 --name box-2.a
check_platform "$work/o" box-2.a 16 2 85899345920 30e9 30e9 10e-6 0 5e-6 307.2e9 || fail "h200x1 overridden"
run "h200x8 --nvlink" h200x8 --out "$work/o" --nvlink=300GB --name h200x8-nv3
check_platform "$work/o" h200x8-nv3 64 8 141000000000 55e9 55e9 10e-6 300e9 5e-6 614.4e9 || fail "h200x8 --nvlink 300GB"
run "custom" custom --out "$work/o" --cpus 8 --gpus 2 --gpu-mem 24GiB --pcie 12GB/s --nvlink 100GB/s --name c2
check_platform "$work/o" c2 8 2 25769803776 12e9 12e9 10e-6 100e9 5e-6 50e9 || fail "custom with GPUs"
run "custom, CPUs only" custom --out "$work/o" --cpus 4
check_platform "$work/o" custom 4 0 0 1 1 0 0 0 50e9 || fail "custom without GPUs"

# ---- measured attention rates (scripts/gpu-check.sh's attention_calibration.json) ------------------
cat > "$work/calibration.json" <<'JSON'
{"gpu": "NVIDIA H200", "entries": [
 {"kernel": "cudnn", "direction": "forward", "B": 8, "T": 1024, "heads": 40, "hs": 128, "causal": true, "ms": 0.859, "tflops": 100},
 {"kernel": "cudnn", "direction": "backward", "B": 8, "T": 1024, "heads": 40, "hs": 128, "causal": true, "ms": 4.29, "tflops": 50}]}
JSON
run "h200x1 --attention-calibration" h200x1 --out "$work/m" --cpus 32 --name h200-measured \
  --attention-calibration "$work/calibration.json"
grep -q "attention: 2 rates measured on the GPU" "$work/out" || fail "--attention-calibration: no summary line"
python3 - "$work/m/bus/h200-measured.machine.json" <<'PY' || fail "--attention-calibration: machine file"
import json, sys
rates = json.load(open(sys.argv[1]))["attention_rates"]
assert [(r["kernel"], r["direction"], r["T"], r["hs"], r["tflops"]) for r in rates] == \
    [("cudnn", "forward", 1024, 128, 100), ("cudnn", "backward", 1024, 128, 50)], rates
PY
# The plan's bound charges them: gpt-13B, B=8, T=1024, no recompute, 40 layers of attention:
# forward 40 x (8.59e10 FLOP / 100 TFLOP/s + 5 us) = 34.56 ms, backward 40 x (2.147e11 / 50e12 +
# 3 x 5 us) = 172.40 ms: 0.2070 s.
"$STARZERO" plan --layers 40 --hidden 5120 --heads 40 --vocab 50257 --batch 8 --seq 1024 --platform "$work/m" \
  --attention cudnn > "$work/out" 2> "$work/err" || { cat "$work/err"; fail "plan on the measured platform"; }
grep -q "cudnn_attention 0.2070 s" "$work/out" || { grep "cost class" "$work/out"; fail "plan: measured attention not charged"; }

# ---- --list ----------------------------------------------------------------------------------------
run "--list" --list
for name in h200x1 h200x8 a100x1; do grep -qx "$name" "$work/out" || fail "--list: no $name"; done
grep -q "bf16 989 TFLOP/s, fp32 67 TFLOP/s, HBM 4.8 TB/s" "$work/out" || fail "--list: H200 peaks"
grep -q "bf16 312 TFLOP/s, fp32 19.5 TFLOP/s, HBM 2.04 TB/s" "$work/out" || fail "--list: A100 peaks"

# ---- bad input: one line on stderr, exit code 2, nothing written ------------------------------------
bad=$work/bad
expect_bad_input "unknown machine" "$STARZERO" platform h100x9 --out "$bad"
expect_bad_input "--gpus 9" "$STARZERO" platform h200x8 --out "$bad" --gpus 9
expect_bad_input "--cpus 0" "$STARZERO" platform h200x1 --out "$bad" --cpus 0
expect_bad_input "--cpus 65" "$STARZERO" platform h200x1 --out "$bad" --cpus 65
expect_bad_input "missing --out" "$STARZERO" platform h200x1
expect_bad_input "--pcie fast" "$STARZERO" platform h200x1 --out "$bad" --pcie fast
expect_bad_input "--pcie 0" "$STARZERO" platform h200x1 --out "$bad" --pcie 0GB/s
expect_bad_input "--gpu-mem 0" "$STARZERO" platform h200x1 --out "$bad" --gpu-mem 0
expect_bad_input "--nvlink -1" "$STARZERO" platform h200x8 --out "$bad" --nvlink=-1GB/s
expect_bad_input "--name with a slash" "$STARZERO" platform h200x1 --out "$bad" --name a/b
expect_bad_input "--name starting with a dot" "$STARZERO" platform h200x1 --out "$bad" --name .x
expect_bad_input "custom GPUs without figures" "$STARZERO" platform custom --out "$bad" --gpus 1
expect_bad_input "no machine" "$STARZERO" platform --out "$bad"
expect_bad_input "two machines" "$STARZERO" platform h200x1 a100x1 --out "$bad"
expect_bad_input "--list with a machine" "$STARZERO" platform --list h200x1
expect_bad_input "unknown flag" "$STARZERO" platform h200x1 --out "$bad" --frobnicate
echo '{"entries": [{"kernel": "flash", "direction": "forward", "T": 1024, "hs": 128, "tflops": 1}]}' > "$work/c1.json"
expect_bad_input "calibration of an unknown kernel" "$STARZERO" platform h200x1 --out "$bad" --attention-calibration "$work/c1.json"
echo '{"entries": [{"kernel": "own", "direction": "forward", "T": 1024, "hs": 128, "tflops": 0}]}' > "$work/c2.json"
expect_bad_input "calibration rate 0" "$STARZERO" platform h200x1 --out "$bad" --attention-calibration "$work/c2.json"
printf '{"entries": [' > "$work/c3.json"
expect_bad_input "truncated calibration" "$STARZERO" platform h200x1 --out "$bad" --attention-calibration "$work/c3.json"
expect_bad_input "missing calibration" "$STARZERO" platform h200x1 --out "$bad" --attention-calibration "$work/none.json"
[ ! -e "$bad" ] || fail "bad input wrote $bad"

finish "platform: all checks passed"
