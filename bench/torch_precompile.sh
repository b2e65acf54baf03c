#!/usr/bin/env bash
# On the GPU machine, before bench/catalogue_speed.sh: each model's torch.compile training step
# compiled once, PROCESSES at a time, untimed, so that inductor's on-disk caches (its FX graph cache
# and Triton's kernels, under TORCHINDUCTOR_CACHE_DIR) hold them. The timed torch.compile runs then
# reload what was compiled instead of spending 40-80 s each compiling on one core: a table of many
# models fits a call. The timed step is the same program either way; only the first-step column of
# such runs is a warm-cache time (this script's log keeps the cold ones, slowed by sharing the cores).
#
#   PROCESSES=4 KILN_BATCH=256 KILN_PRECISION=fp16 bench/torch_precompile.sh resnext50_32x4d densenet121 ...
#
# Output in ${OUT:-build/gpu-out}/precompile.jsonl (one torch_models.py row per model) and precompile.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
export BATCH=${KILN_BATCH:-256} PRECISION=${KILN_PRECISION:-fp16} OUT_DIR=$out
printf '%s\n' "$@" | xargs -P "${PROCESSES:-4}" -I{} bash -c '
  size=224; [ "{}" = inception_v3 ] && size=299  # torchvision'"'"'s input, as kiln'"'"'s zoo model takes it
  python3 bench/torch_models.py --model {} --batch "$BATCH" --precision "$PRECISION" --size $size --modes compile \
    --warmup 0 --steps 1 >>"$OUT_DIR/precompile.jsonl" 2>>"$OUT_DIR/precompile.log" ||
    echo "torch_precompile: {} failed" >>"$OUT_DIR/precompile.log"'
