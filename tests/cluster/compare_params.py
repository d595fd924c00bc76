#!/usr/bin/env python3
"""compare_params.py A.bin B.bin [TOL]: do two ringtrain checkpoints hold the same parameters within TOL?

Reads the checkpoint layout (8-byte magic, u64 header length, JSON header, then float32 tensors in header order; the
first `parameter_tensors` of them are the model's parameters) and compares the parameters as
sqrt(sum (a-b)^2 / sum a^2) < TOL and max|a-b| < TOL * max|a| + 1e-7 (what tests/train/test_data_parallel.cpp asks of
N ranks x batch B against 1 rank x batch N*B: the same sums in another order). Exit 0 when within, 1 when not, 2 on
unreadable input; prints the measured differences."""
import json
import math
import struct
import sys
from array import array


def parameters(path):
    with open(path, "rb") as f:
        magic = f.read(8)
        if not magic.startswith(b"RTCKPT"):
            raise ValueError(f"{path}: not a ringtrain checkpoint (magic {magic!r})")
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        out = array("f")
        for t in header["tensors"][: header["parameter_tensors"]]:
            count = math.prod(t["shape"])
            chunk = array("f")
            chunk.frombytes(f.read(4 * count))
            if len(chunk) != count:
                raise ValueError(f"{path}: tensor {t.get('name')} is cut short")
            out.extend(chunk)
        return out


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    tol = float(sys.argv[3]) if len(sys.argv) == 4 else 1e-5
    try:
        a, b = parameters(sys.argv[1]), parameters(sys.argv[2])
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_params: {e}", file=sys.stderr)
        return 2
    if len(a) != len(b) or not a:
        print(f"compare_params: {len(a)} vs {len(b)} parameters")
        return 1
    diff2 = sum((x - y) ** 2 for x, y in zip(a, b))
    norm2 = sum(x * x for x in a)
    maxdiff = max(abs(x - y) for x, y in zip(a, b))
    maxabs = max(abs(x) for x in a)
    rel = math.sqrt(diff2 / norm2) if norm2 else math.inf
    print(f"compare_params: {len(a)} parameters, relative L2 difference {rel:.3g}, max difference {maxdiff:.3g} "
          f"(max |a| {maxabs:.3g}, tolerance {tol:g})")
    return 0 if rel < tol and maxdiff < tol * maxabs + 1e-7 else 1


if __name__ == "__main__":
    sys.exit(main())
