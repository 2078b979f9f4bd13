#!/usr/bin/env python3
"""llm.c GPT-2 token shards for data_stream_test.sh (header: 256 int32, [0] 20240520, [1] 1, [2] count;
then uint16 tokens), as DIR/train_000000.bin, ...
  write_shards.py sparse DIR COUNT TOKENS        zero tokens, written as sparse files (no disk used)
  write_shards.py random DIR COUNT TOKENS SEED   random tokens of GPT-2's vocabulary"""
import os
import random
import struct
import sys


def header(tokens):
    return struct.pack("<256i", 20240520, 1, tokens, *([0] * 253))


def main():
    kind, folder, count, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for k in range(count):
        path = os.path.join(folder, "train_%06d.bin" % k)
        with open(path, "wb") as f:
            f.write(header(tokens))
            if kind == "sparse":
                f.truncate(1024 + 2 * tokens)
            else:
                rng = random.Random(int(sys.argv[5]) * 1000 + k)
                f.write(struct.pack("<%dH" % tokens, *(rng.randrange(50257) for _ in range(tokens))))


if __name__ == "__main__":
    main()
