#!/usr/bin/env bash
# Installs kiln's dependencies (Debian packages), builds it, and makes the digits data set
# if it is missing. Safe to run again: each step is skipped when already done.
# Builds every target (library, tools, tests, benchmarks; what scripts/test.sh needs) unless
# KILN_BUILD_TARGETS lists some, e.g. KILN_BUILD_TARGETS=kiln_cli (scripts/demo.sh); the digits tool
# below is built in any case.
#
# Only what the build will use is fetched and built:
# - The CUDA backend (and its wheels: cudnn-frontend, nvJPEG, CUTLASS, NCCL) where nvcc and cuDNN are
#   found and KILN_WITH_CUDA says so: ON builds it (scripts/test.sh: CI compiles the CUDA host tests
#   on a machine without a GPU), OFF leaves it out; unset, it is built where a GPU is visible, else
#   the build keeps its earlier choice (a first configure leaves it out). So a demo on a machine
#   without a GPU never compiles the CUDA kernels, and never throws away a build that has them.
# - The test suite's Python packages and its image folders (data/digits_png, data/photos_tiny) when
#   the tests are built: no KILN_BUILD_TARGETS, or KILN_FOR_TESTS=1 (scripts/test.sh --sanitize); the
#   image folders also with KILN_IMAGE_FOLDERS=1 (scripts/demo.sh --data data/digits_png).
set -euo pipefail
cd "$(dirname "$0")/.."

# libonnx-dev and libprotobuf-dev: kiln export --onnx writes models through the ONNX library
# (cmake/onnx.cmake); its protobuf classes come compiled, so protoc is not needed.
# librsvg2-dev: kiln plot -o curves.png rasterizes the chart's SVG through librsvg and cairo
# (cmake/chart_png.cmake), its text in DejaVu Sans (fonts-dejavu-core).
packages=(build-essential cmake ninja-build libeigen3-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev libgtest-dev libpng-dev libjpeg62-turbo-dev opencv-doc python3-venv
          libonnx-dev libprotobuf-dev librsvg2-dev fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Whether this build gets the CUDA backend (the header above says the rule). A GPU is visible when
# a device node /dev/nvidiaN exists (what the CUDA driver opens, also inside a container given the
# GPU) or nvidia-smi lists one.
gpu_visible() {
  compgen -G "/dev/nvidia[0-9]*" >/dev/null ||
    { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
}
cache=build/release/CMakeCache.txt
with_cuda=${KILN_WITH_CUDA:-}
if [ -z "$with_cuda" ]; then
  if gpu_visible; then
    with_cuda=ON
  elif [ -f "$cache" ] && grep -q '^KILN_WITH_CUDA:BOOL=ON$' "$cache"; then
    with_cuda=ON  # built with it before: keep it, whatever it cost is paid
  else
    with_cuda=OFF
    command -v nvcc >/dev/null &&
      echo "setup: no GPU visible: building without the CUDA backend (KILN_WITH_CUDA=ON builds it)"
  fi
fi
case "$with_cuda" in
  ON|OFF) ;;
  *) echo "setup: KILN_WITH_CUDA=$with_cuda: give ON or OFF (or leave it unset: ON where a GPU is visible)" >&2; exit 2 ;;
esac
if [ "$with_cuda" = ON ] && command -v nvcc >/dev/null; then fetch_cuda=1; else fetch_cuda=""; fi

# What only the test suite needs.
for_tests=${KILN_FOR_TESTS:-}
[ -z "$for_tests" ] && [ -z "${KILN_BUILD_TARGETS:-}" ] && for_tests=1
image_folders=${KILN_IMAGE_FOLDERS:-$for_tests}

# cudnn-frontend (header-only) for the CUDA backend, from its PyPI wheel.
frontend=third_party/cudnn_frontend
if [ -n "$fetch_cuda" ] && [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  echo "setup: fetching cudnn-frontend headers"
  mkdir -p third_party/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cudnn-frontend==1.32.0" -d third_party/wheels; then
    python3 - "$frontend" third_party/wheels/nvidia_cudnn_frontend-1.32.0-*.whl <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[2]) as wheel:
    wheel.extractall(sys.argv[1], [n for n in wheel.namelist() if n.startswith("include/")])
PY
  else
    echo "setup: cudnn-frontend unavailable; building without the CUDA backend"
  fi
fi

