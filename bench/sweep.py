#!/usr/bin/python3
"""Scaling sweeps: configs x ranks x batch x sync settings, each point a real `ringtrain train` with its own
summary.json; repeats interleaved (1, N, 1, N ...), medians; the ceiling (N independent single-rank copies at once);
optionally `ringtrain predict` next to each measured point, and every multi-rank point's own prediction (its
summary.json "predicted"). Placements: local mpirun, emulated hosts (network namespaces with a tc rate per link,
scripts/cluster/), or Slurm (an sbatch array per config and rank count, scripts/slurm/cpu.sbatch). Output:
rows.json, report.md and PNG plots.

Usage: bench/sweep.py SWEEP.json [--out DIR] [--bin PATH] [--dry-run]
Run with Debian's /usr/bin/python3 (python3-matplotlib). Definitions and the sweep file's keys: docs/scaling.md.

Weak scaling: the per-rank batch is fixed (`batch` = per-rank batch); efficiency = samples/s at N / (N x samples/s
at 1 with the same per-rank batch). Strong scaling: the global batch is fixed (`batch` = global batch, split over the
N ranks); efficiency = samples/s at N / (N x samples/s at 1 rank training the whole global batch).
"""
import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = {"name", "description", "configs", "ranks", "batch", "scaling", "sync", "set", "placement", "repeats",
        "ceiling", "predict", "mpirun_flags", "timeout_s", "rates", "slurm_flags"}
LOCAL_FLAGS = ["--oversubscribe", "--bind-to", "none"]
CLUSTER = os.path.join(ROOT, "scripts/cluster")
NETNS_PREFIX = "rtsweep"  # its own namespace set (common.sh): never the one a test or another user has up
SKIPPED = 77  # placement slurm without a running Slurm: the reason is printed, nothing is run


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
    spec.setdefault("slurm_flags", [])
    if spec["scaling"] not in ("weak", "strong"):
        fail(f"{path}: scaling must be weak or strong (got {spec['scaling']!r})")
    if spec["placement"] not in ("local", "netns", "slurm"):
        fail(f"{path}: placement must be local, netns or slurm (got {spec['placement']!r})")
    if "rates" in spec and spec["placement"] != "netns":
        fail(f"{path}: rates (a tc rate per emulated link) need placement netns")
    spec.setdefault("rates", ["none"] if spec["placement"] == "netns" else [None])
    if spec["placement"] == "netns":
        if not isinstance(spec["rates"], list) or not spec["rates"] or not all(
                isinstance(r, str) and (r == "none" or r.rstrip("kmgbit").replace(".", "", 1).isdigit() and
                                        r[len(r.rstrip("kmgbit")):] in ("kbit", "mbit", "gbit"))
                for r in spec["rates"]):
            fail(f"{path}: rates must be a list of tc rates like \"100mbit\", \"1gbit\", \"10gbit\" (or \"none\")")
        if max(spec["ranks"]) > 50:
            fail(f"{path}: placement netns runs one rank per emulated host, at most 50")
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
    # The ceiling is N copies of the one-rank baseline's work at once: with strong scaling that baseline trains the
    # whole global batch (not what each of N ranks does), and a Slurm array runs one point at a time.
    if not isinstance(spec["ceiling"], bool):
        fail(f"{path}: ceiling must be true or false")
    if spec["ceiling"] and spec["scaling"] == "strong":
        fail(f"{path}: ceiling needs weak scaling (strong scaling's one-rank baseline trains the whole global batch, "
             "not one rank's share); set \"ceiling\": false")
    if spec["ceiling"] and spec["placement"] == "slurm":
        fail(f"{path}: ceiling is not run under placement slurm (the array runs one point at a time); set "
             "\"ceiling\": false or use placement local")
    if spec["scaling"] == "strong":
        for b in spec["batch"]:
            for n in spec["ranks"]:
                if b is None or b % n:
                    fail(f"{path}: strong scaling splits the global batch {b} over {n} ranks: it must divide")
    return spec


