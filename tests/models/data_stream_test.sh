#!/usr/bin/env bash
# Streamed llm.c token shards (models/data.hpp) end to end:
#   - memory: a run over 3 shards of 100 M tokens (sparse files: 600 MB on paper, no disk) holds
#     less than 50 MB more resident memory than a run over one shard of 1 M tokens;
#   - a folder, a glob and --val-data train; 2 ranks print the 1-rank losses (one stream);
#   - a resume mid-epoch prints the uninterrupted run's losses, on 1 rank and from 2 ranks to 1;
#   - bad shards and flags: one error line naming the file, exit 2.
# Usage: data_stream_test.sh STARZERO
set -euo pipefail
starzero=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

shards() { python3 "$here/write_shards.py" "$@"; }
# --batch is the global batch: 2 ranks take 2 rows each of the same 4.
model=(train --preset tiny --layers 2 --channels 32 --heads 2 --max-seq 32 --seq 16 --batch 4 --precision fp32
       --cuda-workers 0 --cpu-workers 1 --sample-every 0)
peak_rss_mb() {  # the largest resident set of the command, in MB (getrusage of the child)
  python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 if rc == 0 else "failed")' "$@"
}

# ---- memory: resident memory does not grow with the data set --------------------------------
mkdir -p "$work/big" "$work/small"
shards sparse "$work/big" 3 100000000
shards sparse "$work/small" 1 1000000
small=$(peak_rss_mb "$starzero" "${model[@]}" --steps 3 --val-every 0 --data "$work/small")
big=$(peak_rss_mb "$starzero" "${model[@]}" --steps 3 --val-every 0 --data "$work/big")
echo "peak RSS: 1 shard of 1 M tokens $small MB, 3 shards of 100 M tokens $big MB"
python3 -c "import sys; s, b = '$small', '$big'; sys.exit(0 if 'failed' not in (s, b) and float(b) - float(s) < 50 else 1)" \
  || fail "3 x 100 M tokens held $big MB against $small MB for 1 M (limit: +50 MB)"

# ---- forms of --data, ranks, resume -----------------------------------------------------------
mkdir -p "$work/data" "$work/val"
shards random "$work/data" 3 4000 11 # shards of 4000 random GPT-2 tokens
shards random "$work/val" 1 2000 12
"$starzero" "${model[@]}" --steps 8 --data "$work/data" --val-data "$work/val" --val-every 4 \
  --checkpoint-out "$work/full.bin" > "$work/single.log" 2>&1 || { cat "$work/single.log"; fail "folder run"; }
grep -q "data: 3 GPT-2 token shards (12000 tokens): 12000 training and 2000 validation tokens" "$work/single.log" \
  || { grep data: "$work/single.log"; fail "the data line"; }
grep -q "validation loss" "$work/single.log" || fail "no validation over --val-data"
"$starzero" "${model[@]}" --steps 8 --data "$work/data/train_*.bin" --val-data "$work/val" --val-every 4 \
  > "$work/glob.log" 2>&1 || { cat "$work/glob.log"; fail "glob run"; }
[ "$(losses "$work/glob.log")" = "$(losses "$work/single.log")" ] || fail "a glob of the folder's shards trains differently"
# Two ranks, half the rows each: the same global batches, the same losses (within fp32 reduction order).
"${mpirun[@]}" -np 2 "$starzero" "${model[@]}" --steps 8 --data "$work/data" --val-data "$work/val" \
  --val-every 4 --checkpoint-out "$work/np2.bin" > "$work/np2.log" 2>&1 || { cat "$work/np2.log"; fail "2 ranks"; }
compare_losses "$work/single.log" "$work/np2.log" "2 ranks against 1" 1e-3
# Resume at step 4 of 8 (mid-epoch) on 1 rank: the uninterrupted losses and checkpoint.
check_resume "$starzero" "$work" 4 "${model[@]}" --data "$work/data" --val-data "$work/val" --val-every 4
# Saved by 2 ranks at step 4, resumed on 1: the stream continues where it stopped.
"${mpirun[@]}" -np 2 "$starzero" "${model[@]}" --steps 4 --data "$work/data" --val-data "$work/val" \
  --val-every 4 --checkpoint-out "$work/np2half.bin" > "$work/np2half.log" 2>&1 || { cat "$work/np2half.log"; fail "2-rank half"; }
"$starzero" "${model[@]}" --steps 4 --data "$work/data" --val-data "$work/val" --val-every 4 \
  --checkpoint-in "$work/np2half.bin" > "$work/from2.log" 2>&1 || { cat "$work/from2.log"; fail "resume from 2 ranks"; }
python3 - "$(losses "$work/single.log" | tail -n 4)" "$(losses "$work/from2.log")" <<'PY' || fail "2 ranks -> 1: the resumed losses differ"
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == len(b) == 4 and max(abs(x - y) for x, y in zip(a, b)) < 2e-3, (a, b)
PY

# ---- bad input ---------------------------------------------------------------------------------
cp "$work/data/train_000001.bin" "$work/short.bin" && truncate -s -3 "$work/short.bin"
expect_bad_input "a truncated shard" "$starzero" "${model[@]}" --steps 1 --data "$work/short.bin"
grep -q "short.bin" "$work/err" || fail "the error does not name the truncated shard"
mkdir -p "$work/mixed" && cp "$work/data/train_000000.bin" "$work/mixed/" && cp "$work/short.bin" "$work/mixed/train_000001.bin"
expect_bad_input "a bad shard in a folder" "$starzero" "${model[@]}" --steps 1 --data "$work/mixed"
grep -q "train_000001.bin" "$work/err" || fail "the error does not name the bad shard of the folder"
expect_bad_input "a glob that matches nothing" "$starzero" "${model[@]}" --steps 1 --data "$work/data/val_*.bin"
expect_bad_input "--val-data without --data" "$starzero" "${model[@]}" --steps 1 --val-data "$work/val"
expect_bad_input "--val-fraction 1" "$starzero" "${model[@]}" --steps 1 --data "$work/data" --val-fraction 1
expect_bad_input "--val-data and --val-fraction" "$starzero" "${model[@]}" --steps 1 --data "$work/data" \
  --val-data "$work/val" --val-fraction 0.2
finish "streamed token shards: memory, folder, glob, ranks, resume and bad input"
