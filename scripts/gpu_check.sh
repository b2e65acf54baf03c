#!/usr/bin/env bash
# On the GPU machine: build kiln with CUDA, run the GPU tests (ctest label gpu) and the CBR
# benchmark against PyTorch, and print a short table last (tools/cudnn_probe.cpp is separate). Needs the cudnn-frontend
# headers in third_party/cudnn_frontend (scripts/setup.sh fetches them; carry them there).
# Results go to ${OUT:-build/gpu-out}: test log, benchmark JSON lines, joined results.
# Exits non-zero when the build, a GPU test or a benchmark fails, naming the failed tests; lists
# skipped tests with their reasons.
# KILN_COMMIT names the commit the binaries were built from (default: this checkout's HEAD).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
what=${1:-all}   # all | tests | bench | kiln-bench | torch-bench (the last two split a long run) | stages | variants | models | seams | conv-stats | option-ab | binary-ab | start | digits | data | memcheck | data-parallel | ddp-bench

# KILN_PREBUILT=<build dir>: use binaries built elsewhere (same x86-64 ABI) instead of building
# here; their shared libraries not on this machine sit in <build dir>/lib.
bin=${KILN_PREBUILT:-build/gpu}
if [ -z "${KILN_PREBUILT:-}" ]; then
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_NATIVE_ARCH=OFF \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  grep "kiln: CUDA" "$out/configure.log"
  cmake --build build/gpu -j "$(nproc)" --target kiln_test_gpu kiln_cbr_bench kiln_bn_variants_bench kiln_cli > "$out/build.log" 2>&1 \
    || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
fi
venv=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export KILN_SOURCE_DIR="$PWD"
# timm, for the test of timm's weights: the GPU machine has no network, so a timm wheel carried in
# <prebuilt>/wheels (pip download --no-deps timm) is installed beside the output (it needs only torch).
if ! python3 -c 'import timm' 2>/dev/null; then
  wheel=$(ls "$bin"/wheels/timm-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ] && python3 -m pip install -q --no-deps --target "$out/pylib" "$wheel"; then
    export PYTHONPATH="$(cd "$out/pylib" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
