#!/usr/bin/env bash
# End-to-end checks of `starzero plan`. Usage: plan_cli_test.sh PATH/TO/starzero
# Exits non-zero if any check fails (every check runs; failures are listed).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

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
# --recompute: GptModel's buffers per mode (docs/activation-memory.md); fp32, B=4, T=1024. Per token,
# F = 18·C·4 + 16 + 4·NH = 55360 (no T term: the attention keeps one log-sum-exp per head and row);
# the rest (two gradient slots, embedding and head tensors) 726548; none: 12·F + rest = 1390868.
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32
expect_line ' *activations \(B=4, T=1024\) +5\.696995328' "activations, none: 5.696995328 GB"
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --recompute full
# full, window 1: 12·C·4 + 2·(F − C·4) + rest = 867988 per token.
expect_line ' *activations \(B=4, T=1024, recompute full, window 1\) +3\.555278848' "activations, full: 3.555278848 GB"
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --recompute selective --recompute-window 0
# selective, window 0: 12·9·C·4 + (F − 9·C·4) + rest = 1086036 per token.
expect_line ' *activations \(B=4, T=1024, recompute selective, window 0\) +4\.448403456' "activations, selective window 0: 4.448403456 GB"
expect_text 'no T×T attention matrix' "the GPT note says the attention keeps no T×T matrix"
# --max-model: the largest GPT per stage, offload and recompute mode; recomputation never fits
# less, nor does activation offload.
run --max-model --gpu-mem 141GB --host-mem 1.5TB
expect_text 'largest GPT that fits (L layers, hidden 64·L, L heads, vocab 50257, T=1024, B=1, bf16, dp 1), GPU 141 GB, host 1500 GB' "--max-model header"
expect_line 'stage +optimizer params +\| none +\| selective +\| full +\| none \+ offload +\| selective \+ offload +\| full \+ offload *' "--max-model columns"
expect_line 'ZeRO-0 none +none +\| L=54 C=3456 7\.92B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B +\| L=55 C=3520 8\.36B *' "--max-model ZeRO-0 row"
python3 "$here/check_plan_cli.py" max-model-monotone "$WORK/out" && pass "--max-model: selective >= none, full >= selective, offload >= without, on every row" || fail "--max-model rows not monotone"
run --max-model --params 1B --gpu-mem 80GB
if [ "$RC" -eq 2 ]; then pass "--max-model with --params: exit 2"; else fail "--max-model with --params: exit $RC"; fi
run --max-model
if [ "$RC" -eq 2 ]; then pass "--max-model without memory: exit 2"; else fail "--max-model without memory: exit $RC"; fi
# --offload-activations: the kept activations of L − (W + 1) blocks move to the host total.
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --stage 0 --precision fp32 --offload-activations cpu
# F = 55360 bytes per token (above): 10 blocks × F × B·T = 2.2675456 GB move; 5.696995328 less that stays.
expect_line ' *activations \(B=4, T=1024, window 1\) +3\.429449728' "activations, none + offload: 3.429449728 GB on the GPU (12·F·B·T less 10 blocks)"
expect_line ' *host  activations \(offloaded\) +2\.2675456' "offloaded activations: 10 blocks × F × B·T = 2.2675456 GB"
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
  "--params 7e9 --offload-optimizer cpu --offload-optimizer-fraction 1.5"
  "--params 7e9 --offload-optimizer cpu --offload-optimizer-fraction -0.5"
  "--params 7e9 --offload-optimizer cpu --offload-optimizer-fraction half"
  "--params 7e9 --offload-optimizer cpu --offload-optimizer-fraction auto"
  "--params 7e9 --offload-optimizer-fraction 0.5"
  "--params 7e9 --offload-optimizer none --offload-optimizer-fraction 0.5"
  "--params 7e9 --offload-optimizer cpu --speculative-fraction 0.5"
  "--params 7e9 --offload-optimizer cpu --speculative-update --speculative-fraction 2"
  "--params 7e9 --offload-optimizer cpu --speculative-update --speculative-fraction auto"
  "--params 7e9 --offload-optimizer nvme --speculative-update"
  "--params 7e9 --dp 8 --offload-params cpu"
  "--params 7e9 --dp 1,8 --stage 2 --offload-params cpu"
  "--params 7e9 --grad-window 0"
  "--params 7e9 --grad-accum 4"
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
  # Presets (section (e)): Llama 3 needs --model llama3 and a known preset, takes its whole
  # shape from the preset and T <= its max_seq.
  "--model llama3"
  "--model llama4 --preset llama3-8B"
  "--model llama3 --preset llama3-9B"
  "--model llama3 --preset gpt2-124M"
  "--preset llama3-8B"
  "--model llama3 --preset llama3-8B --recompute-window 2"
  # The step bound (section (f)): a machine that exists, AdamW threads only with one.
  "--params 7e9 --platform h100x9"
  "--params 7e9 --platform /nonexistent-folder"
  "--params 7e9 --offload-optimizer cpu --adam-threads 4"
  "--params 7e9 --offload-optimizer cpu --platform h200x1 --adam-threads 0"
  "--params 7e9 --offload-optimizer cpu --platform a100x1 --adam-threads 33"
  "--max-model --gpu-mem 80GB --platform h200x1"
  "--model llama3 --preset llama3-8B --recompute some"
  "--model llama3 --preset llama3-8B --offload-activations nvme"
  "--model llama3 --preset llama3-8B --seq 8193"
  "--model llama3 --preset llama3-8B --seq 0"
  "--model llama3 --preset llama3-8B --batch 0"
  "--model llama3 --preset llama3-8B --params 8B"
  "--model llama3 --preset llama3-8B --layers 4"
  "--model llama3 --preset llama3-8B --vocab 256"
  "--model llama3 --preset llama3-70B --batch 2147483647"
  "--preset gpt2-124M --hidden 512"
  "--preset gpt2-124M --params 1B"
  "--preset gpt2-9B"
  "--max-model --model llama3 --gpu-mem 80GB --recompute full"
  "--max-model --model llama3 --gpu-mem 80GB --vocab 256"
  "--max-model --model llama3 --gpu-mem 80GB --seq 8193"
  "--max-model --model llama3 --preset llama3-9B --gpu-mem 80GB"
  "--max-model --model llama3"
  "--max-model --preset gpt2-124M --gpu-mem 80GB"
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

