#!/usr/bin/env bash
# Checks starzero on a machine with an NVIDIA GPU: prints nvidia-smi, configures a build with
# -DSTARZERO_GPU_TESTS=ON, builds what the checks need with every core, runs the CUDA-vs-CPU
# kernel test (CTest `kernels_cuda`), and ends with a table (step, result, time) on stdout and in
# $OUT/gpu-check.md. Made for a machine without internet or apt: StarPU and the Debian libraries
# are carried there, the StarPU prefix as built by scripts/bootstrap.sh and the Debian packages
# unpacked with `dpkg -x PKG.deb DIR` into one folder (DIR/usr/lib/x86_64-linux-gnu, DIR/usr/include:
# hwloc, openblas, openmpi, catch2, tbb, fxt...). Both may sit at other paths than where they were
# made: pkg-config files are relocated into the build folder. The packages may also come as the
# .deb files themselves (17 MB for the list below, against ~130 MB unpacked): --debs DIR unpacks
# them first (dpkg-deb, or python3 where dpkg-deb is missing).
# Debian 12 packages the build needs where the machine lacks them: libhwloc-dev libhwloc15
# libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libopenmpi-dev
# libopenmpi3 openmpi-bin catch2 libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libfxt2
# nlohmann-json3-dev (header-only: `starzero trace` and `sweep`; gnuplot is optional: without it
# the sweep's chart fails, its table and JSON stay)
# (libtbbbind-2-5 too: TBB's CMake files refuse to load without it), and pkgconf pkgconf-bin
# libpkgconf3 where pkg-config is missing.
#
# Usage: scripts/gpu-check.sh [--starpu-prefix DIR] [--extra-prefix DIR] [--debs DIR] [--build-dir DIR]
#                             [--jobs N]
# Environment (the options win):
#   STARPU_PREFIX          StarPU 1.3 install prefix (required)
#   STARZERO_EXTRA_PREFIX  folder where the .deb packages were unpacked (optional: system libraries
#                          are used when it is not given)
#   STARZERO_EXTRA_DEBS    folder of .deb files, unpacked into STARZERO_EXTRA_PREFIX (default for
#                          that then: a folder next to the build folder)
#   GPU_CHECK_BUILD_DIR    build folder (default ${TMPDIR:-/tmp}/starzero-gpu-check/build)
#   CUDA_HOME              CUDA toolkit (default: the one holding `nvcc` on PATH, else /usr/local/cuda)
#   CUDA_ARCHS             CMAKE_CUDA_ARCHITECTURES (default: the GPU's, from nvidia-smi, else the
#                          project's default)
#   CUDNN_ROOT             cuDNN folder with include/cudnn_graph.h and lib/libcudnn.so.9 (default: the
#                          toolkit's, else the pip wheel nvidia-cudnn-cu13 that python3 imports as
#                          nvidia.cudnn, as PyTorch machines carry it); none: the cuDNN steps say "not built"
#   OUT                    when set: gpu-check.md and the logs are written there
# Exit status: 0 when every step passed, 1 when one failed, 2 on a usage or setup error.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
starpu_prefix=${STARPU_PREFIX:-}
extra_prefix=${STARZERO_EXTRA_PREFIX:-}
extra_debs=${STARZERO_EXTRA_DEBS:-}
build=${GPU_CHECK_BUILD_DIR:-${TMPDIR:-/tmp}/starzero-gpu-check/build}
jobs=$(nproc 2>/dev/null || echo 4)

say() { echo "gpu-check: $*" >&2; }
die() { echo "gpu-check: error: $*" >&2; exit 2; }
usage() { sed -n '/^# Usage:/,/^# Exit status/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --starpu-prefix) [ $# -ge 2 ] || usage; starpu_prefix=$2; shift 2 ;;
    --starpu-prefix=*) starpu_prefix=${1#*=}; shift ;;
    --extra-prefix) [ $# -ge 2 ] || usage; extra_prefix=$2; shift 2 ;;
    --extra-prefix=*) extra_prefix=${1#*=}; shift ;;
    --debs) [ $# -ge 2 ] || usage; extra_debs=$2; shift 2 ;;
    --debs=*) extra_debs=${1#*=}; shift ;;
    --build-dir) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --build-dir=*) build=${1#*=}; shift ;;
    --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    -h|--help) usage ;;
    *) say "unknown argument '$1'"; usage ;;
  esac
