#!/usr/bin/env bash
# kiln builds or settings on the CPU, each beside PyTorch, in one call: for each thread count
# bench/cpu_threads.sh runs every variant in turn, each with its own PyTorch run, so a variant and
# its PyTorch share the machine's state of that moment. Writes <out>/<name> (cpu_threads.sh's
# folders, with their cpu_threads.json) and prints each variant's speed over the first's and over
# the PyTorch beside it (report_cpu_threads_ab.py, <out>/ab.json).
#
# usage: bench/cpu_threads_ab.sh <out dir> <name>=<kiln binary>[,<conv math>] ...
#   conv math: fp32 (default) or bf16 (cpu_threads.sh's KILN_CONV_MATH, both sides);
#   KILN_LIBS: a folder put first on LD_LIBRARY_PATH (the builds' shared libraries);
#   KILN_THREAD_COUNTS, KILN_NETWORKS, KILN_SIDES, KILN_EPOCHS as for bench/cpu_threads.sh
#   (KILN_SIDES defaults to "onednn torch" here); KILN_ROUNDS (default 1): the whole sweep again,
#   interleaved, each figure then the median of its rounds (single passes on a shared VM move by
#   10-30%).
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/cpu_threads_ab.sh <out dir> <name>=<kiln binary>[,<conv math>] ..."
out=${1:?$usage}
shift
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$out"
: > "$out/variants.txt"
for v in "$@"; do echo "${v%%=*}" >> "$out/variants.txt"; done
status=0
for round in $(seq "${KILN_ROUNDS:-1}"); do
for t in ${KILN_THREAD_COUNTS:-1 2 4 8 16}; do
  for v in "$@"; do
    name=${v%%=*} spec=${v#*=}
    kiln=${spec%%,*} math=fp32
    [ "$spec" != "$kiln" ] && math=${spec#*,}
    mkdir -p "$out/$name"
    LD_LIBRARY_PATH="${KILN_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_THREAD_COUNTS=$t KILN_CONV_MATH=$math \
      KILN_SIDES="${KILN_SIDES:-onednn torch}" bench/cpu_threads.sh "$kiln" "$out/$name" >/dev/null || status=1
  done
done
done
while read -r name; do python3 bench/report_cpu_threads.py "$out/$name" >/dev/null || status=1; done < "$out/variants.txt"
python3 bench/report_cpu_threads_ab.py "$out" || status=1
exit $status
