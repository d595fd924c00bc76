#!/usr/bin/python3
"""Scaling sweeps: configs x ranks x batch x sync settings, each point a real `ringtrain train` with its own
summary.json; repeats interleaved (1, N, 1, N ...), medians; the ceiling (N independent single-rank copies at once);
optionally `ringtrain predict` next to each measured point. Output: rows.json, report.md and PNG plots.

Usage: bench/sweep.py SWEEP.json [--out DIR] [--bin PATH] [--dry-run]
Run with Debian's /usr/bin/python3 (python3-matplotlib). Definitions and the sweep file's keys: docs/scaling.md.

Weak scaling: the per-rank batch is fixed (`batch` = per-rank batch); efficiency = samples/s at N / (N x samples/s
at 1 with the same per-rank batch). Strong scaling: the global batch is fixed (`batch` = global batch, split over the
N ranks); efficiency = samples/s at N / (N x samples/s at 1 rank training the whole global batch).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = {"name", "description", "configs", "ranks", "batch", "scaling", "sync", "set", "placement", "repeats",
        "ceiling", "predict", "mpirun_flags", "timeout_s"}
LOCAL_FLAGS = ["--oversubscribe", "--bind-to", "none"]


def fail(msg):
    print(f"sweep.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_spec(path):
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(spec, dict):
        fail(f"{path}: the sweep must be a JSON object")
    unknown = set(spec) - KEYS
    if unknown:
        fail(f"{path}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(KEYS))}")
    for key in ("name", "configs", "ranks"):
        if key not in spec:
            fail(f"{path}: missing key {key!r} (see docs/scaling.md)")
    spec.setdefault("batch", [None])
    spec.setdefault("scaling", "weak")
    spec.setdefault("sync", [{"name": "default", "set": []}])
    spec.setdefault("set", [])
    spec.setdefault("placement", "local")
    spec.setdefault("repeats", 1)
    spec.setdefault("ceiling", False)
    spec.setdefault("mpirun_flags", [])
    spec.setdefault("timeout_s", 900)
    if spec["scaling"] not in ("weak", "strong"):
        fail(f"{path}: scaling must be weak or strong (got {spec['scaling']!r})")
    if spec["placement"] not in ("local", "netns"):
        fail(f"{path}: placement must be local or netns (got {spec['placement']!r}); slurm: see docs/scaling.md")
    if not all(isinstance(n, int) and n >= 1 for n in spec["ranks"]) or 1 not in spec["ranks"]:
        fail(f"{path}: ranks must be positive integers and include 1 (the efficiency baseline)")
    if not isinstance(spec["repeats"], int) or spec["repeats"] < 1:
        fail(f"{path}: repeats must be a positive integer")
    for s in spec["sync"]:
        if not isinstance(s, dict) or "name" not in s:
            fail(f"{path}: each sync entry is {{\"name\": ..., \"set\": [\"sync.key=value\", ...]}}")
        s.setdefault("set", [])
    for c in spec["configs"]:
        if not os.path.isfile(os.path.join(ROOT, c)):
            fail(f"{path}: config {c!r} not found (paths are relative to the repository root)")
    if spec["scaling"] == "strong":
        for b in spec["batch"]:
            for n in spec["ranks"]:
                if b is None or b % n:
                    fail(f"{path}: strong scaling splits the global batch {b} over {n} ranks: it must divide")
    return spec


def launcher(spec, n):
    if spec["placement"] == "netns":
        return [os.path.join(ROOT, "scripts/cluster/mpirun-netns.sh"), "-np", str(n)] + spec["mpirun_flags"] + ["--"]
    return ["mpirun"] + LOCAL_FLAGS + spec["mpirun_flags"] + ["-np", str(n)]


def run(cmd, log, timeout):
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout)
    if p.returncode != 0:
        fail(f"a point failed (exit {p.returncode}); see {log}")


def read_summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def point_row(summary, ranks):
    steps = max(summary["steps_this_run"], 1)
    return {
        "samples_per_s": summary["samples_per_s"],
        "step_s": summary["train_s"] / steps,
        "phase_s": {k: v / steps for k, v in summary["phase_s"].items()},
        "bytes_sent_per_step_per_rank": statistics.mean(summary["bytes_sent_per_rank"]) / steps,
        "test_accuracy": summary.get("test_accuracy"),
        "wait_for_slowest": summary.get("stragglers", {}).get("wait_for_slowest_fraction"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--out", help="output folder [runs/sweeps/NAME]")
    ap.add_argument("--bin", default=os.environ.get("RINGTRAIN_BIN", os.path.join(ROOT, "build/ringtrain")))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args()
    spec = load_spec(a.sweep)
    a.bin = os.path.abspath(a.bin)
    out = os.path.abspath(a.out or os.path.join(ROOT, "runs/sweeps", spec["name"]))
    if not a.dry_run and not os.access(a.bin, os.X_OK):
        fail(f"{a.bin}: no ringtrain binary; build it (scripts/build.sh) or pass --bin")
    if not a.dry_run and os.path.isdir(os.path.join(out, "points")) and os.listdir(os.path.join(out, "points")):
        fail(f"{out} holds an earlier sweep's points; remove it or pass another --out")
    os.makedirs(os.path.join(out, "points"), exist_ok=True)
    if os.geteuid() == 0:
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    # Groups share one efficiency baseline: (config, sync, batch value).
    groups = [(c, s, b) for c in spec["configs"] for s in spec["sync"] for b in spec["batch"]]
    raw = []
    for rep in range(spec["repeats"]):  # interleaved: every N of a group inside each repeat
        for gi, (cfg, sync, b) in enumerate(groups):
            for n in spec["ranks"]:
                per_rank = None if b is None else (b if spec["scaling"] == "weak" else b // n)
                sets = list(spec["set"]) + list(sync["set"])
                if per_rank is not None:
                    sets.append(f"train.batch_size={per_rank}")
                tag = f"g{gi}-n{n}-r{rep}"
                d = os.path.join(out, "points", tag)
                args = [a.bin, "train", "--config", cfg] + sum((["--set", s] for s in sets), []) + \
                       ["--set", f"output.dir={d}", "--set", "output.progress=none"]
                cmd = launcher(spec, n) + args
                if a.dry_run:
                    print(" ".join(cmd))
                    continue
                t0 = time.time()
                load_before = os.getloadavg()[0]  # other tenants' load: the model cannot see it, the report shows it
                run(cmd, d + ".log", spec["timeout_s"])
                summ = read_summary(d)
                row = {"config": cfg, "sync": sync["name"], "batch": b, "ranks": n, "repeat": rep,
                       "batch_per_rank": summ["batch_size_per_rank"], "global_batch": summ["global_batch_size"],
                       "summary": os.path.relpath(os.path.join(d, "summary.json"), out),
                       "load_before": load_before}
                row.update(point_row(summ, n))
                print(f"[{time.time() - t0:6.1f}s] {cfg} {sync['name']} batch {b} N={n} rep {rep}: "
                      f"{row['samples_per_s']:.0f} samples/s", flush=True)
                if spec["ceiling"] and n > 1 and spec["scaling"] == "weak":
                    procs = []
                    for i in range(n):  # N independent single-rank copies at once: no communication at all
                        di = f"{d}-alone{i}"
                        ci = ["mpirun"] + LOCAL_FLAGS + ["-np", "1"] + [x if not x.startswith("output.dir=") else
                                                                        f"output.dir={di}" for x in args]
                        procs.append((subprocess.Popen(ci, stdout=subprocess.DEVNULL, stderr=open(di + ".log", "w"),
                                                       cwd=ROOT), di))
                    for p, di in procs:
                        if p.wait() != 0:
                            fail(f"a ceiling copy failed; see {di}.log")
                    row["ceiling_samples_per_s"] = sum(read_summary(di)["samples_per_s"] for _, di in procs)
                raw.append(row)
    if a.dry_run:
        return

    points = aggregate(raw, spec)
    if "predict" in spec:
        add_predictions(points, spec, groups, a.bin, out)
    doc = {"sweep": spec, "command": " ".join(sys.argv), "points": points, "runs": raw}
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump(doc, f, indent=2)
    pngs = plot(points, out)
    write_report(doc, pngs, out)
    print(f"wrote {out}/rows.json, {out}/report.md and {len(pngs)} plots")


def aggregate(raw, spec):
    points = []
    keys = list(dict.fromkeys((r["config"], r["sync"], r["batch"], r["ranks"]) for r in raw))
    for key in keys:
        rs = [r for r in raw if (r["config"], r["sync"], r["batch"], r["ranks"]) == key]
        med = lambda f: statistics.median(f(r) for r in rs)
        p = {"config": key[0], "sync": key[1], "batch": key[2], "ranks": key[3], "scaling": spec["scaling"],
             "repeats": len(rs), "batch_per_rank": rs[0]["batch_per_rank"], "global_batch": rs[0]["global_batch"],
             "samples_per_s": med(lambda r: r["samples_per_s"]), "step_s": med(lambda r: r["step_s"]),
             "load_before": med(lambda r: r["load_before"]),
             "bytes_sent_per_step_per_rank": med(lambda r: r["bytes_sent_per_step_per_rank"]),
             "phase_s": {k: med(lambda r: r["phase_s"][k]) for k in rs[0]["phase_s"]}}
        acc = [r["test_accuracy"] for r in rs if r["test_accuracy"] is not None]
        p["test_accuracy"] = statistics.median(acc) if acc else None
        if "ceiling_samples_per_s" in rs[0]:
            p["ceiling_samples_per_s"] = med(lambda r: r["ceiling_samples_per_s"])
        points.append(p)
    for p in points:
        base = next(q for q in points if (q["config"], q["sync"], q["batch"], q["ranks"]) ==
                    (p["config"], p["sync"], p["batch"], 1))
        p["efficiency"] = p["samples_per_s"] / (p["ranks"] * base["samples_per_s"])
        if "ceiling_samples_per_s" in p:
            p["ceiling"] = p["ceiling_samples_per_s"] / (p["ranks"] * base["samples_per_s"])
            p["of_ceiling"] = p["samples_per_s"] / p["ceiling_samples_per_s"]
    return points


def add_predictions(points, spec, groups, binary, out):
    """`ringtrain predict` once per (config, sync, per-rank batch): the link given, or fitted with --measure."""
    link = spec["predict"].get("link", "measure")
    ranks = sorted({p["ranks"] for p in points})  # 1 too: how well one rank's profile matches the training loop
    cache = {}
    for p in points:
        sync = next(s for s in spec["sync"] if s["name"] == p["sync"])
        key = (p["config"], p["sync"], p["batch_per_rank"])
        if key not in cache:
            js = os.path.join(out, f"predict-{len(cache)}.json")
            sets = list(spec["set"]) + list(sync["set"]) + [f"train.batch_size={p['batch_per_rank']}"]
            args = [binary, "predict", "--config", p["config"], "--ranks", ",".join(map(str, ranks)),
                    "--json", js] + sum((["--set", s] for s in sets), [])
            if link == "measure":
                cmd = launcher(spec, 2) + args + ["--measure"]
            else:
                cmd = args + ["--link", link]
            run(cmd, js[:-5] + ".log", spec["timeout_s"])
            with open(js) as f:
                cache[key] = {r["ranks"]: r for r in json.load(f)["rows"]}
        pred = cache[key].get(p["ranks"])
        if pred:
            p["predicted_step_s"] = pred["step_s"]
            p["predicted_dominant"] = pred["dominant"]
            p["prediction_error"] = (pred["step_s"] - p["step_s"]) / p["step_s"]
            exposed = pred["terms_s"]["communication"] + pred["terms_s"]["latency"]
            one = cache[key].get(1)
            base = next((q for q in points if (q["config"], q["sync"], q["batch"], q["ranks"]) ==
                         (p["config"], p["sync"], p["batch"], 1)), None)
            # Calibrated: the model's compute scaled so that its one-rank step is the sweep's own measured one
            # (same interleaved runs), i.e. only the communication model is being tested.
            calib = base["step_s"] / one["step_s"] if one and base and one["step_s"] > 0 else 1.0
            if p.get("ceiling"):  # and slowed as much as N independent copies were (ranks sharing cores)
                calib /= p["ceiling"]
            if p["ranks"] > 1:
                p["predicted_step_calibrated_s"] = (pred["step_s"] - exposed) * calib + exposed
                p["prediction_calibrated_error"] = (p["predicted_step_calibrated_s"] - p["step_s"]) / p["step_s"]


def label(p):
    return f"{os.path.basename(p['config']).replace('.json', '')} {p['sync']}" + \
           (f" b{p['batch']}" if p["batch"] is not None else "")


def plot(points, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sweep.py: matplotlib not found (apt-get install python3-matplotlib): no plots", file=sys.stderr)
        return []
    pngs = []
    series = list(dict.fromkeys(label(p) for p in points))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for s in series:
        ps = sorted((p for p in points if label(p) == s), key=lambda p: p["ranks"])
        line, = ax1.plot([p["ranks"] for p in ps], [p["samples_per_s"] for p in ps], "o-", label=s)
        ax2.plot([p["ranks"] for p in ps], [p["efficiency"] for p in ps], "o-", color=line.get_color(), label=s)
        cs = [p for p in ps if "ceiling" in p]
        if cs:
            ax2.plot([p["ranks"] for p in cs], [p["ceiling"] for p in cs], "x--", color=line.get_color())
    ax1.set(xlabel="ranks", ylabel="samples/s", title="throughput")
    ax2.set(xlabel="ranks", ylabel="efficiency", title="efficiency (x--: ceiling)", ylim=(0, 1.1))
    ax1.legend(fontsize=7)
    fig.tight_layout()
    pngs.append(save(fig, out, "throughput_efficiency.png"))

    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(points)), 4))
    phases = list(points[0]["phase_s"])
    bottom = [0.0] * len(points)
    for ph in phases:
        vals = [1e3 * p["phase_s"][ph] for p in points]
        ax.bar(range(len(points)), vals, bottom=bottom, label=ph)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([f"{label(p)} N={p['ranks']}" for p in points], rotation=60, ha="right", fontsize=6)
    ax.set(ylabel="ms per step (rank 0)", title="time split per point")
    ax.legend(fontsize=7)
    fig.tight_layout()
    pngs.append(save(fig, out, "time_split.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for n in sorted({p["ranks"] for p in points if p["ranks"] > 1}):
        ps = sorted((p for p in points if p["ranks"] == n), key=lambda p: p["batch_per_rank"])
        ax.plot([p["batch_per_rank"] for p in ps], [p["bytes_sent_per_step_per_rank"] / 1e6 for p in ps], "o",
                label=f"N={n}")
    ax.set(xlabel="batch per rank", ylabel="MB sent per step per rank", title="bytes per step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    pngs.append(save(fig, out, "bytes_vs_batch.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in series:
        ps = sorted((p for p in points if label(p) == s and p["test_accuracy"] is not None),
                    key=lambda p: p["global_batch"])
        ax.plot([p["global_batch"] for p in ps], [p["test_accuracy"] for p in ps], "o", label=s)
    ax.set(xlabel="global batch", ylabel="test accuracy", title="accuracy vs global batch", xscale="log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    pngs.append(save(fig, out, "accuracy_vs_global_batch.png"))
    return pngs


def save(fig, out, name):
    import matplotlib.pyplot as plt
    fig.savefig(os.path.join(out, name), dpi=100)
    plt.close(fig)
    return name


def write_report(doc, pngs, out):
    spec, points = doc["sweep"], doc["points"]
    lines = [f"# Sweep {spec['name']}", "", spec.get("description", ""), "",
             f"Command: `{doc['command']}`; {spec['scaling']} scaling, placement {spec['placement']}, "
             f"{spec['repeats']} repeat(s) interleaved (medians). Common overrides: `{' '.join(spec['set']) or '-'}`.",
             "",
             "Weak scaling: per-rank batch fixed; strong: global batch fixed. Efficiency = samples/s at N / "
             "(N x samples/s at 1 in the same group). Ceiling = N independent single-rank copies' summed samples/s "
             "/ (N x samples/s at 1). Prediction error = (predicted - measured) / measured step time. Calibrated: the prediction with its compute scaled to the sweep's own measured one-rank step (and divided by the "
             "ceiling where there is one: ranks sharing cores), so only the communication model is tested. Load avg: the "
             "1-minute load average before the point (other tenants; the model assumes none).", ""]
    has_pred = any("predicted_step_s" in p for p in points)
    has_ceil = any("ceiling" in p for p in points)
    head = ["config", "sync", "ranks", "batch/rank", "global batch", "samples/s", "step ms", "efficiency"]
    head += ["ceiling"] if has_ceil else []
    head += ["predicted ms", "error", "predicted dominant"] if has_pred else []
    head += ["calibrated ms", "error"] if has_pred else []
    head += ["sync_wait ms", "MB sent/step/rank", "test acc", "load avg"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        cells = [os.path.basename(p["config"]), p["sync"], p["ranks"], p["batch_per_rank"], p["global_batch"],
                 f"{p['samples_per_s']:.0f}", f"{1e3 * p['step_s']:.2f}", f"{p['efficiency']:.3f}"]
        if has_ceil:
            cells.append(f"{p['ceiling']:.3f}" if "ceiling" in p else "-")
        if has_pred:
            cells += ([f"{1e3 * p['predicted_step_s']:.2f}", f"{100 * p['prediction_error']:+.1f}%",
                       p["predicted_dominant"]] if "predicted_step_s" in p else ["-", "-", "-"])
        if has_pred:
            cells += ([f"{1e3 * p['predicted_step_calibrated_s']:.2f}", f"{100 * p['prediction_calibrated_error']:+.1f}%"]
                      if "predicted_step_calibrated_s" in p else ["-", "-"])
        cells += [f"{1e3 * p['phase_s'].get('sync_wait', 0):.2f}", f"{p['bytes_sent_per_step_per_rank'] / 1e6:.3f}",
                  "-" if p["test_accuracy"] is None else f"{p['test_accuracy']:.4f}", f"{p['load_before']:.1f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines.append("")
    lines += [f"![{n}]({n})" for n in pngs]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
