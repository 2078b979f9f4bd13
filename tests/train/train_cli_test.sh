#!/usr/bin/env bash
# End-to-end checks of `starzero train` and `starzero eval` on the CPU (tiny models, few steps).
# Usage: train_cli_test.sh PATH/TO/starzero [PART]
#   PART: all (default) | train (checks 1-2) | resume (checks 3-5) | errors (check 6) | trace (check 7)
# Every check of the selected part runs; failures are listed and the script exits 1 if any failed.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

STARZERO=${1:?usage: train_cli_test.sh PATH/TO/starzero [all|train|resume|errors|trace]}
PART=${2:-all}
case "$PART" in
  all | train | resume | errors | trace) ;;
  *)
    echo "train_cli_test.sh: unknown part '$PART' (all, train, resume, errors, trace)" >&2
    exit 2
    ;;
esac
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILURES=0
START_SECONDS=$SECONDS

fail() {
  echo "FAIL: $*"
  FAILURES=$((FAILURES + 1))
}
pass() { echo "ok:   $*"; }
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

# A tiny byte-level GPT-2 on the CPU: C=32, 2 heads, 1 block, maxT=32; B=4, T=16.
L=1 C=32 NH=2 MAXT=32 V=256 VP=256
SHAPE=(--preset tiny --layers "$L" --channels "$C" --heads "$NH" --max-seq "$MAXT")
RUN=(--seq 16 --batch 4 --cuda-workers 0 --sample-tokens 8)

# ---- helpers: train_cli_files.py beside this test (Python 3, standard library only) ----------
py() { python3 "$here/train_cli_files.py" "$@"; }

TEXT=$WORK/text.txt
py text "$TEXT" || {
  echo "FAIL: could not write the training text"
  exit 1
}

# sz TAG ARGS...: runs `starzero ARGS` with a time limit; stdout -> $WORK/TAG.out,
# stderr -> $WORK/TAG.err, exit code -> $RC.
sz() {
  local tag=$1
  shift
  timeout -k 5 120 "$STARZERO" "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err"
  RC=$?
}
# expect_ok TAG CHECK: the last sz run exited 0.
expect_ok() {
  if [ "$RC" -eq 0 ]; then
    pass "$2: exit 0"
    return 0
  fi
  fail "$2: exit code $RC; stderr: $(tail -n 5 "$WORK/$1.err")"
  return 1
}
# losses TAG: "STEP/LAST LOSS" for every "step k/N | loss X | ..." line of TAG's stdout.
losses() { sed -nE 's#^step ([0-9]+)/([0-9]+) \| loss ([^ ]+) \|.*#\1/\2 \3#p' "$WORK/$1.out"; }
# step_values TAG: "STEP LOSS LR NORM" per step line (no timings), for determinism checks.
step_values() {
  sed -nE 's#^step ([0-9]+)/[0-9]+ \| loss ([^ ]+) \| lr ([^ ]+) \| norm ([^ ]+) \|.*#\1 \2 \3 \4#p' "$WORK/$1.out"
}
# check_ckpt CHECK FILE VERSION [C]: well-formed llm.c checkpoint of the tiny shape (channels C).
check_ckpt() {
  local desc=$1 file=$2 version=$3 channels=${4:-$C}
  if [ ! -f "$file" ]; then
    fail "$desc: $file was not written"
    return
  fi
  local problems
  problems=$(py check "$file" "$version" $MAXT $V $VP $L $NH "$channels")
  if [ -z "$problems" ]; then
    pass "$desc: llm.c header (magic, version $version, shape) and size 1024 + $(py params $MAXT $V $VP $L $NH "$channels") params"
  else
    fail "$desc: $problems"
  fi
}