# nvJPEG (the GPU decode path, --decode gpu) from its PyPI wheel where the CUDA toolkit lacks it.
nvjpeg=third_party/nvjpeg
if [ -n "$fetch_cuda" ] && [ ! -f "$nvjpeg/include/nvjpeg.h" ] &&
   [ ! -f "$(dirname "$(command -v nvcc)")/../include/nvjpeg.h" ]; then
  echo "setup: fetching nvJPEG"
  mkdir -p third_party/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-nvjpeg==13.3.2.43" -d third_party/wheels; then
    python3 - "$nvjpeg" third_party/wheels/nvidia_nvjpeg-13.3.2.43-*.whl <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[2]) as wheel:
    for name in wheel.namelist():
        part = name.split("/")
        if name.startswith("nvidia/cu13/") and part[2] in ("include", "lib") and not name.endswith("/"):
            target = os.path.join(sys.argv[1], part[2], part[-1])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with wheel.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
PY
  else
    echo "setup: nvJPEG unavailable; building without the GPU decode path"
  fi
fi

# CUTLASS's headers (kiln's own Hopper convolutions, src/ops/*/*_cutlass.cu) from NVIDIA's PyPI
# wheel, which carries them under cutlass_library/source: include/ and tools/util/include/ (cutlass/util)
# go into one include folder. Only with the CUDA backend; without them those kernels are not built.
cutlass=third_party/cutlass
cutlass_version=4.2.0.0
if [ -n "$fetch_cuda" ] && { [ ! -f "$cutlass/.installed" ] || [ "$(cat "$cutlass/.installed")" != "$cutlass_version" ]; }; then
  echo "setup: fetching CUTLASS headers (PyPI nvidia-cutlass $cutlass_version)"
  mkdir -p third_party/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cutlass==$cutlass_version" -d third_party/wheels; then
    rm -rf "$cutlass"
    python3 - "$cutlass/include" third_party/wheels/nvidia_cutlass-$cutlass_version-*.whl <<'PY'
