#!/usr/bin/env bash
# Crash safety of checkpoint sets under kill -9 (issue 14): trains a tiny GPT with a checkpoint set
# after every step (`--checkpoint-dir D --save-every 1 --resume`), kills it with SIGKILL at a
# random moment, restarts the same command line, KILLS times, then lets it finish. Passes when
#   - every restart resumed (exit code 0 or death by our own kill; never a load error),
#   - every step line any run wrote to the metrics file has the loss of an uninterrupted run's
#     same step, to the last digit (resume is exact),
#   - the last set is step STEPS, its model file is byte-identical to the uninterrupted run's,
#   - no partial folder or temporary file is left once the last run ends.
# Usage: scripts/kill-test.sh STARZERO KILLS [RANKS]   (RANKS > 1: under mpirun, a random rank is
# killed). Prints one line per kill and a summary; exit code 1 when anything failed.
set -euo pipefail
starzero=$(realpath "${1:?usage: kill-test.sh STARZERO KILLS [RANKS]}")
kills=${2:?usage: kill-test.sh STARZERO KILLS [RANKS]}
ranks=${3:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/text.txt" <<'PY'
import random, sys
random.seed(14)
words = "the of and to in is that for it as with was on be by this are from at or an which".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(30000)))
PY
# Enough steps that every kill lands before the end (about 60 steps per restart on one rank,
# 6 under mpirun).
steps=$((kills * (ranks > 1 ? 12 : 80) + 100))
first_kill=$([ "$ranks" -gt 1 ] && echo 1.0 || echo 0.3)
launch=("$starzero")
[ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" "$starzero")
args=(train --preset tiny --layers 1 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --cuda-workers 0
  --cpu-workers 1 --data "$work/text.txt" --precision fp32 --val-every 0 --quiet --steps "$steps" --save-every 1
  --resume --keep-checkpoints 2)
[ "$ranks" -gt 1 ] && args+=(--stage 3)

echo "kill-test: $kills kills of a $steps-step run with $ranks rank(s), a checkpoint set after every step"
"${launch[@]}" "${args[@]}" --checkpoint-dir "$work/ref" --metrics "$work/ref.jsonl" > "$work/ref.log" 2>&1 \
  || { cat "$work/ref.log"; echo "FAIL: the uninterrupted run failed"; exit 1; }

failures=0
in_save=0
done_kills=0
while [ "$done_kills" -lt "$kills" ]; do
  # Start-up takes about 0.3 s on one rank and 1 s under mpirun: kill between then and 1.3 s later.
  delay=$(python3 -c "import random; print(round(random.uniform($first_kill, $first_kill + 1.3), 3))")
  setsid "${launch[@]}" "${args[@]}" --checkpoint-dir "$work/run" --metrics "$work/run.jsonl" > "$work/last.log" 2>&1 &
  job=$!
  sleep "$delay"
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job" && rc=0 || rc=$?
    if [ "$rc" -ne 0 ]; then cat "$work/last.log"; echo "FAIL: a run exited $rc without being killed"; failures=$((failures + 1)); fi
    grep -q "nothing to train" "$work/last.log" && break  # finished before the planned kills
    continue
  fi
  if [ "$ranks" -gt 1 ]; then
    mapfile -t pids < <(pgrep -f -- "--checkpoint-dir $work/run" | grep -v "^$job\$" || true)
    [ "${#pids[@]}" -gt 0 ] && victim=${pids[$((RANDOM % ${#pids[@]}))]} || victim=$job
  else
    victim=$job
  fi
  disown "$job"  # its death is ours: no job-control message
  kill -9 "$victim" 2>/dev/null || true
  # Under load a kill can come before the run made its folder (find would fail the pipeline).
  saving=0
  if [ -d "$work/run" ]; then saving=$(find "$work/run" -maxdepth 1 -name '.partial-step_*' | wc -l); fi
  [ "$saving" -gt 0 ] && in_save=$((in_save + 1))
  # The rest of the job: mpirun and the other ranks (which mpirun may have put in their own
  # process groups: a rank orphaned by a killed mpirun would wait in a collective forever).
  kill -9 -- -"$job" 2>/dev/null || true
  pkill -9 -f -- "--checkpoint-dir $work/run" 2>/dev/null || true
  while pgrep -f -- "--checkpoint-dir $work/run" > /dev/null; do sleep 0.05; done
  done_kills=$((done_kills + 1))
  echo "kill $done_kills after ${delay} s: latest $(cat "$work/run/latest" 2>/dev/null || echo none)$([ "$saving" -gt 0 ] && echo ', during a save')"
done
# The last run finishes.
"${launch[@]}" "${args[@]}" --checkpoint-dir "$work/run" --metrics "$work/run.jsonl" > "$work/last.log" 2>&1 \
  || { cat "$work/last.log"; echo "FAIL: the final run failed"; failures=$((failures + 1)); }

python3 - "$work/ref.jsonl" "$work/run.jsonl" <<'PY' || failures=$((failures + 1))
import json, sys
def steps(path):
    return [l for l in map(json.loads, open(path)) if l["event"] == "step"]
ref = {l["step"]: l["loss"] for l in steps(sys.argv[1])}
lines = steps(sys.argv[2])
bad = [(l["step"], l["loss"], ref.get(l["step"])) for l in lines if ref.get(l["step"]) != l["loss"]]
seen = {l["step"] for l in lines}
print("metrics: %d step lines from all runs (%d steps recomputed after a kill), %d differ from the uninterrupted run"
      % (len(lines), len(lines) - len(seen), len(bad)))
if bad or seen != set(ref):
    print("FAIL: losses differ or steps missing:", bad[:5], sorted(set(ref) - seen)[:5])
    sys.exit(1)
PY
[ "$(cat "$work/run/latest")" = "step_$steps" ] || { echo "FAIL: latest is $(cat "$work/run/latest")"; failures=$((failures + 1)); }
cmp -s "$work/ref/step_$steps/model.bin" "$work/run/step_$steps/model.bin" \
  || { echo "FAIL: the final model differs from the uninterrupted run's"; failures=$((failures + 1)); }
left=$(find "$work/run" -name '.partial-*' -o -name '*.tmp.*' | wc -l)
[ "$left" -eq 0 ] || { find "$work/run"; echo "FAIL: $left partial folders or temporary files left"; failures=$((failures + 1)); }
echo "kill-test: $done_kills kills ($in_save during a save), $failures failure(s); final model byte-identical: $([ "$failures" -eq 0 ] && echo yes || echo see above)"
[ "$failures" -eq 0 ]