# ---- 1. training runs and the loss falls ------------------------------------------------------
if want train; then
  sz c1 train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 60 --lr 3e-3 --val-every 20
  expect_ok c1 "check 1 (60 steps)"
  expected_steps=$(for k in $(seq 1 60); do echo "$k/60"; done)
  if [ "$(losses c1 | cut -d' ' -f1)" = "$expected_steps" ]; then
    pass "check 1: 60 'step k/60 | loss X' lines, k = 1..60"
  else
    fail "check 1: step lines are not 'step 1/60' .. 'step 60/60': $(losses c1 | head -n 3 | tr '\n' ' ')..."
  fi
  first=$(losses c1 | head -n 1 | cut -d' ' -f2)
  last=$(losses c1 | tail -n 1 | cut -d' ' -f2)
  # ln 256 = 5.545 at initialisation; the text's byte distribution alone is worth more than 1.5.
  if py lt "${first:-nan}" "${last:-nan}" 1.5; then
    pass "check 1: loss falls by more than 1.5 ($first -> $last)"
  else
    fail "check 1: loss did not fall by more than 1.5: first '$first', last '$last'"
  fi
  if grep -Eq "^summary: 60 steps, loss ${first//./\\.} -> ${last//./\\.}, validation [0-9.]+, " "$WORK/c1.out"; then
    pass "check 1: summary line (60 steps, loss $first -> $last, a validation loss)"
  else
    fail "check 1: no 'summary: 60 steps, loss $first -> $last, validation V, ...' line: $(grep '^summary' "$WORK/c1.out")"
  fi
  nval=$(grep -Ec '^  validation loss [0-9]+\.[0-9]+$' "$WORK/c1.out")
  if [ "$nval" -eq 3 ]; then
    pass "check 1: 3 validation loss lines (steps 20, 40, 60)"
  else
    fail "check 1: $nval '  validation loss X' lines, expected 3"
  fi
  val=$(grep -E '^  validation loss ' "$WORK/c1.out" | tail -n 1 | awk '{print $3}')
  if py plausible "${val:-nan}"; then
    pass "check 1: last validation loss $val is finite and below ln 256 + 0.5"
  else
    fail "check 1: last validation loss '$val' is not a plausible loss"
  fi
  if grep -q '^sample: ' "$WORK/c1.out"; then pass "check 1: sample line"; else fail "check 1: no 'sample: ' line"; fi
  # The step bound (docs/sim.md, "Step bound"): measured peaks, one line per resource, the
  # largest binds; the steady step is the median of steps 2..60 as their lines print them.
  if python3 "$here/check_train_cli.py" step-bound "$WORK/c1.out"; then
    pass "check 1: the step bound (CPU compute binds; steady step = the median; efficiency = bound / step)"
  else
    fail "check 1: the step bound lines: $(grep -A6 '^step bound' "$WORK/c1.out")"
  fi

  # ---- 2. determinism: same seed -> same losses, other seed -> other losses ---------------------
  for prec in fp32 bf16; do
    sz "c2_${prec}_1" train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 8 --lr 3e-3 --seed 7 --precision $prec --val-every 0
    expect_ok "c2_${prec}_1" "check 2 ($prec, seed 7, first run)"
    sz "c2_${prec}_2" train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 8 --lr 3e-3 --seed 7 --precision $prec --val-every 0
    expect_ok "c2_${prec}_2" "check 2 ($prec, seed 7, second run)"
    a=$(step_values "c2_${prec}_1")
    b=$(step_values "c2_${prec}_2")
    if [ "$(echo "$a" | grep -c .)" -ne 8 ]; then
      fail "check 2 ($prec): expected 8 step lines, got: $a"
    elif [ "$a" = "$b" ]; then
      pass "check 2 ($prec): same seed twice -> identical loss, lr and norm on all 8 steps"
    else
      fail "check 2 ($prec): same seed, different step lines: $(diff <(echo "$a") <(echo "$b") | tr '\n' ' ')"
    fi
  done
  sz c2_seed8 train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 8 --lr 3e-3 --seed 8 --precision fp32 --val-every 0
  expect_ok c2_seed8 "check 2 (fp32, seed 8)"
  if [ -n "$(losses c2_seed8)" ] && [ "$(losses c2_seed8)" != "$(losses c2_fp32_1)" ]; then
    pass "check 2: --seed 8 gives other losses than --seed 7"
  else
    fail "check 2: --seed 8 and --seed 7 print the same losses (or none): $(losses c2_seed8 | tr '\n' ' ')"
  fi