# ---- (e) presets: Llama 3 (--model llama3) and GPT ----------------------------------------------
# Every expected number below comes from the formulas here (docs/llama.md), not from the program.
# docs/llama.md's formulas, for any number of blocks L (the other sizes are the 8B's unless given).
llama() { python3 "$here/llama_formulas.py" "$1"; }
commas() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
# Exact GB as the report prints it: bytes / 1e9, trailing zeros dropped, one decimal kept.
gb() { python3 -c 'import sys; n = int(sys.argv[1]); s = f"{n // 10**9}.{n % 10**9:09d}".rstrip("0"); print(s + "0" if s.endswith(".") else s)' "$1"; }
esc() { printf '%s' "$1" | sed 's/[.]/\\./g'; }
# Llama 3 8B (Meta's params.json: dim 4096, 32 layers, 32 heads, 8 kv heads, ffn 14336, V 128256).
V=128256 C=4096 L=32 NH=32 NKV=8 H=14336
Q=$(((NH + 2 * NKV) * C / NH))
PSI=$(llama 'psi(shape())')
HEAD=$((C + V * C)) # final RMSNorm + lm_head: the largest layer (the embedding is V·C)
[ "$PSI" -eq 8030261248 ] && pass "llama3-8B: Ψ from the formula is Meta's 8,030,261,248" ||
  fail "llama3-8B: Ψ from the formula is $PSI"
