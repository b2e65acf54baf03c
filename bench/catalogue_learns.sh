#!/usr/bin/env bash
# On the GPU machine: each family of the catalogue learns real photographs (issue 49, item 6). The
# photo-crop folder (kiln_make_image_folders photos: one real photo a class, random crops of it,
# ImageNet-like JPEG sizes) is made first when missing, then each model trains from kiln's own
# initialization with a user's recipe and is evaluated on the held-out crops each epoch.
#
#   KILN_PREBUILT=<dir> PHOTO_SOURCE=<dir of photos> bench/catalogue_learns.sh resnet18 mobilenet_v2 ...
#
# The recipe: SGD with momentum 0.9 (PyTorch's reference recipes), peak lr 0.1 after one warm-up
# epoch, cosine; networks without BatchNorm (AlexNet, VGG without BN, SqueezeNet) take lr 0.01 as
# torchvision's recipes for them do, and ConvNeXt (LayerNorm) AdamW at 1e-3 with weight decay 0.05,
# as its paper trains it. EPOCHS (6), IMAGE_SIZE (128; the evaluation resizes to 8/7 of it and
# center-crops), KILN_BATCH (128), KILN_PRECISION (fp16), KILN_DEVICE (cuda), CLASSES (100), LIMIT (540 s, models not
# started once it is spent are listed). Output in ${OUT:-build/gpu-out}: learns.jsonl (kiln's epoch
# lines), learns.txt (the table), <model>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
bin=${KILN_PREBUILT:?KILN_PREBUILT=<dir with kiln and lib/> (scripts/carry.sh unpack)}
epochs=${EPOCHS:-6} size=${IMAGE_SIZE:-128} batch=${KILN_BATCH:-128} precision=${KILN_PRECISION:-fp16}
deadline=$((SECONDS + ${LIMIT:-540}))
folder=${PHOTOS_DIR:-build/photos_learns}
if [ ! -d "$folder" ]; then
  "$bin/kiln_make_image_folders" photos "$folder" --source "${PHOTO_SOURCE:?PHOTO_SOURCE=<dir of photos>}" \
    --classes "${CLASSES:-100}" --train-per-class 100 --val-per-class 20 --max-side 320 | tail -1 || exit 1
fi
classes=$(ls "$folder/train" | wc -l)
printf '%-20s %8s %8s %10s %10s %10s\n' model epochs chance "train top1" "val top1" "val top5" | tee "$out/learns.txt"
status=0
for model in "$@"; do
  if [ $((deadline - SECONDS)) -lt 30 ]; then
    echo "catalogue_learns: $model and after not started: LIMIT spent" | tee -a "$out/learns.txt"
    break
  fi
  recipe=(--optimizer sgd --lr 0.1 --warmup 1)
  case "$model" in
    alexnet | vgg11 | vgg13 | vgg16 | vgg19 | squeezenet*) recipe=(--optimizer sgd --lr 0.01 --warmup 1) ;;
    convnext*) recipe=(--optimizer adamw --lr 1e-3 --weight-decay 0.05 --warmup 1) ;;
  esac
  rows="$out/$model.jsonl"
  rm -f "$rows"
  timeout $((deadline - SECONDS)) "$bin/kiln" train --device "${KILN_DEVICE:-cuda}" --model "$model" --data "$folder" \
    --image-size "$size" --eval-resize $((size * 8 / 7)) --batch "$batch" --precision "$precision" \
    --epochs "$epochs" "${recipe[@]}" --json "$rows" >"$out/$model.log" 2>&1 ||
    { echo "catalogue_learns: $model failed or was cut (see $model.log)" | tee -a "$out/learns.txt"; status=1; }
  [ -s "$rows" ] || continue
  python3 - "$rows" "$model" "$classes" <<'PY' | tee -a "$out/learns.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = rows[-1]
print(f"{sys.argv[2]:<20} {last['epoch']:>8} {1 / int(sys.argv[3]):>8.3f} {last['train_accuracy']:>10.3f} "
      f"{last['test_accuracy']:>10.3f} {last['test_top5_accuracy']:>10.3f}")
PY
  cat "$rows" >>"$out/learns.jsonl"
  rm -f "$rows"
done
exit $status
