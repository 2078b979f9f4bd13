#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ with clang into build-fuzz/ and runs each of them.
#
#   scripts/fuzz.sh SECONDS [HARNESS...]   build, then run each harness (default: all) for SECONDS
#                                          seconds, one after the other
#   scripts/fuzz.sh --build                build only
#   scripts/fuzz.sh --make-corpus          build, then rewrite the seed corpus fuzz/corpus/
#
# Each run works on a copy of fuzz/corpus/<harness>/ in a scratch directory (the committed corpus
# is never written to), with -rss_limit_mb=2048 -malloc_limit_mb=1024 -detect_leaks=1. One summary
# line per harness; when a harness finds something, its input and log are kept in
# build-fuzz/findings/<harness>/ and the script exits 1. Exit 2: no clang (Debian: clang-14 and
# libclang-rt-14-dev) or no StarPU headers (scripts/bootstrap.sh builds StarPU).
#
# Environment: FUZZ_CXX (default clang++-14, else clang++), FUZZ_JOBS (parallel compiles, default
# the number of cores), STARPU_PREFIX / STARZERO_CACHE (where StarPU's headers are found, as
# scripts/bootstrap.sh installs them), FUZZ_ARGS (more libFuzzer flags for every run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-fuzz
harnesses=(fuzz_llmc_checkpoint fuzz_token_shard fuzz_llama_checkpoint fuzz_llama_token_shard fuzz_state_file
  fuzz_sharded_state fuzz_layer_checkpoint fuzz_cli fuzz_deepspeed_config fuzz_machine_json fuzz_tokenizer
  fuzz_safetensors fuzz_jsonl)

die() { echo "fuzz: $*" >&2; exit 2; }
usage() { echo "usage: scripts/fuzz.sh SECONDS [HARNESS...] | --build | --make-corpus" >&2; exit 2; }

mode=run seconds=
case ${1:-} in
  --build) mode=build ;;
  --make-corpus) mode=corpus ;;
  ''|-*) usage ;;
  *) [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ] || usage; seconds=$1 ;;
esac
shift
selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=("${harnesses[@]}")
for h in "${selected[@]}"; do
  [[ " ${harnesses[*]} " == *" $h "* ]] || die "unknown harness '$h' (known: ${harnesses[*]})"
done

