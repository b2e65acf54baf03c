#!/usr/bin/env bash
# On the GPU machine: `kiln bench --model file.onnx` against `kiln bench --model <zoo name>` for the
# same network (issue 50: an imported file is the same program, so the same speed within 1%).
# torchvision's model is exported by torch.onnx.export as README's "Your own model" says (the
# TorchScript exporter in training mode, batch dynamic), then both are benched in A B B A order so
# clock and temperature drift weigh on both; the report is the median of each side.
#
#   KILN_PREBUILT=<dir> bench/onnx_bench_parity.sh resnet50 mobilenet_v2
#
# KILN_BATCH (256), KILN_PRECISION (fp16), KILN_STEPS (60). Output in ${OUT:-build/gpu-out}:
# parity.jsonl (kiln bench's JSON lines, each with the model it ran) and parity.txt (the table).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
bin=${KILN_PREBUILT:?KILN_PREBUILT=<dir with kiln and lib/> (scripts/carry.sh unpack)}
batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16} steps=${KILN_STEPS:-60}
venv=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="$bin/lib:$venv/cudnn/lib:$venv/cu13/lib:$venv/nccl/lib:${LD_LIBRARY_PATH:-}"
files=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/env.txt"

for model in "$@"; do
  python3 - "$model" "$files/$model.onnx" <<'PY' || { echo "onnx_bench_parity: export of $model failed" >&2; continue; }
import sys, torch, torchvision
name, path = sys.argv[1], sys.argv[2]
model = getattr(torchvision.models, name)()
torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, input_names=["input"], dynamo=False,
                  dynamic_axes={"input": {0: "N"}}, training=torch.onnx.TrainingMode.TRAINING)
PY
  for side in zoo file file zoo; do
    target=$model
    [ "$side" = file ] && target="$files/$model.onnx"
    "$bin/kiln" bench --model "$target" --device cuda --batch "$batch" --precision "$precision" \
      --steps "$steps" --warmup 10 --json "$out/parity_${model}_${side}.tmp" >/dev/null 2>>"$out/errors.log" ||
      echo "onnx_bench_parity: kiln bench $target failed" | tee -a "$out/errors.log"
    [ -f "$out/parity_${model}_${side}.tmp" ] &&
      sed "s/^{/{\"parity_model\":\"$model\",\"parity_side\":\"$side\",/" "$out/parity_${model}_${side}.tmp" >>"$out/parity.jsonl"
    rm -f "$out/parity_${model}_${side}.tmp"
  done
done
python3 - "$out/parity.jsonl" <<'PY' | tee "$out/parity.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
print("| model | zoo img/s (runs) | file img/s (runs) | file / zoo |")
print("| --- | --- | --- | --- |")
for m in dict.fromkeys(r["parity_model"] for r in rows):
    side = {s: [r["images_per_second"] for r in rows if r["parity_model"] == m and r["parity_side"] == s] for s in ("zoo", "file")}
    if side["zoo"] and side["file"]:
        z, f = statistics.median(side["zoo"]), statistics.median(side["file"])
        print(f"| {m} | {z:,.0f} ({', '.join(f'{v:,.0f}' for v in side['zoo'])}) | "
              f"{f:,.0f} ({', '.join(f'{v:,.0f}' for v in side['file'])}) | {f / z:.4f} |")
PY