case $bin in /*) libdir=$bin/lib ;; *) libdir=$PWD/$bin/lib ;; esac  # KILN_PREBUILT may be absolute
export LD_LIBRARY_PATH="$libdir:$venv/cudnn/lib:$venv/cu13/lib:$venv/nccl/lib:${LD_LIBRARY_PATH:-}"
# NVLink multicast stays off on the shared multi-GPU machines (it can take the host's GPUs down).
export NCCL_NVLS_ENABLE=0

env_json=$(python3 - <<'PY'
import json, os, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "torch_cudnn": torch.backends.cudnn.version(),
                  "commit": os.environ.get("KILN_COMMIT") or subprocess.run(
                      ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
                  or "unknown"}))
PY
)
echo "$env_json" > "$out/env.json"

status=0  # non-zero once any GPU test or benchmark fails; the script's exit code
if [ "$what" = all ] || [ "$what" = tests ]; then
  # The ctest label `gpu` holds exactly this executable's tests.
  # Tests need correct plans, not the fastest: tune over a few to keep the run short.
  # KILN_TEST_SHARDS=n runs the tests as n processes side by side (gtest sharding): the float64
  # references and PyTorch's start-up are CPU work, so the GPU is shared while they run.
  # KILN_TEST_FILTER (a gtest filter) splits the suite over calls of a limited length: the
  # whole-network comparisons with PyTorch take 30-170 s each, the suite about 45 minutes of test
  # time, so two 10-minute calls at 6 shards run it as KILN_TEST_FILTER='-*WholeNetwork*' and
  # KILN_TEST_FILTER='*WholeNetwork*' (the memory check below runs with either; KILN_MEMORY_MODELS=none skips it).
  shards=${KILN_TEST_SHARDS:-1}
  pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_FILTER=${KILN_TEST_FILTER:-*} GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
      KILN_CUDNN_TUNE_PLANS=${KILN_CUDNN_TUNE_PLANS:-6} "$bin/kiln_test_gpu" > "$out/gpu_tests.shard$i.log" 2>&1 &
    pids+=($!)
  done
  tests_rc=0
  for pid in "${pids[@]}"; do wait "$pid" || tests_rc=$?; done
  for ((i = 0; i < shards; ++i)); do cat "$out/gpu_tests.shard$i.log"; rm "$out/gpu_tests.shard$i.log"; done > "$out/gpu_tests.log"
  grep -E "test suites? ran|^\[  (PASSED  |SKIPPED |FAILED  )\] [0-9]" "$out/gpu_tests.log"
  # Skipped tests with their reasons: on a GPU machine a skip means a check compared nothing.
  awk '/^\[  SKIPPED \] [A-Za-z].*\(/ { print "  skipped " $4 ": " prev } { prev = $0 }' "$out/gpu_tests.log"
  if grep -q "no CUDA device" "$out/gpu_tests.log"; then
    echo "GPU tests: some skipped for want of a CUDA device on a GPU machine"; status=1
  fi
  if [ $tests_rc -ne 0 ]; then
    echo "GPU tests FAILED (exit $tests_rc):"
    awk '/^\[  FAILED  \] [A-Za-z]/ { sub(",", "", $4); print "  " $4 }' "$out/gpu_tests.log" | sort -u
    grep -qE "test suites? ran" "$out/gpu_tests.log" || tail -20 "$out/gpu_tests.log"  # crashed before the summary
    status=1
  fi
  # Device memory after the default start, measured device-wide: alone on the GPU, after the shards.
  if [ "${KILN_MEMORY_MODELS:-}" != none ]; then
    python3 bench/check_prepare_memory.py "$bin/kiln" "$out/prepare_memory.jsonl" ${KILN_MEMORY_MODELS:-} || status=1
  fi
fi
if [ "$what" = all ] || [ "$what" = bench ] || [ "$what" = kiln-bench ]; then
  # Every graph is tuned over the first ${KILN_CUDNN_TUNE_PLANS:-12} plans that build (all of them
  # take ~5 s a graph; the bench builds ~50 graphs).
  # SM clock and power twice a second while both sides run: sustained convolutions run below
  # boost clock.
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 500 \
    > "$out/clocks.csv" 2>/dev/null &
  smi=$!
  # KILN_BENCH_ARGS: more arguments (e.g. --variants conv,unfused,cbr, or shapes).
  KILN_CUDNN_TUNE_PLANS=${KILN_CUDNN_TUNE_PLANS:-12} KILN_TUNE_LOG="$out/tune.jsonl" "$bin/kiln_cbr_bench" --precision fp16 \
    ${KILN_BENCH_ARGS:-} > "$out/kiln_bench.jsonl" 2> "$out/kiln_bench.err" || { tail -5 "$out/kiln_bench.err"; status=1; }
  cat "$out/kiln_bench.jsonl"
fi
if [ "$what" = all ] || [ "$what" = bench ] || [ "$what" = torch-bench ]; then
  # KILN_TORCH_ARGS: more arguments for PyTorch's side (e.g. --modes eager,compile,max-autotune,
  # or shapes).
  python3 bench/torch_cbr_bench.py --precision fp16 ${KILN_TORCH_ARGS:-} > "$out/torch_bench.jsonl" 2> "$out/torch_bench.err" \
    || { tail -5 "$out/torch_bench.err"; status=1; }
fi
kill ${smi:-} 2>/dev/null  # the clock log covers both sides
if [ "$what" = variants ]; then
  # Loop-structure variants of the BN+ReLU kernels against the copy ceilings (bench/bn_kernel_variants.cu).
  "$bin/kiln_bn_variants_bench" > "$out/bn_variants.jsonl" 2> "$out/bn_variants.err" || { tail -5 "$out/bn_variants.err"; status=1; }
  tail -3 "$out/bn_variants.jsonl"
  exit $status
fi
if [ "$what" = models ]; then
  # Whole networks, kiln against PyTorch (bench/torch_models.py) on synthetic data already on the
  # GPU: kiln, then PyTorch's modes, then kiln again. One model per call suits the 10-minute
  # limit: KILN_MODEL (default vgg16_bn), KILN_BATCH (256), KILN_PRECISION (fp16),
  # KILN_TORCH_MODES (eager,compile).
  model=${KILN_MODEL:-vgg16_bn} batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16}
  for round in 1 2; do
    KILN_CUDNN_TUNE_PLANS=${KILN_CUDNN_TUNE_PLANS:-6} "$bin/kiln" bench --device cuda --model "$model" --batch "$batch" \
      --precision "$precision" --plan-cache "$out/plans.json" --json "$out/kiln_models.jsonl" 2> "$out/kiln_models.err" \
      || { tail -5 "$out/kiln_models.err"; status=1; }
    if [ $round = 1 ]; then
      python3 bench/torch_models.py --model "$model" --batch "$batch" --precision "$precision" \
        --modes "${KILN_TORCH_MODES:-eager,compile}" > "$out/torch_models.jsonl" 2> "$out/torch_models.err" \
        || { tail -5 "$out/torch_models.err"; status=1; }
    fi
  done
  python3 bench/report_models.py "$out/kiln_models.jsonl" "$out/torch_models.jsonl" \
    "$out/models_${model}_${precision}.json" "$out/env.json" || status=1
  exit $status
fi
if [ "$what" = seams ]; then
  # Fusion across layers (--fuse-seams) against the program without seams, kiln only: for each of
  # KILN_MODELS (default vgg16_bn resnet50) at KILN_PRECISION (fp16), batch KILN_BATCH (256),
  # default tuning, the program without seams and with seams in turn for KILN_ROUNDS rounds (2) with
  # one plan cache (the first round tunes, later rounds start warm). bench/report_seams.py joins the
  # rows.
  batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16}
  for model in ${KILN_MODELS:-vgg16_bn resnet50}; do
    for ((round = 1; round <= ${KILN_ROUNDS:-2}; ++round)); do
      for seams in "" --fuse-seams; do
        "$bin/kiln" bench --device cuda --model "$model" --batch "$batch" --precision "$precision" $seams \
          ${KILN_BENCH_ARGS:-} --plan-cache "$out/plans.json" --json "$out/kiln_seams.jsonl" 2>> "$out/kiln_seams.err" \
          || { tail -5 "$out/kiln_seams.err"; status=1; }
      done
    done
  done
  python3 bench/report_seams.py "$out/kiln_seams.jsonl" "$out/seams_${precision}.json" "$out/env.json" || status=1
  exit $status
fi
if [ "$what" = conv-stats ] || [ "$what" = option-ab ]; then
  # One CUDA option's values against each other, kiln only, interleaved for KILN_ROUNDS rounds (2)
  # with one plan cache: KILN_MODELS (default resnet50 vgg16_bn), KILN_PRECISION (bf16), KILN_BATCH
  # (256), default tuning otherwise. option-ab takes the option from KILN_AB_OPTION (a `kiln bench`
  # flag without its dashes, e.g. cutlass) and its values from KILN_AB_VALUES (e.g. "0 1", the
  # first the baseline); conv-stats is option-ab for --conv-stats 1 and 2: the sum kernel after
  # the convolution against the faster of that and cuDNN's reductions graph by timing. Each
  # statistics choice is in the .err file (`conv with statistics`).
  option=conv-stats values="1 2"
  [ "$what" = option-ab ] && option=${KILN_AB_OPTION:?option-ab needs KILN_AB_OPTION} values=${KILN_AB_VALUES:?}
  field=${option//-/_}
  batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-bf16}
  for model in ${KILN_MODELS:-resnet50 vgg16_bn}; do
    for ((round = 1; round <= ${KILN_ROUNDS:-2}; ++round)); do
      for value in $values; do
        "$bin/kiln" bench --device cuda --model "$model" --batch "$batch" --precision "$precision" --$option $value \
          --plan-cache "$out/plans.json" --json "$out/kiln_$field.jsonl" 2>> "$out/kiln_$field.err" \
          || { tail -5 "$out/kiln_$field.err"; status=1; }
      done
    done
  done
  grep "conv with statistics" "$out/kiln_$field.err" | sort -u > "$out/${field}_choices.log"
  python3 bench/report_ab.py "$field" "${values// /,}" "$out/kiln_$field.jsonl" "$out/${field}_${precision}.json" \
    "$out/env.json" || status=1
  exit $status
fi
if [ "$what" = binary-ab ]; then
  # Two builds of kiln against each other (a refactor that must not change speed): KILN_OLD_BIN
  # (the baseline's kiln, its libraries beside the new one's) and this build's, interleaved for
  # KILN_ROUNDS rounds (3), each with a plan cache of its own, on KILN_MODELS (resnet50 vgg16_bn)
  # at KILN_PRECISION (fp16) and KILN_BATCH (256), default settings otherwise. The rows are tagged
  # binary=old|new and joined by report_ab.py.
  old=${KILN_OLD_BIN:?binary-ab needs KILN_OLD_BIN}
  batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16}
  for model in ${KILN_MODELS:-resnet50 vgg16_bn}; do
    for ((round = 1; round <= ${KILN_ROUNDS:-3}; ++round)); do
      for side in old new; do
        exe="$bin/kiln"; [ $side = old ] && exe=$old
        "$exe" bench --device cuda --model "$model" --batch "$batch" --precision "$precision" \
          --plan-cache "$out/plans_$side.json" --json "$out/kiln_$side.jsonl" 2>> "$out/kiln_$side.err" \
          || { tail -5 "$out/kiln_$side.err"; status=1; }
      done
    done
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/kiln_binary.jsonl", "w") as f:
    for side in ("old", "new"):
        for line in open(f"{out}/kiln_{side}.jsonl"):
            if line.strip():
                f.write(json.dumps(dict(json.loads(line), binary=side)) + "\n")
PY
  python3 bench/report_ab.py binary old,new "$out/kiln_binary.jsonl" "$out/binary_${precision}.json" "$out/env.json" \
    || status=1
  exit $status
fi
if [ "$what" = data-parallel ]; then
  # Several GPUs: the two-rank GPU test (two ranks against one GPU), a two-rank `kiln train` of the
  # digits, and the fault test: one rank of a running two-rank `kiln train` is killed; the launcher
  # must end non-zero, naming it, and the time it took is recorded. On one GPU: the launch path with
  # one rank (`--gpus 1`) against the same run without it (the same losses), and `kiln bench` both
  # ways (what a one-rank group's collectives cost).
  gpus=$(nvidia-smi -L | wc -l)
  digits=${KILN_DIGITS_DIR:-data/digits}
  if [ "$gpus" -lt 2 ]; then
    echo "one GPU: the two-rank runs need two; running the one-rank checks"
    for launch in "" "--gpus 1"; do
      timeout 200 "$bin/kiln" train $launch --device cuda --model digits_cnn --data "$digits" --epochs 3 --batch 64 \
        --json "$out/dp_one_rank.jsonl" > "$out/dp_one${launch// /}.log" 2>&1 || { tail -5 "$out/dp_one${launch// /}.log"; status=1; }
      grep -E "^epoch|test accuracy" "$out/dp_one${launch// /}.log"
    done
    for ((round = 1; round <= 2; ++round)); do
      for launch in "" "--gpus 1"; do
        timeout 200 "$bin/kiln" bench $launch --device cuda --model resnet50 --batch 256 --precision fp16 \
          --plan-cache "$out/plans.json" --json "$out/dp_one_rank_bench.jsonl" 2>> "$out/dp_bench.err" | grep "kiln bench" \
          || status=1
      done
    done
    exit $status
  fi
  port=$((29500 + RANDOM % 1000))
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 \
      "$bin/kiln_test_gpu" --gtest_filter='DataParallelGpu.*' > "$out/dp_test_rank$rank.log" 2>&1 &
  done
  wait -n || status=1
  wait -n || status=1
  grep -hE "^\[  (PASSED|FAILED|  SKIPPED) |^rank |OK \]|FAILED" "$out"/dp_test_rank*.log
  timeout 300 "$bin/kiln" train --gpus 2 --model digits_cnn --data "$digits" --epochs 3 --batch 64 \
    --checkpoint "$out/dp_digits.ckpt" --overwrite > "$out/dp_train.log" 2> "$out/dp_train.err" || status=1
  tail -5 "$out/dp_train.log"
  # The fault: rank 1 is killed (SIGKILL) once training runs; the launcher's exit is timed.
  "$bin/kiln" train --gpus 2 --model digits_cnn --data "$digits" --epochs 400 --batch 64 \
    --checkpoint "$out/dp_fault.ckpt" --overwrite > "$out/dp_fault.log" 2> "$out/dp_fault.err" &
  launcher=$!
  (sleep 200; kill -9 "$launcher" 2>/dev/null) &  # should the launcher itself hang
  guard=$!
  for _ in $(seq 1 120); do grep -q "^epoch 1/" "$out/dp_fault.log" 2>/dev/null && break; sleep 0.5; done
  victim=""
  for pid in $(pgrep -P "$launcher"); do
    tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx RANK=1 && victim=$pid
  done
  killed_at=$(date +%s.%N)
  kill -9 "$victim"
  wait "$launcher"
  code=$?
  ended_at=$(date +%s.%N)
  kill "$guard" 2>/dev/null
  python3 - "$code" "$killed_at" "$ended_at" "$out/dp_fault.err" "$out/dp_fault.ckpt" > "$out/dp_fault.json" <<'PY'
import json, os, sys
code, killed, ended, err, ckpt = sys.argv[1:]
text = open(err).read()
print(json.dumps({"launcher_exit": int(code), "seconds_to_exit": float(ended) - float(killed),
                  "names_rank_1": "rank 1" in text, "checkpoint_kept": os.path.exists(ckpt),
                  "stderr_tail": text[-800:]}))
PY
  cat "$out/dp_fault.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["launcher_exit"] != 0 and r["names_rank_1"] and r["checkpoint_kept"] else 1)' "$out/dp_fault.json" || status=1
  exit $status
fi
if [ "$what" = ddp-bench ]; then
  # Scaling and PyTorch DDP on two GPUs, in one call: for each of KILN_MODELS (resnet50 vgg16_bn),
  # KILN_PRECISION (fp16), batch KILN_BATCH (256) per GPU, default tuning: kiln on one GPU, kiln on
  # two (`kiln bench --gpus 2`), PyTorch DDP (torchrun, bench/torch_ddp.py) eager and torch.compile,
  # KILN_ROUNDS rounds of kiln interleaved. bench/report_ddp.py joins them.
  batch=${KILN_BATCH:-256} precision=${KILN_PRECISION:-fp16}
  for model in ${KILN_MODELS:-resnet50 vgg16_bn}; do
    for ((round = 1; round <= ${KILN_ROUNDS:-1}; ++round)); do
      for gpus in 1 2; do
        launch=()
        [ "$gpus" -gt 1 ] && launch=(--gpus "$gpus")
        timeout 240 "$bin/kiln" bench --device cuda --model "$model" --batch "$batch" --precision "$precision" \
          "${launch[@]}" --plan-cache "$out/plans.json" --json "$out/ddp_kiln.jsonl" 2>> "$out/ddp_kiln.err" \
          || { tail -5 "$out/ddp_kiln.err"; status=1; }
      done
    done
    for mode in ${KILN_TORCH_MODES:-eager compile}; do
      timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/torch_ddp.py \
        --models "$model" --precision "$precision" --batch "$batch" --modes "$mode" \
        >> "$out/ddp_torch.jsonl" 2>> "$out/ddp_torch.err" || { tail -5 "$out/ddp_torch.err"; status=1; }
    done
  done
  cat "$out/ddp_kiln.jsonl" | python3 -c 'import json,sys
for l in sys.stdin: r=json.loads(l); print("kiln", r["model"], r["ranks"], round(r["images_per_second"]))'
  grep -h '^{' "$out/ddp_torch.jsonl" || true
  exit $status
fi
if [ "$what" = start ]; then
  # The default start beside PyTorch's (issue: a fast, lean start by default), in one call, for each
  # of KILN_MODELS (default resnet50 vgg16_bn), batch KILN_BATCH (256), fp16, default flags:
  # kiln bench with an empty plan cache (cold), again with the cache it filled (warm), PyTorch eager
  # and torch.compile each in a fresh process, then kiln warm again (a second round for the rate).
  # Then, for KILN_TUNE_COMPARE (default vgg16_bn), the default's rate against exhaustive tuning's.
  # bench/report_start.py joins them.
  batch=${KILN_BATCH:-256}
  export XDG_CACHE_HOME=/tmp/kiln-start-cache
  rm -rf "$XDG_CACHE_HOME" "$out"/start_*.jsonl
  SECONDS=0
  for model in ${KILN_MODELS:-resnet50 vgg16_bn}; do
    common=(--device cuda --model "$model" --batch "$batch" --precision fp16)
    for run in cold warm; do
      timeout 200 "$bin/kiln" bench "${common[@]}" --steps 30 --warmup 5 --json "$out/start_kiln_$run.jsonl" \
        2> "$out/start_kiln.err" || status=1
    done
    for mode in eager compile; do
      timeout 240 python3 bench/torch_models.py --model "$model" --batch "$batch" --precision fp16 --modes "$mode" \
        >> "$out/start_torch.jsonl" 2> "$out/start_torch.err" || { tail -3 "$out/start_torch.err"; status=1; }
    done
    timeout 120 "$bin/kiln" bench "${common[@]}" --steps 30 --warmup 5 --json "$out/start_kiln_warm.jsonl" \
      2> "$out/start_kiln.err" || status=1
  done
  # Exhaustive tuning's rate comes from the run that tunes (100 steps after it), between two runs of
  # the default; it gets what is left of KILN_START_SECONDS (default 560) but a minute.
  for model in ${KILN_TUNE_COMPARE-vgg16_bn}; do
    common=(--device cuda --model "$model" --batch "$batch" --precision fp16 --steps 100 --warmup 10)
    bounded() {
      timeout 100 "$bin/kiln" bench "${common[@]}" --json "$out/start_rate_bounded.jsonl" 2> "$out/start_kiln.err" \
        || status=1
    }
    bounded
    left=$(( ${KILN_START_SECONDS:-560} - SECONDS - 60 ))
    echo "exhaustive tuning of $model: $left s left for it"
    timeout "$left" "$bin/kiln" bench "${common[@]}" --tune exhaustive --plan-cache none \
      --tune-log "$out/start_exhaustive_tune.jsonl" --json "$out/start_rate_exhaustive.jsonl" \
      2> "$out/start_kiln.err" || { echo "exhaustive tuning did not finish in $left s"; status=1; }
    bounded
  done
  python3 bench/report_start.py "$out" "$out/start_results.json" "$out/env.json" || status=1
  exit $status
fi
if [ "$what" = digits ]; then
  # The digits recipe (scripts/demo.sh) on the GPU, kiln against bench/torch_digits.py, data
  # loading and per-epoch evaluation included on both sides: KILN_DIGITS_DIR (default
  # data/digits), KILN_PRECISION (fp32), KILN_TORCH_MODES (eager,compile), KILN_CONV_TF32 (0: true
  # fp32 convolutions on both sides; 1: TF32 on both, PyTorch's default).
  data=${KILN_DIGITS_DIR:-data/digits} precision=${KILN_PRECISION:-fp32} tf32=${KILN_CONV_TF32:-0}
  torch_tf32=; [ "$tf32" = 1 ] && torch_tf32=--conv-tf32
  "$bin/kiln" train --device cuda --model digits_cnn --data "$data" --epochs 30 --batch 64 --optimizer sgd --lr 0.05 \
    --momentum 0.9 --nesterov --weight-decay 5e-4 --schedule cosine --label-smoothing 0.1 --crop-pad 1 --seed 1 \
    --precision "$precision" --conv-tf32 "$tf32" --json "$out/kiln_digits.jsonl" > "$out/kiln_digits.log" 2>&1 \
    || { tail -5 "$out/kiln_digits.log"; status=1; }
  python3 bench/torch_digits.py --data "$data" --precision "$precision" --modes "${KILN_TORCH_MODES:-eager,compile}" $torch_tf32 \
    > "$out/torch_digits.jsonl" 2> "$out/torch_digits.err" || { tail -5 "$out/torch_digits.err"; status=1; }
  suffix=; [ "$tf32" = 1 ] && suffix=_tf32
  python3 bench/report_digits.py "$out/kiln_digits.jsonl" "$out/torch_digits.jsonl" "$out/digits_${precision}${suffix}.json" \
    "$out/env.json" || status=1
  exit $status
fi
if [ "$what" = data ]; then
  # Image folders (issue: train from image files at GPU speed): the photo-crop folder made here
  # from real photos (KILN_PHOTO_SOURCE, default opencv-doc's; KILN_PHOTOS_DIR, default
  # data/photos), then on the same files: kiln's loader alone (kiln data-bench), torchvision's
  # DataLoader (bench/torch_data_bench.py: PIL, torchvision.io on the CPU, nvJPEG on the GPU),
  # kiln bench's synthetic-data rate and kiln train from the folder (KILN_MODEL, default resnet50,
  # KILN_PRECISION fp16, batch 256; the second epoch's rate, the first holds the tuning).
  photos=${KILN_PHOTOS_DIR:-data/photos} model=${KILN_MODEL:-resnet50} precision=${KILN_PRECISION:-fp16}
  if [ ! -d "$photos" ]; then
    start=$SECONDS
    "$bin/kiln_make_image_folders" photos "$photos" --source "${KILN_PHOTO_SOURCE:-/usr/share/doc/opencv-doc}" \
      ${KILN_PHOTO_ARGS:-} || status=1
    echo "photo folder made in $((SECONDS - start)) s"
  fi
  python3 - "$photos" > "$out/photos_stats.json" <<'PY'
import json, os, statistics, sys
from PIL import Image
sizes, dims = [], []
for root, _, files in os.walk(os.path.join(sys.argv[1], "train")):
    for f in files:
        p = os.path.join(root, f); sizes.append(os.path.getsize(p))
        if len(dims) < 2000:
            with Image.open(p) as im: dims.append(im.size)
print(json.dumps({"files": len(sizes), "median_bytes": statistics.median(sizes),
                  "median_width": statistics.median(d[0] for d in dims), "median_height": statistics.median(d[1] for d in dims)}))
PY
  cat "$out/photos_stats.json"
  # Decoding and resampling against PIL + torchvision (Resize + CenterCrop of every validation
  # image; evaluation decodes at full scale) (KILN_PIL_COMPARE=0 skips it).
  for dct in $([ "${KILN_PIL_COMPARE:-1}" = 1 ] && echo 1); do
    "$bin/kiln" data-bench --data "$photos" --split val --batches 1 --dct-scaling $dct --dump /tmp/kiln_val.u8 \
      --dump-count 1000000 > /dev/null || status=1
    python3 bench/pil_compare.py --images "$photos/val" --kiln-dump /tmp/kiln_val.u8 > "$out/pil_compare_dct$dct.json" \
      || status=1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('pil compare dct $dct:', {k: v for k, v in d.items() if not isinstance(v, list)})" "$out/pil_compare_dct$dct.json"
  done
  # KILN_DATA_VARIANTS: the data-bench runs, ';'-separated option sets (the GPU decode path last).
  IFS=';' read -r -a variants <<<"${KILN_DATA_VARIANTS-;--dct-scaling 0;--host-normalize;--decode gpu}"
  for args in "${variants[@]}"; do
    # shellcheck disable=SC2086  # each variant is a list of options
    "$bin/kiln" data-bench --data "$photos" --batch 256 --batches ${KILN_DATA_BATCHES:-40} $args \
      --json "$out/kiln_data.jsonl" || status=1
  done
  # One process per mode, each bounded: a mode that hangs must not take the rest of the call.
  for mode in ${KILN_TORCH_DATA_MODES:-pil tv-io gpu}; do
    timeout 150 python3 bench/torch_data_bench.py --data "$photos/train" --modes "$mode" --workers "$(nproc)" \
      --batches ${KILN_TORCH_DATA_BATCHES:-40} >> "$out/torch_data.jsonl" 2>> "$out/torch_data.err" \
      || { echo "torch_data_bench $mode failed or timed out"; tail -3 "$out/torch_data.err"; }
  done
  cat "$out/torch_data.jsonl"
  # The same training step from synthetic data on the device and from the folder (cuDNN's first
  # plans on both sides, KILN_CUDNN_TUNE=0, so that both run the same kernels and start in seconds).
  packed=$photos.kiln
  [ -d "$packed" ] || "$bin/kiln" pack "$photos" "$packed" --max-side 512 | tail -1 || status=1
  "$bin/kiln" data-bench --data "$packed" --batch 256 --batches ${KILN_DATA_BATCHES:-40} --json "$out/kiln_data.jsonl" \
    || status=1
  for model in ${KILN_MODELS:-resnet50 resnet18}; do
    KILN_CUDNN_TUNE=0 "$bin/kiln" bench --device cuda --model "$model" --batch 256 --precision "$precision" \
      --json "$out/kiln_synthetic.jsonl" > "$out/kiln_bench.log" 2>&1 || { tail -5 "$out/kiln_bench.log"; status=1; }
    head -1 "$out/kiln_bench.log"
    # KILN_TRAIN_FROM: folder, packed or both (default).
    sources=()
    [[ " ${KILN_TRAIN_FROM:-folder packed} " == *" folder "* ]] && sources+=("$photos")
    [[ " ${KILN_TRAIN_FROM:-folder packed} " == *" packed "* ]] && sources+=("$packed")
    for data in "${sources[@]}"; do
      for decode in ${KILN_TRAIN_DECODE:-cpu gpu}; do
        echo "== $model from $data, --decode $decode"
        KILN_CUDNN_TUNE=0 "$bin/kiln" train --device cuda --model "$model" --data "$data" --batch 256 --decode "$decode" \
          --precision "$precision" --epochs ${KILN_EPOCHS:-2} --lr 0.1 --warmup 1 --json "$out/kiln_folder_train.jsonl" \
          > "$out/kiln_train.log" 2>&1 || { tail -5 "$out/kiln_train.log"; status=1; }
        grep -E "^epoch|accuracy" "$out/kiln_train.log"
      done
    done
  done
  exit $status
fi
if [ "$what" = memcheck ]; then
  # compute-sanitizer memcheck (out-of-bounds and misaligned device accesses, leaks of device
  # memory, CUDA API errors) over GPU tests that reach every kernel family (BN, CBR, elementwise
  # and activations, loss, loss scaling, optimizers, pooling, dropout, the block ends, few-channel
  # and direct wgrad, the linear layer, CUDA Graph replay, pixel input) and the GPU decode path
  # (KILN_MEMCHECK_FILTER, a gtest filter), then one short digits training run through the CLI.
  # Kernels run several times slower under memcheck, and cuDNN takes its first plans (no tuning).
  # A control process that only creates and destroys a cuDNN handle shows what cuDNN itself leaves
  # allocated until exit; scripts/memcheck_report.py counts those as the library's and fails on
  # anything else.
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; exit 1; }
  memcheck=("$sanitizer" --tool memcheck --leak-check full)
  "${memcheck[@]}" python3 -c "import ctypes
lib = ctypes.CDLL('libcudnn.so.9'); h = ctypes.c_void_p()
assert lib.cudnnCreate(ctypes.byref(h)) == 0 and lib.cudnnDestroy(h) == 0" > "$out/memcheck_control.log" 2>&1
  families='BatchNormGpu.*:CbrKernelsGpu.*:ElementwiseGpu.*:LossGpu.*:LossScaleGpu.*:OptimizerGpu.*:Dtypes/PoolGpu.*'
  families+=':DropoutGpu.*:ResblockKernelsGpu.*:ResblockOpsGpu.*:FewChannelConvGpu.*:WgradDirectGpu.*:CudnnGraphsGpu.*'
  families+=':Precisions/LinearLayerGpu.*:Precisions/CbrGpu.*/fp16:CudaGraphs.*:PixelInputGpu.*'
  families+=':GpuDecode.BatchesMatchTheCpuPathWithinRounding'
  KILN_CUDNN_TUNE=0 "${memcheck[@]}" "$bin/kiln_test_gpu" --gtest_filter="${KILN_MEMCHECK_FILTER:-$families}" \
    > "$out/memcheck_tests.log" 2>&1 || status=1
  grep -E "^\[==========\] [0-9]+ tests? from|^\[  (PASSED|FAILED)" "$out/memcheck_tests.log"
  KILN_CUDNN_TUNE=0 "${memcheck[@]}" "$bin/kiln" train --device cuda --model digits_cnn \
    --data "${KILN_DIGITS_DIR:-data/digits}" --epochs 1 --batch 64 --warmup 0 > "$out/memcheck_train.log" 2>&1 || status=1
  grep -E "test accuracy" "$out/memcheck_train.log"
  python3 scripts/memcheck_report.py "$out/memcheck_control.log" "$out/memcheck_tests.log" "$out/memcheck_train.log" \
    || status=1
  exit $status
