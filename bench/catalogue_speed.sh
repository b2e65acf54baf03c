#!/usr/bin/env bash
# On the GPU machine: the catalogue's speed and memory table, kiln against PyTorch eager and
# torch.compile, several models in one call within a deadline. For each model in turn (one at a time
# on the GPU): `kiln bench`, then bench/torch_models.py (eager, then torch.compile), then `kiln bench`
# again, so that clock and temperature drift weigh on both sides (bench/report_models.py takes kiln's
# median over both rounds). A model is started only while LIMIT leaves it MODEL_SECONDS; each step
# is cut at the deadline, and what finished is kept.
#
#   KILN_PREBUILT=<dir> LIMIT=540 bench/catalogue_speed.sh mobilenet_v2 efficientnet_b0 ...
#
# KILN_BATCH (256), KILN_PRECISION (fp16), KILN_TORCH_MODES (eager,compile), MODEL_SECONDS (150).
# bench/torch_precompile.sh run first fills inductor's caches, so each torch.compile run reloads.
# Output in ${OUT:-build/gpu-out}: kiln.jsonl, torch.jsonl, errors.log, one models_<m>_<p>.json per
# model and catalogue.txt, the table.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
bin=${KILN_PREBUILT:?KILN_PREBUILT=<dir with kiln and lib/> (scripts/carry.sh unpack)}
batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16} modes=${KILN_TORCH_MODES:-eager,compile}
deadline=$((SECONDS + ${LIMIT:-540})) per_model=${MODEL_SECONDS:-150}
venv=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="$bin/lib:$venv/cudnn/lib:$venv/cu13/lib:$venv/nccl/lib:${LD_LIBRARY_PATH:-}"
export KILN_SOURCE_DIR="$PWD"

python3 - >"$out/env.json" <<'PY'
import json, os, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "torch_cudnn": torch.backends.cudnn.version(), "commit": os.environ.get("KILN_COMMIT", "unknown")}))
PY

left() { echo $((deadline - SECONDS)); }
status=0
for model in "$@"; do
  if [ "$(left)" -lt "$per_model" ]; then
    echo "catalogue_speed: $model and after not started: $(left) s left of LIMIT" | tee -a "$out/errors.log"
    break
  fi
  kiln_rows="$out/kiln_$model.jsonl" torch_rows="$out/torch_$model.jsonl"
  # issue 51's sides: 224x224, inception_v3 299x299 (torchvision's), on both sides; not the zoo model's own
  # evaluation size, which is larger for EfficientNet B1-B4 and V2.
  size=224; [ "$model" = inception_v3 ] && size=299
  for round in 1 2; do
    timeout "$(left)" "$bin/kiln" bench --device cuda --model "$model" --batch "$batch" --precision "$precision" \
      --image-size $size \
      --plan-cache "$out/plans.json" --json "$kiln_rows" 2>>"$out/errors.log" >/dev/null ||
      { echo "catalogue_speed: kiln bench $model round $round failed" | tee -a "$out/errors.log"; status=1; }
    if [ $round = 1 ]; then
      timeout "$(left)" python3 bench/torch_models.py --model "$model" --batch "$batch" --precision "$precision" \
        --size $size --modes "$modes" >"$torch_rows" 2>>"$out/errors.log" ||
        { echo "catalogue_speed: PyTorch $model failed or was cut" | tee -a "$out/errors.log"; status=1; }
    fi
  done
  cat "$kiln_rows" >>"$out/kiln.jsonl" 2>/dev/null
  cat "$torch_rows" >>"$out/torch.jsonl" 2>/dev/null
  python3 bench/report_models.py "$kiln_rows" "$torch_rows" "$out/models_${model}_${precision}.json" "$out/env.json" \
    | tee -a "$out/catalogue.txt" || status=1
  rm -f "$kiln_rows" "$torch_rows" "$out/models_${model}_${precision}.json"  # kept in kiln.jsonl, torch.jsonl
done
rm -f "$out/plans.json"
exit $status