ACT8K=$(llama "act(shape(), 8192, 1, 2)")
run --model llama3 --preset llama3-8B --seq 8192 --batch 1 --dp 1,8
if [ "$RC" -eq 0 ] && [ ! -s "$WORK/err" ]; then pass "llama3-8B exits 0"; else fail "llama3-8B: exit $RC: $(cat "$WORK/err")"; fi
expect_line 'model: Llama 3 llama3-8B: L=32 C=4096 NH=32 NKV=8 H=14336 V=128256 maxT=8192, T=8192 B=1' "llama3-8B header names the preset and its shape"
expect_text "Q = (NH + 2·NKV)·C/NH = $Q: $(commas "$PSI") parameters" "llama3-8B: Ψ = $(commas "$PSI")"
expect_text "largest layer: head ($(commas "$HEAD"))" "llama3-8B: largest layer head = V·C + C = $(commas "$HEAD")"
# Static: 16Ψ at every stage at dp 1 (k = 12); at dp 8: 16Ψ, 4Ψ + 12Ψ/8, 2Ψ + 14Ψ/8, 16Ψ/8.
expect_line " *model states +$(esc "$(gb $((16 * PSI)))")( +$(esc "$(gb $((16 * PSI)))")){3}" "llama3-8B dp 1: 16Ψ = $(gb $((16 * PSI))) GB at every stage"
expect_line " *model states +$(esc "$(gb $((16 * PSI)))") +$(esc "$(gb $((4 * PSI + 12 * PSI / 8)))") +$(esc "$(gb $((2 * PSI + 14 * PSI / 8)))") +$(esc "$(gb $((16 * PSI / 8)))")" "llama3-8B dp 8: 16Ψ, 5.5Ψ, 3.75Ψ, 2Ψ"
expect_line " *activations \(B=1, T=8192, all kept\)( +$(esc "$(gb "$ACT8K")")){4}" "llama3-8B activations at T=8192: $(gb "$ACT8K") GB on every stage"
expect_line " *ZeRO-3 full layers \(W\+1=2\) +0 +0 +0 +$(esc "$(gb $((2 * HEAD * 2)))")" "llama3-8B ZeRO-3 full layers at dp 8: 2 × head × 2 bytes"
expect_text "3Ψ = $(commas $((3 * PSI))) elements" "llama3-8B: ZeRO-3 communication 3Ψ"
# Fit check at T=8192 on 141 GB GPUs with 1.5 TB of host memory: plain ZeRO-0 needs
# 16Ψ + activations; ZeRO-0 with the optimizer on the host keeps 4Ψ + activations on the GPU.
run --model llama3 --preset llama3-8B --seq 8192 --batch 1 --dp 1 --gpu-mem 141GB --host-mem 1.5TB
read -r VERDICT MINDP < <(python3 "$here/check_plan_cli.py" llama-8k-verdict "$PSI" "$ACT8K" "$HEAD"
)
[ "$VERDICT" = offload ] && pass "llama3-8B T=8192: the formulas say offload at dp 1" || fail "llama3-8B T=8192: formula verdict $VERDICT"
expect_text "verdict: does not fit without offload at dp 1; use ZeRO-0 + offload optimizer cpu (GPU $(gb $((4 * PSI + ACT8K)))" "llama3-8B T=8192 fit: ZeRO-0 + offload optimizer cpu"
expect_text "plain ZeRO-3 fits from dp $MINDP." "llama3-8B T=8192: plain ZeRO-3 from dp $MINDP"
check_json "llama3-8B json" "
p = {(r['dp'], r['stage']): r for r in d['plans']}
m = d['model']
assert m['params'] == $PSI and m['gpt'] is None
l = m['llama']
assert l['preset'] == 'llama3-8B' and (l['layers'], l['channels'], l['heads'], l['kv_heads'], l['ffn_hidden'], l['vocab']) == ($L, $C, $NH, $NKV, $H, $V)
assert l['largest_layer'] == {'name': 'head', 'params': $HEAD}
assert p[(1, 0)]['gpu']['static'] == 16 * $PSI
assert p[(8, 3)]['gpu']['static'] == 16 * $PSI / 8
assert p[(8, 3)]['gpu']['temporaries'] == 2 * $HEAD * 2
assert all(r['gpu']['activations'] == $ACT8K for r in d['plans'])
assert p[(8, 0)]['communication']['elements'] == 2 * $PSI
" --model llama3 --preset llama3-8B --seq 8192 --batch 1 --dp 1,8
# fp32 and B=2: 4-byte activations, 16Ψ static is 4Ψ + 4Ψ + 12Ψ = 20Ψ.
run --model llama3 --preset llama3-8B --seq 1024 --batch 2 --precision fp32 --stage 0
expect_line " *activations \(B=2, T=1024, all kept\) +$(esc "$(gb "$(llama "act(shape(), 1024, 2, 4)")")")" "llama3-8B fp32 B=2 T=1024 activations"
expect_line " *model states +$(esc "$(gb $((20 * PSI)))")" "llama3-8B fp32: 20Ψ"
# --recompute none and --offload-activations none are what Llama 3 does: accepted.
run --model llama3 --preset llama3-8B --recompute none --offload-activations none --stage 0
[ "$RC" -eq 0 ] && pass "llama3: --recompute none accepted" || fail "llama3: --recompute none: exit $RC: $(cat "$WORK/err")"
expect_text "T=8192 B=1" "llama3: --seq defaults to max_seq, --batch to 1"
# --recompute and --offload-activations: the bytes of each mode from the formulas above.
run --model llama3 --preset llama3-8B --seq 2048 --batch 1 --stage 0 --recompute full
expect_line " *activations \(B=1, T=2048, recompute full, window 1\) +$(esc "$(gb "$(llama "act(shape(), 2048, 1, 2, 'full', 1)")")")" "llama3-8B --recompute full: $(gb "$(llama "act(shape(), 2048, 1, 2, 'full', 1)")") GB"
expect_text "allocates with --recompute full" "llama3-8B --recompute full: the notes name the mode"
run --model llama3 --preset llama3-8B --seq 2048 --batch 2 --stage 0 --recompute selective --recompute-window 0 --precision fp32
expect_line " *activations \(B=2, T=2048, recompute selective, window 0\) +$(esc "$(gb "$(llama "act(shape(), 2048, 2, 4, 'selective', 0)")")")" "llama3-8B fp32 B=2 --recompute selective window 0"
run --model llama3 --preset llama3-8B --seq 2048 --batch 1 --stage 0 --offload-activations cpu --recompute-window 0
expect_line " *activations \(B=1, T=2048, window 0\) +$(esc "$(gb "$(llama "act(shape(), 2048, 1, 2, 'none', 0, True)")")")" "llama3-8B --offload-activations cpu window 0: GPU bytes"
expect_line " *host  activations \(offloaded\) +$(esc "$(gb "$(llama "host(shape(), 2048, 1, 2, 'none', 0, True)")")")" "llama3-8B --offload-activations cpu: 31 blocks' kept bytes on the host"
run --model llama3 --preset llama3-8B --seq 2048 --batch 1 --stage 0 --recompute full --offload-activations cpu
expect_line " *host  activations \(offloaded\) +$(esc "$(gb "$(llama "host(shape(), 2048, 1, 2, 'full', 1, True)")")")" "llama3-8B full + offload: 30 blocks' residual3 on the host"
check_json "llama3-8B full + offload json" "
r = d['plans'][0]
assert r['gpu']['activations'] == $(llama "act(shape(), 2048, 1, 2, 'full', 1, True)")
assert r['host_activations'] == $(llama "host(shape(), 2048, 1, 2, 'full', 1, True)")
" --model llama3 --preset llama3-8B --seq 2048 --batch 1 --stage 0 --recompute full --offload-activations cpu
# The tiny preset: Ψ from the same formula (docs/llama.md: 229,952).
run --model llama3 --preset llama3-tiny
expect_text "$(commas "$(llama 'psi(shape(L=4, C=64, NH=4, NKV=2, H=192, V=256))')") parameters" "llama3-tiny Ψ (229,952)"
# --max-model --model llama3: the deepest Llama of the 8B's width. ZeRO-0 without offload fits
# while 16Ψ(L) + activations(L) <= 141 GB; with the optimizer on the host, 4Ψ(L) + activations(L)
# on the GPU and 16Ψ(L) <= 1.5 TB on the host.
run --max-model --model llama3 --preset llama3-8B --seq 2048 --gpu-mem 141GB --host-mem 1.5TB
expect_line "deepest Llama 3 of llama3-8B's width that fits \(L blocks of C=4096 NH=32 NKV=8 H=14336, V=128256, T=2048, B=1, bf16, dp 1\), GPU 141 GB, host 1500 GB" "llama --max-model header"
read -r L0 L0CPU < <(llama '(lambda m: " ".join(str(max(l for l in range(1, 1025) if fits(l))) for fits in (
    lambda l: 16 * psi(shape(L=l)) + act(shape(L=l), 2048, 1, 2) <= 141e9,
    lambda l: 4 * psi(shape(L=l)) + act(shape(L=l), 2048, 1, 2) <= 141e9 and 16 * psi(shape(L=l)) <= 1.5e12)))(0)')
