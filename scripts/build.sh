#!/usr/bin/env bash
# Installs what is missing (scripts/bootstrap.sh), then configures and builds starzero.
# Usage: scripts/build.sh [build-dir] [cmake --build args, e.g. --target starzero]   (default: build/ in the
#   checkout, everything)
# Environment: STARZERO_CUDA=auto|on|off (default auto), STARZERO_CUDNN=auto|on|off (default auto:
#   cuDNN's flash attention when found; CUDNN_ROOT: a cuDNN folder other than the toolkit's), CMAKE_BUILD_TYPE (default RelWithDebInfo),
#   STARZERO_SANITIZE=on (ASan + UBSan; scripts/sanitize.sh),
#   STARZERO_SIMGRID=on (starzero-sim against StarPU in SimGrid mode, e.g. in build-sim/;
#   docs/sim.md)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
prefix=$("$root/scripts/bootstrap.sh" | tail -n1)
cuda=${STARZERO_CUDA:-auto}
case $cuda in auto) cmake_cuda=AUTO ;; on) cmake_cuda=ON ;; off) cmake_cuda=OFF ;;
  *) echo "build: STARZERO_CUDA must be auto, on or off" >&2; exit 2 ;; esac
cudnn=${STARZERO_CUDNN:-auto}
case $cudnn in auto) cmake_cudnn=AUTO ;; on) cmake_cudnn=ON ;; off) cmake_cudnn=OFF ;;
  *) echo "build: STARZERO_CUDNN must be auto, on or off" >&2; exit 2 ;; esac
sanitize=OFF
[ "${STARZERO_SANITIZE:-off}" = on ] && sanitize=ON
simgrid=OFF
[ "${STARZERO_SIMGRID:-off}" = on ] && { simgrid=ON; cmake_cuda=ON; }
cmake -S "$root" -B "$build" -DSTARPU_PREFIX="$prefix" -DSTARZERO_CUDA="$cmake_cuda" -DSTARZERO_CUDNN="$cmake_cudnn" -DSTARZERO_SANITIZE="$sanitize" \
      -DSTARZERO_SIMGRID="$simgrid" \
      -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log" >&2; echo "build: cmake configure failed" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" "$@"