# ---- toolchain -------------------------------------------------------------------------------
cxx=${FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++-14 clang++; do command -v "$c" >/dev/null && { cxx=$c; break; }; done
fi
[ -n "$cxx" ] && command -v "$cxx" >/dev/null \
  || die "clang++ not found: install Debian's clang-14 and libclang-rt-14-dev (scripts/bootstrap.sh)"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "${TMPDIR:-/tmp}/fuzz-probe-$$.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "${TMPDIR:-/tmp}/fuzz-probe-$$.cpp" \
     -o "${TMPDIR:-/tmp}/fuzz-probe-$$" 2>/dev/null; then
  rm -f "${TMPDIR:-/tmp}/fuzz-probe-$$"*
  die "$cxx cannot build with -fsanitize=fuzzer,address,undefined: install libclang-rt-14-dev"
fi
rm -f "${TMPDIR:-/tmp}/fuzz-probe-$$"*

# StarPU's headers only (apps/cli.hpp and models/layer_checkpoint.hpp include starpu.h through
# runtime/ and offload/ headers); nothing links StarPU.
pc_path=${STARPU_PREFIX:+$STARPU_PREFIX/lib/pkgconfig:}${STARZERO_CACHE:-/var/cache/starzero}/starpu-current/lib/pkgconfig
starpu_cflags=$(PKG_CONFIG_PATH="$pc_path${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config --cflags-only-I starpu-1.3 \
                2>/dev/null) || die "StarPU 1.3 headers not found (pkg-config starpu-1.3 in $pc_path): run scripts/bootstrap.sh"
read -r -a starpu_includes <<< "${starpu_cflags//-I/-isystem }"

# ---- build -----------------------------------------------------------------------------------
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Wno-unused-parameter -I"$root" "${starpu_includes[@]}")

# The library sources each harness needs, beside fuzz/<harness>.cpp.
sources_of() {
  local common="runtime/files.cpp models/gpt_layout.cpp"
  # Llama's files need its layout and llama_ffn_hidden (tasks/nn_llama_kernels_cpu.cpp: OpenBLAS).
  local llama="models/llama_files.cpp models/llama_layout.cpp models/llmc_format.cpp tasks/nn_llama_kernels_cpu.cpp"
  case $1 in
    fuzz_llmc_checkpoint) echo "$common models/gpt_files.cpp models/llmc_format.cpp" ;;
    fuzz_token_shard) echo "$common models/gpt_files.cpp models/llmc_format.cpp models/data.cpp models/mask_shard.cpp models/pretokenize.cpp models/tokenizer.cpp" ;;
    fuzz_llama_checkpoint) echo "$common $llama" ;;
    fuzz_llama_token_shard) echo "$common $llama models/gpt_files.cpp models/data.cpp models/mask_shard.cpp models/pretokenize.cpp models/tokenizer.cpp" ;;
    fuzz_state_file) echo "$common train/state_files.cpp" ;;
    fuzz_sharded_state) echo "$common train/state_files.cpp train/sharded_state.cpp" ;;
    fuzz_layer_checkpoint) echo "runtime/files.cpp models/layer_checkpoint.cpp" ;;
    fuzz_cli) echo "apps/cli.cpp tasks/attention_kernel.cpp runtime/priority_names.cpp runtime/placement.cpp" ;;
    fuzz_deepspeed_config) echo "apps/deepspeed_config.cpp apps/cli.cpp tasks/attention_kernel.cpp runtime/priority_names.cpp runtime/placement.cpp" ;;
    fuzz_machine_json) echo "sim/platform.cpp runtime/gpu_cost.cpp" ;;
    fuzz_tokenizer) echo "runtime/files.cpp models/pretokenize.cpp models/tokenizer.cpp" ;;
    fuzz_safetensors) echo "runtime/files.cpp models/safetensors.cpp" ;;
    fuzz_jsonl) echo "runtime/files.cpp models/pretokenize.cpp models/tokenizer.cpp models/jsonl_data.cpp models/mask_shard.cpp models/llmc_format.cpp" ;;
    make_corpus) echo "$common $llama models/gpt_files.cpp train/state_files.cpp train/sharded_state.cpp models/layer_checkpoint.cpp models/safetensors.cpp models/mask_shard.cpp" ;;
  esac
}
# Libraries beside the sources (the Llama kernels' file calls OpenBLAS).
libs_of() {
  case $1 in
    fuzz_llama_checkpoint|fuzz_llama_token_shard|make_corpus) echo "-lopenblas" ;;
  esac
}

# An object is rebuilt when it is missing, or older than its source or a header it includes.
stale() {
  local obj=$1 dep=${1%.o}.d f
  [ -f "$obj" ] && [ -f "$dep" ] || return 0
  for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$dep"); do
    [ "$f" -nt "$obj" ] && return 0
  done
  return 1
}

targets=("${selected[@]}")
[ "$mode" = corpus ] && targets=(make_corpus)
[ "$mode" = build ] && targets=("${harnesses[@]}" make_corpus)
mkdir -p "$build/obj"
objects_needed=()
for t in "${targets[@]}"; do
  for s in fuzz/$t.cpp $(sources_of "$t"); do objects_needed+=("$s"); done