expect_line "ZeRO-0 none +none +\| L=$L0 .*" "llama --max-model ZeRO-0: L=$L0"
expect_line "ZeRO-0 cpu +none +\| L=$L0CPU .*" "llama --max-model ZeRO-0 + optimizer cpu: L=$L0CPU"
# The columns: none, selective, full, then each + offload (window 1). ZeRO-0 under each.
read -r -a DEEPEST < <(llama '" ".join(str(max([l for l in range(1, 1025) if 16 * psi(shape(L=l)) + act(shape(L=l), 2048, 1, 2, m, 1, o) <= 141e9], default=0)) for o in (False, True) for m in ("none", "selective", "full"))')
expect_line "stage +optimizer +params +\| none +\| selective +\| full +\| none \+ offload +\| selective \+ offload +\| full \+ offload" "llama --max-model: six policy columns"
expect_line "ZeRO-0 none +none +\| L=${DEEPEST[0]} [^|]*\| L=${DEEPEST[1]} [^|]*\| L=${DEEPEST[2]} [^|]*\| L=${DEEPEST[3]} [^|]*\| L=${DEEPEST[4]} [^|]*\| L=${DEEPEST[5]} .*" "llama --max-model ZeRO-0 per policy: L=${DEEPEST[*]}"
[ "$(grep -c '^ZeRO-' "$WORK/out")" -eq 15 ] && pass "llama --max-model: 15 rows" || fail "llama --max-model: not 15 rows"
# GPT presets: the same report as the six flags, with the preset named.
run --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --dp 1,8
sed 2d "$WORK/out" >"$WORK/flags"
run --preset gpt2-124M --batch 4 --dp 1,8
expect_line 'model: GPT gpt2-124M: L=12 C=768 NH=12 V=50257 \(padded Vp=50304\) T=1024 B=4' "GPT preset named in the header"
if sed 2d "$WORK/out" | cmp -s - "$WORK/flags"; then pass "--preset gpt2-124M = the six flags"; else fail "--preset gpt2-124M differs from the six flags"; fi
run --model gpt --preset tiny --batch 2 --recompute full --stage 0
expect_line 'model: GPT tiny: L=4 C=128 NH=4 V=256 \(padded Vp=256\) T=64 B=2' "GPT tiny preset with --model gpt"
expect_text 'recompute full' "GPT preset keeps --recompute"

