#!/usr/bin/env bash
# Builds the libFuzzer targets (build/fuzz: clang, ASan + UBSan, no CUDA) and runs one of them.
#
#   fuzz/run.sh TARGET [libFuzzer flags...]   e.g. fuzz/run.sh idx -runs=10000000
#   fuzz/run.sh --build                       only build (and make the seeds)
#
# TARGET: idx, cifar10, safetensors, cli_options, image_decode, pack, folder_scan, onnx_import. The run starts from the
# stored inputs (fuzz/corpus/TARGET/, seeds made by kiln_fuzz_seeds when it is empty) and keeps what it finds
# in build/fuzz/corpus/TARGET/ (fuzz/corpus/ stays small: copy a crasher there by hand, named crash-*,
# and tests/fuzz_regression/ replays it in the CPU suite). A crash leaves build/fuzz/artifacts/TARGET/crash-*.
# Defaults: -max_len=16384 -timeout=25 -rss_limit_mb=2560 -print_final_stats=1, one process (-jobs=1);
# fuzz/farm.sh runs several targets on every core at once.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang 16 and its libFuzzer runtime (Debian 12: clang-16, libclang-rt-16-dev; clang 14, the default, cannot
# compile kiln: C++20 lambdas capturing structured bindings); only fuzzing needs them.
packages=(clang-16 libclang-rt-16-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build=build/fuzz
if [ ! -f "$build/build.ninja" ]; then
  # Without oneDNN: the targets read files and options and run no convolution, and kiln's oneDNN
  # path includes GCC's omp.h (libgomp), which clang does not find.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-16 \
    -DKILN_WITH_CUDA=OFF -DKILN_WITH_ONEDNN=OFF -DKILN_BUILD_TESTS=OFF -DKILN_FUZZ=ON >/dev/null
fi
cmake --build "$build" --target kiln_fuzz -j "$(nproc)"

targets=(idx cifar10 safetensors cli_options image_decode pack folder_scan onnx_import)
for t in "${targets[@]}"; do
  if [ -z "$(ls -A "fuzz/corpus/$t" 2>/dev/null)" ]; then
    echo "fuzz: making the seeds of fuzz/corpus/"
    "$build/kiln_fuzz_seeds" fuzz/corpus
    break
  fi
done
[ "${1:-}" = "--build" ] && exit 0

target=${1:?usage: fuzz/run.sh TARGET [libFuzzer flags...] (targets: ${targets[*]})}
shift
[[ " ${targets[*]} " == *" $target "* ]] || { echo "fuzz: unknown target '$target' (${targets[*]})" >&2; exit 2; }
mkdir -p "$build/corpus/$target" "$build/artifacts/$target"
# Stack-use-after-return detection makes every throw collect ASan's fake stacks (30-60% of the time
# of targets that throw kiln::Error for most inputs); leaks and the rest stay on.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=0:detect_leaks=1}
exec "$build/kiln_fuzz_$target" -max_len=16384 -timeout=25 -rss_limit_mb=2560 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/$target/" "$@" "$build/corpus/$target" "fuzz/corpus/$target"
