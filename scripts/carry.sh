#!/usr/bin/env bash
# kiln binaries packed to run on a machine that lacks their shared libraries (the GPU machine has
# none of Debian's packages, on its host CPU or beside its GPU): the stripped binaries and every
# library ldd resolves for them outside the C and C++ runtimes and outside CUDA's own libraries
# (cudart, cuBLASLt, cuDNN, NVRTC, nvJPEG, NCCL: the GPU machine has them in PyTorch's venv, where
# scripts/gpu_check.sh points LD_LIBRARY_PATH), in one xz tarball (oneDNN alone is ~60 MB
# unpacked, more than a device call carries).
#
#   scripts/carry.sh pack <tarball> <binary>...   # e.g. build/release/kiln build/release/kiln_test_gpu
#   scripts/carry.sh unpack <tarball> <dir>       # then <dir>/<binary>, the libraries in <dir>/lib
#
# A CPU build then runs with KILN_LIBS=<dir>/lib (bench/cpu_threads_ab.sh, bench/cpu_conv_share.sh),
# a CUDA build's tests and benchmarks with KILN_PREBUILT=<dir> scripts/gpu_check.sh.
set -euo pipefail
usage="usage: scripts/carry.sh pack <tarball> <binary>... | unpack <tarball> <dir>"
case ${1:-} in
  pack)
    tarball=${2:?$usage}
    shift 2
    [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/lib"
    for binary in "$@"; do
      [ -x "$binary" ] || { echo "scripts/carry.sh: $binary is not an executable; build it first" >&2; exit 2; }
      cp "$binary" "$stage/" && strip "$stage/$(basename "$binary")"
      # The runtimes every x86-64 Linux has (glibc's libraries, libstdc++, libgcc) and CUDA's stay behind.
      ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
        grep -Ev '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[a-z-]*|nvjpeg|nccl)\.so' |
        while read -r lib; do cp -L "$lib" "$stage/lib/"; done
    done
    mkdir -p "$(dirname "$tarball")"
    tar -C "$stage" -cJf "$tarball" .
    echo "packed $(ls "$stage" | grep -v '^lib$' | tr '\n' ' ')with $(ls "$stage/lib" | tr '\n' ' ')into $tarball" \
      "($(du -h "$tarball" | cut -f1))"
    ;;
  unpack)
    tarball=${2:?$usage} dir=${3:?$usage}
    mkdir -p "$dir" && tar -C "$dir" -xJf "$tarball"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
