#!/usr/bin/env python3
"""Decodes ringtrain's TensorBoard event files with an independent reader: Debian's python3-protobuf, with the Event
and Summary messages declared here from TensorFlow's field numbers (event.proto, summary.proto), and CRC-32C written
here too. A 2-rank run stopped by train.max_steps and then resumed must leave two files (rank 0 only) whose records
have both CRCs right, whose first event is file_version "brain.Event:2", whose scalars carry the expected tags at
the expected steps (continuing across the resume) and whose losses are metrics.jsonl's. Exit 77 (SKIPPED in ctest)
with the reason when python3-protobuf is missing."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:
    print(f"SKIPPED: python3-protobuf is not installed ({e}); apt-get install python3-protobuf "
          "(scripts/setup.sh installs it)")
    sys.exit(77)


def crc32c(data: bytes) -> int:
    table = crc32c.table
    if table is None:
        table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
        crc32c.table = table
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = None


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="rt_test_event.proto", package="rt_test", syntax="proto2")
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".rt_test.Summary.Value")
    event = fdp.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".rt_test.Summary")
    session_log = fdp.message_type.add(name="SessionLog")
    session_log.field.add(name="status", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)  # START = 1
    event.field.add(name="session_log", number=7, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".rt_test.SessionLog")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("rt_test.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def read_records(path):
    data = open(path, "rb").read()
    at, records = 0, []
    while at < len(data):
        assert at + 12 <= len(data), f"{path}: a record header cut short at byte {at}"
        length_bytes = data[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert length_crc == masked(length_bytes), f"{path}: length CRC wrong at byte {at}"
        body = data[at + 12:at + 12 + length]
        assert len(body) == length, f"{path}: record cut short at byte {at}"
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked(body), f"{path}: data CRC wrong at byte {at}"
        records.append(body)
        at += 16 + length
    return records


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout)
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {r.returncode}")


def train_stopped_then_resumed(binary, cfg, max_steps):
    """Two ranks: a run cut at train.max_steps, then checkpoint.resume=auto to the end."""
    mpirun = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
              "--mca", "btl", "self,vader,tcp", "-np", "2", binary, "train", "--config", cfg]
    run(mpirun + ["--set", f"train.max_steps={max_steps}"])
    run(mpirun + ["--set", "checkpoint.resume=auto"])


def event_files(out):
    """output.dir/tensorboard's files, oldest first; one per run (rank 0 only)."""
    tb = os.path.join(out, "tensorboard")
    files = sorted(os.listdir(tb), key=lambda n: os.stat(os.path.join(tb, n)).st_mtime_ns)
    assert len(files) == 2, f"expected one file per run (rank 0 only), found {files}"
    for name in files:
        assert name.startswith("events.out.tfevents."), name
    return [os.path.join(tb, n) for n in files]


def decode_events(Event, path):
    """Every record of one file, CRCs checked; each message must re-encode to its record (no unknown fields:
    proto2 keeps explicit zeros). The first event must be the file_version header."""
    events = []
    for body in read_records(path):
        ev = Event.FromString(body)
        assert ev.SerializeToString() == body, f"{path}: a record holds fields this reader does not know"
        events.append(ev)
    assert events[0].file_version == "brain.Event:2", f"{path}: first event's file_version {events[0].file_version!r}"
    assert not events[0].HasField("summary")
    return events


def restart_step(path, events):
    """The step of the SessionLog START (a resumed run's mark, right after the header), or None."""
    starts = [(i, ev) for i, ev in enumerate(events) if ev.HasField("session_log")]
    if not starts:
        return None
    assert len(starts) == 1 and starts[0][0] == 1, f"{path}: session logs at events {[i for i, _ in starts]}"
    ev = starts[0][1]
    assert ev.session_log.status == 1 and not ev.HasField("summary"), f"{path}: {ev}"
    return ev.step


def scalars_by_tag(path, events):
    """{tag: [(step, value), ...]} over the events after the header, with unix wall times."""
    tags = {}
    for ev in events[1:]:
        if ev.HasField("session_log"):
            continue
        assert not ev.HasField("file_version")
        assert ev.wall_time > 1.6e9, f"{path}: wall_time {ev.wall_time} is not a unix time"
        for v in ev.summary.value:
            tags.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return tags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    Event = event_class()
    work = tempfile.mkdtemp(prefix="ringtrain-tensorboard-")
    try:
        out = os.path.join(work, "out")
        cfg = os.path.join(work, "cfg.json")
        # 256 samples, 8 per rank x 2 ranks: 16 steps an epoch; logged every 4.
        json.dump({"model": os.path.join(args.source, "models/logreg.json"),
                   "data": {"format": "synthetic", "synthetic_shape": [784], "synthetic_train_size": 256,
                            "synthetic_test_size": 64},
                   "train": {"batch_size": 8, "epochs": 2, "log_every_steps": 4},
                   "output": {"dir": out, "progress": "none", "tensorboard": True}}, open(cfg, "w"))
        train_stopped_then_resumed(args.binary, cfg, 20)
        losses = {r["global_step"]: r["loss"] for r in map(json.loads, open(os.path.join(out, "metrics.jsonl")))
                  if r["type"] == "step"}
        # The resumed run's file marks its restart at step 21, so TensorBoard hides anything a killed run wrote after
        # its last checkpoint (step 20); the first run's file has no mark.
        expected = [([4, 8, 12, 16, 20], [16], None), ([24, 28, 32], [32], 21)]
        last_step = 0
        for name, (loss_steps, epoch_steps, restart) in zip(event_files(out), expected):
            events = decode_events(Event, name)
            assert restart_step(name, events) == restart, f"{name}: restart at {restart_step(name, events)}, expected {restart}"
            tags = scalars_by_tag(name, events)
            assert all(b.step >= a.step for a, b in zip(events[1:], events[2:])), f"{name}: steps go back"
            got = [s for s, _ in tags["train/loss"]]
            assert got == loss_steps, f"{name}: train/loss at steps {got}, expected {loss_steps}"
            for s, v in tags["train/loss"]:
                assert v == f32(losses[s]), f"{name}: train/loss {v} at step {s}, metrics.jsonl has {losses[s]}"
            for tag in ["train/lr", "train/samples_per_s"]:
                assert [s for s, _ in tags[tag]] == loss_steps, f"{name}: {tag} steps"
            for tag in ["epoch/train_loss", "test/accuracy", "test/loss", "time/data_s", "time/forward_s",
                        "time/backward_s", "time/sync_wait_s", "time/optimizer_s", "time/train_s", "time/eval_s",
                        "comm/bytes_sent", "comm/bytes_received"]:
                assert [s for s, _ in tags.get(tag, [])] == epoch_steps, f"{name}: {tag} at {tags.get(tag)}"
            assert 0.0 <= tags["test/accuracy"][0][1] <= 1.0
            assert tags["comm/bytes_sent"][0][1] > 0
            assert min(s for s, _ in tags["train/loss"]) > last_step, f"{name}: steps do not continue"
            last_step = max(s for s, _ in tags["train/loss"])
        print(f"ok: {len(expected)} event files decoded, CRCs and steps right")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
