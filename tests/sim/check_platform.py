#!/usr/bin/env python3
"""The checks of platform_test.sh, each a subcommand: check_platform.py NAME ARGS... exits non-zero when it fails.
"""
import math
import os
import sys
import xml.etree.ElementTree as ET


def platform():
    """DIR NAME CPUS GPUS MEMSIZE H2D D2H PCIE_LAT NVLINK NVLINK_LAT HOST_BW: the platform files against the data sheet figures."""
    d, name = sys.argv[1], sys.argv[2]
    cpus, gpus, memsize = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    h2d, d2h, pcie_lat, nvlink, nvlink_lat, host_bw = map(float, sys.argv[6:12])
    bus = os.path.join(d, "bus")
    errors = []
    def check(ok, what):
        if not ok: errors.append(what)

    expected = {name + s for s in (".platform.v4.xml", ".bandwidth", ".latency", ".config", ".affinity")}
    present = set(os.listdir(bus))
    check(expected <= present, f"files {sorted(expected - present)} missing")
    check(not [f for f in present if f.startswith(".")], f"temporary files left: {sorted(present)}")

    # ---- the platform ----
    def bps(text):
        assert text.endswith("Bps"), text
        return float(text[:-3])
    def secs(text):
        assert text.endswith("s"), text
        return float(text[:-1])
    root = ET.parse(os.path.join(bus, name + ".platform.v4.xml")).getroot()
    check(root.tag == "platform" and root.get("version", "").startswith("4"), "root is not a v4 platform")
    zones = [z for z in root if z.tag in ("zone", "AS")]
    check(len(zones) == 1 and zones[0].get("routing") == "Full", "one zone with Full routing")
    zone = zones[0]
    hosts = {h.get("id"): h for h in zone.findall("host")}
    want = {"MAIN", "RAM", "DISK0"} | {f"CPU{i}" for i in range(cpus)} | {f"CUDA{i}" for i in range(gpus)}
    check(set(hosts) == want, f"hosts {sorted(set(hosts) ^ want)} differ")
    peer = "1" if gpus > 1 and nvlink > 0 else "0"
    for i in range(gpus):
        props = {p.get("id"): p.get("value") for p in hosts.get(f"CUDA{i}", ET.Element("x")).findall("prop")}
        check(props.get("memsize") == str(memsize), f"CUDA{i} memsize {props.get('memsize')} != {memsize}")
        check(props.get("memcpy_peer") == peer, f"CUDA{i} memcpy_peer {props.get('memcpy_peer')} != {peer}")
    links = {l.get("id"): (bps(l.get("bandwidth")), secs(l.get("latency"))) for l in zone.findall("link")}
    def close(a, b): return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
    def link(lid, bw, lat):
        got = links.get(lid)
        check(got is not None and close(got[0], bw) and close(got[1], lat), f"link {lid}: {got} != {(bw, lat)}")
    link("Host", host_bw, 0)
    for i in range(gpus):
        link(f"RAM-CUDA{i}", h2d, pcie_lat)
        link(f"CUDA{i}-RAM", d2h, pcie_lat)
        for j in range(gpus):
            if i == j: continue
            if peer == "1": link(f"CUDA{i}-CUDA{j}", nvlink, nvlink_lat)
            else: check(f"CUDA{i}-CUDA{j}" not in links, f"link CUDA{i}-CUDA{j} without NVLink")
    routes = {(r.get("src"), r.get("dst")): [c.get("id") for c in r.findall("link_ctn")] for r in zone.findall("route")}
    for (s, t), ids in routes.items():
        check(all(i in links for i in ids), f"route {s}->{t} names an unknown link")
    def route_figures(s, t):
        ids = routes.get((s, t))
        if ids is None:
            errors.append(f"no route {s}->{t}")
            return (1, 0)
        return (min(links[i][0] for i in ids), sum(links[i][1] for i in ids))
    for i in range(gpus):
        check(f"RAM-CUDA{i}" in routes.get(("RAM", f"CUDA{i}"), []), f"route RAM->CUDA{i} lacks RAM-CUDA{i}")
        check(f"CUDA{i}-RAM" in routes.get((f"CUDA{i}", "RAM"), []), f"route CUDA{i}->RAM lacks CUDA{i}-RAM")
        for j in range(gpus):
            if i != j and peer == "1":
                bw, lat = route_figures(f"CUDA{i}", f"CUDA{j}")
                check(close(bw, nvlink) and close(lat, nvlink_lat), f"route CUDA{i}->CUDA{j}: {bw} Bps, {lat} s")
    route_figures("RAM", "DISK0"); route_figures("DISK0", "RAM")

    # ---- the matrices: node 0 = RAM, 1 + i = CUDAi; MB/s and us ----
    nodes = 1 + gpus
    down, up = min(d2h, host_bw) / 1e6, min(h2d, host_bw) / 1e6
    def expected_bw(s, t):
        if s == t: return 0.0
        if s == 0: return up
        if t == 0: return down
        if peer == "1": return nvlink / 1e6
        return 1 / (1 / down + 1 / up)
    def expected_lat(s, t):
        if s == t: return 0.0
        if s == 0 or t == 0: return pcie_lat * 1e6
        return nvlink_lat * 1e6 if peer == "1" else 2 * pcie_lat * 1e6
    for kind, want_value in (("bandwidth", expected_bw), ("latency", expected_lat)):
        lines = open(os.path.join(bus, name + "." + kind)).read().split("\n")
        check(lines[0] == "# " + "".join(f"to {i}\t\t" for i in range(32)), f"{kind}: header")
        rows = [l for l in lines[1:] if l]
        check(len(rows) == 32, f"{kind}: {len(rows)} rows, want 32")
        for s, row in enumerate(rows):
            cells = row.split("\t")
            check(len(cells) == 32, f"{kind}: row {s} has {len(cells)} columns, want 32")
            for t, cell in enumerate(cells):
                value = float(cell)
                if s < nodes and t < nodes:
                    check(math.isclose(value, want_value(s, t), rel_tol=1e-6), f"{kind}[{s}][{t}] = {cell}, want {want_value(s, t)}")
                else:
                    check(cell == "nan", f"{kind}[{s}][{t}] = {cell}, want nan")

    config = [l.split("#")[0].strip() for l in open(os.path.join(bus, name + ".config")) if not l.startswith("#")]
    check(config == [str(cpus), "1", str(gpus), "0", "0", "0"], f".config {config}")
    affinity = open(os.path.join(bus, name + ".affinity")).read()
    check(affinity == "# GPU\tNUMA0\t\n" + "".join(f"{i}\t0\t\n" for i in range(gpus)), f".affinity {affinity!r}")

    for e in errors: print("  " + e)
    sys.exit(1 if errors else 0)


CHECKS = {"platform": platform}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
