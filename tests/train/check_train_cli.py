#!/usr/bin/env python3
"""The checks of train_cli_test.sh, each a subcommand: check_train_cli.py NAME ARGS... exits non-zero when it fails.
"""
import re
import statistics
import sys



def step_bound():
    """OUT: the step bound the run printed: CPU compute binds, the steady step is the median of steps 2-60, the efficiency is bound / step within the rounding."""
    out = open(sys.argv[1]).read()
    head = out.index("step bound per rank, from this machine's measured peaks")
    lines = out[head:].splitlines()[1:7]
    names = ["CPU compute", "CPU AdamW", "PCIe host->GPU", "PCIe GPU->host", "disk"]
    seconds = {}
    for name, line in zip(names, lines):
        m = re.match(r"  %s +([0-9.e+-]+) s " % re.escape(name), line)
        assert m, line
        seconds[name] = float(m.group(1))
    assert seconds["CPU compute"] > 0 and seconds["CPU AdamW"] == 0, seconds  # no offload: no CPU AdamW
    assert all(seconds[n] == 0 for n in names[2:]), seconds
    binding = max(seconds, key=seconds.get)
    assert lines[names.index(binding)].endswith("<- bound"), lines
    m = re.fullmatch(r"steady step ([0-9.]+) s, bound ([0-9.e+-]+) s \((.+)\), efficiency ([0-9.]+) %", lines[5])
    assert m, lines[5]
    steady, bound, name, efficiency = float(m.group(1)), float(m.group(2)), m.group(3), float(m.group(4))
    steps = [float(x) / 1e3 for x in re.findall(r"^step (?:[2-9]|[1-9][0-9])/60 \|.*\| ([0-9.]+) ms \|", out, re.M)]
    assert len(steps) == 59, len(steps)
    assert abs(steady - statistics.median_low(steps)) <= 1e-4, (steady, statistics.median_low(steps))
    assert name == binding and bound == seconds[binding], (name, bound, seconds)
    # The printed figures are rounded (steady to 1e-4 s, the bound to 3 digits, the efficiency to
    # 0.1 %): the efficiency must lie in what the rounded step and bound allow (a 1 ms step printed as
    # 0.0012 may be 0.00115 s: 4 % of it).
    lo = 100 * bound * (1 - 5e-3) / (steady + 5e-5) - 0.05
    hi = 100 * bound * (1 + 5e-3) / max(steady - 5e-5, 1e-9) + 0.05
    assert lo <= efficiency <= hi, (efficiency, bound, steady, lo, hi)


CHECKS = {"step-bound": step_bound}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
