#!/usr/bin/env bash
# End-to-end checks of `starzero plan`. Usage: plan_cli_test.sh PATH/TO/starzero
# Exits non-zero if any check fails (every check runs; failures are listed).
set -u

STARZERO=${1:?usage: plan_cli_test.sh PATH/TO/starzero}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILURES=0

fail() {
  echo "FAIL: $*"
  FAILURES=$((FAILURES + 1))
}
pass() { echo "ok:   $*"; }

# run ARGS...: runs `starzero plan ARGS`, stdout -> $WORK/out, stderr -> $WORK/err, code -> $RC
run() {
  "$STARZERO" plan "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
}

# expect_line REGEX DESCRIPTION: some stdout line matches the extended regex (whole line)
expect_line() {
  if grep -Eq -- "^$1\$" "$WORK/out"; then pass "$2"; else fail "$2: no line matching /^$1\$/"; fi
}
expect_text() {
  if grep -Fq -- "$1" "$WORK/out"; then pass "$2"; else fail "$2: '$1' not in the output"; fi
}

# ---- (a) the seeds' 7B table --------------------------------------------------------------------
run --params 7e9 --dp 1,8,64
if [ "$RC" -eq 0 ]; then pass "7B table exits 0"; else fail "7B table exit code $RC: $(cat "$WORK/err")"; fi
if [ -s "$WORK/err" ]; then fail "7B table wrote to stderr: $(cat "$WORK/err")"; fi
expect_line ' *dp +ZeRO-0 +ZeRO-1 +ZeRO-2 +ZeRO-3' "table header"
expect_line ' *1 +112\.0 +112\.0 +112\.0 +112\.0' "dp 1 row: all stages 112.0"
expect_line ' *8 +112\.0 +38\.5 +26\.3 +14\.0' "dp 8 row: 112.0 38.5 26.3 14.0"
expect_line ' *64 +112\.0 +29\.3 +15\.5 +1\.75' "dp 64 row: 112.0 29.3 15.5 1.75"
# Exact values in the breakdown.
expect_line ' *model states +112\.0 +38\.5 +26\.25 +14\.0' "exact dp 8 totals"
expect_line ' *model states +112\.0 +29\.3125 +15\.53125 +1\.75' "exact dp 64 totals"
# Communication: 2Ψ = 14e9 elements = 28 GB, 3Ψ = 21e9 = 42 GB, ring figures.
expect_text '2Ψ = 14,000,000,000 elements = 28.0 GB' "communication 2Ψ"
expect_text '3Ψ = 21,000,000,000 elements = 42.0 GB' "communication 3Ψ"
expect_line ' *8 +24\.5 +24\.5 +24\.5 +36\.75' "ring figures at dp 8"
expect_text 'ZeRO does not shard them' "activations are not sharded"