# ---- (f) the step bound on a machine (--platform; docs/zero-formulas.md, "Step bound") -------------
# Figures by hand (docs/sim.md, "Step bound"): FLOPs of a GPT micro-batch L·(72NC² + 14BT²C
# + full recomputation's 16NC² + 4BT²C) + 6N·Vp·C at 989 TFLOP/s × 0.75; the CPU AdamW's 28 bytes per
# parameter at threads × 307.2 GB/s / cores × 0.8; 2Ψ bytes each way at 55 GB/s.
bound_row() {  # L C T B RECOMPUTE CORES THREADS STAGE: the expected table row, as a regex
  python3 "$here/check_plan_cli.py" bound-row "$@"
}
# gpt2-124M (B=4, T=1024) with the optimizer on the host of h200x1 (64 cores: 62 AdamW threads).
run --preset gpt2-124M --batch 4 --stage 1 --offload-optimizer cpu --platform h200x1
expect_text 'Step bound per rank and step (one micro-batch) on h200x1: 64 CPU cores, 1 GPU(s)' "bound section on h200x1"
expect_text 'GPU compute 741.8 TFLOP/s, CPU AdamW 238.1 GB/s (62 threads), PCIe 55 GB/s host->GPU, 55 GB/s GPU->host' "h200x1's rates"
expect_line ' *dp +stage +GPU compute +CPU AdamW +PCIe host->GPU +PCIe GPU->host +disk +bound' "bound table heading"
expect_line "$(bound_row 12 768 1024 4 none 64 62 1)" "gpt2-124M bound row, by hand"
# The 13B of issue 27 (gpt2-1558M's width grown to L=40, C=5120, NH=40), B=8, full recomputation,
# on a `starzero platform h200x1 --cpus 32` folder: 30 AdamW threads; the CPU AdamW binds.
"$STARZERO" platform h200x1 --cpus 32 --name h200x1-32 --out "$WORK/h200x1-32" >/dev/null
run --layers 40 --hidden 5120 --heads 40 --vocab 50257 --seq 1024 --batch 8 --recompute full --stage 1 \
    --offload-optimizer cpu --platform "$WORK/h200x1-32"
