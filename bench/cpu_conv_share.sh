#!/usr/bin/env bash
# How much of a CPU training step is oneDNN's convolutions, kiln beside PyTorch eager: one network
# trained on both sides at one thread (the same core) with ONEDNN_VERBOSE=1, the logs summed by
# bench/report_onednn_conv_time.py. Both sides run oneDNN's convolutions, so this bounds what kiln
# can gain over PyTorch by the rest of its step (BatchNorm, ReLU, pooling, the optimizer).
#
#   bench/cpu_conv_share.sh <kiln binary> <out dir>
# KILN_NETWORK (default resnet18:224:32, model:size:batch), KILN_THREADS (default 1: at one
# thread the summed kernel times are the step's time in them), KILN_LIBS (a folder put first on
# kiln's LD_LIBRARY_PATH: a build unpacked by scripts/carry.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
kiln=${1:?usage: bench/cpu_conv_share.sh <kiln binary> <out dir>}
out=${2:?usage: bench/cpu_conv_share.sh <kiln binary> <out dir>}
mkdir -p "$out"
IFS=: read -r model size batch <<< "${KILN_NETWORK:-resnet18:224:32}"
t=${KILN_THREADS:-1}
pin="taskset -c 0-$((t - 1))"
LD_LIBRARY_PATH="${KILN_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ONEDNN_VERBOSE=1 $pin "$kiln" bench --device cpu --threads "$t" --cpu-kernels onednn --model "$model" --batch "$batch" \
  --precision fp32 --warmup 1 --steps 3 --json "$out/kiln.jsonl" > "$out/kiln_verbose.log" 2>&1 || { tail -3 "$out/kiln_verbose.log"; exit 1; }
ONEDNN_VERBOSE=1 OMP_NUM_THREADS=$t $pin python3 bench/torch_models.py --device cpu --threads "$t" --model "$model" \
  --batch "$batch" --size "$size" --precision fp32 --modes eager --warmup 1 --steps 3 > "$out/torch_verbose.log" 2>&1 \
  || { tail -3 "$out/torch_verbose.log"; exit 1; }
grep '^{' "$out/torch_verbose.log" > "$out/torch.jsonl"
python3 bench/report_onednn_conv_time.py "$out/kiln_verbose.log" "$out/kiln.jsonl" "$out/torch_verbose.log" \
  "$out/torch.jsonl" "$batch" --out "$out/conv_share.json"
