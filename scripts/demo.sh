#!/usr/bin/env bash
# The main job: set up, then train the digits CNN on real handwritten digits (on the GPU when
# there is one, else on the CPU; --device cpu|cuda chooses) and print the test accuracy. Extra arguments go to `kiln train` after
# the script's own, and a later option overrides an earlier one: `scripts/demo.sh --epochs 2`,
# `scripts/demo.sh --momentum 0 --no-nesterov`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what it runs: the CLI and the digits tool, not the tests, benchmarks or the test suite's
# Python packages (scripts/test.sh sets those up), and the CUDA backend only where a GPU is visible
# (KILN_WITH_CUDA=ON|OFF chooses; setup.sh says the rule).
# The image folders setup makes for the tests only when the arguments name one
# (`scripts/demo.sh --data data/digits_png --transform plain --channels 1`).
case " $* " in
  *data/digits_png*|*data/photos_tiny*) export KILN_IMAGE_FOLDERS=1 ;;
esac
KILN_BUILD_TARGETS=kiln_cli scripts/setup.sh
exec build/release/kiln train --model digits_cnn --data data/digits --epochs 30 --batch 64 \
  --optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 5e-4 --schedule cosine \
  --label-smoothing 0.1 --crop-pad 1 --seed 1 "$@"
