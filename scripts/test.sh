#!/usr/bin/env bash
# Sets up, builds and runs the test suite (CPU tests; GPU tests carry the ctest label `gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_WERROR=ON scripts/setup.sh  # a warning in kiln's own code fails the build
ctest --preset release -j "$(nproc)" --label-exclude gpu "$@"
