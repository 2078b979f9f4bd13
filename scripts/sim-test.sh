#!/usr/bin/env bash
# Builds starzero-sim against StarPU in SimGrid mode (the second StarPU prefix, which
# scripts/bootstrap.sh builds and caches with STARZERO_SIMGRID=on) and runs the simulation's tests
# (docs/sim.md). Usage: scripts/sim-test.sh [build-dir] [extra ctest args...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-sim}
shift || true
STARZERO_SIMGRID=on "$root/scripts/build.sh" "$build"
cd "$build"
ctest --output-on-failure --timeout 900 "$@"