expect_text 'on h200x1-32: 32 CPU cores, 1 GPU(s)' "bound section on a platform folder"
expect_line "$(bound_row 40 5120 1024 8 full 32 30 1)" "13B bound row, by hand: CPU AdamW binds"
python3 "$here/check_plan_cli.py" gpu-classes "$WORK/out" 40 5120 1024 8 full && pass "13B GPU compute by cost class" \
  || fail "13B GPU compute by cost class"
expect_text "cudnn_attention" "13B: cuDNN's attention charged by default"
run --layers 40 --hidden 5120 --heads 40 --vocab 50257 --seq 1024 --batch 8 --recompute full --stage 1 \
    --offload-optimizer cpu --platform "$WORK/h200x1-32" --attention own
# Our scalar attention: 40 layers x (forward, recomputation: 87.4 ms each; backward 516.6 ms) from
# its L1 wavefronts (docs/sim.md): about 27.7 s, far above the CPU AdamW's 1.56 s.
expect_line ' *1 +ZeRO-1 +2[0-9]\.[0-9]{4} s\* .*\(GPU compute\)$' "13B with --attention own: the GPU binds"
run --layers 40 --hidden 5120 --heads 40 --vocab 50257 --seq 1024 --batch 8 --recompute full --stage 1 \
    --offload-optimizer cpu --platform "$WORK/h200x1-32" --adam-threads 16
expect_line "$(bound_row 40 5120 1024 8 full 32 16 1)" "13B with --adam-threads 16"
# Llama 3 8B, T=4096 B=1: its kernels by class too (models/llama_flops.hpp), not FLOPs at 0.75.
run --model llama3 --preset llama3-8B --seq 4096 --batch 1 --recompute selective --stage 1 \
    --offload-optimizer cpu --platform h200x1
python3 "$here/check_plan_cli.py" gpu-classes "$WORK/out" 32 4096 4096 1 selective llama 32 8 14336 128256 \
  && pass "Llama 3 8B GPU compute by cost class" || fail "Llama 3 8B GPU compute by cost class"
run --params 7e9 --dp 8
if grep -q 'Step bound' "$WORK/out"; then fail "a bound without --platform"; else pass "no bound without --platform"; fi
check_json "bound json" '
assert d["platform"] == "h200x1"
keys = ["compute_s", "cpu_adam_s", "pcie_to_gpu_s", "pcie_to_host_s", "disk_s", "bound_s", "binding", "steady_step_s",
        "efficiency", "compute_device", "compute_flops", "compute_flops_per_s", "adam_threads", "adam_bytes",
        "adam_bytes_per_s", "host_to_gpu_bytes", "host_to_gpu_Bps", "gpu_to_host_bytes", "gpu_to_host_Bps",
        "disk_read_bytes", "disk_read_Bps", "disk_write_bytes", "disk_write_Bps", "rates_source",
        "compute_s_by_gpu_class"]
