#!/usr/bin/env bash
# --attention on `starzero train` and `starzero plan`: a bad value is a one-line usage error with
# exit code 2; a CPU run resolves auto to the own kernel and says so in its banner; an explicit
# cudnn without a GPU is refused; `plan --attention cudnn` counts cuDNN's workspace on the GPU.
# Usage: attention_cli_test.sh PATH/TO/starzero
set -u
STARZERO=${1:?usage: attention_cli_test.sh PATH/TO/starzero}
FAILURES=0
fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
pass() { echo "ok:   $*"; }

for cmd in train plan; do
  out=$("$STARZERO" $cmd --preset tiny --attention flash 2>&1)
  rc=$?
  [ $rc -eq 2 ] && pass "$cmd --attention flash exits 2" || fail "$cmd --attention flash exited $rc: $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q -- "--attention: 'flash' is not one of auto|cudnn|own" &&
    pass "$cmd: one-line error naming the value" || fail "$cmd: error output was: $out"
done

run=(train --preset tiny --steps 1 --val-every 0 --sample-tokens 1 --cuda-workers 0 --cpu-workers 2 --progress lines)
out=$("$STARZERO" "${run[@]}" 2>&1)
rc=$?
[ $rc -eq 0 ] && pass "CPU run exits 0" || fail "CPU run exited $rc: $out"
echo "$out" | grep -qx "attention: own (own kernel: no GPU)" && pass "banner: attention own, no GPU" ||
  fail "no 'attention: own (own kernel: no GPU)' line in: $out"
out=$("$STARZERO" "${run[@]}" --attention own 2>&1)
echo "$out" | grep -qx "attention: own (--attention own)" && pass "banner: --attention own" ||
  fail "no 'attention: own (--attention own)' line in: $out"
out=$("$STARZERO" "${run[@]}" --attention cudnn 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--attention cudnn: no GPU" && pass "cudnn without a GPU is refused" ||
  fail "--attention cudnn without a GPU: exit $rc, output: $out"

gpu_total() { "$STARZERO" plan --preset gpt2-124M --batch 8 --seq 1024 --dp 1 --stage 0 --json "$@" 2>&1 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["plans"][0]["gpu"]["total"])'; }
own=$(gpu_total --attention own)
cudnn=$(gpu_total --attention cudnn)
if [ -n "$own" ] && [ -n "$cudnn" ] && python3 -c "import sys; sys.exit(0 if float('$cudnn') > float('$own') else 1)"; then
  pass "plan: cudnn attention adds GPU bytes ($own -> $cudnn)"
else
  fail "plan: GPU bytes own '$own', cudnn '$cudnn'"
fi

[ $FAILURES -eq 0 ] && echo "all passed" || echo "$FAILURES failed"
exit $((FAILURES > 0))
