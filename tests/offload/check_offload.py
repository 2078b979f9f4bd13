#!/usr/bin/env python3
"""The checks of offload_test.sh, each a subcommand: check_offload.py NAME ARGS... exits non-zero when it fails.
"""
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tasks_rec.py
import tasks_rec  # noqa: E402


def same_params():
    """A.bin B.bin TOLERANCE WHAT: two llm.c checkpoints hold the same parameters (exactly at tolerance 0)."""
    def params(path):
        data = open(path, "rb").read()
        return struct.unpack(f"{(len(data) - 1024) // 4}f", data[1024:])
    a, b, tol = params(sys.argv[1]), params(sys.argv[2]), float(sys.argv[3])
    assert len(a) == len(b)
    worst = max(abs(x - y) for x, y in zip(a, b))
    print(f"  {sys.argv[4]}: {len(a)} parameters, max |diff| {worst:.2e} (allowed {tol:g})")
    sys.exit(0 if worst <= tol else 1)


def nvme_traffic():
    """LOG: the optimizer state went through the disk node (bytes moved each way against its size)."""
    log = open(sys.argv[1]).read()
    state = 12 * 3229184 / 1e9  # GB of fp32 master, m, v
    down = float(re.search(r"Disk 0 -> NUMA 0\s+([0-9.]+) GB", log).group(1))
    up = float(re.search(r"NUMA 0 -> Disk 0\s+([0-9.]+) GB", log).group(1))
    print(f"  nvme: disk -> RAM {down} GB, RAM -> disk {up} GB, optimizer state {state:.4f} GB")
    sys.exit(0 if down >= state and up >= state else 1)


def placement_report():
    """LOG NP STAGE OPT PARAMS L C T: the placement report against the planner formulas, with padded layers."""
    log = open(sys.argv[1]).read().replace("\r", "\n")
    N, stage, opt, par = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    L, C, T = map(int, sys.argv[6:])
    Vp = 256
    layers = [Vp * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C]
    shard = [-(-n // N) for n in layers]
    padded = sum(s * N for s in shard)
    S = sum(shard)
    b = 4  # fp32
    own = S if (N > 1 and stage >= 1) else padded      # elements of this rank's optimizer state
    expect = {  # place -> (params, grads, optimizer), bytes held for good
        "device": [0, 0, 0], "host": [0, 0, 0], "disk": [0, 0, 0]}
    state = "disk" if opt == "nvme" else "host"
    expect[state][2] = 12 * own
    if stage < 3 or N == 1:
        expect["device"][0] = b * padded
    else:
        expect["device"][0] = 0 if par == "cpu" else b * S
    expect["host"][0] = b * own if not (stage == 3 and N > 1) else b * S
    expect["device"][1] = b * (S if (N > 1 and stage >= 2) else padded)
    expect["host"][1] = b * own
    rows = re.findall(r"^\s+0\s+(device|host|disk)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\S+\s+\S+\s+\S+\s+\|\s+(\d+)", log, re.M)
    assert len(rows) == 3, rows
    ok = True
    for place, p, g, o, planned in rows:
        got = [int(p), int(g), int(o)]
        print(f"  {place}: measured {got}, expected {expect[place]}, plan+pad total {planned}")
        ok &= got == expect[place] and sum(got) == int(planned)
    sys.exit(0 if ok else 1)


def delayed_losses():
    """LOSSES_PLAIN LOSSES_DELAYED: the delayed update sees the same parameters in steps 1-3, then the losses differ."""
    a, b = [list(map(float, s.split())) for s in sys.argv[1:]]
    # Steps 1-3 see the same parameters (warm-up 2: the update of step 3 is the first delayed one,
    # and it is first missing in step 4's forward); from step 4 on the losses differ.
    assert a[:3] == b[:3], (a, b)
    assert a[3] != b[3] and a[4] != b[4], (a, b)


def one_window_losses():
    """LOSSES_PLAIN LOSSES_DELAYED: one-window runs give five distinct losses each."""
    p, d = [s.split() for s in sys.argv[1:]]
    print(f"  one-window losses plain {p}, delayed {d}")
    assert len(p) == len(d) == 5 and len(set(p)) == 5, (p, d)
    sys.exit(0 if d[:3] == p[:3] and d[3] == p[2] and d[4] == p[3] else 1)


def adamw_waits():
    """TASKS_REC CLIP L: which AdamW tasks wait for the whole backward (all with exact clipping, only layer 0 without)."""
    by_id = tasks_rec.read(sys.argv[1])
    clip, L = float(sys.argv[2]), int(sys.argv[3])
    ancestors = lambda job: tasks_rec.ancestors(by_id, job)
    encoder = [j for j, r in by_id.items() if r.get("Name") == "encoder_bwd"]
    assert len(encoder) == 1, encoder
    adam = {int(r["Name"][6:-1]): j for j, r in by_id.items() if r.get("Name", "").startswith("adamw[")}
    assert sorted(adam) == list(range(L + 2)), sorted(adam)
    waits = {l: encoder[0] in ancestors(j) for l, j in adam.items()}
    end_bwd = float(by_id[encoder[0]]["EndTime"])
    early = sum(max(0.0, min(float(by_id[j]["EndTime"]), end_bwd) - float(by_id[j]["StartTime"])) for j in adam.values())
    total = sum(float(by_id[j]["EndTime"]) - float(by_id[j]["StartTime"]) for j in adam.values())
    print(f"  grad-clip {clip:g}: AdamW layers waiting for the embedding's backward: "
          f"{[l for l, w in sorted(waits.items()) if w]}; AdamW time before it ended: {early / total:.0%} (measured)")
    if clip > 0:
        sys.exit(0 if all(waits.values()) else 1)
    # Without clipping only the embedding's own group (layer 0) needs it.
    sys.exit(0 if [l for l, w in waits.items() if w] == [0] else 1)


def adamw_turns():
    """TASKS_REC ascending|descending: the CPU AdamW pool is taken layer by layer in that order in every step.

    Untagged tasks (iteration 0 in update_order) are the delayed update's last flush, after the
    last step: no backward or forward waits for it, so its tasks take the pool as they become
    ready and their order is not checked (it was [3, 2, 0, 1] once in CI)."""
    orders = tasks_rec.update_order(tasks_rec.read(sys.argv[1]))
    print(f"  AdamW start order per step ({sys.argv[2]} expected): {orders}")
    orders.pop(0, None)
    assert len(orders) >= 2, orders
    sign = 1 if sys.argv[2] == "ascending" else -1
    sys.exit(0 if all(sorted(o[1:], key=lambda l: sign * l) == o[1:] for o in orders.values()) else 1)


CHECKS = {"same-params": same_params, "nvme-traffic": nvme_traffic, "placement-report": placement_report, "delayed-losses": delayed_losses, "one-window-losses": one_window_losses, "adamw-waits": adamw_waits, "adamw-turns": adamw_turns}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
