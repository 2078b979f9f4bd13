#!/usr/bin/env python3
"""Checks of tests/cli/code_rules_test.sh that read the sources: python3 check_code_rules.py CHECK ROOT."""
import re
import subprocess
import sys

# A C++ comment, string or character literal: what prose and messages may say in words.
NOT_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
LONG_NAME = re.compile(r'\b\w*simulat\w*\b', re.I)


def sim_names(root):
    """ROOT: the idea has one name in names, "sim": no tracked path and no C++ identifier, macro or
    namespace spells "simulation", "simulate" or "simulated" (comments and messages are prose)."""
    files = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split()
    bad = [f"path: {f}" for f in files if "simulat" in f.lower() and not f.startswith("sim/calibrations/")]
    for f in files:
        if not f.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
            continue
        with open(f"{root}/{f}", encoding="utf-8", errors="replace") as src:
            code = NOT_CODE.sub(" ", src.read())
        bad += [f"{f}: {name}" for name in sorted(set(LONG_NAME.findall(code))) if not name.startswith("STARPU_")]
    for line in bad:
        print(line)
    assert not bad, "names that spell out simulation: the name is sim (CONTRIBUTING.md)"


CHECKS = {"sim-names": sim_names}

if __name__ == "__main__":
    try:
        CHECKS[sys.argv[1]](*sys.argv[2:])
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