# The same with --dp=..., a single stage, and a GPT config.
run --params=7e9 --dp=8 --stage=2
expect_line ' *dp +ZeRO-2' "--stage 2: one column"
expect_line ' *8 +26\.3' "--stage 2 at dp 8"
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --dp 1,8
if [ "$RC" -eq 0 ]; then pass "GPT config exits 0"; else fail "GPT config exit code $RC: $(cat "$WORK/err")"; fi
expect_text '124,475,904 parameters' "GPT-2 124M parameter count"
expect_text 'activations (B=4, T=1024)' "activations row"
expect_text 'ZeRO-3 full layers (W+1=2)' "ZeRO-3 temporaries row"
# --recompute: GptModel's buffers per mode (docs/activation-memory.md); fp32, B=4, T=1024.
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32
expect_line ' *activations \(B=4, T=1024\) +10\.929127424' "activations, none: 10.929127424 GB"
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --recompute full
expect_line ' *activations \(B=4, T=1024, recompute full, window 1\) +4\.762845184' "activations, full: 4.762845184 GB"
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --recompute selective --recompute-window 0
expect_line ' *activations \(B=4, T=1024, recompute selective, window 0\) +5\.253513216' "activations, selective window 0: 5.253513216 GB"
# --max-model: the largest GPT per stage, offload and recompute mode; recomputation never fits
# less, nor does activation offload.
run --max-model --gpu-mem 141GB --host-mem 1.5TB
expect_text 'largest GPT that fits (L layers, hidden 64·L, L heads, vocab 50257, T=1024, B=1, bf16, dp 1), GPU 141 GB, host 1500 GB' "--max-model header"
expect_line 'stage +optimizer params +\| none +\| selective +\| full +\| none \+ offload +\| selective \+ offload +\| full \+ offload *' "--max-model columns"
expect_line 'ZeRO-0 none +none +\| L=51 C=3264 6\.69B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B *' "--max-model ZeRO-0 row"
python3 - "$WORK/out" <<'PY' && pass "--max-model: selective >= none, full >= selective, offload >= without, on every row" || fail "--max-model rows not monotone"
import re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("ZeRO-")]
assert len(rows) == 15, len(rows)
for r in rows:
    sizes = [int(x) for x in re.findall(r"L=(\d+)", r)]
    assert len(sizes) == 6 and sizes[0] <= sizes[1] <= sizes[2], r
    assert sizes[3] <= sizes[4] <= sizes[5] and all(sizes[i] <= sizes[i + 3] for i in range(3)), r
PY
run --max-model --params 1B --gpu-mem 80GB
if [ "$RC" -eq 2 ]; then pass "--max-model with --params: exit 2"; else fail "--max-model with --params: exit $RC"; fi
run --max-model
if [ "$RC" -eq 2 ]; then pass "--max-model without memory: exit 2"; else fail "--max-model without memory: exit $RC"; fi
# --offload-activations: the kept activations of L − (W + 1) blocks move to the host total.
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --offload-activations cpu
expect_line ' *activations \(B=4, T=1024, window 1\) +4\.637016064' "activations, none + offload: 4.637016064 GB on the GPU (12·F·B·T less 10 blocks)"
expect_line ' *host  activations \(offloaded\) +6\.29211136' "offloaded activations: 10 blocks × F × B·T = 6.29211136 GB"
run --params 1B --offload-activations cpu
if [ "$RC" -eq 2 ]; then pass "--offload-activations without a GPT config: exit 2"; else fail "--offload-activations without a GPT config: exit $RC"; fi
run --params 1B --recompute full
if [ "$RC" -eq 2 ]; then pass "--recompute without a GPT config: exit 2"; else fail "--recompute without a GPT config: exit $RC"; fi

# --help: usage on stdout, exit 0.
run --help
if [ "$RC" -eq 0 ] && grep -q '^usage: starzero plan' "$WORK/out" && [ ! -s "$WORK/err" ]; then
  pass "--help"
else
  fail "--help: exit $RC, stdout $(head -c 200 "$WORK/out")"
fi

