#!/usr/bin/env bash
# The predicted table of docs/manual.md ("What one H200 would do"; README.md shows it condensed): GPT models of 124M to 13B
# parameters on a simulated H200 node with 32 CPU cores (starzero-sim, roofline durations for the
# GPU), each plain, with --offload-optimizer cpu, and with the offloaded optimizer without
# gradient clipping, with DeepSpeed's delayed parameter update and with the speculative update. For each run: steady tokens/s
# (the median of the steps after the second), model TFLOP/s (6 FLOPs per parameter and token) and
# MFU (of the bf16 peak, 989 TFLOP/s), the step's bound and step / bound (the trace report's
# "Bound"), the CUDA worker's busy share and the share of the steady steps' CPU AdamW time during
# which the GPU runs a task (overlap.cpu_adam_hidden_fraction).
# Every run is bf16, --recompute full unless asked (activation checkpointing, as the ZeRO-Offload paper's runs),
# --sched dmda, roofline durations; B sequences of T tokens per step in micro-batches of MB
# (--batch B --grad-accum B/MB). A configuration whose state does not fit the GPU is reported as
# such (exit 2 of the run).
# Usage: scripts/sim-table.sh STARZERO_SIM [--cpus N] [--steps N] [--models LIST] [--configs LIST]
#          [--batch B] [--micro-batch MB] [--seq T] [--recompute MODE]
#   --models: comma-separated among gpt2-124M, gpt2-1558M, gpt-7B, gpt-13B (default all)
#   --configs: comma-separated among plain, offload, offload-noclip, offload-delayed (default: these
#     four), offload-auto (--offload-optimizer-fraction auto: the state the GPU holds stays there),
#     offload-speculative (--speculative-update) and offload-speculative-auto (both)
#   --batch, --micro-batch, --seq: default 8, 8, 1024; --recompute: full (default), selective or none
set -euo pipefail
sim=${1:?usage: sim-table.sh STARZERO_SIM [--cpus N] [--steps N] [--models LIST] [--configs LIST] [--attention cudnn|own]}
shift
cpus=32 steps=5 models=gpt2-124M,gpt2-1558M,gpt-7B,gpt-13B configs=plain,offload,offload-noclip,offload-delayed
batch=8 micro=8 seq=1024 recompute=full attention=cudnn
while [ $# -gt 0 ]; do
  case $1 in
    --cpus) cpus=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --models) models=${2:?}; shift 2 ;;
    --configs) configs=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --micro-batch) micro=${2:?}; shift 2 ;;
    --seq) seq=${2:?}; shift 2 ;;
    --recompute) recompute=${2:?}; shift 2 ;;
    --attention) attention=${2:?}; shift 2 ;;
    *) echo "sim-table: unknown option $1" >&2; exit 2 ;;
  esac
