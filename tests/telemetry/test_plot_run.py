#!/usr/bin/env python3
"""scripts/plot_run.py on real runs: two short ringtrain runs, then one PNG per run (the default RUN_DIR/plot.png)
and one for both (--out); each must be a PNG of real size. A folder without metrics.jsonl, and --out into a missing
folder, are exit 2 with one line.
Exit 77 (SKIPPED in ctest) with the reason when matplotlib is missing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401  (plot_run.py imports it itself; only the skip is decided here)
except ImportError as e:
    print(f"SKIPPED: python3-matplotlib is not installed ({e}); apt-get install python3-matplotlib "
          "(scripts/setup.sh installs it)")
    sys.exit(77)


def check_png(path):
    assert os.path.isfile(path), f"{path} not written"
    with open(path, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert os.path.getsize(path) > 10000, f"{path} is only {os.path.getsize(path)} bytes"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    plot = [sys.executable, os.path.join(args.source, "scripts/plot_run.py")]
    work = tempfile.mkdtemp(prefix="ringtrain-plot-")
    try:
        runs = []
        for name, lr in [("run_a", 0.01), ("run_b", 0.05)]:
            out = os.path.join(work, name)
            cfg = os.path.join(work, name + ".json")
            json.dump({"model": os.path.join(args.source, "models/logreg.json"),
                       "data": {"format": "synthetic", "synthetic_shape": [784], "synthetic_train_size": 512,
                                "synthetic_test_size": 64},
                       "train": {"batch_size": 16, "epochs": 3, "log_every_steps": 4},
                       "optimizer": {"lr": lr},
                       "output": {"dir": out, "progress": "none"}}, open(cfg, "w"))
            r = subprocess.run([args.binary, "train", "--config", cfg], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            runs.append(out)
        r = subprocess.run(plot + [runs[0]], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        check_png(os.path.join(runs[0], "plot.png"))
        both = os.path.join(work, "both.png")
        r = subprocess.run(plot + runs + ["--out", both, "--title", "two runs"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        check_png(both)
        r = subprocess.run(plot + [work], capture_output=True, text=True)
        assert r.returncode == 2, f"exit {r.returncode}"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "metrics.jsonl: not found" in lines[0], r.stderr
        # --out into a missing folder: one line and exit 2 (was a FileNotFoundError traceback and exit 1).
        missing = os.path.join(work, "no_such_folder", "x.png")
        r = subprocess.run(plot + [runs[0], "--out", missing], capture_output=True, text=True)
        assert r.returncode == 2, f"--out into a missing folder: exit {r.returncode}: {r.stderr}"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plot_run.py: error: --out") \
            and "does not exist" in lines[0], r.stderr
        assert not os.path.exists(os.path.dirname(missing)), "--out's folder was created"
        print("ok: plot_run.py wrote both PNGs and refused a folder without metrics.jsonl and a missing --out folder")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