def launcher(spec, n):
    if spec["placement"] == "netns":  # one rank per emulated host
        return [os.path.join(CLUSTER, "mpirun-netns.sh"), "-np", str(n)] + spec["mpirun_flags"] + ["--"]
    # The sweep's own --bind-to replaces the default one (one of each: some Open MPI versions refuse a repeat).
    local = LOCAL_FLAGS if "--bind-to" not in spec["mpirun_flags"] else ["--oversubscribe"]
    return ["mpirun"] + local + spec["mpirun_flags"] + ["-np", str(n)]


class EmulatedHosts:
    """placement netns: max(ranks) network namespaces (scripts/cluster/netns-up.sh), shaped per rate; removed at the
    end, also after a failure."""

    def __init__(self, hosts, dry_run):
        self.hosts, self.dry_run, self.rate = hosts, dry_run, None
        os.environ["RT_CLUSTER_PREFIX"] = NETNS_PREFIX

    def __enter__(self):
        if os.geteuid() != 0:
            fail("placement netns needs root (ip netns, tc): see scripts/cluster/README.md")
        self._call([os.path.join(CLUSTER, "netns-up.sh"), str(self.hosts)])
        return self

    def shape(self, rate):
        if rate != self.rate:
            self._call([os.path.join(CLUSTER, "netns-shape.sh"), rate])
            self.rate = rate

    def __exit__(self, *exc):
        self._call([os.path.join(CLUSTER, "netns-down.sh"), "-q"], check=False)

    def _call(self, cmd, check=True):
        if self.dry_run:
            print(" ".join(cmd))
            return
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if check and p.returncode != 0:
            fail(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")


def slurm_running():
    """None when a Slurm controller answers, else why not."""
    try:
        p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return "no Slurm client (scontrol) on PATH; scripts/cluster/start-slurm.sh installs and starts one"
    except subprocess.TimeoutExpired:
        return "scontrol ping did not answer in 20 s"
    if p.returncode != 0 or "UP" not in p.stdout:
        return (f"no Slurm controller answers (scontrol ping: {(p.stdout + p.stderr).strip()[:200]}); start one "
                "with scripts/cluster/start-slurm.sh (and export the SLURM_CONF it prints)")
    return None


def run_slurm_array(spec, cfg, n, tasks, binary, out, tag):
    """One sbatch array for `tasks` (lists of --set arguments) of `cfg` at `n` ranks, one task per point, one at a
    time (%1: concurrent points would share the cores), waited for; a failed task ends the sweep."""
    lines = os.path.join(out, f"{tag}.lines")
    with open(lines, "w") as f:
        for sets in tasks:
            f.write(" ".join(sum((["--set", x] for x in sets), [])) + "\n")
    env = dict(os.environ, RINGTRAIN_SWEEP=lines, RINGTRAIN_BIN=binary, RINGTRAIN_REQUEUE="0")
    cmd = ["sbatch", "--wait", "--parsable", f"--array=0-{len(tasks) - 1}%1", "-n", str(n), "-J", tag,
           "-o", os.path.join(out, "%x-%A_%a.out"), "-t", str(max(1, spec["timeout_s"] // 60))] + \
        spec["slurm_flags"] + [os.path.join(ROOT, "scripts/slurm/cpu.sbatch"), cfg]
    with open(os.path.join(out, f"{tag}.log"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                           timeout=spec["timeout_s"] * (len(tasks) + 1))
    if p.returncode != 0:
        fail(f"the Slurm array {tag} failed (exit {p.returncode}); see {out}/{tag}.log and {out}/{tag}-*.out")


def first_error(log):
    """The trainer's own one-line reason in a failed point's log (bad input names the file or key and what to do),
    without the rank prefix mpirun's ranks add; None when there is none."""
    try:
        with open(log, errors="replace") as f:
            for line in f:
                if line.startswith("ringtrain: error: "):
                    why = line[len("ringtrain: error: "):].strip()
                    return why.split(": ", 1)[1] if re.match(r"rank \d+: ", why) else why
    except OSError:
        pass
    return None


def run(cmd, log, timeout):
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout)
    if p.returncode != 0:
        why = first_error(log)
        fail(f"a point failed (exit {p.returncode}){': ' + why if why else ''}; see {log}")


def read_summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def slowest_wait_per_step(summary):
    """Seconds per step the ranks waited for the slowest one's local work (part of rank 0's sync_wait), or None:
    dense runs measure it (stragglers: the wait summed over the measured steps), sparse and local SGD runs' own
    prediction carries it as its straggler term (per step); one rank has neither."""
    st = summary.get("stragglers") or {}
    if st.get("steps", 0) > 0 and "wait_for_slowest_s" in st:
        return st["wait_for_slowest_s"] / st["steps"]
    terms = (summary.get("predicted") or {}).get("terms_s") or {}
    return terms.get("straggler")


def point_row(summary, ranks):
    steps = max(summary["steps_this_run"], 1)
    return {
        "samples_per_s": summary["samples_per_s"],
        "step_s": summary["train_s"] / steps,
        "phase_s": {k: v / steps for k, v in summary["phase_s"].items()},
        "bytes_sent_per_step_per_rank": statistics.mean(summary["bytes_sent_per_rank"]) / steps,
        "test_accuracy": summary.get("test_accuracy"),
        "test_auc": summary.get("test_auc"),  # sparse runs: accuracy alone can be the constant predictor's
        "wait_for_slowest": summary.get("stragglers", {}).get("wait_for_slowest_fraction"),
        "wait_for_slowest_s": slowest_wait_per_step(summary),  # per step, part of sync_wait
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--out", help="output folder [runs/sweeps/NAME]")
    ap.add_argument("--bin", default=os.environ.get("RINGTRAIN_BIN", os.path.join(ROOT, "build/ringtrain")))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args()
    # SIGTERM (a kill, a time limit) unwinds like an error, so the emulated hosts are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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

    if spec["placement"] == "slurm" and not a.dry_run:
        why = slurm_running()
        if why:
            print(f"sweep.py: placement slurm: skipped: {why}", file=sys.stderr)
            sys.exit(SKIPPED)

    # Groups share one efficiency baseline: (config, sync, batch value, link rate).
    groups = [(c, s, b, r) for c in spec["configs"] for s in spec["sync"] for b in spec["batch"] for r in spec["rates"]]
    raw = []
    hosts = EmulatedHosts(max(spec["ranks"]), a.dry_run) if spec["placement"] == "netns" else contextlib.nullcontext()
    with hosts:
        for rep in range(spec["repeats"]):  # interleaved: every N of a group inside each repeat
            if spec["placement"] == "slurm":
                for cfg in spec["configs"]:
                    raw += slurm_arrays(spec, groups, cfg, rep, a, out)
                continue
            for gi, (cfg, sync, b, rate) in enumerate(groups):
                if rate is not None:
                    hosts.shape(rate)
                for n in spec["ranks"]:
                    # One rank has no link: its baseline is the same whatever the rate, measured once per repeat.
                    same = next((r for r in raw if n == 1 and r["ranks"] == 1 and r["repeat"] == rep and
                                 (r["config"], r["sync"], r["batch"]) == (cfg, sync["name"], b)), None)
                    if same is not None:
                        raw.append(dict(same, rate=rate))
                        continue
                    row = run_point(spec, a, out, gi, cfg, sync, b, rate, n, rep)
                    if row:
                        raw.append(row)
        if a.dry_run:
            return
        points = aggregate(raw, spec)
        if "predict" in spec:  # (netns: still on the emulated hosts, --measure over each rate)
            add_predictions(points, spec, a.bin, out, hosts)
    doc = {"sweep": spec, "command": " ".join(sys.argv), "points": points, "runs": raw}
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump(doc, f, indent=2)
    pngs = plot(points, out)
    write_report(doc, pngs, out)
    print(f"wrote {out}/rows.json, {out}/report.md and {len(pngs)} plots")


def binds_to_core(spec):
    f = spec["mpirun_flags"]
    return spec["placement"] == "local" and any(f[i] == "--bind-to" and f[i + 1].split(":")[0] == "core"
                                                for i in range(len(f) - 1))


def point_sets(spec, sync, b, n):
    per_rank = None if b is None else (b if spec["scaling"] == "weak" else b // n)
    sets = list(spec["set"]) + list(sync["set"])
    if per_rank is not None:
        sets.append(f"train.batch_size={per_rank}")
    return sets


def run_point(spec, a, out, gi, cfg, sync, b, rate, n, rep):
    sets = point_sets(spec, sync, b, n)
    tag = f"g{gi}-n{n}-r{rep}"
    d = os.path.join(out, "points", tag)
    args = [a.bin, "train", "--config", cfg] + sum((["--set", s] for s in sets), []) + \
           ["--set", f"output.dir={d}", "--set", "output.progress=none"]
    cmd = launcher(spec, n) + args
    if a.dry_run:
        print(" ".join(cmd))
        return None
    t0 = time.time()
    load_before = os.getloadavg()[0]  # other tenants' load: the model cannot see it, the report shows it
    run(cmd, d + ".log", spec["timeout_s"])
    row = measured_row(read_summary(d), cfg, sync, b, rate, n, rep, os.path.relpath(os.path.join(d, "summary.json"), out),
                       load_before)
    print(f"[{time.time() - t0:6.1f}s] {cfg} {sync['name']} batch {b}{'' if rate is None else ' ' + rate} N={n} "
          f"rep {rep}: {row['samples_per_s']:.0f} samples/s" +
          (f", own prediction {100 * row['inrun_error']:+.0f} %" if "inrun_error" in row else ""), flush=True)
    if spec["ceiling"] and n > 1:  # (weak scaling, not under Slurm: load_spec refuses the others)
        procs = []
        for i in range(n):  # N independent single-rank copies at once: no communication at all
            di = f"{d}-alone{i}"
            # Where the ranks are bound one to a core, so is each copy (a copy free to use every core would start
            # a parse or prefetch thread the bound ranks do not have).
            pin = ["taskset", "-c", str(i % os.cpu_count())] if binds_to_core(spec) else []
            ci = pin + ["mpirun"] + LOCAL_FLAGS + ["-np", "1"] + [x if not x.startswith("output.dir=") else
                                                            f"output.dir={di}" for x in args]
            procs.append((subprocess.Popen(ci, stdout=subprocess.DEVNULL, stderr=open(di + ".log", "w"),
                                           cwd=ROOT), di))
        for p, di in procs:
            if p.wait() != 0:
                why = first_error(di + ".log")
                fail(f"a ceiling copy failed{': ' + why if why else ''}; see {di}.log")
        row["ceiling_samples_per_s"] = sum(read_summary(di)["samples_per_s"] for _, di in procs)
    return row


def slurm_arrays(spec, groups, cfg, rep, a, out):
    """placement slurm: per rank count, one sbatch array whose tasks are this config's points (sync x batch), in the
    order of ranks (an array's tasks share -n, and cpu.sbatch takes one config)."""
    rows = []
    for n in spec["ranks"]:
        tag = f"{os.path.basename(cfg).replace('.json', '')}-n{n}-r{rep}"
        points = []
        for gi, (c, sync, b, rate) in enumerate(groups):
            if c != cfg:
                continue
            d = os.path.join(out, "points", f"g{gi}-n{n}-r{rep}")
            points.append((sync, b, rate, d, point_sets(spec, sync, b, n) + [f"output.dir={d}", "output.progress=none"]))
        if a.dry_run:
            for i, (_, _, _, _, sets) in enumerate(points):
                print(f"sbatch --array={i} -n {n} -J {tag} scripts/slurm/cpu.sbatch {cfg} " +
                      " ".join(sum((["--set", x] for x in sets), [])))
            continue
        load_before = os.getloadavg()[0]
        run_slurm_array(spec, cfg, n, [p[4] for p in points], a.bin, out, tag)
        for sync, b, rate, d, _ in points:
            rows.append(measured_row(read_summary(d), cfg, sync, b, rate, n, rep,
                                     os.path.relpath(os.path.join(d, "summary.json"), out), load_before))
            print(f"{cfg} {sync['name']} batch {b} N={n} rep {rep} (Slurm array {tag}): "
                  f"{rows[-1]['samples_per_s']:.0f} samples/s", flush=True)
    return rows


def measured_row(summ, cfg, sync, b, rate, n, rep, summary_path, load_before):
    row = {"config": cfg, "sync": sync["name"], "batch": b, "rate": rate, "ranks": n, "repeat": rep,
           "batch_per_rank": summ["batch_size_per_rank"], "global_batch": summ["global_batch_size"],
           "summary": summary_path, "load_before": load_before, "backend": summ.get("backend")}
    row.update(point_row(summ, n))
    pred = summ.get("predicted") or {}
    if "step_s" in pred:  # the run's own prediction (train/run_prediction.hpp)
        row.update(inrun_predicted_step_s=pred["step_s"], inrun_measured_step_s=pred["measured_step_s"],
                   inrun_error=pred["error"], inrun_error_fitted_link=pred.get("error_fitted_link"), inrun_dominant=pred["dominant"], inrun_terms_s=pred["terms_s"],
                   inrun_link=pred["link"], inrun_straggler=pred["straggler"])
    return row


def key(p, ranks=None):
    return (p["config"], p["sync"], p["batch"], p.get("rate"), p["ranks"] if ranks is None else ranks)


def aggregate(raw, spec):
    points = []
    keys = list(dict.fromkeys(key(r) for r in raw))
    for k in keys:
        rs = [r for r in raw if key(r) == k]
        med = lambda f: statistics.median(f(r) for r in rs)
        p = {"config": k[0], "sync": k[1], "batch": k[2], "rate": k[3], "ranks": k[4], "scaling": spec["scaling"],
             "backend": rs[0].get("backend"),
             "repeats": len(rs), "batch_per_rank": rs[0]["batch_per_rank"], "global_batch": rs[0]["global_batch"],
             "samples_per_s": med(lambda r: r["samples_per_s"]), "step_s": med(lambda r: r["step_s"]),
             "load_before": med(lambda r: r["load_before"]),
             "bytes_sent_per_step_per_rank": med(lambda r: r["bytes_sent_per_step_per_rank"]),
             "phase_s": {k: med(lambda r: r["phase_s"][k]) for k in rs[0]["phase_s"]}}
        acc = [r["test_accuracy"] for r in rs if r["test_accuracy"] is not None]
        p["test_accuracy"] = statistics.median(acc) if acc else None
        aucs = [r["test_auc"] for r in rs if r.get("test_auc") is not None]
        p["test_auc"] = statistics.median(aucs) if aucs else None
        waits = [r["wait_for_slowest_s"] for r in rs if r.get("wait_for_slowest_s") is not None]
        p["wait_for_slowest_s"] = statistics.median(waits) if waits else None
        if "ceiling_samples_per_s" in rs[0]:
            p["ceiling_samples_per_s"] = med(lambda r: r["ceiling_samples_per_s"])
        own = [r for r in rs if "inrun_error" in r]
        if own:  # the run's own prediction: the repeat with the median error, whole (its terms belong together)
            mid = sorted(own, key=lambda r: r["inrun_error"])[len(own) // 2]
            for f in ("inrun_predicted_step_s", "inrun_measured_step_s", "inrun_error", "inrun_error_fitted_link",
                      "inrun_dominant",
                      "inrun_terms_s", "inrun_link", "inrun_straggler"):
                p[f] = mid[f]
            p["inrun_errors"] = [r["inrun_error"] for r in own]
        points.append(p)
    for p in points:
        base = next(q for q in points if key(q) == key(p, 1))
        p["efficiency"] = p["samples_per_s"] / (p["ranks"] * base["samples_per_s"])
        if "ceiling_samples_per_s" in p:
            p["ceiling"] = p["ceiling_samples_per_s"] / (p["ranks"] * base["samples_per_s"])
            p["of_ceiling"] = p["samples_per_s"] / p["ceiling_samples_per_s"]
    return points


def add_predictions(points, spec, binary, out, hosts):
    """`ringtrain predict` once per (config, sync, per-rank batch, rate): the link given, or fitted with --measure
    (over the emulated hosts at that rate with placement netns)."""
    link = spec["predict"].get("link", "measure")
    ranks = sorted({p["ranks"] for p in points})  # 1 too: how well one rank's profile matches the training loop
    cache = {}
    for p in points:
        sync = next(s for s in spec["sync"] if s["name"] == p["sync"])
        ck = (p["config"], p["sync"], p["batch_per_rank"], p.get("rate") if link == "measure" else None)
        if ck not in cache:
            js = os.path.join(out, f"predict-{len(cache)}.json")
            sets = list(spec["set"]) + list(sync["set"]) + [f"train.batch_size={p['batch_per_rank']}"]
            args = [binary, "predict", "--config", p["config"], "--ranks", ",".join(map(str, ranks)),
                    "--json", js] + sum((["--set", s] for s in sets), [])
            if link == "measure":
                if p.get("rate") is not None:
                    hosts.shape(p["rate"])
                cmd = launcher(spec, 2) + args + ["--measure"]
            else:
                cmd = args + ["--link", link]
            run(cmd, js[:-5] + ".log", spec["timeout_s"])
            with open(js) as f:
                cache[ck] = {r["ranks"]: r for r in json.load(f)["rows"]}
        pred = cache[ck].get(p["ranks"])
        if pred:
            p["predicted_step_s"] = pred["step_s"]
            p["predicted_dominant"] = pred["dominant"]
            p["prediction_error"] = (pred["step_s"] - p["step_s"]) / p["step_s"]
            exposed = pred["terms_s"]["communication"] + pred["terms_s"]["latency"]
            one = cache[ck].get(1)
            base = next((q for q in points if key(q) == key(p, 1)), None)
            # Calibrated: the model's compute scaled so that its one-rank step is the sweep's own measured one
            # (same interleaved runs), i.e. only the communication model is being tested.
            calib = base["step_s"] / one["step_s"] if one and base and one["step_s"] > 0 else 1.0
            if p.get("ceiling"):  # and slowed as much as N independent copies were (ranks sharing cores)
                calib /= p["ceiling"]
            if p["ranks"] > 1:
                p["predicted_step_calibrated_s"] = (pred["step_s"] - exposed) * calib + exposed
                p["prediction_calibrated_error"] = (p["predicted_step_calibrated_s"] - p["step_s"]) / p["step_s"]


TIME_SPLIT = (("compute", ("forward", "backward")), ("input", ("data",)), ("optimizer", ("optimizer",)))


def time_split(p):
    """Rank 0's step in the issue's words, seconds per step: compute (forward + backward), input (waiting for the
    batch), optimizer, waiting for the slowest rank (the ranks' uneven local work, which a faster rank spends inside
    its sync) and waiting for gradients (the rest of sync_wait: the allreduce that did not overlap). The slowest-rank
    wait is a mean over ranks, so it is capped at rank 0's sync_wait: neither part is ever negative. Phases the
    trainer adds later keep their own names."""
    ph = p["phase_s"]
    out = {name: sum(ph.get(k, 0.0) for k in keys) for name, keys in TIME_SPLIT}
    sync = max(0.0, ph.get("sync_wait", 0.0))
    slowest = min(sync, max(0.0, p.get("wait_for_slowest_s") or 0.0))
    out["waiting for gradients"] = sync - slowest
    out["waiting for the slowest rank"] = slowest
    known = {k for _, keys in TIME_SPLIT for k in keys} | {"sync_wait"}
    out.update({k: v for k, v in ph.items() if k not in known})
    return out


def label(p):
    return f"{os.path.basename(p['config']).replace('.json', '')} {p['sync']}" + \
           (f" b{p['batch']}" if p["batch"] is not None else "") + (f" {p['rate']}" if p.get("rate") else "")


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
    splits = [time_split(p) for p in points]
    segments = list(dict.fromkeys(k for sp in splits for k in sp))
    bottom = [0.0] * len(points)
    for seg in segments:
        vals = [1e3 * sp.get(seg, 0.0) for sp in splits]
        ax.bar(range(len(points)), vals, bottom=bottom, label=seg)
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
             "1-minute load average before the point (other tenants; the model assumes none). The time split is rank 0's, ms per step: "
             "compute (forward + backward), input, optimizer, waiting for gradients (sync_wait less the next column) and "
             "waiting for the slowest rank (the ranks' uneven local work: dense runs' stragglers.wait_for_slowest_s per "
             "step, sparse and local SGD runs' predicted straggler term; '-' where the run has neither: one rank, a GPU).", ""]
    has_pred = any("predicted_step_s" in p for p in points)
    has_ceil = any("ceiling" in p for p in points)
    has_rate = any(p.get("rate") for p in points)
    head = ["config", "sync"] + (["rate"] if has_rate else []) + ["ranks", "batch/rank", "global batch", "samples/s",
                                                                  "step ms", "efficiency"]
    head += ["ceiling"] if has_ceil else []
    head += ["predicted ms", "error", "predicted dominant"] if has_pred else []
    head += ["calibrated ms", "error"] if has_pred else []
    head += ["compute ms", "input ms", "optimizer ms", "waiting for gradients ms", "waiting for the slowest rank ms",
             "MB sent/step/rank", "test acc"]
    has_auc = any(p.get("test_auc") is not None for p in points)
    head += ["test AUC"] if has_auc else []
    head += ["load avg"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        cells = [os.path.basename(p["config"]), p["sync"]] + ([p.get("rate") or "-"] if has_rate else []) + \
                [p["ranks"], p["batch_per_rank"], p["global_batch"], f"{p['samples_per_s']:.0f}",
                 f"{1e3 * p['step_s']:.2f}", f"{p['efficiency']:.3f}"]
        if has_ceil:
            cells.append(f"{p['ceiling']:.3f}" if "ceiling" in p else "-")
        if has_pred:
            cells += ([f"{1e3 * p['predicted_step_s']:.2f}", f"{100 * p['prediction_error']:+.1f}%",
                       p["predicted_dominant"]] if "predicted_step_s" in p else ["-", "-", "-"])
        if has_pred:
            cells += ([f"{1e3 * p['predicted_step_calibrated_s']:.2f}", f"{100 * p['prediction_calibrated_error']:+.1f}%"]
                      if "predicted_step_calibrated_s" in p else ["-", "-"])
        split = time_split(p)
        cells += [f"{1e3 * split[k]:.2f}" for k in ("compute", "input", "optimizer", "waiting for gradients")]
        cells += ["-" if p.get("wait_for_slowest_s") is None else f"{1e3 * split['waiting for the slowest rank']:.2f}"]
        cells += [f"{p['bytes_sent_per_step_per_rank'] / 1e6:.3f}",
                  "-" if p["test_accuracy"] is None else f"{p['test_accuracy']:.4f}"]
        if has_auc:
            cells.append("-" if p.get("test_auc") is None else f"{p['test_auc']:.4f}")
        cells.append(f"{p['load_before']:.1f}")
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines.append("")
    own = [p for p in points if "inrun_error" in p]
    if own:
        errs = [abs(p["inrun_error"]) for p in own]
        lines += ["## Each run's own prediction (summary.json `predicted`)", "",
                  "The scaling model fed with the point's own measurements (docs/scaling.md): rank 0's compute per "
                  "phase at this N (so co-located ranks sharing cores are in it: compute is measured per point), "
                  "when each gradient became ready, the final buckets, the slowest rank's extra work, and a link "
                  "fitted to the run's own bucket allreduces (less the wait for the slowest rank) and a one-float "
                  "probe; each bucket's own time goes through the timeline ('error, fitted line': every bucket's time "
                  "from the fitted alpha-beta line instead). Measured: the steady step (between consecutive steps, the first left out). Error = "
                  "(measured - predicted) / measured; with repeats, the repeat with the median error.",
                  "", f"{len(own)} points; |error| at most {100 * max(errs):.1f} %, median "
                  f"{100 * statistics.median(errs):.1f} %; {sum(e <= 0.15 for e in errs)} of {len(own)} within 15 %.", "",
                  "| config | sync | backend | rate | ranks | predicted ms | measured ms | error | error, fitted line | "
                  "dominant | straggler | link alpha us | link Gbit/s | load avg |", "|" + "---|" * 14]
        for p in own:
            beta = p["inrun_link"]["beta_s_per_byte"]
            lines.append("| " + " | ".join(map(str, [
                os.path.basename(p["config"]), p["sync"], p.get("backend") or "-", p.get("rate") or "-", p["ranks"],
                f"{1e3 * p['inrun_predicted_step_s']:.2f}", f"{1e3 * p['inrun_measured_step_s']:.2f}",
                f"{100 * p['inrun_error']:+.1f}%",
                "-" if p.get("inrun_error_fitted_link") is None else f"{100 * p['inrun_error_fitted_link']:+.1f}%",
                p["inrun_dominant"], f"{p['inrun_straggler']:.2f}",
                f"{1e6 * p['inrun_link']['alpha_s']:.1f}", f"{8e-9 / beta:.3f}" if beta > 0 else "-",
                f"{p['load_before']:.1f}"])) + " |")
        lines.append("")
        # The α-β model extrapolates in N only if the link fitted at each N (through the ring formula) is the same.
        series = {}
        for p in own:
            if p["inrun_link"]["beta_s_per_byte"] > 0:
                series.setdefault((os.path.basename(p["config"]), p["sync"], p.get("rate") or "-"), {})[p["ranks"]] = \
                    8e-9 / p["inrun_link"]["beta_s_per_byte"]
        ns = sorted({n for v in series.values() for n in v})
        if len(ns) > 1:
            lines += ["### The link fitted at each N (Gbit/s through the ring formula)", "",
                      "If the alpha-beta model held across N, each row would be flat: a prediction at N from the link "
                      "fitted at the smallest N is off by the ratio (last column: largest N's / smallest N's).", "",
                      "| config | sync | rate | " + " | ".join(f"N={n}" for n in ns) + " | ratio |",
                      "|" + "---|" * (len(ns) + 4)]
            for (c, sy, r), v in series.items():
                lo, hi = min(v), max(v)
                lines.append(f"| {c} | {sy} | {r} | " + " | ".join(f"{v[n]:.3f}" if n in v else "-" for n in ns) +
                             f" | {v[hi] / v[lo]:.2f} |")
            lines.append("")
    lines += [f"![{n}]({n})" for n in pngs]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
