#!/usr/bin/env bash
# Sets up everything on a fresh machine, builds, and runs the main job: trains the `tiny` GPT on
# this checkout's own docs and sources on the CPU, printing the loss, validation loss and text
# sampled from the model.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STARZERO_BUILD:-$root/build}
"$root/scripts/build.sh" "$build" >&2
"$build/apps/starzero" train --preset tiny --steps 300 --cuda-workers 0 --sample-every 100 "$@"