fi
if [ "$what" = stages ]; then
  # Per-kernel times (Nsight Compute, clocks left alone) of the conv alone and the CBR block, one
  # shape per argument after the mode (default: a small and a deep VGG shape): where the time goes.
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  shift
  shapes=("$@")
  [ ${#shapes[@]} -eq 0 ] && shapes=(256,64,56,64,3,1 256,512,28,512,3,1)
  for shape in "${shapes[@]}"; do
    for variant in conv cbr; do
      KILN_CUDNN_TUNE=0 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv \
        "$bin/kiln_cbr_bench" --warmup 0 --iters 1 --variants "$variant" "$shape" > "$out/ncu_${variant}_${shape//,/_}.csv" 2> "$out/ncu.err" \
        || tail -3 "$out/ncu.err"
      python3 bench/kernel_times.py "$out/ncu_${variant}_${shape//,/_}.csv" "$variant $shape" >> "$out/stages.jsonl"
    done
  done
  cat "$out/stages.jsonl"
  exit $status
fi
# KILN_BENCH_FROM=<dir>: kiln's half of a split run (kiln_bench.jsonl, tune.jsonl) made earlier.
from=${KILN_BENCH_FROM:-$out}
if [ -f "$from/kiln_bench.jsonl" ] && [ -f "$out/torch_bench.jsonl" ]; then
  # KILN_STAGES_FROM=<stages.jsonl>: per-kernel times from a `stages` run, joined into the rows.
  python3 bench/report_cbr.py "$from/kiln_bench.jsonl" "$out/torch_bench.jsonl" "$out/cbr_results.json" \
    "$out/env.json" "$from/tune.jsonl" ${KILN_STAGES_FROM:-}
fi
exit $status
