#!/usr/bin/env python3
"""mutate_safetensors.py FILE MUTATION: rewrites a safetensors FILE with its header changed by MUTATION,
Python run with `h` (name -> entry), `data` (the data bytes), `by_offset` (names in data order) and
`n_override` (a header length to write instead of the real one) in scope (hf_test.sh's bad files)."""
import json, struct, sys
path, mutation = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
data = raw[8 + n:]
by_offset = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
exec(mutation)
text = json.dumps(h).encode() if not isinstance(h, bytes) else h
open(path, "wb").write(struct.pack("<Q", len(text) if n_override is None else n_override) + text + data)
