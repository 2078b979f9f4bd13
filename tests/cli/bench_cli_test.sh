#!/usr/bin/env bash
# `starzero bench blas` end to end: the table of every GPT matmul (tiles of single-threaded sgemm
# against one multi-threaded sgemm) with plausible figures, the bf16 GEMM line, and one-line usage
# errors with exit code 2; `bench step`'s tiles and attention head groups. No figure is compared with another: this is a measurement tool.
# Usage: bench_cli_test.sh PATH/TO/starzero
set -u
STARZERO=${1:?usage: bench_cli_test.sh PATH/TO/starzero}
FAILURES=0
fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
pass() { echo "ok:   $*"; }

out=$("$STARZERO" bench blas --preset tiny --rows 48 --repeat 2 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] && pass "bench blas exits 0" || fail "bench blas exited $rc"
# 5 linear layers x (forward, input grad, weight grad), each row with two positive GFLOP/s and their ratio.
rows=$(echo "$out" | grep -cE '^\| [a-z]+ (forward|input grad|weight grad) \| [0-9]+ x [0-9]+ x [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$')
[ "$rows" -eq 15 ] && pass "15 products in the table" || fail "$rows well-formed product rows, want 15"
# tiny: C=128, Vp=256 -> the classifier forward is 48 x 256 x 128.
echo "$out" | grep -q '^| classifier forward | 48 x 256 x 128 |' && pass "shapes from the preset and --rows" ||
  fail "no 'classifier forward | 48 x 256 x 128' row"
echo "$out" | grep -qE '^\| all of them \| \| [0-9.]+ s \| [0-9.]+ s \| [0-9.]+ \|$' && pass "total line" ||
  fail "no total line"
echo "$out" | grep -qE '^bf16 GEMM \(cblas_sbgemm\): (exported|not exported by this library); this CPU (has|lacks) AVX512-BF16$' &&
  pass "bf16 GEMM availability line" || fail "no bf16 GEMM availability line"
zero=$(echo "$out" | grep -E '^\| [a-z]+ (forward|input grad|weight grad) \|' | awk -F'|' '$4 + 0 <= 0 || $5 + 0 <= 0' | wc -l)
[ "$zero" -eq 0 ] && pass "every throughput positive" || fail "$zero rows with a zero throughput"

for bad in "--rows 0" "--repeat -1" "--cores x" "--preset nosuch" "--frobnicate"; do
  # shellcheck disable=SC2086
  err=$("$STARZERO" bench blas $bad 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ]; then pass "bench blas $bad: exit 2, one line"; else
    fail "bench blas $bad: exit $rc, $lines lines: $err"; fi
done
# `bench step` splits attention as `train` does: --head-groups auto is 2 groups for one tile and 2
# CPU workers (tiny has 4 heads), and a count beyond the heads is refused before any work.
out=$("$STARZERO" bench step --preset tiny --batch 1 --seq 16 --steps 1 --probe-size 16 --cpu-workers 2 --cuda-workers 0 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q '^tiles: 1 per row-wise op, 2 attention head group(s) per tile$' &&
  pass "bench step: auto head groups" || fail "bench step auto head groups: exit $rc: $out"
out=$("$STARZERO" bench step --preset tiny --batch 2 --seq 16 --steps 1 --probe-size 16 --cpu-workers 2 --cuda-workers 0 --tiles 2 --head-groups 3 2>&1)
echo "$out" | grep -q '^tiles: 2 per row-wise op, 3 attention head group(s) per tile$' &&
  pass "bench step --tiles 2 --head-groups 3" || fail "bench step --head-groups 3: $out"
for bad in "--head-groups 5" "--head-groups 0" "--tiles 9"; do
  # shellcheck disable=SC2086
  err=$("$STARZERO" bench step --preset tiny --batch 2 --cuda-workers 0 $bad 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ]; then pass "bench step $bad: exit 2, one line"; else
    fail "bench step $bad: exit $rc, $lines lines: $err"; fi
done
# The model checks the tiling, as for `train`: Llama 3's attention is not cut by heads, and its
# tiles are printed from the model as built.
err=$("$STARZERO" bench step --preset llama3-tiny --batch 2 --cuda-workers 0 --head-groups 2 2>&1 >/dev/null)
rc=$?
[ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && echo "$err" | grep -q 'head-groups' &&
  pass "bench step llama3-tiny --head-groups 2: exit 2, one line" || fail "llama3 --head-groups: exit $rc: $err"
out=$("$STARZERO" bench step --preset llama3-tiny --batch 2 --seq 16 --steps 1 --probe-size 16 --cpu-workers 2 --cuda-workers 0 --tiles 2 2>&1)
echo "$out" | grep -q '^tiles: 2 per row-wise op$' && pass "bench step llama3-tiny --tiles 2" ||
  fail "bench step llama3-tiny --tiles 2: $out"
err=$("$STARZERO" bench nosuch 2>&1 >/dev/null)
rc=$?
[ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && pass "unknown bench: exit 2, one line" ||
  fail "unknown bench: exit $rc: $err"

echo "bench_cli: $FAILURES failed"
[ "$FAILURES" -eq 0 ]
