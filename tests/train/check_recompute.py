#!/usr/bin/env python3
"""The checks of recompute_test.sh, each a subcommand: check_recompute.py NAME ARGS... exits non-zero when it fails.
"""
import collections
import sys


def shrinks():
    """NONE SELECTIVE FULL: activation bytes held shrink from none to selective to full."""
    none, selective, full = map(float, sys.argv[1:])
    assert full < selective < none, (none, selective, full)


def offload_moves():
    """KEPT DEVICE OFFLOADED: offload takes the offloaded bytes off the device."""
    kept, device, offloaded = map(float, sys.argv[1:])
    assert offloaded > 0.1 and abs(kept - offloaded - device) < 0.11, (kept, device, offloaded)


def fetch_order():
    """TASKS_REC: each activation fetch starts after its gate (the backward above it); the last block is not offloaded."""
    spans = collections.defaultdict(list)
    for record in open(sys.argv[1]).read().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
        if "Name" in fields and "StartTime" in fields:
            spans[fields["Name"]].append((float(fields["StartTime"]), float(fields["EndTime"])))
    for block in range(3):
        fetches = sorted(spans["activation_fetch[%d]" % block])
        gates = sorted(end for _, end in spans["ln1_bwd_input[%d]" % (block + 1)])
        recomputes = sorted(start for start, _ in spans["ln1_recompute[%d]" % block])
        assert len(fetches) == 5 == len(gates) == len(recomputes), (block, len(fetches), len(gates), len(recomputes))
        for (start, end), gate, recompute in zip(fetches, gates, recomputes):
            assert gate <= start, (block, gate, start, end, recompute)
    assert not spans["activation_fetch[3]"], "the last block is offloaded"


CHECKS = {"shrinks": shrinks, "offload-moves": offload_moves, "fetch-order": fetch_order}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
