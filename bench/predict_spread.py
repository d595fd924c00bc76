#!/usr/bin/python3
"""`ringtrain predict` at N = 2 against measured 2-rank runs, one rank's profile vs ranks profiled side by side.

Usage: bench/predict_spread.py [--bin build/ringtrain] [--rounds 3] [--out DIR]

Per round and model (interleaved): (a) `predict --link L` on one process (one rank's profile, straggler 0: the
predictor before 2026-11-28), with L the line (b) fitted; (b) `mpirun -np 2 predict --measure` (both ranks profile
at once; the wait for the slower one drawn from their step times; since 2026-11-29 each bucket at the allreduce time
measured at its size, where (a) has the line: they differ in that too); (c) the real run, `mpirun -np 2 train`, its
warm step (summary.json's steady_step_s; train_s / steps_this_run from a binary before it). Prints each
prediction's error against (c) and the range over the rounds.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"logreg": ("configs/logreg_fashion.json", 600), "lenet5": ("configs/lenet5_fashion.json", 300),
          "mnist_cnn": ("configs/mnist_cnn_fashion.json", 60)}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "-np", "2", "--oversubscribe"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT)
    if p.returncode != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + p.stderr)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/ringtrain"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="predict-spread-")
    os.makedirs(out, exist_ok=True)
    errors = {m: {"one_rank": [], "side_by_side": []} for m in MODELS}
    print("round model     measured_ms  one-rank_ms (err)   side-by-side_ms (err, slowest +x%)")
    for r in range(a.rounds):
        for m, (cfg, steps) in MODELS.items():
            new = os.path.join(out, f"{m}-r{r}-measured.json")
            run(MPI + [a.bin, "predict", "--config", cfg, "--measure", "--ranks", "2", "--json", new])
            dn = json.load(open(new))
            link = f"{dn['link']['gbit_per_s']:.6f}gbit,{dn['link']['alpha_s'] * 1e6:.6f}us"
            old = os.path.join(out, f"{m}-r{r}-one.json")
            run([a.bin, "predict", "--config", cfg, "--link", link, "--ranks", "2", "--json", old])
            do = json.load(open(old))
            d = os.path.join(out, f"{m}-r{r}-run")
            run(MPI + [a.bin, "train", "--config", cfg, "--set", f"train.max_steps={steps}", "--set",
                       "checkpoint.every_epochs=0", "--set", "output.progress=none", "--set", f"output.dir={d}"])
            s = json.load(open(os.path.join(d, "summary.json")))
            measured = s.get("steady_step_s") or s["train_s"] / max(s["steps_this_run"], 1)
            po, pn = do["rows"][0]["step_s"], dn["rows"][0]["step_s"]
            eo, en = po / measured - 1, pn / measured - 1
            errors[m]["one_rank"].append(eo)
            errors[m]["side_by_side"].append(en)
            print(f"{r:5d} {m:9s} {measured * 1e3:11.3f} {po * 1e3:11.3f} ({100 * eo:+5.1f} %) {pn * 1e3:11.3f} "
                  f"({100 * en:+5.1f} %, +{100 * dn['rows'][0]['straggler']:.1f} %)", flush=True)
    print("\nmodel      one rank's profile      side by side")
    for m, e in errors.items():
        o, n = e["one_rank"], e["side_by_side"]
        print(f"{m:9s} {100 * min(o):+6.1f} .. {100 * max(o):+6.1f} %   {100 * min(n):+6.1f} .. {100 * max(n):+6.1f} %")
    print(f"(files in {out})")


if __name__ == "__main__":
    main()