fi

# ---- 3. exact resume ----------------------------------------------------------------------------
# A constant learning rate (no warm-up, cosine from lr to lr·1) makes the schedule independent of
# the run's length: 10 steps == 5 steps + 5 resumed steps, bit for bit in fp32.
CONST=(--warmup 0 --lr-final 1 --lr 3e-3 --precision fp32 --val-every 0 --seed 11 --data "$TEXT")
make_A() { # the 10-step fp32 checkpoint A.bin (+ A.bin.state); also used by checks 4-6
  [ -f "$WORK/A.bin" ] && return 0
  sz c3_A train "${SHAPE[@]}" "${RUN[@]}" "${CONST[@]}" --steps 10 --checkpoint-out "$WORK/A.bin"
  expect_ok c3_A "check 3 (run A: 10 steps, --checkpoint-out A.bin)"
}
if want resume; then
  make_A
  sz c3_B1 train "${SHAPE[@]}" "${RUN[@]}" "${CONST[@]}" --steps 5 --checkpoint-out "$WORK/B.bin"
  expect_ok c3_B1 "check 3 (run B1: 5 steps, --checkpoint-out B.bin)"
  if [ -f "$WORK/B.bin" ] && [ -f "$WORK/B.bin.state" ]; then
    pass "check 3: B1 wrote B.bin and B.bin.state"
  else
    fail "check 3: B1 did not write B.bin and B.bin.state"
  fi
  cp "$WORK/B.bin" "$WORK/B.bin.orig" 2>/dev/null
  # Temporaries a killed save of B2.bin left (a process that has exited), and one of a running
  # process (this shell): the run removes the first two only.
  (exit 0) &
  dead=$!
  wait "$dead"
  echo x >"$WORK/B2.bin.tmp.$dead"
  echo x >"$WORK/B2.bin.state.tmp.$dead"
  echo x >"$WORK/B2.bin.tmp.$$"
  sz c3_B2 train "${SHAPE[@]}" "${RUN[@]}" "${CONST[@]}" --steps 5 --checkpoint-in "$WORK/B.bin" --checkpoint-out "$WORK/B2.bin"
  expect_ok c3_B2 "check 3 (run B2: --checkpoint-in B.bin, 5 more steps)"
  if [ ! -e "$WORK/B2.bin.tmp.$dead" ] && [ ! -e "$WORK/B2.bin.state.tmp.$dead" ] && [ -e "$WORK/B2.bin.tmp.$$" ] &&
    [ "$(grep -c "^removed .*B2\.bin.*\.tmp\.$dead, left by a save that did not finish\$" "$WORK/c3_B2.out")" = 2 ]; then
    pass "check 3: B2 removed the stale temporaries of a killed save, and only those"
  else
    fail "check 3: stale temporaries: $(ls "$WORK" | grep tmp | tr '\n' ' ') / $(grep '^removed' "$WORK/c3_B2.out")"
  fi
  rm -f "$WORK/B2.bin.tmp.$$"
  if grep -q "^resumed from .*B\.bin at step 5\$" "$WORK/c3_B2.out"; then
    pass "check 3: B2 says 'resumed from B.bin at step 5'"
  else
    fail "check 3: B2 does not say 'resumed from ... at step 5': $(grep -E '^(resumed|initialised)' "$WORK/c3_B2.out")"
  fi
  a_first=$(losses c3_A | head -n 5 | sed -E 's#/[0-9]+##')
  b1=$(losses c3_B1 | sed -E 's#/[0-9]+##')
  if [ "$(echo "$b1" | grep -c .)" -eq 5 ] && [ "$a_first" = "$b1" ]; then
    pass "check 3: B1's steps 1-5 have A's losses"
  else
    fail "check 3: B1's steps 1-5 differ from A's: A [$(echo "$a_first" | tr '\n' ' ')] B1 [$(echo "$b1" | tr '\n' ' ')]"
  fi
  a_last=$(losses c3_A | tail -n 5)
  b2=$(losses c3_B2)
  if [ "$(echo "$b2" | cut -d' ' -f1 | tr '\n' ' ')" = "6/10 7/10 8/10 9/10 10/10 " ]; then
    pass "check 3: B2 prints steps 6/10 .. 10/10"
  else
    fail "check 3: B2's step lines are not 6/10 .. 10/10: $(echo "$b2" | cut -d' ' -f1 | tr '\n' ' ')"
  fi
  if [ -n "$b2" ] && [ "$a_last" = "$b2" ]; then
    pass "check 3: B2's steps 6-10 have exactly A's losses ($(echo "$b2" | cut -d' ' -f2 | tr '\n' ' '))"
  else
    fail "check 3: resumed losses differ: A [$(echo "$a_last" | tr '\n' ' ')] B2 [$(echo "$b2" | tr '\n' ' ')]"
  fi
  if [ -f "$WORK/A.bin" ] && [ -f "$WORK/B2.bin" ] && cmp -s "$WORK/A.bin" "$WORK/B2.bin"; then
    pass "check 3: A.bin and B2.bin are byte-identical"
  else
    fail "check 3: A.bin and B2.bin differ (or are missing): $(cmp "$WORK/A.bin" "$WORK/B2.bin" 2>&1)"
  fi
  if [ -f "$WORK/A.bin.state" ] && [ -f "$WORK/B2.bin.state" ] && cmp -s "$WORK/A.bin.state" "$WORK/B2.bin.state"; then
    pass "check 3: A.bin.state and B2.bin.state are byte-identical"
  else
    fail "check 3: A.bin.state and B2.bin.state differ (or are missing): $(cmp "$WORK/A.bin.state" "$WORK/B2.bin.state" 2>&1)"
  fi
  if cmp -s "$WORK/B.bin" "$WORK/B.bin.orig"; then
    pass "check 3: the resumed run left its --checkpoint-in B.bin unchanged"
  else
    fail "check 3: B2 changed its --checkpoint-in B.bin"
  fi

  # ---- 4. llm.c checkpoint files are well-formed ------------------------------------------------
  n_expected=$((VP * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C))
  n_py=$(py params $MAXT $V $VP $L $NH $C)
  if [ "$n_expected" -eq "$n_py" ] && grep -q "^starzero train: .* $n_expected parameters" "$WORK/c3_A.out"; then
    pass "check 4: train reports $n_expected parameters = Vp*C + maxT*C + L*(12C^2+13C) + 2C"
  else
    fail "check 4: train does not report $n_expected parameters: $(head -n 1 "$WORK/c3_A.out")"
  fi
  check_ckpt "check 4 (A.bin, fp32)" "$WORK/A.bin" 3
  check_ckpt "check 4 (B.bin, fp32)" "$WORK/B.bin" 3
  sz c4_bf16 train "${SHAPE[@]}" "${RUN[@]}" "${CONST[@]}" --steps 2 --checkpoint-precision bf16 --checkpoint-out "$WORK/H.bin"
  expect_ok c4_bf16 "check 4 (--checkpoint-precision bf16)"
  if grep -q "^wrote .*H\.bin (llm\.c version 5)" "$WORK/c4_bf16.out"; then
    pass "check 4: train says it wrote llm.c version 5"
  else
    fail "check 4: no 'wrote ... (llm.c version 5)' line: $(grep '^wrote' "$WORK/c4_bf16.out")"
  fi
  check_ckpt "check 4 (H.bin, bf16)" "$WORK/H.bin" 5
  # A bf16 checkpoint loads (widened exactly) and training continues from it.
  sz c4_bf16_in train "${SHAPE[@]}" "${RUN[@]}" "${CONST[@]}" --steps 1 --checkpoint-in "$WORK/H.bin"
  expect_ok c4_bf16_in "check 4 (--checkpoint-in of a version 5 file)"

  # ---- 5. starzero eval ---------------------------------------------------------------------------
  # 4 batches of B*T = 64 tokens need 4*64 + 1 tokens; the shard holds 300 (4 whole batches).
  py shard "$WORK/tokens.bin" 300 "$TEXT"
  EVAL=(eval --checkpoint "$WORK/A.bin" --batch 4 --seq 16 --cuda-workers 0)
  mean_loss() { sed -nE 's#^eval: .*: mean loss ([^ ]+) over ([0-9]+) batches of ([0-9]+)x([0-9]+) .*#\1#p' "$WORK/$1.out"; }
  for src in shard text; do
    if [ $src = shard ]; then data=$WORK/tokens.bin; else data=$TEXT; fi
    sz "c5_${src}_1" "${EVAL[@]}" --data "$data" --batches 4
    if expect_ok "c5_${src}_1" "check 5 (eval on the $src)"; then
      x=$(mean_loss "c5_${src}_1")
      if py plausible "${x:-nan}"; then
        pass "check 5 ($src): 'mean loss $x' over 4 batches is finite and below ln 256 + 0.5"
      else
        fail "check 5 ($src): no plausible 'mean loss X' in: $(cat "$WORK/c5_${src}_1.out")"
      fi
      sz "c5_${src}_2" "${EVAL[@]}" --data "$data" --batches 4
      y=$(mean_loss "c5_${src}_2")
      if [ "$RC" -eq 0 ] && [ -n "$x" ] && [ "$x" = "$y" ]; then
        pass "check 5 ($src): eval is deterministic ($x twice)"
      else
        fail "check 5 ($src): eval twice: '$x' then '$y' (exit $RC)"
      fi
    fi
    sz "c5_${src}_many" "${EVAL[@]}" --data "$data" --batches 100000
    if [ "$RC" -eq 2 ] && [ "$(wc -l <"$WORK/c5_${src}_many.err")" -eq 1 ] &&
      grep -q '^starzero eval: error: .*--batches' "$WORK/c5_${src}_many.err"; then
      pass "check 5 ($src): --batches beyond the data -> exit 2: $(cat "$WORK/c5_${src}_many.err")"
    else
      fail "check 5 ($src): --batches beyond the data: exit $RC, stderr: $(cat "$WORK/c5_${src}_many.err")"
    fi
  done
