#!/usr/bin/env bash
# Makes the full-size photo-crop image folder for benchmarks of `--format imagefolder` (GPU machine):
# at least 10,000 training JPEGs spread over the qualifying photos of opencv-doc (100 classes x 100
# train + 20 val when 100 qualify), with ImageNet's spread of sizes (longer side 200-800, median 500)
# and JPEG kinds; about 0.5 GB.
# Takes about 20 s of CPU time (it scales with cores): measured 12,000 JPEGs (10,000 train + 2,000 val)
# in 17.5 s CPU, 30-40 s wall on 2 cores that other builds were loading; ~10 s on 2 idle cores, a few
# seconds on 16.
#
# usage: scripts/make_photos.sh [OUT] [kiln_make_image_folders photos options...]
#   OUT defaults to data/photos; an existing OUT is left alone. Extra options go to the tool, e.g.
#   --seed 1, or --source DIR where opencv-doc is not installed (a folder of the photos, copied here).
# The tool: $KILN_MAKE_IMAGE_FOLDERS, else the first built one of build/release, build/gpu, $KILN_PREBUILT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/photos}
[ $# -gt 0 ] && shift

tool=${KILN_MAKE_IMAGE_FOLDERS:-}
if [ -z "$tool" ]; then
  for dir in build/release build/gpu ${KILN_PREBUILT:+"$KILN_PREBUILT"}; do
    if [ -x "$dir/kiln_make_image_folders" ]; then tool=$dir/kiln_make_image_folders; break; fi
  done
fi
if [ -z "$tool" ]; then
  echo "make_photos: kiln_make_image_folders is not built: run scripts/setup.sh (or cmake --build <dir>" \
       "--target kiln_make_image_folders) first" >&2
  exit 1
fi
if [ -e "$out" ]; then
  echo "make_photos: $out exists; leaving it as it is"
  exit 0
fi

# Classes: every qualifying photo, at most 100; enough training crops per class for 10,000 in all.
classes=$("$tool" photos --list "$@" | tail -n 1 | awk '{print $1}')
if ! [ "$classes" -gt 0 ] 2>/dev/null; then
  echo "make_photos: no qualifying source photos (install opencv-doc, or pass --source DIR)" >&2
  exit 1
fi
[ "$classes" -gt 100 ] && classes=100
train=$(( (10000 + classes - 1) / classes ))
val=$(( (train + 4) / 5 ))
echo "make_photos: $classes classes x ($train train + $val val) -> $out"
"$tool" photos "$out" --classes "$classes" --train-per-class "$train" --val-per-class "$val" "$@"
