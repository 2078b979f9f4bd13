#!/usr/bin/env bash
# Sets up everything on a fresh machine, builds, and runs the whole test suite with CTest.
# Usage: scripts/test.sh [build-dir] [extra ctest args...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
"$root/scripts/build.sh" "$build"
cd "$build"
ctest --output-on-failure --timeout 600 "$@"
