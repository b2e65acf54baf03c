#!/usr/bin/env bash
# kiln's CPU backend against PyTorch eager on the CPU, the digits recipe (scripts/demo.sh's flags,
# data loading and each epoch's test evaluation included) at 1, 2, 4, 8 and 16 threads, each
# side pinned to the same first t cores (taskset): kiln with oneDNN's convolutions, kiln with its
# reference kernels (--cpu-kernels reference) and bench/torch_digits.py --device cpu. Epochs/s over
# epochs 2..E; bench/report_cpu_threads.py joins the rows.
#
#   bench/cpu_threads.sh <kiln binary> <out dir>
# Then training steps of whole networks, fp32 (kiln bench against bench/torch_models.py --device
# cpu, synthetic data, 1 warm-up and 3 timed steps, the median), kiln with oneDNN: ResNet-18 at
# 224², batch 32, and the 32² zoo variants ResNet-18 and VGG16-BN at batch 128.
# KILN_THREAD_COUNTS (default "1 2 4 8 16", capped at the cores), KILN_EPOCHS (5), KILN_DATA
# (data/digits), KILN_SIDES (default "onednn reference torch"; "none" skips the digits recipe),
# KILN_NETWORKS (default "resnet18:224:32 resnet18_cifar:32:128 vgg16_bn_cifar:32:128", each
# model:size:batch; empty skips them), KILN_CONV_MATH (fp32, or bf16: the networks' convolutions
# with bf16 products on both sides, kiln --cpu-kernels onednn-bf16 against PyTorch's
# mkldnn.conv.fp32_precision = "bf16"; the digits recipe stays fp32), KILN_TORCH_MODES (default
# "eager"; "eager,compile" adds torch.compile, compiled in its first epoch or warm-up step, which
# the timing leaves out).
set -uo pipefail
cd "$(dirname "$0")/.."
kiln=${1:?usage: bench/cpu_threads.sh <kiln binary> <out dir>}
out=${2:?usage: bench/cpu_threads.sh <kiln binary> <out dir>}
mkdir -p "$out"
epochs=${KILN_EPOCHS:-5} data=${KILN_DATA:-data/digits} cores=$(nproc) torch_modes=${KILN_TORCH_MODES:-eager}
status=0
for t in ${KILN_THREAD_COUNTS:-1 2 4 8 16}; do
  [ "$t" -le "$cores" ] || continue
  pin="taskset -c 0-$((t - 1))"
  for side in ${KILN_SIDES:-onednn reference torch}; do
    [ "$side" = none ] && continue
    if [ "$side" = torch ]; then
      OMP_NUM_THREADS=$t $pin python3 bench/torch_digits.py --device cpu --threads "$t" --modes "$torch_modes" --data "$data" \
        --epochs "$epochs" >> "$out/torch_cpu.jsonl" 2>> "$out/torch_cpu.err" || { tail -3 "$out/torch_cpu.err"; status=1; }
      continue
    fi
    # One file per run: a thread count run again (bench/cpu_threads_ab.sh's rounds) adds a run,
    # and report_cpu_threads.py takes the median.
    run=1
    while [ -e "$out/kiln_${side}_t${t}_r${run}.jsonl" ]; do run=$((run + 1)); done
    json="$out/kiln_${side}_t${t}_r${run}.jsonl"
    $pin "$kiln" train --device cpu --threads "$t" --cpu-kernels "$side" --model digits_cnn --data "$data" \
      --epochs "$epochs" --batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 5e-4 \
      --schedule cosine --label-smoothing 0.1 --crop-pad 1 --seed 1 --json "$json" >> "$out/kiln_cpu.log" 2>&1 \
      || { tail -3 "$out/kiln_cpu.log"; status=1; }
  done
done
conv_math=${KILN_CONV_MATH:-fp32}
case $conv_math in
  fp32) net_kernels=onednn ;;
  bf16) net_kernels=onednn-bf16 ;;
  *) echo "KILN_CONV_MATH=$conv_math: use fp32 or bf16" >&2; exit 2 ;;
esac
for net in ${KILN_NETWORKS-resnet18:224:32 resnet18_cifar:32:128 vgg16_bn_cifar:32:128}; do
  IFS=: read -r model size batch <<< "$net"
  for t in ${KILN_THREAD_COUNTS:-1 2 4 8 16}; do
    [ "$t" -le "$cores" ] || continue
    pin="taskset -c 0-$((t - 1))"
    $pin "$kiln" bench --device cpu --threads "$t" --cpu-kernels $net_kernels --model "$model" --batch "$batch" --precision fp32 \
      --warmup 1 --steps 3 --json "$out/net_kiln_$model.jsonl" >> "$out/kiln_cpu.log" 2>&1 \
      || { tail -3 "$out/kiln_cpu.log"; status=1; }
    OMP_NUM_THREADS=$t $pin python3 bench/torch_models.py --device cpu --threads "$t" --model "$model" --batch "$batch" \
      --size "$size" --precision fp32 --cpu-conv-math "$conv_math" --modes "$torch_modes" --warmup 1 --steps 3 \
      >> "$out/net_torch_$model.jsonl" \
      2>> "$out/torch_cpu.err" || { tail -3 "$out/torch_cpu.err"; status=1; }
  done
done
python3 bench/report_cpu_threads.py "$out" || status=1
exit $status
