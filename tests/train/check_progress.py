#!/usr/bin/env python3
"""The checks of progress_test.sh, each a subcommand: check_progress.py NAME ARGS... exits non-zero when it fails.
"""
import os
import pty
import re
import sys


def output():
    """FILE lines|bar WHAT: FILE holds the 3 steps as plain lines, or as progress-bar frames."""
    path, want, what = sys.argv[1:]
    text = open(path, "rb").read().decode("utf-8", "replace")
    frames = re.findall(r"\r\[[#.]{24}\] step (\d+)/3 \|", text)
    # A terminal turns "\n" into "\r\n": drop that before looking for lone carriage returns.
    plain = text.replace("\r\n", "\n")
    lines = re.findall(r"^step (\d+)/3 \|", plain, re.M)
    problems = []
    if want == "lines":
        if "\r" in plain or "\x1b" in text:
            problems.append("a carriage return or an escape sequence in lines mode")
        if lines != ["1", "2", "3"]:
            problems.append(f"step lines {lines}, want 1 2 3")
    else:
        if frames != ["1", "2", "3"]:
            problems.append(f"bar frames {frames}, want 1 2 3")
        if lines:
            problems.append(f"plain step lines {lines} beside the bar")
        if not re.search(r"\] step 3/3 \|[^\r\n]*\x1b\[K\r?\n", text):
            problems.append("the last frame does not end its line")
    print(f"  {what}: {len(frames)} frame(s), {len(lines)} plain step line(s)" + "".join("; " + p for p in problems))
    sys.exit(1 if problems else 0)


def on_terminal():
    """OUT PROGRAM ENV... -- ARGS...: runs PROGRAM ARGS with ENV on a pseudo-terminal, its output in OUT; exits with its exit code."""
    out, program, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    split = rest.index("--")
    env = dict(os.environ)
    for assignment in rest[:split]:
        key, _, value = assignment.partition("=")
        env[key] = value
    args = [program] + rest[split + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(program, args, env)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    open(out, "wb").write(data)
    sys.exit(os.waitstatus_to_exitcode(status))


CHECKS = {"output": output, "on-terminal": on_terminal}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
