#!/usr/bin/python3
"""Does the image input pipeline keep the GPU busy? (issue 17) AlexNet at 224x224 (configs/alexnet_folder.json:
random-resized-crop + flip, decoding in data.workers threads with prefetch, no decoded cache) from a JPEG folder
written by `ringtrain make-image-folder`, one run per data.workers value; per run: samples/s, the time per step the
training loop waited for its batch (phase_s.data), and the GPU's utilisation sampled by NVML during training
(summary.json gpu_utilisation, src/telemetry/gpu_monitor.cpp). --cache-workers adds runs with data.cache=true (the
first epoch decodes and keeps the resized images, later epochs only crop, flip and normalise): their rows carry
"cache": true, and every row the median step rate of epoch 1 and of the later epochs apart. --staged-workers runs
those data.workers values again with RINGTRAIN_STAGED_UPLOAD=1 (each batch copied into a staging buffer before its copy
to the GPU, the hand-over before page-locked batches), each between two runs of the default: rows carry "upload".

Usage: bench/device/workers.py --bin build/ringtrain --out DIR --work DIR [--workers "1 2 4 8 12"] [--device cuda]
         [--cache-workers "8"] [--staged-workers "12"] [--steps 40] [--batch 128] [--classes 6] [--per-class 300] [--size 320x320]
         [--deadline EPOCH_S]
The folder (DIR/images under --work) is reused when it is there. The model is models/alexnet.json with its last
layer sized to --classes (written under --work). Rows: DIR/rows.jsonl, one per data.workers; a point that would
start past --deadline is skipped (said on stderr and in the rows). Exit 1 when a run fails, else 0."""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_folder(binary, work, classes, per_class, size, jobs):
    """DIR/train (classes x per_class JPEGs, written by `jobs` make-image-folder processes at once with their own
    seeds, then merged) and DIR/test (8 a class)."""
    root = os.path.join(work, "images")
    done = os.path.join(root, ".complete")
    key = f"{classes} {per_class} {size}"
    if os.path.exists(done) and open(done).read() == key:
        return root
    shutil.rmtree(root, ignore_errors=True)
    parts = os.path.join(root, "parts")
    chunk = math.ceil(per_class / jobs)
    t0 = time.time()
    procs = [subprocess.Popen([binary, "make-image-folder", "--out", os.path.join(parts, str(k)), "--classes",
                               str(classes), "--per-class", str(chunk), "--size", size, "--format", "jpg", "--seed",
                               str(100 + k)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k in range(jobs)]
    procs.append(subprocess.Popen([binary, "make-image-folder", "--out", os.path.join(root, "test"), "--classes",
                                   str(classes), "--per-class", "8", "--size", size, "--format", "jpg", "--seed", "2"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"workers.py: make-image-folder failed (exit {p.returncode}): {err.strip()[-300:]}")
    for k in range(jobs):
        src = os.path.join(parts, str(k))
        for cls in os.listdir(src):
            dst = os.path.join(root, "train", cls)
            os.makedirs(dst, exist_ok=True)
            for name in os.listdir(os.path.join(src, cls)):
                os.rename(os.path.join(src, cls, name), os.path.join(dst, f"p{k}_{name}"))
    shutil.rmtree(parts)
    with open(done, "w") as f:
        f.write(key)
    print(f"workers.py: wrote {classes} x {chunk * jobs} training JPEGs ({size}) and {classes} x 8 test ones to "
          f"{root} in {time.time() - t0:.1f} s", file=sys.stderr)
    return root


def model_file(work, classes):
    with open(os.path.join(ROOT, "models/alexnet.json")) as f:
        m = json.load(f)
    m["layers"][-1]["out_features"] = classes  # the folder's classes, not ImageNet's 1000
    path = os.path.join(work, f"alexnet_{classes}.json")
    with open(path, "w") as f:
        json.dump(m, f, indent=1)
    return path


def median_or_none(values):
    return statistics.median(values) if values else None


def row_of(out_dir, workers, cache, wall, base):
    s = json.load(open(os.path.join(out_dir, "summary.json")))
    steps = max(s["steps_this_run"], 1)
    rates, by_epoch = [], {}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "step":
                rates.append(r["samples_per_s"])
                by_epoch.setdefault(r["epoch"] > 1, []).append(r["samples_per_s"])
    u = s.get("gpu_utilisation") or {}
    step_s = s["train_s"] / steps
    data_s = s["phase_s"].get("data", 0.0) / steps
    # The loader's part of data_s; the rest hands the batch on: queueing its copy (staging it first where it is not
    # page-locked) and, in place, waiting for the previous batch's copy before its buffer is refilled.
    loader_s = s.get("data_loader_wait_s")
    loader_s = None if loader_s is None else loader_s / steps
    first = by_epoch.get(False, [])[1:]  # the first step also builds the model's buffers
    upload = s.get("batch_upload")  # {"mode": "in place" | "staged", tensor counts}; a string before 2026-11-28 22:00
    upload = upload.get("mode") if isinstance(upload, dict) else upload
    return {"workers": workers, "cache": cache, "upload": upload, "device": s.get("device"),
            "device_name": s.get("device_name"),
            "batch": s["batch_size_per_rank"], "steps": steps, "samples_per_s": s["samples_per_s"],
            "steady_samples_per_s": statistics.median(rates[1:]) if len(rates) > 2 else None,
            "epoch1_samples_per_s": median_or_none(first),
            "later_epochs_samples_per_s": median_or_none(by_epoch.get(True, [])),
            "step_s": step_s, "data_wait_s_per_step": data_s, "loader_wait_s_per_step": loader_s,
            "data_wait_fraction": data_s / step_s if step_s else None,
            "phase_s_per_step": {k: v / steps for k, v in s["phase_s"].items()},
            "gpu_mean_percent": u.get("mean_gpu_percent"), "gpu_max_percent": u.get("max_gpu_percent"),
            "gpu_samples": u.get("samples"), "gpu_utilisation": u or None, "wall_s": wall,
            "data": s.get("data"), "summary": os.path.relpath(os.path.join(out_dir, "summary.json"), base)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--workers", default="1 2 4 8 12")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cache-workers", default="", help="data.workers values also run with data.cache=true")
    ap.add_argument("--staged-workers", default="",
                    help="data.workers values run again with the staged hand-over, between two default runs")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--per-class", type=int, default=300)
    ap.add_argument("--size", default="320x320")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, os.cpu_count() or 1)))
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: no point starts after it")
    a = ap.parse_args()
    try:
        points = [(int(w), False, False) for w in a.workers.replace(",", " ").split()]
        points += [(int(w), True, False) for w in a.cache_workers.replace(",", " ").split()]
        for w in a.staged_workers.replace(",", " ").split():  # A/B/A: staged between two in-place runs
            points += [(int(w), False, True), (int(w), False, False)]
    except ValueError:
        sys.exit(f"workers.py: --workers {a.workers!r} / --cache-workers {a.cache_workers!r} / --staged-workers "
                 f"{a.staged_workers!r}: expected integers")
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    images = make_folder(a.bin, a.work, a.classes, a.per_class, a.size, a.jobs)
    model = model_file(a.work, a.classes)
    rows_path = os.path.join(a.out, "rows.jsonl")
    open(rows_path, "w").close()
    failed, last = 0, 0.0
    seen = {}
    for w, cache, staged in points:
        name = f"data.workers={w}" + (", data.cache=true" if cache else "") + (", staged upload" if staged else "")
        if a.deadline and time.time() + last > a.deadline:
            why = f"{name}: skipped, the stage's time is up (the previous point took {last:.0f} s)"
            print(f"workers.py: {why}", file=sys.stderr)
            with open(rows_path, "a") as f:
                f.write(json.dumps({"workers": w, "cache": cache, "staged": staged, "skipped": why}) + "\n")
            continue
        base = f"workers{w}" + ("_cache" if cache else "") + ("_staged" if staged else "")
        seen[base] = seen.get(base, 0) + 1
        d = os.path.join(a.out, base + (f"_{seen[base]}" if seen[base] > 1 else ""))
        shutil.rmtree(d, ignore_errors=True)
        cmd = [a.bin, "train", "--config", os.path.join(ROOT, "configs/alexnet_folder.json"),
               "--set", f"model={model}", "--set", f"data.train_dir={images}/train",
               "--set", f"data.test_dir={images}/test", "--set", f"data.workers={w}", "--set", f"device={a.device}",
               "--set", f"data.cache={'true' if cache else 'false'}",
               "--set", f"train.batch_size={a.batch}", "--set", f"train.max_steps={a.steps}",
               "--set", "train.epochs=1000", "--set", "train.log_every_steps=1", "--set", "train.eval_batch_size=64",
               "--set", "checkpoint.every_epochs=0", "--set", "output.progress=none", "--set", f"output.dir={d}"]
        t0 = time.time()
        with open(d + ".log", "w") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            env = dict(os.environ)
            env.pop("RINGTRAIN_STAGED_UPLOAD", None)
            if staged:
                env["RINGTRAIN_STAGED_UPLOAD"] = "1"
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env).returncode
        last = time.time() - t0
        if rc != 0:
            failed += 1
            print(f"workers.py: {name} failed (exit {rc}); see {d}.log", file=sys.stderr)
            with open(rows_path, "a") as f:
                f.write(json.dumps({"workers": w, "cache": cache, "staged": staged, "failed": f"exit {rc}",
                                    "log": d + ".log"}) + "\n")
            continue
        r = row_of(d, w, cache, last, a.out)
        with open(rows_path, "a") as f:
            f.write(json.dumps(r) + "\n")
        gpu = "-" if r["gpu_mean_percent"] is None else f"{r['gpu_mean_percent']:.0f} %"
        loader = r.get("loader_wait_s_per_step")
        loader = "" if loader is None else f" (the loader {1e3 * loader:.1f})"
        later = r["later_epochs_samples_per_s"]
        later = "" if later is None else f", later epochs {later:.0f}"
        print(f"[{last:5.1f}s] {name}: {r['samples_per_s']:.0f} samples/s{later}, waiting for data "
              f"{1e3 * r['data_wait_s_per_step']:.1f}{loader} of {1e3 * r['step_s']:.1f} ms a step, GPU busy {gpu}",
              flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