done

# ---- where results go ----------------------------------------------------------------------------
mkdir -p "$build" || die "cannot create the build folder $build"
build=$(cd "$build" && pwd)
work=$(dirname "$build")/gpu-check-work   # relocated pkg-config files, StarPU view
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" || die "cannot create OUT=$OUT"
  logs=$(cd "$OUT" && pwd)
else
  logs=$build/gpu-check-logs
fi
mkdir -p "$logs" "$work"
say "build folder $build, logs in $logs"

# ---- .deb files, unpacked ------------------------------------------------------------------------
# unpack_deb DEB DIR: `dpkg -x`, with python3 (ar archive holding data.tar.{xz,gz,bz2}) as fallback.
unpack_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  elif command -v python3 >/dev/null; then
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
if data[:8] != b"!<arch>\n":
    sys.exit(f"{deb}: not a .deb (ar) archive")
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(data[pos + 60:pos + 60 + size]), mode="r:*") as t:
            if hasattr(tarfile, "fully_trusted_filter"):
                t.extractall(dest, filter="fully_trusted")
            else:
                t.extractall(dest)
        sys.exit(0)
    pos += 60 + size + (size & 1)
sys.exit(f"{deb}: no data.tar member")
PY
  else
    die "cannot unpack $1: neither dpkg-deb nor python3 on this machine"
  fi
}
if [ -n "$extra_debs" ]; then
  [ -d "$extra_debs" ] || die "--debs / STARZERO_EXTRA_DEBS: $extra_debs is not a folder"
  [ -n "$extra_prefix" ] || extra_prefix=$work/extra
  mkdir -p "$extra_prefix"
  n=0
  for deb in "$extra_debs"/*.deb; do
    [ -f "$deb" ] || continue
    unpack_deb "$deb" "$extra_prefix" || die "unpacking $deb failed"
    n=$((n + 1))
  done
  [ $n -gt 0 ] || die "no .deb files in $extra_debs"
  say "unpacked $n .deb files from $extra_debs into $extra_prefix"
fi

# ---- tools ---------------------------------------------------------------------------------------
[ -n "$extra_prefix" ] && export PATH="$PATH:$extra_prefix/usr/bin"   # pkg-config, orterun if carried
command -v cmake >/dev/null || die "cmake not found on PATH"
if [ -z "${CUDA_HOME:-}" ]; then
  if command -v nvcc >/dev/null; then CUDA_HOME=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
  else CUDA_HOME=/usr/local/cuda; fi
fi
nvcc=$CUDA_HOME/bin/nvcc
[ -x "$nvcc" ] || die "nvcc not found at $nvcc: set CUDA_HOME"
say "CUDA toolkit $CUDA_HOME ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
# cuDNN (its flash attention, --attention): the toolkit's, else the pip wheel's.
cudnn_root=${CUDNN_ROOT:-}
if [ -z "$cudnn_root" ] && ! ls "$CUDA_HOME"/include/cudnn_graph.h >/dev/null 2>&1 && command -v python3 >/dev/null; then
  cudnn_root=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || true)
  # A namespace package has no __file__: its __path__ then.
  [ -n "$cudnn_root" ] || cudnn_root=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null || true)
fi
[ -n "$cudnn_root" ] && say "cuDNN from $cudnn_root" || say "cuDNN from the CUDA toolkit (if it has one)"

# ---- StarPU, relocatable -------------------------------------------------------------------------
[ -n "$starpu_prefix" ] || die "no StarPU prefix: pass --starpu-prefix DIR or set STARPU_PREFIX"
[ -d "$starpu_prefix" ] || die "StarPU prefix $starpu_prefix is not a folder"
starpu_prefix=$(cd "$starpu_prefix" && pwd -P)
starpu_pc=$starpu_prefix/lib/pkgconfig/starpu-1.3.pc
[ -f "$starpu_pc" ] || die "no $starpu_pc: STARPU_PREFIX must be the install prefix of a StarPU 1.3 build"
# A view of the prefix (symbolic links) whose pkg-config files name the view itself and this
# machine's CUDA: the prefix recorded at build time may not exist here.
starpu_view=$work/starpu
rm -rf "$starpu_view"
mkdir -p "$starpu_view/lib/pkgconfig"
for e in "$starpu_prefix"/*; do [ "$(basename "$e")" = lib ] || ln -s "$e" "$starpu_view/"; done
for e in "$starpu_prefix"/lib/*; do [ "$(basename "$e")" = pkgconfig ] || ln -s "$e" "$starpu_view/lib/"; done
for f in "$starpu_prefix"/lib/pkgconfig/*.pc; do
  sed -E -e "s#^prefix=.*#prefix=$starpu_view#" -e "s#/usr/local/cuda(/| |\$)#$CUDA_HOME\\1#g" "$f" \
    > "$starpu_view/lib/pkgconfig/$(basename "$f")"
done

# ---- the unpacked Debian packages ------------------------------------------------------------------
cmake_args=()
ld_dirs=("$starpu_prefix/lib" "$CUDA_HOME/lib64" "$CUDA_HOME/lib")
[ -n "$cudnn_root" ] && { ld_dirs+=("$cudnn_root/lib"); cmake_args+=("-DCUDNN_ROOT=$cudnn_root"); }
pc_dirs=()
if [ -n "$extra_prefix" ]; then
  [ -d "$extra_prefix/usr" ] || die "STARZERO_EXTRA_PREFIX=$extra_prefix has no usr/ folder (expected dpkg -x output)"
  extra_prefix=$(cd "$extra_prefix" && pwd -P)
  E=$extra_prefix/usr
  arch=x86_64-linux-gnu
  # pkg-config files say prefix=/usr: copies that point into the extra prefix. Links into
  # /etc/alternatives (not unpacked by dpkg -x) are skipped; the first file of a name wins.
  pc_extra=$work/pkgconfig
  rm -rf "$pc_extra"
  mkdir -p "$pc_extra"
  for d in "$E/lib/$arch/pkgconfig" "$E/lib/$arch/openblas-pthread/pkgconfig" "$E/lib/$arch/openmpi/lib/pkgconfig" \
           "$E/lib/pkgconfig" "$E/share/pkgconfig"; do
    [ -d "$d" ] || continue
    for f in "$d"/*.pc; do
      [ -f "$f" ] || continue
      [ -e "$pc_extra/$(basename "$f")" ] && continue
      sed -E "s#(^[A-Za-z_]+=|-I|-L)/usr(/|\$)#\\1$E\\2#g" "$f" > "$pc_extra/$(basename "$f")"
    done
  done
  pc_dirs+=("$pc_extra")
  cmake_args+=("-DCMAKE_PREFIX_PATH=$E")   # TBB, Catch2 (CMake config files), cblas.h, NCCL if carried
  export CMAKE_LIBRARY_PATH="$E/lib/$arch/openblas-pthread:$E/lib/$arch${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}"
  ld_dirs+=("$E/lib/$arch" "$E/lib/$arch/openblas-pthread" "$E/lib/$arch/openmpi/lib" "$E/lib")
  # Open MPI: its wrapper compilers hold /usr paths; give FindMPI the files instead.
  ompi=$E/lib/$arch/openmpi
  if [ -f "$ompi/include/mpi.h" ] && [ -e "$ompi/lib/libmpi.so" ]; then
    mpi_libs="$ompi/lib/libmpi.so"
    [ -e "$ompi/lib/libmpi_cxx.so" ] && mpi_libs="$ompi/lib/libmpi_cxx.so;$mpi_libs"
    cmake_args+=("-DMPI_CXX_ADDITIONAL_INCLUDE_DIRS=$ompi/include" "-DMPI_CXX_LIBRARIES=$mpi_libs"
                 "-DMPI_CXX_SKIP_MPICXX=ON")
    [ -x "$E/bin/orterun" ] && cmake_args+=("-DMPIEXEC_EXECUTABLE=$E/bin/orterun")
    # Relocated Open MPI finds its plugins and help files through these (used by later MPI runs).
    export OPAL_PREFIX=$E OPAL_LIBDIR=$ompi/lib OPAL_DATADIR=$E/share OPAL_PKGDATADIR=$E/share/openmpi
  fi
fi
export PKG_CONFIG_PATH="$starpu_view/lib/pkgconfig${pc_dirs[*]:+:$(IFS=:; echo "${pc_dirs[*]}")}${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
LD_LIBRARY_PATH="$(IFS=:; echo "${ld_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
say "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
command -v pkg-config >/dev/null || die "pkg-config not found: carry pkgconf, pkgconf-bin and libpkgconf3 too"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for need in hwloc starpu-1.3; do
  pkg-config --exists "$need" || say "warning: pkg-config does not find '$need' (configure will fail)"
done
if ! ls "$CUDA_HOME"/lib*/libnccl.so* >/dev/null 2>&1 && ! ls "${E:-/nonexistent}"/lib/*/libnccl.so* >/dev/null 2>&1 \
   && ! ldconfig -p 2>/dev/null | grep -q libnccl.so; then
  say "warning: libnccl.so not found in $CUDA_HOME nor the extra prefix (configure needs NCCL)"
fi

# ---- steps and the result table ----------------------------------------------------------------------
rows=()
failed=0
# step NAME LOG CMD...: runs CMD with output to LOG, records result and wall time.
step() {
  local name=$1 log=$2
  shift 2
  say "== $name (log: $log)"
  local start end rc=0
  start=$(date +%s.%N)
  "$@" > "$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f s", b - a }')
  if [ $rc -eq 0 ]; then
    rows+=("| $name | passed | $secs |")
  else
    rows+=("| $name | FAILED (exit $rc) | $secs |")
    failed=1
    say "$name FAILED (exit $rc); last lines of $log:"
    tail -n 40 "$log" >&2 || true
  fi
  return $rc
}
skip() { rows+=("| $1 | skipped ($2) | - |"); say "$1 skipped: $2"; }

# 1. the GPU
gpu_ok=1
if command -v nvidia-smi >/dev/null; then
  step "nvidia-smi" "$logs/nvidia-smi.txt" nvidia-smi || gpu_ok=0
  cat "$logs/nvidia-smi.txt"
else
  rows+=("| nvidia-smi | FAILED (not found) | - |"); failed=1; gpu_ok=0
  say "nvidia-smi not found: no NVIDIA driver on this machine?"
fi
if [ -z "${CUDA_ARCHS:-}" ] && [ $gpu_ok = 1 ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
  [[ $cap =~ ^[0-9]+$ ]] && CUDA_ARCHS=$cap
fi
[ -n "${CUDA_ARCHS:-}" ] && cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS")

# 2. configure and build. Targets the checks need; a later step appends its own here.
build_targets=(test_gpt_kernels_cuda test_llama_kernels_cuda test_host_memory test_comm_mpi starzero)

built=0
cudnn_built=0
rm -f "$build/CMakeCache.txt"   # no stale paths from an earlier run with other prefixes
if step "configure" "$logs/configure.log" \
     cmake -S "$root" -B "$build" -DSTARPU_PREFIX="$starpu_view" -DSTARZERO_CUDA=ON -DSTARZERO_GPU_TESTS=ON \
       -DSTARZERO_CUDNN=AUTO -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
       "${cmake_args[@]}"; then
  if grep -q "starzero: cuDNN ON" "$logs/configure.log"; then
    build_targets+=(test_attention_cudnn)
    cudnn_built=1
  else
    rows+=("| cuDNN | not found (set CUDNN_ROOT): cuDNN attention not built | - |")
  fi
  step "build (${build_targets[*]}, -j$jobs)" "$logs/build.log" \
    cmake --build "$build" --target "${build_targets[@]}" -j "$jobs" && built=1
else
  skip "build" "configure failed"
fi

# 3. CUDA kernels against the CPU ones
if [ $built = 1 ]; then
  if ldd "$build/tests/test_gpt_kernels_cuda" | grep -q "not found"; then
    say "warning: unresolved libraries of test_gpt_kernels_cuda:"
    ldd "$build/tests/test_gpt_kernels_cuda" | grep "not found" >&2 || true
  fi
  step "kernels_cuda (CUDA vs CPU kernels, memory-efficient attention and AdamW bit for bit included)" "$logs/kernels_cuda.log" \
    ctest --test-dir "$build" -R '^kernels_cuda$' --no-tests=error --output-on-failure -V --timeout 600 || true
  step "kernels_llama_cuda (Llama 3 CUDA vs CPU kernels)" "$logs/kernels_llama_cuda.log" \
    ctest --test-dir "$build" -R '^kernels_llama_cuda$' --no-tests=error --output-on-failure -V --timeout 600 || true
else
  skip "kernels_cuda (CUDA vs CPU kernels, memory-efficient attention and AdamW bit for bit included)" "not built"
  skip "kernels_llama_cuda (Llama 3 CUDA vs CPU kernels)" "not built"
fi

# 3b. cuDNN flash attention against a double reference and the own kernel, then both timed at
#     gpt-13B's shape into $logs/attention_calibration.json (the simulator's attention rates for
#     this GPU), and a tiny bf16 run with --attention cudnn whose losses must be --attention own's.
cudnn_name="kernels_attention_cudnn (cuDNN vs reference and own kernel, gpt-13B timings)"
if [ $built = 1 ] && [ $cudnn_built = 1 ]; then
  step "$cudnn_name" "$logs/attention_cudnn.log" \
    env OUT_DIR="$logs" ctest --test-dir "$build" -R '^kernels_attention_cudnn$' --no-tests=error --output-on-failure \
    -V --timeout 300 || true
  while IFS= read -r line; do rows+=("| ${line#attention } | | |"); done \
    < <(grep -oE 'attention (cudnn|own) .*TFLOP/s' "$logs/attention_cudnn.log" 2>/dev/null)
  if [ -f "$logs/attention_calibration.json" ]; then
    rows+=("| attention calibration written | $logs/attention_calibration.json | |")
    # The simulator's platform with these rates in place of the published table (docs/sim.md, "GPU
    # cost classes"): h200x1's figures otherwise (an H100 SXM has the same 989 TFLOP/s peak).
    step "simulator platform with the measured attention rates" "$logs/attention_platform.log" \
      "$build/apps/starzero" platform h200x1 --cpus 32 --name h200x1-measured \
      --attention-calibration "$logs/attention_calibration.json" --out "$logs/attention-platform" || true
  else
    rows+=("| attention calibration written | FAILED (no attention_calibration.json) | |"); failed=1
  fi
  att_common=(train --preset tiny --steps 20 --precision bf16 --cuda-workers 1 --val-every 0 --sample-tokens 1 --seed 7)
  for kernel in own cudnn; do
    step "tiny bf16, 20 steps, --attention $kernel" "$logs/attention_train_$kernel.log" \
      "$build/apps/starzero" "${att_common[@]}" --attention $kernel || true
  done
  python3 - "$logs/attention_train_own.log" "$logs/attention_train_cudnn.log" <<'EOF' \
    && rows+=("| --attention cudnn: banner, no refusal, losses = own's within 2 % | passed | |") \
    || { rows+=("| --attention cudnn: banner, no refusal, losses = own's within 2 % | FAILED | |"); failed=1; }
import re, sys
own, cudnn = (open(p, errors="replace").read().replace("\r", "\n") for p in sys.argv[1:3])
get = lambda t: [float(x) for x in re.findall(r"loss ([0-9.]+) \|", t)]
a, b = get(own), get(cudnn)
print(a, b)
ok = "attention: cudnn (cuDNN flash attention)" in cudnn and "cuDNN attention refused" not in cudnn
ok = ok and a and len(a) == len(b) and max(abs(x - y) / max(abs(x), 1e-6) for x, y in zip(a, b)) <= 0.02
sys.exit(0 if ok else 1)
EOF
elif [ $built = 1 ]; then
  skip "$cudnn_name" "not built: no cuDNN"
else
  skip "$cudnn_name" "not built"
fi

# 4. Training: a few steps of the tiny model on the GPU (loss must fall), then the gpt2-124M
#    step benchmark in fp32 and bf16 (tokens/s and MFU against a GEMM probe in the same run).
if [ $built = 1 ]; then
  step "train tiny, 50 steps on 1 CUDA worker" "$logs/train_tiny.log" \
    "$build/apps/starzero" train --preset tiny --steps 50 --cuda-workers 1 --val-every 25 || true
  for precision in fp32 bf16; do
    step "bench step gpt2-124M B=4 T=64 $precision" "$logs/bench_$precision.log" \
      "$build/apps/starzero" bench step --preset gpt2-124M --batch 4 --seq 64 --precision $precision \
      --cuda-workers 1 --steps 5 || true
    if [ -f "$logs/bench_$precision.log" ]; then
      while IFS= read -r row; do rows+=("| bench $precision: ${row#| }"); done \
        < <(grep -E '^\| (step time|tokens/s|model FLOP|peak|MFU)' "$logs/bench_$precision.log" | sed 's/ |$/ | |/')
    fi
  done
  # Granularity on the GPU: auto picks one tile (and one head group) with a CUDA worker, so it
  # must be as fast as --tiles 1; --tiles 2 splits every row-wise op (and moves tensors between
  # their pieces and the whole through main memory), so it must not be faster. Both with the GPU
  # and the CPU workers.
  for tiles in 1 auto 2; do
    step "bench step gpt2-124M fp32 --tiles $tiles (GPU + CPU workers)" "$logs/bench_tiles$tiles.log" \
      "$build/apps/starzero" bench step --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 5 \
      --tiles $tiles || true
    if [ -f "$logs/bench_tiles$tiles.log" ]; then
      while IFS= read -r row; do rows+=("| bench --tiles $tiles: ${row#| }"); done \
        < <(grep -E '^\| (step time|MFU)' "$logs/bench_tiles$tiles.log" | sed 's/ |$/ | |/')
    fi
  done
else
  skip "train / bench" "not built"
fi

# 5. ZeRO-Offload on the GPU: pinned host buffers under CUDA, then gpt2-124M bf16 with and without
#    --offload-optimizer cpu (tokens/s, GPU busy share and PCIe bytes from StarPU's own statistics),
#    and gpt2-774M with StarPU's GPU memory capped at 8 GiB, below the 12.4 GB of model states plain
#    training needs (16 bytes/param) but above offload's 3.1 GB (4 bytes/param) + activations.
offload_row() {  # offload_row LABEL LOG: tokens/s, GPU executing share, host<->GPU bytes
  local label=$1 log=$2
  python3 - "$log" "$label" <<'EOF' || true
import re, sys
log = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
label = sys.argv[2]
tok = re.findall(r"\|\s*([0-9]+) tok/s", log)
tok = sorted(int(t) for t in tok[2:])[len(tok[2:]) // 2] if len(tok) > 2 else (tok[-1] if tok else "?")
busy = "?"
m = re.search(r"CUDA 0[^\n]*\n(?:[^\n]*\n){0,6}?[^\n]*total:\s*([0-9.]+)\s*ms\s*executing:\s*([0-9.]+)\s*ms", log)
if m: busy = f"{100 * float(m.group(2)) / float(m.group(1)):.0f} %"
def gb(a, b):
    m = re.search(rf"{a}\s*->\s*{b}\s+([0-9.]+) GB", log)
    return float(m.group(1)) if m else 0.0
down = gb(r"CUDA 0", r"NUMA 0"); up = gb(r"NUMA 0", r"CUDA 0")
print(f"| offload: {label} | median {tok} tok/s, GPU executing {busy}, PCIe up {up:.2f} GB / down {down:.2f} GB | |")
EOF
}
if [ $built = 1 ]; then
  # NcclComm on the one GPU (one rank: NCCL refuses two ranks on one device), device buffers,
  # against a double-precision reference.
  if command -v mpirun >/dev/null; then
    step "NcclComm collectives, 1 rank on the GPU" "$logs/nccl.log" \
      mpirun --allow-run-as-root --oversubscribe -np 1 "$build/tests/test_comm_mpi" "[nccl]" --success || true
    grep -q "NcclComm not exercised\|NcclComm collectives not exercised" "$logs/nccl.log" 2>/dev/null \
      && { rows+=("| NcclComm exercised | FAILED (skipped inside) | |"); failed=1; }
  fi
  step "host memory pinned by StarPU under CUDA" "$logs/host_memory_cuda.log" \
    "$build/tests/test_host_memory" "[cuda]" || true
  stats=(env STARPU_BUS_STATS=1 STARPU_PROFILING=1 STARPU_WORKER_STATS=1)
  common=(train --preset gpt2-124M --batch 8 --seq 256 --steps 12 --precision bf16 --cuda-workers 1 --val-every 0
          --sample-tokens 1)
  step "gpt2-124M bf16, plain" "$logs/offload_plain.log" "${stats[@]}" "$build/apps/starzero" "${common[@]}" || true
  step "gpt2-124M bf16, --offload-optimizer cpu" "$logs/offload_cpu.log" \
    "${stats[@]}" "$build/apps/starzero" "${common[@]}" --offload-optimizer cpu || true
  step "gpt2-124M bf16, offload + --delayed-update 4" "$logs/offload_dpu.log" \
    "${stats[@]}" "$build/apps/starzero" "${common[@]}" --offload-optimizer cpu --delayed-update 4 || true
  big=(train --preset gpt2-774M --batch 4 --seq 256 --steps 4 --precision bf16 --cuda-workers 1 --val-every 0
       --sample-tokens 1 --cuda-mem-limit 8192)
  step "gpt2-774M bf16, GPU capped at 8 GiB, plain" "$logs/big_plain.log" \
    "${stats[@]}" timeout 150 "$build/apps/starzero" "${big[@]}" || true
  step "gpt2-774M bf16, GPU capped at 8 GiB, --offload-optimizer cpu" "$logs/big_offload.log" \
    "${stats[@]}" timeout 150 "$build/apps/starzero" "${big[@]}" --offload-optimizer cpu || true
  # Two ranks on the one GPU: NCCL refuses two ranks on one device, so MPI collectives (CPU tasks;
  # StarPU moves the buffers) with CUDA compute; the losses must be single-rank training's.
  if command -v mpirun >/dev/null; then
    ranks_common=(train --preset tiny --layers 2 --steps 6 --batch 8 --precision fp32 --cuda-workers 1 --val-every 0
                  --sample-tokens 1 --warmup 0 --seed 5)
    step "tiny fp32, 1 rank on the GPU" "$logs/ranks1.log" "$build/apps/starzero" "${ranks_common[@]}" || true
    for stage in 1 3; do
      step "tiny fp32, 2 ranks on the GPU, ZeRO-$stage, MPI collectives, offload cpu" "$logs/ranks2_s$stage.log" \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$build/apps/starzero" "${ranks_common[@]}" \
        --stage $stage --collectives mpi --offload-optimizer cpu || true
      python3 - "$logs/ranks1.log" "$logs/ranks2_s$stage.log" <<'EOF' && rows+=("| 2 ranks ZeRO-$stage losses = 1 rank | passed | |") \
        || { rows+=("| 2 ranks ZeRO-$stage losses = 1 rank | FAILED | |"); failed=1; }
import re, sys
get = lambda p: [float(x) for x in re.findall(r"loss ([0-9.]+) \|", open(p, errors="replace").read().replace("\r", "\n"))]
a, b = get(sys.argv[1]), get(sys.argv[2])
print(a, b)
sys.exit(0 if a and len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= 2e-4 else 1)
EOF
    done
  fi
  for run in offload_plain offload_cpu offload_dpu big_plain big_offload; do
    [ -f "$logs/$run.log" ] && while IFS= read -r row; do rows+=("$row"); done < <(offload_row "$run" "$logs/$run.log")
  done
else
  skip "offload" "not built"
fi

# 6. Scheduling with a GPU beside CPU AdamW, where the order of ready tasks should matter: a sweep
#    of policies x priority schemes on gpt2-124M with --offload-optimizer cpu (one repeat), and the
#    trace report of one run (RAM<->GPU transfer lanes, AdamW overlap with GPU compute). Its
#    sweep.json and report.json are kept in the logs.
if [ $built = 1 ]; then
  sweep_train=(train --preset gpt2-124M --batch 8 --seq 256 --steps 6 --precision bf16 --cuda-workers 1 --val-every 0
               --sample-every 0 --offload-optimizer cpu)
  step "sweep lws,dmdas,heteroprio x none,critical-path, gpt2-124M offload cpu" "$logs/sweep.log" \
    timeout 400 "$build/apps/starzero" sweep --sched lws,dmdas,heteroprio --priorities none,critical-path --repeat 1 \
    --out "$logs/sweep" -- "${sweep_train[@]}" || true
  if [ -f "$logs/sweep/sweep.json" ]; then
    rows+=("| sweep written (sweep.json) | passed | |")
    while IFS= read -r row; do rows+=("| sweep: ${row#| }"); done < <(grep -E '^\| (lws|dmdas|heteroprio) ' "$logs/sweep.log")
    first_run=$(ls -d "$logs"/sweep/runs/*_r1 2>/dev/null | head -n1)
    [ -n "$first_run" ] && step "trace report of $(basename "$first_run")" "$logs/report.json" \
      "$build/apps/starzero" trace "$first_run" --json || true
  fi
else
  skip "scheduling sweep" "not built"
fi

# 7. Calibration for the simulator (docs/sim.md, "Task durations"): the gpt2-124M runs of
#    step 5 again with StarPU recording every codelet's CUDA and CPU durations, into
#    $logs/calibration (commit it as sim/calibrations/h200x1: `starzero-sim --platform
#    sim/calibrations/h200x1`). With STARZERO_SIM set to a starzero-sim that runs here, the same
#    runs are then simulated on that calibration and predicted step times are printed beside the
#    measured ones (the medians of the steps after the second).
if [ $built = 1 ]; then
  cal_common=(--preset gpt2-124M --batch 8 --seq 256 --precision bf16 --cuda-workers 1 --steps 12)
  step "calibrate gpt2-124M bf16 plain + offload cpu (--like h200x1)" "$logs/calibrate.log" \
    bash -c "'$build/apps/starzero' calibrate --out '$logs/calibration' --name h200x1-calibrated --like h200x1 \
      ${cal_common[*]} && '$build/apps/starzero' calibrate --out '$logs/calibration' --name h200x1-calibrated \
      --like h200x1 ${cal_common[*]} --offload-optimizer cpu" || true
  if [ -n "${STARZERO_SIM:-}" ] && [ -d "$logs/calibration/bus" ]; then
    for run in offload_plain offload_cpu; do
      extra=(); [ $run = offload_cpu ] && extra=(--offload-optimizer cpu)
      step "simulate $run on the calibration" "$logs/sim_$run.log" "$STARZERO_SIM" train --preset gpt2-124M --batch 8 \
        --seq 256 --steps 12 --precision bf16 --val-every 0 --platform "$logs/calibration" "${extra[@]}" || true
      row=$(python3 - "$logs/$run.log" "$logs/sim_$run.log" <<'EOF' || true
import re, statistics, sys
real = [float(x) for x in re.findall(r"\| ([0-9.]+) ms \|", open(sys.argv[1], errors="replace").read().replace("\r", "\n"))]
sim = [float(x) for x in re.findall(r"predicted ([0-9.]+) ms", open(sys.argv[2]).read())]
m, p = statistics.median(real[2:]), statistics.median(sim[2:])
print(f"measured {m:.1f} ms, predicted {p:.1f} ms, error {100 * (p - m) / m:+.1f} %")
EOF
)
      rows+=("| simulated $run vs measured | ${row:-?} | |")
    done
  fi
else
  skip "calibration" "not built"
fi

# ---- summary ---------------------------------------------------------------------------------------
{
  echo "# starzero gpu-check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), GPU: $( (nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>/dev/null || echo none) | head -n1), CUDA ${CUDA_ARCHS:+sm_$CUDA_ARCHS, }$("$nvcc" --version \
    | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p')"
  echo
  echo "| step | result | time |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Logs: $logs"
} | tee "$logs/gpu-check.md"

exit $failed
