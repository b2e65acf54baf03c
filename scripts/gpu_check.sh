#!/usr/bin/env bash
# On the GPU machine: build kiln with CUDA, run the GPU tests (ctest label gpu), the cuDNN probe
# and the CBR benchmark against PyTorch, and print a short table last. Needs the cudnn-frontend
# headers in third_party/cudnn_frontend (scripts/setup.sh fetches them; carry them there).
# Results go to ${OUT:-build/gpu-out}: test log, probe table, benchmark JSON.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
what=${1:-all}   # all | tests | bench

cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_NATIVE_ARCH=OFF \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep "kiln: CUDA" "$out/configure.log"
cmake --build build/gpu -j "$(nproc)" --target kiln_test_gpu kiln_cbr_bench kiln_cudnn_probe > "$out/build.log" 2>&1 \
  || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }

env_json=$(python3 - <<'PY'
import json, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "torch_cudnn": torch.backends.cudnn.version(),
                  "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip() or "unknown"}))
PY
)
echo "$env_json" > "$out/env.json"

if [ "$what" = all ] || [ "$what" = tests ]; then
  (cd build/gpu && ctest -L gpu --output-on-failure -j1 > "$out/gpu_tests.log" 2>&1)
  tail -5 "$out/gpu_tests.log"
  build/gpu/kiln_cudnn_probe > "$out/cudnn_probe.md" 2>&1; tail -15 "$out/cudnn_probe.md"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  KILN_TUNE_LOG="$out/tune.jsonl" build/gpu/kiln_cbr_bench --precision fp16 > "$out/kiln_bench.jsonl" 2> "$out/kiln_bench.err" \
    || tail -5 "$out/kiln_bench.err"
  python3 bench/torch_cbr_bench.py --precision fp16 > "$out/torch_bench.jsonl" 2> "$out/torch_bench.err" \
    || tail -5 "$out/torch_bench.err"
  python3 bench/report_cbr.py "$out/kiln_bench.jsonl" "$out/torch_bench.jsonl" "$out/cbr_results.json" \
    "$out/env.json" "$out/tune.jsonl"
fi