done
for n in "$batch" "$micro" "$seq"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "sim-table: --batch, --micro-batch and --seq take positive integers" >&2; exit 2; }
done
case $recompute in none | selective | full) ;; *) echo "sim-table: --recompute none, selective or full" >&2; exit 2 ;; esac
case $attention in cudnn | own) ;; *) echo "sim-table: --attention cudnn or own" >&2; exit 2 ;; esac
[ $((batch % micro)) -eq 0 ] || { echo "sim-table: --micro-batch $micro does not divide --batch $batch" >&2; exit 2; }
declare -A shape=(
  [gpt2-124M]="--preset gpt2-124M"
  [gpt2-1558M]="--preset gpt2-1558M"
  [gpt-7B]="--preset gpt2-1558M --layers 32 --channels 4096 --heads 32"
  [gpt-13B]="--preset gpt2-1558M --layers 40 --channels 5120 --heads 40"
)
declare -A mode=(
  [plain]=""
  [offload]="--offload-optimizer cpu"
  [offload-noclip]="--offload-optimizer cpu --grad-clip 0"
  [offload-delayed]="--offload-optimizer cpu --delayed-update 1"
  [offload-speculative]="--offload-optimizer cpu --speculative-update"
  [offload-auto]="--offload-optimizer cpu --offload-optimizer-fraction auto"
  [offload-speculative-auto]="--offload-optimizer cpu --speculative-update --offload-optimizer-fraction auto"
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$sim" platform h200x1 --cpus "$cpus" --out "$work/platform" > /dev/null
# An llm.c token shard (magic 20240520, version 1, uint16 tokens) in GPT-2's vocabulary, so the
# models have their real 50257-token embedding (byte text would give them a vocabulary of 256).
text=$work/tokens.bin
python3 - "$text" <<'PY'
import random, struct, sys
random.seed(3)
n = 400000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
PY
IFS=, read -r -a chosen <<< "$models"
echo "| model | configuration | attention | B×T (micro-batch) | tokens/s | TFLOP/s | MFU | step ms | bound ms (resource) | step / bound | GPU busy | attention ms/step | CPU Adam hidden |"
echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for m in "${chosen[@]}"; do
  [ -n "${shape[$m]:-}" ] || { echo "sim-table: unknown model $m" >&2; exit 2; }
  IFS=, read -r -a chosen_configs <<< "$configs"
  for c in "${chosen_configs[@]}"; do
    [ -n "${mode[$c]+set}" ] || { echo "sim-table: unknown configuration $c" >&2; exit 2; }
    echo "sim-table: $m, $c ..." >&2
    read -r -a flags <<< "${shape[$m]} ${mode[$c]}"
    rc=0
    "$sim" train "${flags[@]}" --max-seq "$seq" --batch "$batch" --grad-accum $((batch / micro)) --seq "$seq" \
      --precision bf16 --recompute "$recompute" --attention "$attention" --data "$text" --steps "$steps" --sched dmda \
      --platform "$work/platform" --trace "$work/t" > "$work/log" 2> "$work/err" || rc=$?
    if [ "$rc" -eq 2 ]; then
      [ "$recompute" = full ] || c="$c, --recompute $recompute"
      echo "| $m | $c | $attention | ${batch}×${seq} ($micro) | does not fit: $(grep -m1 'error: ' "$work/err" | sed 's/^[^:]*: error: //' | cut -c1-60)... | | | | | | | | |"
      continue
    elif [ "$rc" -ne 0 ] && ! grep -q "^step $steps/$steps " "$work/log"; then
      cat "$work/log" "$work/err" >&2
      exit 1
    fi
    # A run that predicted every step but died at exit has no trace (written at shutdown).
    if [ "$rc" -eq 0 ]; then "$sim" trace "$work/t" --json > "$work/report.json" 2> /dev/null; else echo '{}' > "$work/report.json"; fi
    python3 - "$m" "$c" "$work/log" "$work/report.json" "$batch" "$seq" "$micro" "$recompute" "$attention" <<'PY'
import json, re, statistics, sys
model, config, log, report = sys.argv[1], sys.argv[2], open(sys.argv[3]).read(), json.load(open(sys.argv[4]))
batch, seq, micro = map(int, sys.argv[5:8])
attention = sys.argv[9]
# The summary's GPU time per step by cost class: the attention classes together.
classes = dict((k, float(v)) for k, v in re.findall(r"(\w+) ([0-9.]+) ms", (re.search(r"^GPU time per step by cost class[^:]*: (.*)$", log, re.M) or [None, ""])[1]))
attention_ms = classes.get("cudnn_attention", 0.0) + classes.get("own_attention", 0.0)
if sys.argv[8] != "full":
    config += f", --recompute {sys.argv[8]}"
ms = [float(x) for x in re.findall(r"^step \d+/\d+ \| lr \S+ \| predicted ([0-9.]+) ms", log, re.M)]
step = statistics.median(ms[2:]) / 1e3
tokens = batch * seq
params = float(re.search(r", (\d+) parameters", log).group(1))
cuda = [w for w in report.get("workers", []) if w["kind"] == "cuda"]
traced = bool(report)
gpu_busy = f"{100 * cuda[0]['steady_busy_fraction']:.0f} %" if cuda and cuda[0]["steady_busy_fraction"] is not None else "?"
# The steady steps' CPU AdamW under the GPU's tasks ("-": no CPU AdamW, all of it on the GPU).
hidden = report.get("overlap", {}).get("cpu_adam_hidden_fraction")
hidden = "-" if hidden is None else f"{100 * hidden:.0f} %"
if not traced:
    gpu_busy = hidden = "no trace (aborted at exit)"
tflops = 6 * params * tokens / step / 1e12
bound = report.get("bound") or {}
names = {"compute": "GPU", "cpu_adam": "CPU AdamW", "pcie_to_gpu": "PCIe up", "pcie_to_host": "PCIe down", "disk": "disk"}
bound_text = f"{1e3 * bound['bound_s']:.0f} ({names.get(bound['binding'], bound['binding'])})" if bound else "?"
ratio = f"{step / bound['bound_s']:.2f}" if bound else "?"
print(f"| {model} | {config} | {attention} | {batch}×{seq} ({micro}) | {tokens / step:.0f} | {tflops:.1f} | {100 * tflops / 989:.1f} % | "
      f"{step * 1e3:.1f} | {bound_text} | {ratio} | {gpu_busy} | {attention_ms:.1f} | {hidden} |")
PY
  done
done