import os, sys, zipfile
roots = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")
with zipfile.ZipFile(sys.argv[2]) as wheel:
    for name in wheel.namelist():
        root = next((r for r in roots if name.startswith(r)), None)
        if root is None or name.endswith("/"):
            continue
        target = os.path.join(sys.argv[1], name[len(root):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with wheel.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
PY
    echo "$cutlass_version" >"$cutlass/.installed"
  else
    echo "setup: CUTLASS unavailable; building without kiln's CUTLASS convolutions"
  fi
fi

# NCCL (data-parallel training, src/dist/) from NVIDIA's PyPI wheel: nccl.h and libnccl.so.2 into
# third_party/nccl. Only with the CUDA backend. 2.28 is the release PyTorch's venv on the GPU machines
# carries, which the ranks load there (its soname, libnccl.so.2, is what kiln links).
nccl=third_party/nccl
nccl_version=2.28.9
if [ -n "$fetch_cuda" ] && { [ ! -f "$nccl/.installed" ] || [ "$(cat "$nccl/.installed")" != "$nccl_version" ]; }; then
  echo "setup: fetching NCCL (PyPI nvidia-nccl-cu13 $nccl_version)"
  mkdir -p third_party/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-nccl-cu13==$nccl_version" -d third_party/wheels; then
    rm -rf "$nccl"
    python3 - "$nccl" third_party/wheels/nvidia_nccl_cu13-$nccl_version-*.whl <<'PY'
import os, sys, zipfile
wanted = {"nvidia/nccl/include/nccl.h": "include/nccl.h", "nvidia/nccl/lib/libnccl.so.2": "lib/libnccl.so.2"}
with zipfile.ZipFile(sys.argv[2]) as wheel:
    for name, target in wanted.items():
        path = os.path.join(sys.argv[1], target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with wheel.open(name) as src, open(path, "wb") as dst:
            dst.write(src.read())
PY
    ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"
    echo "$nccl_version" >"$nccl/.installed"
  else
    echo "setup: NCCL unavailable; building without data-parallel training"
  fi
fi

# The Python the CPU suite checks kiln's files with (onnxruntime runs exported ONNX models, tensorboard
# reads the event files), in a venv of its own so the system's Python is left as it is; pinned in
# tests/python-requirements.txt. The tests find it as KILN_PYTHON (CMakeLists.txt). The venv itself
# (a few seconds) is made in any case: its pip fetches oneDNN below; the packages only for the tests.
pyenv=third_party/pyenv
if [ ! -x "$pyenv/bin/python" ]; then
  python=/usr/bin/python3
  [ -x "$python" ] || python=python3
  "$python" -m venv "$pyenv"
fi
if [ -n "$for_tests" ] && { [ ! -f "$pyenv/.installed" ] || ! cmp -s tests/python-requirements.txt "$pyenv/.installed"; }; then
  echo "setup: installing the test suite's Python packages into $pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check -r tests/python-requirements.txt
  cp tests/python-requirements.txt "$pyenv/.installed"
fi

# oneDNN 3.2 for the CPU convolutions (cmake/onednn.cmake says why this build), from Intel's PyPI
# wheels built on GNU OpenMP: the library and its headers, unpacked into third_party/onednn as an
# install prefix (lib/, include/, lib/cmake/dnnl), through the venv's pip above. Without it kiln's
# own CPU kernels run everything.
onednn=third_party/onednn
onednn_version=2023.2.0
if [ ! -f "$onednn/.installed" ] || [ "$(cat "$onednn/.installed")" != "$onednn_version" ]; then
  echo "setup: fetching oneDNN (PyPI onednn-cpu-gomp $onednn_version)"
  mkdir -p third_party/wheels
  if "$pyenv/bin/python" -m pip download -q --no-deps --only-binary=:all: "onednn-cpu-gomp==$onednn_version" \
       "onednn-devel-cpu-gomp==$onednn_version" -d third_party/wheels; then
    rm -rf "$onednn"
    "$pyenv/bin/python" - "$onednn" third_party/wheels/onednn_cpu_gomp-$onednn_version-*.whl \
      third_party/wheels/onednn_devel_cpu_gomp-$onednn_version-*.whl <<'PY'
import os, sys, zipfile
# Each wheel keeps its files under <name>.data/data/; the library comes three times (libdnnl.so,
# .so.3, .so.3.2): one copy, and the other two names as links to it.
prefix = sys.argv[1]
for path in sys.argv[2:]:
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            part = name.split("/")
            if len(part) < 4 or part[1] != "data" or name.endswith("/"):
                continue
            rel = os.path.join(*part[2:])
            if rel in ("lib/libdnnl.so", "lib/libdnnl.so.3"):
                continue
            target = os.path.join(prefix, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with wheel.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
for link in ("libdnnl.so", "libdnnl.so.3"):
    os.symlink("libdnnl.so.3.2", os.path.join(prefix, "lib", link))
PY
    echo "$onednn_version" >"$onednn/.installed"
  else
    echo "setup: oneDNN unavailable; the CPU convolutions run on kiln's own kernels"
  fi
fi

jobs=$(nproc)
# KILN_WERROR=ON|OFF (scripts/test.sh sets ON) is kept in the build's cache until set again.
# KILN_WITH_CUDA is given every time, so a build switches cleanly when the choice changes (CMake
# then builds or drops kiln_cuda; what links kiln_engine, the CLI and the tests, is compiled again,
# as the engine's KILN_WITH_CUDA define changes).
cmake --preset release -DKILN_WITH_CUDA="$with_cuda" ${KILN_WERROR:+-DKILN_WERROR=$KILN_WERROR} >/dev/null
targets=()
if [ -n "${KILN_BUILD_TARGETS:-}" ]; then
  extra=kiln_make_digits
  [ -n "$image_folders" ] && extra+=" kiln_make_image_folders"
  read -r -a targets <<<"$KILN_BUILD_TARGETS $extra"
  echo "setup: building ${targets[*]}"
fi
cmake --build --preset release -j "$jobs" ${targets[@]+--target "${targets[@]}"}

# The digits data set: OpenCV's digits.png (Debian package opencv-doc) cut into IDX files.
if [ ! -f data/digits/t10k-labels-idx1-ubyte ]; then
  echo "setup: building data/digits from opencv-doc's digits.png"
  build/release/kiln_make_digits data/digits
fi

# Tiny image folders (--format imagefolder) for the CPU test suite, a few seconds: the digits as 20x20
# PNGs, and random crops of real photos from opencv-doc (scripts/make_photos.sh makes the full size).
if [ -n "$image_folders" ]; then
  if [ ! -d data/digits_png ]; then
    echo "setup: building data/digits_png from data/digits"
    build/release/kiln_make_image_folders digits data/digits data/digits_png >/dev/null
  fi
  if [ ! -d data/photos_tiny ]; then
    echo "setup: building data/photos_tiny from opencv-doc's photos"
    build/release/kiln_make_image_folders photos data/photos_tiny --classes 10 --train-per-class 20 \
      --val-per-class 10 --max-side 256 >/dev/null
  fi
fi
