#!/usr/bin/env bash
# Sets up everything on a fresh machine, builds, and runs the main job: for now `starzero plan`
# on the seeds' 7B example (training comes with the GPT-model issue).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STARZERO_BUILD:-$root/build}
"$root/scripts/build.sh" "$build" >&2
"$build/examples/starzero" plan --params 7e9 --dp 1,8,64
