#!/usr/bin/env bash
# A kiln CPU build packed to run on a machine that lacks its shared libraries (the GPU machine's
# host CPU has none of Debian's packages): the stripped binary and every library ldd resolves for
# it outside the C and C++ runtimes, in one xz tarball (oneDNN alone is ~60 MB unpacked, more
# than a device call carries).
#
#   bench/cpu_carry.sh pack <kiln binary> <tarball>
#   bench/cpu_carry.sh unpack <tarball> <dir>     # then <dir>/kiln, with KILN_LIBS=<dir>/lib
#
# bench/cpu_threads_ab.sh and bench/cpu_conv_share.sh take KILN_LIBS.
set -euo pipefail
usage="usage: bench/cpu_carry.sh pack <kiln binary> <tarball> | unpack <tarball> <dir>"
case ${1:-} in
  pack)
    kiln=${2:?$usage} tarball=${3:?$usage}
    [ -x "$kiln" ] || { echo "bench/cpu_carry.sh: $kiln is not an executable; build it first" >&2; exit 2; }
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/lib"
    cp "$kiln" "$stage/kiln" && strip "$stage/kiln"
    # The runtimes every x86-64 Linux has (glibc's libraries, libstdc++, libgcc) stay behind.
    ldd "$kiln" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
      while read -r lib; do cp -L "$lib" "$stage/lib/"; done
    mkdir -p "$(dirname "$tarball")"
    tar -C "$stage" -cJf "$tarball" .
    echo "packed $(ls "$stage/lib" | tr '\n' ' ')into $tarball ($(du -h "$tarball" | cut -f1))"
    ;;
  unpack)
    tarball=${2:?$usage} dir=${3:?$usage}
    mkdir -p "$dir" && tar -C "$dir" -xJf "$tarball"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
