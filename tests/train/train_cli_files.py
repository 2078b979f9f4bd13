#!/usr/bin/env python3
"""The files train_cli_test.sh trains on and reads: train_cli_files.py COMMAND ARGS... (see the commands
at the end)."""
import math, random, struct, sys, os

def gen_text(path):
    # Deterministic, learnable English-like text (about 24 KB): a byte model's loss falls fast.
    rng = random.Random(20240326)
    words = ("the a model trains on text and its loss falls as it learns which bytes follow "
             "which; tasks run on workers while the runtime moves data between memories").split()
    out = []
    while sum(len(s) for s in out) < 24000:
        n = rng.randint(4, 12)
        s = " ".join(rng.choice(words) for _ in range(n))
        out.append(s[0].upper() + s[1:] + ".\n")
    with open(path, "w") as f:
        f.write("".join(out))

def shard(path, count):
    # llm.c token shard: 256 int32 header (magic, version 1, count), then uint16 tokens < 256.
    rng = random.Random(7)
    text = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else None
    tokens = [text[i % len(text)] for i in range(count)] if text else [rng.randrange(256) for _ in range(count)]
    header = [20240520, 1, count] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % count, *tokens))

def param_count(maxT, V, Vp, L, NH, C):
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C

def check_ckpt(path, version, maxT, V, Vp, L, NH, C):
    # Prints what is wrong (nothing if the file is a well-formed llm.c checkpoint of that shape).
    size = os.path.getsize(path)
    if size < 1024:
        print("file of %d bytes is shorter than the 1024-byte header" % size)
        return
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
    problems = []
    if h[0] != 20240326: problems.append("magic %d != 20240326" % h[0])
    if h[1] != version: problems.append("version %d != %d" % (h[1], version))
    for i, (name, want) in enumerate([("maxT", maxT), ("V", V), ("L", L), ("NH", NH), ("C", C), ("Vp", Vp)]):
        if h[2 + i] != want: problems.append("header[%d] %s = %d, expected %d" % (2 + i, name, h[2 + i], want))
    n = param_count(maxT, V, Vp, L, NH, C)
    width = 4 if version == 3 else 2
    if size != 1024 + n * width:
        problems.append("size %d != 1024 + %d params * %d = %d" % (size, n, width, 1024 + n * width))
    elif version == 3:
        with open(path, "rb") as f:
            f.seek(1024)
            values = struct.unpack("<%df" % n, f.read())
        if not all(math.isfinite(x) for x in values): problems.append("non-finite parameters")
        if all(x == 0 for x in values): problems.append("all parameters are zero")
    print("; ".join(problems))

def corrupt(src, dst, mode):
    data = bytearray(open(src, "rb").read())
    if mode == "truncate":
        data = data[: len(data) // 2]
    elif mode == "magic":
        data[0:4] = struct.pack("<i", 20240327)
    elif mode == "version4":
        data[4:8] = struct.pack("<i", 4)
    else:
        raise SystemExit("unknown mode " + mode)
    open(dst, "wb").write(bytes(data))

cmd = sys.argv[1]
if cmd == "text": gen_text(sys.argv[2])
elif cmd == "shard": shard(sys.argv[2], int(sys.argv[3]))
elif cmd == "params": print(param_count(*map(int, sys.argv[2:8])))
elif cmd == "check": check_ckpt(sys.argv[2], *map(int, sys.argv[3:10]))
elif cmd == "corrupt": corrupt(sys.argv[2], sys.argv[3], sys.argv[4])
elif cmd == "lt":  # lt A B MARGIN: exit 0 iff B < A - MARGIN (all finite)
    a, b, m = map(float, sys.argv[2:5])
    sys.exit(0 if math.isfinite(a) and math.isfinite(b) and b < a - m else 1)
elif cmd == "plausible":  # X finite and in (0, ln 256 + 0.5)
    x = float(sys.argv[2])
    sys.exit(0 if math.isfinite(x) and 0 < x < math.log(256) + 0.5 else 1)
else:
    raise SystemExit("unknown command " + cmd)