for p in d["plans"]:
    b = p["bound"]
    assert list(b) == keys, list(b)
    assert abs(sum(b["compute_s_by_gpu_class"].values()) - b["compute_s"]) < 1e-9 and b["compute_s_by_gpu_class"]["gemm"] > 0
    assert b["binding"] == "cpu_adam" and b["bound_s"] == b["cpu_adam_s"] and b["efficiency"] is None
    psi = d["model"]["params"]
    assert abs(b["adam_bytes"] - 28 * psi) < 1 and abs(b["host_to_gpu_bytes"] - 2 * psi) < 1
    assert b["adam_threads"] == 62 and b["compute_device"] == "GPU"
' --preset gpt2-124M --batch 4 --offload-optimizer cpu --platform h200x1
# --offload-optimizer-fraction: a share of the state on each side, by whole layers from the last,
# counted in the placement, the fit check and the bound (the CPU AdamW of the offloaded share only).
check_json "offload fraction json" '
p = d["plans"][0]
s = p["optimizer_split"]
assert d["settings"]["offload_optimizer_fraction"] == 0.5
# gpt2-124M: embedding 39,419,904, 12 blocks of 7,087,872, lnf 1,536: F·Ψ = 62,237,952 needs 9 blocks.
assert s["layers"] == 14 and s["first_offloaded_layer"] == 4, s
assert s["offloaded_params"] == 1536 + 9 * 7087872 and s["device_params"] == 39419904 + 3 * 7087872, s
assert p["host"]["optimizer"] == 12 * s["offloaded_params"] and p["gpu"]["optimizer"] == 12 * s["device_params"]
assert abs(p["bound"]["adam_bytes"] - 28 * s["offloaded_params"]) < 1
assert abs(p["bound"]["host_to_gpu_bytes"] - 2 * s["offloaded_params"]) < 1
' --preset gpt2-124M --batch 4 --stage 0 --offload-optimizer cpu --offload-optimizer-fraction 0.5 --platform h200x1
check_json "offload fraction auto json" '
one, four = d["plans"]
assert 0 < one["optimizer_split"]["fraction"] < 1, one  # a 1.5B does not fit 20 GB with its state
assert four["optimizer_split"]["fraction"] == 0, four  # on 4 ranks its ZeRO-1 shard does: nothing offloaded
for p in d["plans"]:
    assert p["gpu"]["total"] <= 0.95 * 20e9, p["gpu"]
assert d["settings"]["offload_optimizer_fraction"] == "auto"
for o in d["fit"]["per_dp"][0]["options"]:
    if o["offload_optimizer"] != "none":
        assert o["gpu_total"] <= 0.95 * 20e9, o
' --preset gpt2-1558M --batch 1 --recompute full --dp 1,4 --stage 1 --offload-optimizer cpu --offload-optimizer-fraction auto --gpu-mem 20GB
run --preset gpt2-124M --batch 4 --stage 0 --offload-optimizer cpu --offload-optimizer-fraction 0.5
expect_text 'Optimizer state split (--offload-optimizer-fraction 0.5)' "the split section"
expect_text 'layers 4-13 on the host (CPU AdamW; 63792384 of 124475904 parameters' "the split's layers"
expect_text 'layers 0-3 on the device (device AdamW)' "the split's device layers"
check_json "no bound json without --platform" '
assert d["platform"] is None and all(p["bound"] is None for p in d["plans"])
' --params 7e9 --dp 1,8

