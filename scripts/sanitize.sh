#!/usr/bin/env bash
# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer (issue 14): builds
# starzero with STARZERO_SANITIZE=ON into BUILD (default build-asan/; the same StarPU and CUDA
# setting as the normal build, the sanitizers on the C++ code only), then runs
# every Catch2 test (`ctest -L unit`). Any ASan or UBSan report fails its test; leaks are checked
# at exit, with only other libraries' leaks suppressed (scripts/sanitizers/lsan.supp, commented).
# Usage: scripts/sanitize.sh [BUILD] [extra ctest args...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-asan}
shift || true
STARZERO_SANITIZE=on "$root/scripts/build.sh" "$build"
# halt_on_error: the first report ends the test with a failure; StarPU's own threads are not
# instrumented, so ASan sees their memory only through malloc (no false positives from them).
# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be.
# allocator_may_return_null=1: an impossible allocation returns null as it does without ASan
# (tests check that the code turns it into an error), instead of ASan stopping the program.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:protect_shadow_gap=0:allocator_may_return_null=1
# hwloc's PCI plugin (libpciaccess) leaks, and hwloc unloads the plugin before exit, so LSan
# cannot name its module in a suppression: keep it from loading (no PCI devices in topologies).
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
export LSAN_OPTIONS=suppressions=$root/scripts/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cd "$build"
# One test cannot run here: ASan's mlock interceptor does nothing and reports success, so the
# fallback to pageable memory under RLIMIT_MEMLOCK never happens (the normal suite runs it).
ctest -L unit -E 'RLIMIT_MEMLOCK' --output-on-failure --timeout 900 -j"$(nproc)" "$@"