done
to_compile=()
for s in $(printf '%s\n' "${objects_needed[@]}" | sort -u); do
  obj=$build/obj/${s//\//_}; obj=${obj%.cpp}.o
  stale "$obj" && to_compile+=("$s")
done
if [ ${#to_compile[@]} -gt 0 ]; then
  echo "fuzz: compiling ${#to_compile[@]} sources with $cxx" >&2
  export cxx build root
  export flags_str="${flags[*]}"
  printf '%s\n' "${to_compile[@]}" | xargs -P "${FUZZ_JOBS:-$(nproc)}" -I{} bash -c '
    s={}; obj=$build/obj/${s//\//_}; obj=${obj%.cpp}.o
    extra=-fsanitize=fuzzer-no-link
    cd "$root" && $cxx $flags_str $extra -MMD -MF "${obj%.o}.d" -c "$s" -o "$obj.tmp" && mv "$obj.tmp" "$obj"' \
    || { echo "fuzz: compilation failed" >&2; exit 1; }
fi
for t in "${targets[@]}"; do
  objs=()
  for s in fuzz/$t.cpp $(sources_of "$t"); do obj=$build/obj/${s//\//_}; objs+=("${obj%.cpp}.o"); done
  link=(-fsanitize=fuzzer)
  [ "$t" = make_corpus ] && link=()
  read -r -a libs <<< "$(libs_of "$t")"
  newest=0
  for o in "${objs[@]}"; do [ "$o" -nt "$build/$t" ] && newest=1; done
  if [ ! -x "$build/$t" ] || [ $newest = 1 ]; then
    "$cxx" "${flags[@]}" "${link[@]}" "${objs[@]}" "${libs[@]}" -o "$build/$t.tmp" && mv "$build/$t.tmp" "$build/$t" \
      || { echo "fuzz: linking $t failed" >&2; exit 1; }
  fi
done

# The Llama harnesses link OpenBLAS (never called): no thread pool of its own.
export OPENBLAS_NUM_THREADS=1
case $mode in
  build) echo "fuzz: built ${targets[*]} in $build"; exit 0 ;;
  corpus)
    ASAN_OPTIONS=detect_leaks=1 "$build/make_corpus" "$root/fuzz/corpus"
    echo "fuzz: wrote $root/fuzz/corpus ($(du -sh "$root/fuzz/corpus" | cut -f1))"
    exit 0 ;;
esac

# ---- run -------------------------------------------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/starzero-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The harnesses' own scratch files (the input written as a file) on tmpfs when there is one.
file_tmp=$scratch/files
if [ -w /dev/shm ]; then file_tmp=$(mktemp -d /dev/shm/starzero-fuzz.XXXXXX); trap 'rm -rf "$scratch" "$file_tmp"' EXIT; fi
mkdir -p "$file_tmp"

failed=0
for h in "${selected[@]}"; do
  work=$scratch/$h
  mkdir -p "$work/corpus" "$work/artifacts"
  [ -d "$root/fuzz/corpus/$h" ] && cp -r "$root/fuzz/corpus/$h/." "$work/corpus/"
  start=$SECONDS
  set +e
  # shellcheck disable=SC2086
  STARZERO_FUZZ_TMP=$file_tmp ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/$h" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -detect_leaks=1 \
      -timeout=20 -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/artifacts/" ${FUZZ_ARGS:-} \
      "$work/corpus" > "$work/log" 2>&1
  rc=$?
  set -e
  elapsed=$((SECONDS - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n1)
  [ -n "$runs" ] || runs=$( (grep -o '^#[0-9]*' "$work/log" || true) | tail -n1 | tr -d '#')
  cov=$( (grep -o 'cov: [0-9]* ft: [0-9]*' "$work/log" || true) | tail -n1)
  corpus=$(find "$work/corpus" -type f | wc -l)
  if [ $rc -eq 0 ] && [ -z "$(ls -A "$work/artifacts")" ]; then
    result=ok
  else
    failed=1
    keep=$build/findings/$h
    mkdir -p "$keep"
    cp "$work/artifacts/"* "$keep/" 2>/dev/null || true
    cp "$work/log" "$keep/log-$(date +%Y%m%d-%H%M%S)"
    what=$(grep -m1 -o 'ERROR: [A-Za-z]*: [^(]*\|FUZZ_CHECK failed: .*\|runtime error: .*\|deadly signal\|out-of-memory[^)]*)\|malloc([0-9]*)' "$work/log" || true)
    result="FAILED (exit $rc: ${what:-see log}; input and log in $keep)"
  fi
  printf '%-22s %10s runs in %4d s, %s, corpus %d: %s\n' "$h" "${runs:-?}" "$elapsed" "${cov:-cov: ?}" "$corpus" "$result"
  [ "$result" = ok ] || tail -n 40 "$work/log" | sed 's/^/    /' >&2
done
exit $failed
