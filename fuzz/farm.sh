#!/usr/bin/env bash
# Runs fuzz targets on every core at once, until each has made its executions or the time is up,
# and prints each target's total: the way to reach 10^7 executions per target in minutes on a
# machine with many cores (fuzz/run.sh runs one process of one target).
#
#   fuzz/farm.sh [--bin DIR] [--runs N] [--time S] [--cores C] TARGET...
#
#   --bin DIR   the kiln_fuzz_* executables (default build/fuzz; fuzz/run.sh --build makes them), so
#               targets built on one machine can run on another
#   --runs N    executions per target, over all its processes (default 10000000)
#   --time S    stop every process after S seconds whatever it reached (default 540)
#   --cores C   processes in all (default nproc), shared equally among the targets
#
# Each process is libFuzzer with its own -seed, starting from fuzz/corpus/TARGET/ and the shared
# build/fuzz/corpus/TARGET/ (libFuzzer reloads that folder, so what one process finds the others
# use), crashes into build/fuzz/artifacts/TARGET/, its log in build/fuzz/logs/. The summary line of
# a target: executions (the sum of the processes' "Done N runs" or, for a process stopped by the
# time limit, its last status line), processes, crashes (artifacts), and "ok" or the log to read.
# Exit status: 1 when any target left an artifact or a process failed, else 0.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/fuzz runs=10000000 seconds=540 cores=$(nproc)
while (($#)); do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --time) seconds=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    -*) echo "farm: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($#)) || { echo "usage: fuzz/farm.sh [--bin DIR] [--runs N] [--time S] [--cores C] TARGET..." >&2; exit 2; }
targets=("$@")
per_target=$((cores / ${#targets[@]}))
((per_target >= 1)) || per_target=1
runs_each=$(((runs + per_target - 1) / per_target))

# Stack-use-after-return detection makes every throw collect ASan's fake stacks: the targets throw
# kiln::Error for most inputs, and it took 30-60% of their time. Leaks and everything else stay on.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

logs=build/fuzz/logs
mkdir -p "$logs"
pids=()
for t in "${targets[@]}"; do
  [ -x "$bin/kiln_fuzz_$t" ] || { echo "farm: $bin/kiln_fuzz_$t is missing (fuzz/run.sh --build)" >&2; exit 2; }
  mkdir -p "build/fuzz/corpus/$t" "build/fuzz/artifacts/$t"
  for ((i = 0; i < per_target; i++)); do
    "$bin/kiln_fuzz_$t" -runs="$runs_each" -max_total_time="$seconds" -seed=$((1000 + i)) -reload=10 \
      -max_len=16384 -timeout=25 -rss_limit_mb=2560 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/artifacts/$t/" "build/fuzz/corpus/$t" "fuzz/corpus/$t" \
      >"$logs/$t.$i.log" 2>&1 &
    pids+=($!)
  done
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done

status=0
for t in "${targets[@]}"; do
  total=0
  for ((i = 0; i < per_target; i++)); do
    log=$logs/$t.$i.log
    n=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | tail -1 || true)
    [ -n "$n" ] || n=$(grep -oE '^#[0-9]+' "$log" | tr -d '#' | tail -1 || true)
    total=$((total + ${n:-0}))
  done
  crashes=$(find "build/fuzz/artifacts/$t" -type f | wc -l)
  verdict=ok
  if ((crashes > 0)) || grep -qlE '^==[0-9]+==ERROR|runtime error:|deadly signal' "$logs/$t".*.log; then
    verdict="FOUND (see $logs/$t.*.log, build/fuzz/artifacts/$t/)"
    status=1
  fi
  echo "farm: $t: $total executions in $per_target processes, $crashes artifacts, $verdict"
done
((failed == 0)) || { echo "farm: a fuzzing process failed (its log says why)"; status=1; }
exit "$status"