# ---- (b) bad input: exit 2, exactly one stderr line "starzero plan: error: ...", no stdout ------
bad_cases=(
  "--params 0"
  "--params -3"
  "--params abc"
  "--params 1.5X"
  "--params 1e"
  "--params nan"
  "--params="
  "--params"
  "--params 1.5"
  "--params 7e9 --dp 0"
  "--params 7e9 --dp -1"
  "--params 7e9 --dp 1,,8"
  "--params 7e9 --dp"
  "--params 7e9 --stage 4"
  "--params 7e9 --stage -1"
  "--params 7e9 --stage two"
  "--params 7e9 --k -1"
  "--params 7e9 --k abc"
  "--params 7e9 --precision fp8"
  "--params 7e9 --offload-optimizer gpu"
  "--params 7e9 --offload-params cpu"
  "--params 7e9 --stage 2 --offload-params cpu"
  "--params 7e9 --gpu-mem 80XB"
  "--params 7e9 --gpu-mem 0"
  "--params 7e9 --host-mem -5GB"
  "--params 7e9 --prefetch-depth -1"
  "--params 7e9 --bogus"
  "--params 7e9 --bogus=1"
  "--params 7e9 extra"
  "--params 7e9 --json=maybe"
  ""
  "--layers 12 --hidden 768"
  "--layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024"
  "--layers 12 --hidden 768 --heads 7 --vocab 50257 --seq 1024 --batch 4"
  "--layers 0 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4"
  "--params 7e9 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4"
)
for args in "${bad_cases[@]}"; do
  # shellcheck disable=SC2086  # word splitting of the case is intended
  run $args
  lines=$(wc -l <"$WORK/err")
  if [ "$RC" -ne 2 ]; then
    fail "[$args]: exit code $RC, expected 2"
  elif [ "$lines" -ne 1 ]; then
    fail "[$args]: $lines stderr lines, expected 1: $(cat "$WORK/err")"
  elif ! grep -q '^starzero plan: error: ' "$WORK/err"; then
    fail "[$args]: stderr does not start with 'starzero plan: error: ': $(cat "$WORK/err")"
  elif [ -s "$WORK/out" ]; then
    fail "[$args]: wrote to stdout"
  else
    pass "[$args] -> $(cat "$WORK/err")"
  fi
done

# ---- (c) --json is valid JSON with the seeds' numbers -----------------------------------------
check_json() {
  local desc=$1 script=$2
  shift 2
  run "$@" --json
  if [ "$RC" -ne 0 ]; then
    fail "$desc: exit code $RC: $(cat "$WORK/err")"
    return
  fi
  if python3 -c 'import json,sys; json.load(sys.stdin)' <"$WORK/out"; then
    pass "$desc: valid JSON"
  else
    fail "$desc: invalid JSON"
    return
  fi
  if python3 -c "import json,sys; d=json.load(sys.stdin); $script" <"$WORK/out"; then
    pass "$desc: values"
  else
    fail "$desc: values"
  fi
}
check_json "7B json" '
p = {(r["dp"], r["stage"]): r for r in d["plans"]}
assert len(p) == 12
assert p[(8, 2)]["gpu"]["total"] == 26250000000
assert p[(64, 1)]["gpu"]["total"] == 29312500000
assert p[(64, 3)]["gpu"]["total"] == 1750000000
assert p[(8, 0)]["communication"]["elements"] == 14000000000
assert p[(8, 3)]["communication"]["bytes"] == 42000000000
assert d["fit"] is None
' --params 7e9 --dp 1,8,64
check_json "GPT json" '
assert d["model"]["params"] == 124475904
assert d["model"]["gpt"]["padded_vocab"] == 50304
assert all(r["gpu"]["activations"] > 0 for r in d["plans"])
' --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --dp 8 --offload-optimizer nvme
check_json "70B fit json" '
f = d["fit"]["per_dp"][0]
assert f["recommended"] == {"stage": 3, "offload_optimizer": "cpu", "offload_params": "none"}, f["recommended"]
assert f["min_dp_without_offload"] == [None, None, None, 14]
' --params 70e9 --dp 4 --gpu-mem 80GB

# ---- (d) 70B on 4 x 80 GB: ZeRO-3 with offload, or more GPUs ------------------------------------
run --params 70e9 --dp 4 --gpu-mem 80GB
if [ "$RC" -eq 0 ]; then pass "70B fit exits 0"; else fail "70B fit exit code $RC: $(cat "$WORK/err")"; fi
expect_text 'verdict: does not fit without offload at dp 4; use ZeRO-3 + offload optimizer cpu' "70B verdict: ZeRO-3 with offload"
expect_text 'plain ZeRO-3 fits from dp 14' "70B verdict: more GPUs (dp 14)"
expect_line ' *ZeRO-3 +dp 14' "minimum dp for plain ZeRO-3"

if [ "$FAILURES" -ne 0 ]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all checks passed"
