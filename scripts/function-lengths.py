#!/usr/bin/env python3
"""The longest functions of the shipped code, by universal-ctags' line spans (first to last line).

Usage: scripts/function-lengths.py [--over N] [--all]
Lists every function longer than N lines (default 80; CONTRIBUTING.md) outside tests/, fuzz/ and
the numerical kernels (files named *kernels*, CUDA .cu files, optimizers/adamw_simd*), which are
plain functions with explicit shapes and may be long. --all includes the kernels. Exit code 1 when
any is listed, 2 on bad usage or without ctags.
"""
import shutil
import subprocess
import sys
import tempfile


def is_kernel(path):
    name = path.rsplit("/", 1)[-1]
    return "kernels" in name or path.endswith(".cu") or path.startswith("optimizers/adamw_simd")


def main(argv):
    limit, everything = 80, False
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--over" and args and args[0].isdigit():
            limit = int(args.pop(0))
        elif arg == "--all":
            everything = True
        else:
            print(__doc__.strip(), file=sys.stderr)
            return 2
    if not shutil.which("ctags"):
        print("function-lengths: needs universal-ctags (apt-get install universal-ctags)", file=sys.stderr)
        return 2
    files = subprocess.run(["git", "ls-files", "*.cpp", "*.hpp", "*.cu"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if not f.startswith(("tests/", "fuzz/")) and (everything or not is_kernel(f))]
    with tempfile.NamedTemporaryFile("r", suffix=".tags") as tags:
        subprocess.run(["ctags", "--fields=+ne", "--c++-kinds=f", "-o", tags.name] + files, check=True)
        rows = []
        for line in tags:
            if line.startswith("!"):
                continue
            parts = line.rstrip("\n").split("\t")
            fields = dict(p.split(":", 1) for p in parts[3:] if ":" in p)
            if "line" in fields and "end" in fields:
                rows.append((int(fields["end"]) - int(fields["line"]) + 1, parts[1], int(fields["line"]), parts[0]))
    long = sorted((r for r in rows if r[0] > limit), reverse=True)
    print(f"| lines | function | where |\n|---:|---|---|")
    for lines, path, start, name in long:
        print(f"| {lines} | `{name}` | {path}:{start} |")
    print(f"{len(long)} function(s) over {limit} lines")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
