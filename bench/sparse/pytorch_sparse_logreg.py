#!/usr/bin/python3
"""PyTorch peer for the sparse logistic-regression benchmark (bench/sparse/compare.sh, issue 13).

The model users of PyTorch would write for click logs: nn.EmbeddingBag(F, K, mode="sum", sparse=True) over the
hashed features (value-weighted via per_sample_weights) plus a bias, BCE-with-logits, torch.optim.Adagrad (which
takes the embedding's sparse gradient as it is), one thread. The libsvm file is parsed once into CSR arrays before
the clock starts (that time is printed separately), and each batch is a vectorised slice of those arrays: the
peer's training samples/s include no parsing, ours (ringtrain) include it.

Run with Debian's /usr/bin/python3 (python3-torch 1.13). It prints the build configuration, the thread count and
the CPU so that a ratio can be checked against a peer running at full speed.
"""
import argparse
import os
import sys
import json
import math
import platform
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import peer_malloc  # noqa: E402  (bench/peer_malloc.py: before torch, it may re-execute this script)

peer_malloc.ensure()

import numpy as np  # noqa: E402
import torch  # noqa: E402


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_libsvm(path, index_base, num_features):
    """CSR arrays (offsets, indices, values, labels) of a libsvm file; labels -1/+1 become 0/1."""
    offsets, indices, values, labels = [0], [], [], []
    opener = open
    if path.endswith(".gz"):
        import gzip
        opener = gzip.open
    with opener(path, "rt") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            y = float(parts[0])
            labels.append(1.0 if y > 0 else 0.0)
            for p in parts[1:]:
                if p.startswith("qid:"):
                    continue
                i, v = p.split(":")
                i = int(i) - index_base
                if num_features and i >= num_features:
                    raise SystemExit(f"{path}: index {i} past {num_features} features")
                indices.append(i)
                values.append(float(v))
            offsets.append(len(indices))
    return (np.asarray(offsets, dtype=np.int64), np.asarray(indices, dtype=np.int64),
            np.asarray(values, dtype=np.float32), np.asarray(labels, dtype=np.float32))


def exact_auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):  # average ranks over ties (Mann-Whitney)
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    y = labels[order]
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--features", type=int, required=True)
    ap.add_argument("--index-base", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--initial-accumulator", type=float, default=0.0)
    ap.add_argument("--eps", type=float, default=1e-10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--quiet-config", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if not a.quiet_config:
        print(torch.__config__.show())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, CPU {cpu_model()}, malloc: {peer_malloc.describe()}")

    t0 = time.perf_counter()
    tr = read_libsvm(a.train, a.index_base, a.features)
    te = read_libsvm(a.test, a.index_base, a.features)
    parse_s = time.perf_counter() - t0

    F = a.features
    emb = torch.nn.EmbeddingBag(F, 1, mode="sum", sparse=True)
    torch.nn.init.zeros_(emb.weight)
    bias = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adagrad([emb.weight, bias], lr=a.lr, initial_accumulator_value=a.initial_accumulator, eps=a.eps)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    off = torch.from_numpy(tr[0])
    idx = torch.from_numpy(tr[1])
    val = torch.from_numpy(tr[2])
    lab = torch.from_numpy(tr[3])
    n = len(tr[3])
    steps = 0
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for start in range(0, n - a.batch + 1, a.batch):  # full batches only, as ringtrain
            end = start + a.batch
            lo, hi = int(off[start]), int(off[end])
            logits = emb(idx[lo:hi], off[start:end] - lo, per_sample_weights=val[lo:hi]).squeeze(1) + bias
            loss = loss_fn(logits, lab[start:end])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
    train_s = time.perf_counter() - t0

    with torch.no_grad():
        o = torch.from_numpy(te[0])
        logits = emb(torch.from_numpy(te[1]), o[:-1], per_sample_weights=torch.from_numpy(te[2])).squeeze(1) + bias
        y = torch.from_numpy(te[3])
        p = torch.sigmoid(logits).clamp(1e-7, 1 - 1e-7)
        logloss = float(-(y * p.log() + (1 - y) * (1 - p).log()).mean())
        auc = exact_auc(logits.numpy(), te[3])

    row = {"peer": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": cpu_model(),
           "batch": a.batch, "steps": steps, "train_s": train_s, "samples_per_s": steps * a.batch / train_s,
           "parse_s": parse_s, "test_logloss": logloss, "test_auc": auc}
    print(json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f)


if __name__ == "__main__":
    main()
