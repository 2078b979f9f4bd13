#!/usr/bin/env python3
"""The checks of offload_fraction_test.sh, each a subcommand: check_offload_fraction.py NAME ARGS... exits non-zero when it fails.
"""
import re
import sys


def split():
    """LOG NP STAGE F L C T: the offloaded layers follow the rule (the last layers while fewer than F of the parameters are taken), in the banner and in the placement report, and the bytes each holds."""
    log = open(sys.argv[1]).read().replace("\r", "\n")
    N, stage, F = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    L, C, T = map(int, sys.argv[5:])
    layers = [256 * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C]
    first, taken = len(layers), 0  # the rule: the last layers while fewer than F·Ψ are taken
    while first > 0 and taken < F * sum(layers):
        first -= 1
        taken += layers[first]
    last = len(layers) - 1
    host = f"layers {first}-{last}" if first < last else f"layer {last}"
    device = f"layers 0-{first - 1}" if first > 1 else "layer 0"
    banner = re.search(r"^optimizer state: (.*)$", log, re.M)
    print(f"  {sys.argv[1].split('/')[-1]}: offloaded from layer {first}; banner: {banner.group(1) if banner else None}")
    ok = bool(banner) and banner.group(1).startswith(f"{host} on the host") and f"{device} on the device" in banner.group(1)
    ok &= f"offloaded (CPU AdamW): {'block' + str(first - 1) if first <= L else 'lnf+classifier'}" in log
    ok &= "on the device (device AdamW): embedding" in log
    # Bytes held for good: 12 per parameter of this rank's state (its shards from ZeRO-1 on, padded).
    own = lambda n: -(-n // N) if (N > 1 and stage >= 1) else -(-n // N) * N
    rows = {m[0]: list(map(int, m[1:])) for m in re.findall(
        r"^\s+0\s+(device|host|disk)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\S+\s+\S+\s+\S+\s+\|\s+(\d+)", log, re.M)}
    want_device = 12 * sum(own(n) for n in layers[:first])
    want_host = 12 * sum(own(n) for n in layers[first:])
    print(f"  optimizer bytes: device {rows['device'][2]} (rule {want_device}), host {rows['host'][2]} (rule {want_host})")
    ok &= rows["device"][2] == want_device and rows["host"][2] == want_host
    for place, (p, g, o, planned) in rows.items():  # the ledger against `starzero plan` (plan+pad)
        ok &= p + g + o == planned
    sys.exit(0 if ok and 0 < first < len(layers) else 1)


CHECKS = {"split": split}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
