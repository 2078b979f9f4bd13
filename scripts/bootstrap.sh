#!/usr/bin/env bash
# Installs everything starzero's build and tests need on a fresh Debian 12 machine, as root:
# Debian packages, then StarPU 1.3.10 built from Debian's source package with FxT (and CUDA
# when nvcc exists), patched for CUDA 12/13, into a cache prefix outside the clone.
#
# Quick and quiet when everything is already there. Prints the StarPU prefix on its last line
# of stdout (all other messages go to stderr), so callers can do
#   prefix=$(scripts/bootstrap.sh | tail -n1)
#
# Environment:
#   STARZERO_CACHE   cache root for StarPU builds (default /var/cache/starzero)
#   STARZERO_CUDA    auto (default: CUDA when nvcc is found), on, off
#   CUDA_HOME        CUDA toolkit (default /usr/local/cuda)
#   STARZERO_SIMGRID off (default) or on: build (and print) the second prefix instead, StarPU in
#                    SimGrid mode for starzero-sim (docs/sim.md): simulated CPUs and CUDA
#                    devices (CUDA headers needed, no GPU), no hwloc, up to 64 CPUs and 8 GPUs
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${STARZERO_CACHE:-/var/cache/starzero}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
want_cuda=${STARZERO_CUDA:-auto}
simgrid=${STARZERO_SIMGRID:-off}
starpu_version=1.3.10
patch_file=$here/patches/starpu-$starpu_version-cuda13.patch

say() { echo "bootstrap: $*" >&2; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs Debian packages and writes $cache)"
[ -f "$patch_file" ] || die "missing $patch_file"

# ---- Debian packages -------------------------------------------------------------------
packages=(build-essential cmake pkg-config dpkg-dev libhwloc-dev hwloc libtbb-dev libtbbbind-2-5 catch2
          libopenblas-dev libopenmpi-dev openmpi-bin libfxt-dev fxt-tools vite xvfb
          nlohmann-json3-dev python3-regex gnuplot-nox clang-14 libclang-rt-14-dev universal-ctags)
case $simgrid in
  on) packages+=(libsimgrid-dev) ;;
  off) ;;
  *) die "STARZERO_SIMGRID must be on or off (got '$simgrid')" ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  command -v apt-get >/dev/null || die "apt-get not found: this script needs Debian 12"
  apt-get update -qq >&2 || die "apt-get update failed: no Debian mirror reachable?"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || die "apt-get install failed for: ${missing[*]}"
fi

# ---- CUDA --------------------------------------------------------------------------------
cuda=off
case $want_cuda in
  auto) [ -x "$cuda_home/bin/nvcc" ] && cuda=on ;;
  on)   [ -x "$cuda_home/bin/nvcc" ] || die "STARZERO_CUDA=on but $cuda_home/bin/nvcc not found"; cuda=on ;;
  off)  ;;
  *)    die "STARZERO_CUDA must be auto, on or off (got '$want_cuda')" ;;
esac

configure_flags=(--disable-static --disable-opencl --disable-build-doc --disable-build-examples
                 --disable-build-tests --disable-socl --disable-starpufft --disable-fortran
                 --disable-openmp --disable-mpi --with-fxt)
if [ $simgrid = on ]; then
  # Simulated CUDA devices still need the CUDA headers; kernels never run.
  [ -x "$cuda_home/bin/nvcc" ] || die "STARZERO_SIMGRID=on needs the CUDA toolkit in $cuda_home (headers only)"
  cuda=sim
  configure_flags+=(--enable-simgrid --enable-cuda "--with-cuda-dir=$cuda_home" --enable-maxcpus=64
                    --enable-maxcudadev=8 --without-hwloc)
elif [ $cuda = on ]; then
  configure_flags+=(--enable-cuda "--with-cuda-dir=$cuda_home")
else
  configure_flags+=(--disable-cuda)
fi

# The cache key: StarPU version, the patch and the configure flags.
key=$( (cat "$patch_file"; echo "${configure_flags[*]}") | sha256sum | cut -c1-12)
prefix=$cache/starpu-$starpu_version-$key-cuda$cuda

if [ ! -f "$prefix/.complete" ]; then
  say "building StarPU $starpu_version (cuda=$cuda) into $prefix; this takes ~10 minutes on 2 cores"
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/build.XXXXXX")
  chmod 755 "$work"  # apt-get source downloads as the _apt user
  trap 'rm -rf "$work"' EXIT
  src_list=/etc/apt/sources.list.d/starzero-src.sources
  if ! apt-get source --download-only --print-uris starpu >/dev/null 2>&1; then
    [ -f /etc/apt/sources.list.d/debian.sources ] || die "no /etc/apt/sources.list.d/debian.sources to derive a deb-src entry from"
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$src_list"
    apt-get update -qq >&2 || die "apt-get update failed after adding deb-src entries"
  fi
  (cd "$work" && apt-get source --download-only starpu >/dev/null 2>&1) \
    || die "apt-get source starpu failed: Debian's source package for StarPU $starpu_version is not reachable"
  tarball=$(ls "$work"/starpu_"$starpu_version"*.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$tarball" ] || die "no StarPU $starpu_version orig tarball in the source package"
  tar -C "$work" -xf "$tarball"
  srcdir=$(ls -d "$work"/starpu-"$starpu_version"*/ | head -n1)
  (cd "$srcdir" && patch -p1 -s < "$patch_file") || die "the CUDA 12/13 patch does not apply"
  staging=$prefix.partial
  rm -rf "$staging"
  log=$work/build.log
  (
    cd "$srcdir"
    export NVCCFLAGS="-std=c++17 -O2"
    ./configure --prefix="$prefix" "${configure_flags[@]}" > "$log" 2>&1
    make -j"$(nproc)" >> "$log" 2>&1
    make install DESTDIR="$staging" >> "$log" 2>&1
  ) || { tail -n 40 "$log" >&2; die "StarPU build failed (last lines above)"; }
  # The install went under DESTDIR; move the tree into place in one rename.
  mv "$staging/$prefix" "$prefix.tmp"
  rm -rf "$staging"
  find "$prefix.tmp/lib" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
  touch "$prefix.tmp/.complete"
  rm -rf "$prefix"
  mv "$prefix.tmp" "$prefix"
  say "StarPU installed in $prefix"
fi

# A fixed name for tools and humans: points at the build this checkout uses.
if [ $simgrid = on ]; then ln -sfn "$prefix" "$cache/starpu-sim-current"; else ln -sfn "$prefix" "$cache/starpu-current"; fi
echo "$prefix"
