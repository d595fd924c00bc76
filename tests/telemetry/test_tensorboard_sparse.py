#!/usr/bin/env python3
"""The sparse path's TensorBoard event files (data.format libsvm), decoded with test_tensorboard.py's independent
reader (Debian's python3-protobuf, CRC-32C written there): a 2-rank run stopped by train.max_steps and then resumed
must leave two files (rank 0 only) whose records have both CRCs right, whose first event is file_version
"brain.Event:2", whose step scalars sit at the logged steps (continuing across the resume) with metrics.jsonl's
losses, and whose epoch scalars (test AUC, log loss, accuracy, the sparse sync's bytes) sit at the epochs' ends with
metrics.jsonl's values. Exit 77 (SKIPPED in ctest) with the reason when python3-protobuf is missing."""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tensorboard import (decode_events, event_class, event_files, f32,  # noqa: E402 (exits 77 without protobuf)
                              restart_step, scalars_by_tag, train_stopped_then_resumed)


def write_svm(path, rows, seed):
    """Fixed-width libsvm rows (72 bytes), so the ranks' byte-range shares split exactly between rows."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            idx = sorted(rng.sample(range(1, 51), 3))
            label = 1 if sum(i % 3 == 0 for i in idx) >= 1 else 0
            line = f"{label} " + " ".join(f"{i}:0.500" for i in idx) + " #"
            f.write(line.ljust(72) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    Event = event_class()
    work = tempfile.mkdtemp(prefix="ringtrain-tensorboard-sparse-")
    try:
        out = os.path.join(work, "out")
        cfg = os.path.join(work, "cfg.json")
        write_svm(os.path.join(work, "train.svm"), 160, 1)
        write_svm(os.path.join(work, "test.svm"), 40, 2)
        # 160 rows, 8 per rank x 2 ranks: 10 steps an epoch, 3 epochs; logged every 4.
        json.dump({"model": os.path.join(args.source, "models/sparse_logreg.json"),
                   "data": {"format": "libsvm", "train_file": os.path.join(work, "train.svm"),
                            "test_file": os.path.join(work, "test.svm")},
                   "optimizer": {"name": "adagrad", "lr": 0.1},
                   "train": {"batch_size": 8, "epochs": 3, "log_every_steps": 4},
                   "output": {"dir": out, "progress": "none", "tensorboard": True}}, open(cfg, "w"))
        train_stopped_then_resumed(args.binary, cfg, 13)
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        losses = {r["global_step"]: r["loss"] for r in records if r["type"] == "step"}
        epochs = {r["global_step"]: r for r in records if r["type"] == "epoch"}
        # The first run stops inside epoch 2 (no epoch scalars there) and logs its last step, 13; the resumed one ends
        # epochs 2 and 3, its file marked as a restart at step 14.
        expected = [([4, 8, 12, 13], [10], None), ([16, 20, 24, 28], [20, 30], 14)]
        last_step = 0
        for name, (loss_steps, epoch_steps, restart) in zip(event_files(out), expected):
            events = decode_events(Event, name)
            assert restart_step(name, events) == restart, f"{name}: restart at {restart_step(name, events)}"
            tags = scalars_by_tag(name, events)
            for tag in ["train/loss", "train/lr", "train/samples_per_s"]:
                got = [s for s, _ in tags.get(tag, [])]
                assert got == loss_steps, f"{name}: {tag} at steps {got}, expected {loss_steps}"
            for s, v in tags["train/loss"]:
                assert v == f32(losses[s]), f"{name}: train/loss {v} at step {s}, metrics.jsonl has {losses[s]}"
            for tag in ["epoch/train_loss", "test/accuracy", "test/loss", "test/logloss", "test/auc",
                        "time/data_s", "time/forward_s", "time/backward_s", "time/sync_wait_s", "time/optimizer_s",
                        "time/train_s", "comm/bytes_sent", "comm/bytes_received", "sync/bytes_allgather",
                        "sync/bytes_dense"]:
                got = [s for s, _ in tags.get(tag, [])]
                assert got == epoch_steps, f"{name}: {tag} at steps {got}, expected {epoch_steps}"
            for s in epoch_steps:
                value = {t: dict(tags[t])[s] for t in tags if not t.startswith("train/")}
                for tag, key in [("test/auc", "test_auc"), ("test/logloss", "test_logloss"),
                                 ("test/accuracy", "test_accuracy"), ("epoch/train_loss", "train_loss")]:
                    assert value[tag] == f32(epochs[s][key]), f"{name}: {tag} {value[tag]} at {s}, {epochs[s][key]}"
                assert value["sync/bytes_allgather"] + value["sync/bytes_dense"] > 0, f"{name}: no sync bytes"
            assert min(s for s, _ in tags["train/loss"]) > last_step, f"{name}: steps do not continue"
            last_step = max(s for s, _ in tags["train/loss"])
        print(f"ok: {len(expected)} sparse-path event files decoded, CRCs and steps right")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
