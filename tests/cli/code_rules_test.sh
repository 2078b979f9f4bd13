#!/usr/bin/env bash
# The code rules CONTRIBUTING.md states, checked on the checkout:
# - no function over 80 lines outside the numerical kernels (scripts/function-lengths.py);
# - the simulation seam: only runtime/sim.hpp decides what differs in a simulation build,
#   so no source names sim::enabled;
# - one name for simulation in names: sim (tests/cli/check_code_rules.py sim-names).
# Usage: code_rules_test.sh REPO_ROOT
set -euo pipefail
root=$1
cd "$root"
failures=0
if ! out=$(python3 scripts/function-lengths.py 2>&1); then
  echo "$out"
  echo "FAIL: functions over 80 lines (split them into named steps)"
  failures=$((failures + 1))
fi
if hits=$(git ls-files '*.cpp' '*.hpp' '*.cu' | xargs grep -n 'sim::enabled'); then
  echo "$hits"
  echo "FAIL: sim::enabled outside runtime/sim.hpp (ask kernels_run, host_is_this_machine or predicts_times)"
  failures=$((failures + 1))
fi
if ! python3 "$(dirname "${BASH_SOURCE[0]}")/check_code_rules.py" sim-names "$root"; then
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] || exit 1
echo "code rules: no function over 80 lines, one simulation seam, one name for it"
