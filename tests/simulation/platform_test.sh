#!/usr/bin/env bash
# `starzero platform` end to end: every named machine's five files (the SimGrid platform parsed by
# Python's xml.etree: hosts, memsize, memcpy_peer, links and routes; the .bandwidth and .latency
# matrices: 32 x 32, MB/s and us computed here from the figures in Bps and s, nan past the
# machine's nodes; .config and .affinity), user numbers over a named machine and over `custom`,
# --list, and one-line usage errors with exit code 2. docs/simulation.md, "Platforms".
# Usage: platform_test.sh PATH/TO/starzero
set -euo pipefail
STARZERO=${1:?usage: platform_test.sh PATH/TO/starzero}
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# check_platform DIR NAME CPUS GPUS MEMSIZE H2D D2H PCIE_LAT NVLINK NVLINK_LAT HOST_BW
#   (bytes, bytes/s and seconds, as a machine's data sheet gives them; NVLINK 0 = none)
check_platform() {
  python3 - "$@" <<'PY'
import math, os, sys, xml.etree.ElementTree as ET
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
PY
}

# run WHAT ARGS...: `starzero platform ARGS` must exit 0 without stderr.
run() {
  local what=$1 rc=0
  shift
  "$STARZERO" platform "$@" > "$work/out" 2> "$work/err" || rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$work/err" ]; then
    cat "$work/err"
    fail "$what: exit code $rc"
  fi
}

# ---- the named machines (figures from the data sheets, docs/simulation.md) --------------------
out=$work/named
run "h200x1" h200x1 --out "$out"
grep -qx "  export STARPU_PERF_MODEL_DIR=$out" "$work/out" || fail "h200x1: no STARPU_PERF_MODEL_DIR=$out line"
grep -qx "  export STARPU_HOSTNAME=h200x1" "$work/out" || fail "h200x1: no STARPU_HOSTNAME line"
grep -qx "wrote $out/bus/h200x1.platform.v4.xml" "$work/out" || fail "h200x1: no 'wrote' line"
check_platform "$out" h200x1 64 1 141000000000 55e9 55e9 10e-6 450e9 5e-6 307.2e9 || fail "h200x1 files"
run "h200x8" h200x8 --out "$out"
check_platform "$out" h200x8 64 8 141000000000 55e9 55e9 10e-6 450e9 5e-6 614.4e9 || fail "h200x8 files"
run "a100x1" a100x1 --out "$out"
check_platform "$out" a100x1 32 1 80000000000 25e9 25e9 10e-6 300e9 5e-6 204.8e9 || fail "a100x1 files"
# Writing again replaces the files.
run "h200x8 again" h200x8 --out "$out"
check_platform "$out" h200x8 64 8 141000000000 55e9 55e9 10e-6 450e9 5e-6 614.4e9 || fail "h200x8 rewritten"

# ---- user numbers --------------------------------------------------------------------------------
run "h200x1 overridden" h200x1 --out "$work/o" --gpus 2 --cpus 16 --gpu-mem 80GiB --pcie 30GB/s --nvlink 0 --name box-2.a
check_platform "$work/o" box-2.a 16 2 85899345920 30e9 30e9 10e-6 0 5e-6 307.2e9 || fail "h200x1 overridden"
run "h200x8 --nvlink" h200x8 --out "$work/o" --nvlink=300GB --name h200x8-nv3
check_platform "$work/o" h200x8-nv3 64 8 141000000000 55e9 55e9 10e-6 300e9 5e-6 614.4e9 || fail "h200x8 --nvlink 300GB"
run "custom" custom --out "$work/o" --cpus 8 --gpus 2 --gpu-mem 24GiB --pcie 12GB/s --nvlink 100GB/s --name c2
check_platform "$work/o" c2 8 2 25769803776 12e9 12e9 10e-6 100e9 5e-6 50e9 || fail "custom with GPUs"
run "custom, CPUs only" custom --out "$work/o" --cpus 4
check_platform "$work/o" custom 4 0 0 1 1 0 0 0 50e9 || fail "custom without GPUs"

# ---- --list ----------------------------------------------------------------------------------------
run "--list" --list
for name in h200x1 h200x8 a100x1; do grep -qx "$name" "$work/out" || fail "--list: no $name"; done
grep -q "bf16 989 TFLOP/s, fp32 67 TFLOP/s, HBM 4.8 TB/s" "$work/out" || fail "--list: H200 peaks"
grep -q "bf16 312 TFLOP/s, fp32 19.5 TFLOP/s, HBM 2.04 TB/s" "$work/out" || fail "--list: A100 peaks"

# ---- bad input: one line on stderr, exit code 2, nothing written ------------------------------------
bad=$work/bad
expect_bad_input "unknown machine" "$STARZERO" platform h100x9 --out "$bad"
expect_bad_input "--gpus 9" "$STARZERO" platform h200x8 --out "$bad" --gpus 9
expect_bad_input "--cpus 0" "$STARZERO" platform h200x1 --out "$bad" --cpus 0
expect_bad_input "--cpus 65" "$STARZERO" platform h200x1 --out "$bad" --cpus 65
expect_bad_input "missing --out" "$STARZERO" platform h200x1
expect_bad_input "--pcie fast" "$STARZERO" platform h200x1 --out "$bad" --pcie fast
expect_bad_input "--pcie 0" "$STARZERO" platform h200x1 --out "$bad" --pcie 0GB/s
expect_bad_input "--gpu-mem 0" "$STARZERO" platform h200x1 --out "$bad" --gpu-mem 0
expect_bad_input "--nvlink -1" "$STARZERO" platform h200x8 --out "$bad" --nvlink=-1GB/s
expect_bad_input "--name with a slash" "$STARZERO" platform h200x1 --out "$bad" --name a/b
expect_bad_input "--name starting with a dot" "$STARZERO" platform h200x1 --out "$bad" --name .x
expect_bad_input "custom GPUs without figures" "$STARZERO" platform custom --out "$bad" --gpus 1
expect_bad_input "no machine" "$STARZERO" platform --out "$bad"
expect_bad_input "two machines" "$STARZERO" platform h200x1 a100x1 --out "$bad"
expect_bad_input "--list with a machine" "$STARZERO" platform --list h200x1
expect_bad_input "unknown flag" "$STARZERO" platform h200x1 --out "$bad" --frobnicate
[ ! -e "$bad" ] || fail "bad input wrote $bad"

finish "platform: all checks passed"