fi

# ---- 6. bad input: exit 2, one "starzero train: error:" line, no checkpoint written -----------
if want errors; then
  make_A
  OUT=$WORK/out.bin
  # snapshot: checksums of out.bin and out.bin.state where they exist.
  snapshot() {
    local f
    for f in "$OUT" "$OUT.state"; do
      if [ -e "$f" ]; then md5sum "$f"; fi
    done
  }
  # expect_usage_error DESCRIPTION COMMAND ARGS...: exit 2, stderr exactly one line
  # "starzero COMMAND: error: ...", and out.bin (+ .state) as before the run.
  expect_usage_error() {
    local desc=$1 command=$2
    shift 2
    local before after
    before=$(snapshot)
    sz c6 "$command" "$@"
    after=$(snapshot)
    local lines
    lines=$(wc -l <"$WORK/c6.err")
    if [ "$RC" -ne 2 ]; then
      fail "check 6 [$desc]: exit code $RC, expected 2; stderr: $(tail -n 3 "$WORK/c6.err")"
    elif [ "$(grep -c "^starzero $command: error: " "$WORK/c6.err")" -ne 1 ] ||
      ! tail -n 1 "$WORK/c6.err" | grep -q "^starzero $command: error: "; then
      fail "check 6 [$desc]: stderr does not end with one 'starzero $command: error: ...' line: $(cat "$WORK/c6.err")"
    elif [ "$before" != "$after" ]; then
      fail "check 6 [$desc]: the --checkpoint-out file changed: before [$before] after [$after]"
    elif ls "$WORK"/out.bin*.tmp* >/dev/null 2>&1; then
      fail "check 6 [$desc]: a temporary file was left behind: $(ls "$WORK"/out.bin*.tmp*)"
    else
      pass "check 6 [$desc] -> exit 2, $(tail -n 1 "$WORK/c6.err")"
    fi
    # The error line is all of stderr: nothing else (StarPU start-up messages included) precedes it,
    # i.e. the input is validated before the StarPU session starts.
    if [ "$lines" -gt 1 ]; then
      fail "check 6 [$desc]: stderr has $lines lines, expected only the error line: $(head -n $((lines - 1)) "$WORK/c6.err")"
    fi
  }
  # Without --steps: each case adds "--steps 2" (or the bad value under test).
  T6=(train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --val-every 0 --checkpoint-out "$OUT")
  rm -f "$OUT" "$OUT.state"
  expect_usage_error "unknown flag" "${T6[@]}" --steps 2 --bogus
  expect_usage_error "--steps 0" "${T6[@]}" --steps 0
  expect_usage_error "--batch -1" "${T6[@]}" --steps 2 --batch -1
  expect_usage_error "--seq 64 > --max-seq 32" "${T6[@]}" --steps 2 --seq 64
  expect_usage_error "--precision fp16" "${T6[@]}" --steps 2 --precision fp16
  expect_usage_error "--tiles 0" "${T6[@]}" --steps 2 --tiles 0
  expect_usage_error "--tiles two" "${T6[@]}" --steps 2 --tiles two
  expect_usage_error "--tiles 5 for a micro-batch of 4" "${T6[@]}" --steps 2 --batch 4 --tiles 5
  expect_usage_error "--heads 3 with --channels 32" "${T6[@]}" --steps 2 --heads 3
  expect_usage_error "--cpu-compute yes" "${T6[@]}" --steps 2 --cpu-compute yes
  expect_usage_error "--data missing file" "${T6[@]}" --steps 2 --data "$WORK/no-such-file.txt"
  expect_usage_error "--checkpoint-in missing file" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/no-such.bin"
  for f in "$OUT" "$OUT.state"; do
    if [ -e "$f" ]; then fail "check 6: $f was created by a failing run"; fi
  done

  # The malformed --checkpoint-in cases run with a pre-existing out.bin (+ .state) of known content.
  printf 'known content\n' >"$OUT"
  printf 'known state\n' >"$OUT.state"
  py corrupt "$WORK/A.bin" "$WORK/truncated.bin" truncate
  py corrupt "$WORK/A.bin" "$WORK/magic.bin" magic
  py corrupt "$WORK/A.bin" "$WORK/version4.bin" version4
  expect_usage_error "truncated checkpoint" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/truncated.bin"
  expect_usage_error "wrong magic" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/magic.bin"
  expect_usage_error "version 4" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/version4.bin"
  sz c6_c64 train --preset tiny --layers "$L" --channels 64 --heads "$NH" --max-seq "$MAXT" "${RUN[@]}" --data "$TEXT" \
    --steps 1 --val-every 0 --checkpoint-out "$WORK/C64.bin"
  if expect_ok c6_c64 "check 6 (a --channels 64 checkpoint)"; then
    check_ckpt "check 6 (C64.bin)" "$WORK/C64.bin" 3 64
    expect_usage_error "--channels 64 checkpoint into --channels 32" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/C64.bin"
  fi
  # A valid checkpoint whose .state beside it is truncated: no silent fresh start.
  cp "$WORK/A.bin" "$WORK/S.bin"
  head -c 100 "$WORK/A.bin.state" >"$WORK/S.bin.state"
  expect_usage_error "truncated FILE.state beside the checkpoint" "${T6[@]}" --steps 2 --checkpoint-in "$WORK/S.bin"
  if [ "$(cat "$OUT")" = "known content" ] && [ "$(cat "$OUT.state")" = "known state" ]; then
    pass "check 6: the pre-existing --checkpoint-out file and its .state are unchanged"
  else
    fail "check 6: the pre-existing --checkpoint-out file or its .state was overwritten"
  fi
  # eval on malformed checkpoints.
  E6=(eval --data "$TEXT" --batch 4 --cuda-workers 0)
  expect_usage_error "eval: truncated checkpoint" "${E6[@]}" --seq 16 --checkpoint "$WORK/truncated.bin"
  expect_usage_error "eval: wrong magic" "${E6[@]}" --seq 16 --checkpoint "$WORK/magic.bin"
  expect_usage_error "eval: missing checkpoint" "${E6[@]}" --seq 16 --checkpoint "$WORK/no-such.bin"
  expect_usage_error "eval: --seq 64 > the checkpoint's max-seq" "${E6[@]}" --seq 64 --checkpoint "$WORK/A.bin"
