#!/usr/bin/env bash
# Sets up, builds and runs the test suite (CPU tests; GPU tests carry the ctest label `gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --preset release -j "$(nproc)" --label-exclude gpu "$@"