# ---- one rank with the whole model on the host (issue 28) ---------------------------------------
# At dp 1 any stage takes --offload-params cpu; with the optimizer offloaded too, the GPU holds the
# W+1 fetched layers, the G streamed gradients and the activations, the host everything else.
check_json "llama3-70B on one GPU" '
p = d["plans"][0]
psi, largest = d["model"]["params"], d["model"]["llama"]["largest_layer"]["params"]
assert p["stage"] == 1 and p["gpu"]["static"] == 0, p["gpu"]
assert p["gpu"]["temporaries"] == 2 * largest * 2 and p["gpu"]["grads_in_flight"] == 3 * largest * 2, p["gpu"]
assert p["gpu"]["total"] == p["gpu"]["activations"] + p["gpu"]["temporaries"] + p["gpu"]["grads_in_flight"]
assert p["gpu"]["total"] < 141e9, p["gpu"]["total"]
assert p["host"]["total"] == 16 * psi and p["offload_transfer_bytes"] == 6 * psi, p["host"]
assert d["settings"]["grad_window"] == 3 and d["settings"]["micro_batches"] == 4
b = p["bound"]  # 4 micro-batches: parameters up twice each, gradients down each and up for 3
assert abs(b["host_to_gpu_bytes"] - (4 * 4 + 3 * 2) * psi) < 1e3 and abs(b["gpu_to_host_bytes"] - 4 * 2 * psi) < 1e3, b
rec = d["fit"]["per_dp"][0]["recommended"]
assert rec == {"stage": 3, "offload_optimizer": "cpu", "offload_params": "cpu"}, rec
' --model llama3 --preset llama3-70B --seq 8192 --batch 2 --recompute full --stage 1 --offload-optimizer cpu \
  --offload-params cpu --grad-window 3 --gpu-mem 141GB --host-mem 1.5TB --platform h200x1 --grad-accum 4
run --model llama3 --preset llama3-70B --seq 8192 --batch 2 --recompute full --stage 3 --offload-optimizer cpu \
  --offload-params cpu --gpu-mem 141GB --host-mem 1.5TB --platform h200x1 --grad-accum 4
expect_text 'Step bound per rank and step (4 micro-batches) on h200x1' "bound of 4 micro-batches"
expect_line ' +gradients in flight \(G=2\) +4\.202725376' "gradients in flight in the breakdown"
# Wide figures (1128.859303936 GB of host memory) keep two blanks between the fit table's columns.
python3 "$here/check_plan_cli.py" fit-columns "$WORK/out" && pass "fit table columns stay apart" || fail "fit table columns run together"
# --speculative-fraction auto: the last layers whose second set of optimizer state still fits the
# host (llama3-70B on one GPU with 1.5 TB: all of it would take 1975.5 GB).
check_json "llama3-70B speculative on 1.5 TB" '
p = d["plans"][0]
s, o = p["speculative_split"], p["optimizer_split"]
assert d["settings"]["speculative_update"] and d["settings"]["speculative_fraction"] == "auto"
assert 0 < s["fraction"] < 1 and s["first_speculative_layer"] > o["first_offloaded_layer"] == 0, (s, o)
assert p["host"]["total"] <= 1.5e12, p["host"]
# One more layer (a block: 856,039,424 parameters, 12 bytes each) would not fit.
assert p["host"]["total"] + 12 * 856039424 > 1.5e12, p["host"]
assert p["host"]["optimizer"] == 12 * (d["model"]["params"] + s["speculative_params"]), p["host"]
' --model llama3 --preset llama3-70B --seq 8192 --batch 2 --recompute full --stage 3 --offload-optimizer cpu \
  --offload-params cpu --gpu-mem 141GB --host-mem 1.5TB --speculative-update --speculative-fraction auto
run --model llama3 --preset llama3-70B --seq 8192 --batch 2 --recompute full --stage 3 --offload-optimizer cpu \
  --offload-params cpu --gpu-mem 141GB --host-mem 1.5TB --speculative-update --speculative-fraction auto
expect_text 'layers 47-81 speculative (30142930944 of 70553706496 parameters, F = 0.4272), layers 0-46 synchronous' \
  "the speculative layers"
run --params 7e9 --stage 2 --offload-params cpu --offload-optimizer cpu
if [ "$RC" -eq 0 ]; then pass "dp 1, ZeRO-2 with --offload-params cpu"; else fail "dp 1, ZeRO-2: exit $RC"; fi

if [ "$FAILURES" -ne 0 ]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all checks passed"