fi

# ---- 7. --trace DIR: paje.trace that ViTE reads without errors ----------------------------------
if want trace; then
  sz c7 train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 3 --val-every 0 --trace "$WORK/trace"
  expect_ok c7 "check 7 (--trace, 3 steps)"
  if [ -s "$WORK/trace/paje.trace" ]; then
    pass "check 7: $WORK/trace/paje.trace written"
    (cd "$WORK/trace" && QT_QPA_PLATFORM=offscreen timeout -k 5 120 vite -f paje.trace -e out.svg) >"$WORK/vite.log" 2>&1
    vite_rc=$?
    summary=$(grep -Eo '[0-9]+ errors? and [0-9]+ warnings?' "$WORK/vite.log" | tail -n 1)
    if [ -z "$summary" ]; then
      fail "check 7: no 'N errors and M warnings' line from vite (exit $vite_rc): $(tail -n 5 "$WORK/vite.log")"
    elif [ "${summary%% *}" != 0 ]; then
      fail "check 7: vite reports $summary: $(grep -i error "$WORK/vite.log" | head -n 5)"
    elif [ "$vite_rc" -ne 0 ]; then
      fail "check 7: vite exit code $vite_rc ($summary)"
    else
      pass "check 7: vite reads paje.trace: $summary"
    fi
  else
    fail "check 7: no $WORK/trace/paje.trace; stdout: $(tail -n 2 "$WORK/c7.out") stderr: $(tail -n 3 "$WORK/c7.err")"
  fi
  # The run leaves its step bound's figures for `starzero trace`; a one-step run has no steady step,
  # so neither a bound nor the file.
  if python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["compute_device"] == "CPU" and d["steady_step_s"] > 0' \
       "$WORK/trace/step_bound.json"; then
    pass "check 7: step_bound.json beside the trace"
  else
    fail "check 7: no valid $WORK/trace/step_bound.json"
  fi
  sz c7one train "${SHAPE[@]}" "${RUN[@]}" --data "$TEXT" --steps 1 --val-every 0 --trace "$WORK/trace-one"
  expect_ok c7one "check 7 (--trace, 1 step)"
  if ! grep -q '^step bound' "$WORK/c7one.out" && [ ! -e "$WORK/trace-one/step_bound.json" ]; then
    pass "check 7: one step: no bound, no step_bound.json"
  else
    fail "check 7: one step printed a bound or wrote step_bound.json"
  fi
fi

echo "part $PART: $((SECONDS - START_SECONDS)) s"
if [ "$FAILURES" -ne 0 ]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all checks passed"
