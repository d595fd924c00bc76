#!/usr/bin/python3
"""Scaling sweeps: configs x ranks x batch x sync settings, each point a real `ringtrain train` with its own
summary.json; repeats interleaved (1, N, 1, N ...), medians; the ceiling (N independent single-rank copies at once);
optionally `ringtrain predict` next to each measured point, and every multi-rank point's own prediction (its
summary.json "predicted"). Placements: local mpirun, emulated hosts (network namespaces with a tc rate per link,
scripts/cluster/), or Slurm (an sbatch array per config and rank count, scripts/slurm/cpu.sbatch). Output:
rows.json, report.md and PNG plots. A point that fails (or runs past timeout_s) stops the sweep, but the points
that finished are written (rows.json marked "incomplete", report.md, plots); --resume continues the same sweep in
the same folder, reusing every finished point and running the rest.

Usage: bench/sweep.py SWEEP.json [--out DIR] [--bin PATH] [--dry-run] [--resume]
Run with Debian's /usr/bin/python3 (python3-matplotlib). Definitions and the sweep file's keys: docs/scaling.md.

Weak scaling: the per-rank batch is fixed (`batch` = per-rank batch); efficiency = samples/s at N / (N x samples/s
at 1 with the same per-rank batch). Strong scaling: the global batch is fixed (`batch` = global batch, split over the
N ranks); efficiency = samples/s at N / (N x samples/s at 1 rank training the whole global batch).
"""
import argparse
import collections
import contextlib
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
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
SPEC_FILE = "sweep-spec.json"  # in the output folder: the sweep that made it (what --resume compares)
# Keys that do not change what a point measures: a --resume may change them (e.g. a longer timeout_s after a point
# ran past it).
RESUME_FREE = ("description", "timeout_s")
# --dry-run: the commands listed, counted by kind for its closing line (how much the real run would start).
DRY_RUN = collections.Counter()
DRY_KINDS = {"hosts": "emulated-host command(s) (scripts/cluster)",
             "sbatch": "Slurm array(s) (sbatch --wait, one after another, one task at a time)",
             "point": "point run(s) (ringtrain train, one after another)",
             "ceiling": "ceiling copies (one-rank ringtrain train, a point's N at once, after that point)",
             "predict": "predictor run(s) (ringtrain predict, after every point)"}


def fail(msg):
    print(f"sweep.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


# `ringtrain predict --link RATE[,LATENCY]`'s grammar, mirrored from scaling::parse_link (src/scaling/link.cpp):
# a number as strtod reads it (decimal or hex; > 0, at most 1e18) then a unit, case-insensitive; the latency is
# optional (5us). Checked here so that a bad link stops the sweep before its points run, not after all of them.
LINK_NUMBER = re.compile(r"\s*([+-]?(?:0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?|(?:\d+\.?\d*|\.\d+)"
                         r"(?:e[+-]?\d+)?))", re.I)
LINK_UNITS = {"rate": ("gbit", "mbit", "kbit"), "latency": ("us", "ms", "s")}


def link_problem(text):
    """Why `ringtrain predict --link TEXT` would refuse TEXT (its own wording), or None when it parses."""
    rate, comma, latency = text.partition(",")
    for what, part in (("rate", rate), ("latency", latency if comma else "5us")):
        m = LINK_NUMBER.match(part)
        try:
            v = None if m is None else (float.fromhex(m.group(1)) if "x" in m.group(1).lower() else float(m.group(1)))
        except ValueError:
            v = None
        if v is None or not 0 < v <= 1e18:
            return f"{what} {part!r} needs a positive number first"
        unit = part[m.end():].lower()
        if unit not in LINK_UNITS[what]:
            return f"{what} {part!r}: unknown unit {unit!r}; use {', '.join(LINK_UNITS[what][:-1])} or " \
                   f"{LINK_UNITS[what][-1]}"
    return None


def list_command(cmd, kind):
    """--dry-run: print one command the real run would start, counted by kind (DRY_KINDS)."""
    print(" ".join(cmd))
    DRY_RUN[kind] += 1


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)  # JSON's true/false are Python ints


def load_spec(path):
    """The sweep file, every key's type and range checked (one line naming the file and the key, exit 2) before
    anything runs; defaults filled in."""
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

    def unique(key, values, shown=None, noun=""):
        """Refuse a repeated value of a key the points are grouped by: both would be merged into one row (the
        median of two settings) and share one baseline."""
        seen = set()
        for v, s in zip(values, shown or values):
            if v in seen:
                fail(f"{path}: {key} lists {noun}{s!r} twice; remove or rename one (the points are grouped by "
                     "it: both would be merged into one row)")
            seen.add(v)

    def strings(key, v, example, sets=False):
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            fail(f"{path}: {key} must be a list of strings, e.g. {example} (got {json.dumps(v)})")
        for x in v if sets else ():
            if "=" not in x or x.startswith("="):
                fail(f"{path}: {key}: {x!r} is not a key=value override (e.g. \"train.max_steps=20\")")

    if not isinstance(spec["name"], str) or not spec["name"] or "/" in spec["name"] or spec["name"] in (".", ".."):
        fail(f"{path}: name must be a non-empty string without '/' (the output folder runs/sweeps/NAME)")
    if not isinstance(spec.get("description", ""), str):
        fail(f"{path}: description must be a string")
    if not isinstance(spec["configs"], list) or not spec["configs"] or \
            not all(isinstance(c, str) and c for c in spec["configs"]):
        fail(f"{path}: configs must be a non-empty list of config files, e.g. [\"configs/logreg_fashion.json\"]")
    unique("configs", [os.path.normpath(c) for c in spec["configs"]], spec["configs"])
    if not isinstance(spec["ranks"], list) or not spec["ranks"] or \
            not all(is_int(n) and n >= 1 for n in spec["ranks"]) or 1 not in spec["ranks"]:
        fail(f"{path}: ranks must be a list of positive integers that includes 1 (the efficiency baseline), "
             f"e.g. [1, 2, 4] (got {json.dumps(spec['ranks'])})")
    unique("ranks", spec["ranks"])
    if "batch" in spec:
        if not isinstance(spec["batch"], list) or not spec["batch"] or \
                not all(is_int(b) and b >= 1 for b in spec["batch"]):
            fail(f"{path}: batch must be a list of positive integers, e.g. [64, 128], or left out for the config's "
                 f"own (got {json.dumps(spec['batch'])})")
        unique("batch", spec["batch"])
    spec.setdefault("scaling", "weak")
    if spec["scaling"] not in ("weak", "strong"):
        fail(f"{path}: scaling must be weak or strong (got {json.dumps(spec['scaling'])})")
    if spec["scaling"] == "strong" and "batch" not in spec:
        fail(f"{path}: strong scaling needs batch: the global batches to split over the ranks, e.g. \"batch\": [128]")
    spec.setdefault("batch", [None])
    spec.setdefault("sync", [{"name": "default", "set": []}])
    if not isinstance(spec["sync"], list) or not spec["sync"]:
        fail(f"{path}: sync must be a non-empty list of {{\"name\": ..., \"set\": [\"sync.key=value\", ...]}}")
    for i, s in enumerate(spec["sync"]):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not s["name"] or \
                set(s) - {"name", "set"}:
            fail(f"{path}: sync[{i}] must be {{\"name\": \"...\", \"set\": [\"sync.key=value\", ...]}} "
                 f"(got {json.dumps(s)})")
        s.setdefault("set", [])
        strings(f"sync[{i}] ({s['name']}) set", s["set"], "[\"sync.backend=ring\"]", sets=True)
    unique("sync", [s["name"] for s in spec["sync"]], noun="the name ")
    spec.setdefault("set", [])
    strings("set", spec["set"], "[\"train.max_steps=20\"]", sets=True)
    spec.setdefault("placement", "local")
    if spec["placement"] not in ("local", "netns", "slurm"):
        fail(f"{path}: placement must be local, netns or slurm (got {json.dumps(spec['placement'])})")
    spec.setdefault("repeats", 1)
    if not is_int(spec["repeats"]) or spec["repeats"] < 1:
        fail(f"{path}: repeats must be a positive integer")
    spec.setdefault("ceiling", False)
    if not isinstance(spec["ceiling"], bool):
        fail(f"{path}: ceiling must be true or false")
    spec.setdefault("mpirun_flags", [])
    strings("mpirun_flags", spec["mpirun_flags"], "[\"--bind-to\", \"core\"]")
    spec.setdefault("slurm_flags", [])
    strings("slurm_flags", spec["slurm_flags"], "[\"-p\", \"cpu\"]")
    spec.setdefault("timeout_s", 900)
    if not isinstance(spec["timeout_s"], (int, float)) or isinstance(spec["timeout_s"], bool) or \
            not spec["timeout_s"] > 0:
        fail(f"{path}: timeout_s must be a positive number of seconds (got {json.dumps(spec['timeout_s'])})")
    if "predict" in spec:
        pr = spec["predict"]
        if not isinstance(pr, dict) or set(pr) - {"link", "repeats"}:
            fail(f"{path}: predict must be {{\"link\": \"measure\"}} or {{\"link\": \"10gbit,5us\"}}, with "
                 f"\"repeats\": R optional (got {json.dumps(pr)})")
        if not is_int(pr.get("repeats", 1)) or pr.get("repeats", 1) < 1 or pr.get("repeats", 1) % 2 == 0:
            fail(f"{path}: predict.repeats must be an odd whole number >= 1 (got {json.dumps(pr['repeats'])}): how "
                 f"many times each prediction runs, the median kept (of an even count there is no middle one)")
        link = pr.get("link", "measure")
        why = link_problem(link) if isinstance(link, str) and link != "measure" else None
        if not isinstance(link, str) or why:
            fail(f"{path}: predict.link {json.dumps(link)} is not a link `ringtrain predict --link` takes "
                 f"({why or 'not a string'}): use \"measure\" or RATE[,LATENCY], e.g. \"10gbit,5us\"")
    if "rates" in spec and spec["placement"] != "netns":
        fail(f"{path}: rates (a tc rate per emulated link) need placement netns")
    # Flags a placement would not pass on are refused, as rates are, rather than silently dropped.
    if spec["slurm_flags"] and spec["placement"] != "slurm":
        fail(f"{path}: slurm_flags go to sbatch, which only placement slurm runs; remove them or set placement slurm")
    if spec["mpirun_flags"] and spec["placement"] == "slurm":
        fail(f"{path}: mpirun_flags are not used under placement slurm (srun starts the ranks); remove them, or put "
             "launcher options in slurm_flags")
    spec.setdefault("rates", ["none"] if spec["placement"] == "netns" else [None])
    if spec["placement"] == "netns":
        if not isinstance(spec["rates"], list) or not spec["rates"] or not all(
                isinstance(r, str) and (r == "none" or r.rstrip("kmgbit").replace(".", "", 1).isdigit() and
                                        r[len(r.rstrip("kmgbit")):] in ("kbit", "mbit", "gbit"))
                for r in spec["rates"]):
            fail(f"{path}: rates must be a list of tc rates like \"100mbit\", \"1gbit\", \"10gbit\" (or \"none\")")
        unique("rates", spec["rates"])
        if max(spec["ranks"]) > 50:
            fail(f"{path}: placement netns runs one rank per emulated host, at most 50")
    for c in spec["configs"]:
        if not os.path.isfile(os.path.join(ROOT, c)):
            fail(f"{path}: config {c!r} not found (paths are relative to the repository root)")
    # The ceiling is N copies of the one-rank baseline's work at once: with strong scaling that baseline trains the
    # whole global batch (not what each of N ranks does), and a Slurm array runs one point at a time.
    if spec["ceiling"] and spec["scaling"] == "strong":
        fail(f"{path}: ceiling needs weak scaling (strong scaling's one-rank baseline trains the whole global batch, "
             "not one rank's share); set \"ceiling\": false")
    if spec["ceiling"] and spec["placement"] == "slurm":
        fail(f"{path}: ceiling is not run under placement slurm (the array runs one point at a time); set "
             "\"ceiling\": false or use placement local")
    if spec["scaling"] == "strong":
        for b in spec["batch"]:
            for n in spec["ranks"]:
                if b % n:
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
            list_command(cmd, "hosts")
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
    time (%1: concurrent points would share the cores), waited for. Returns why it failed (one line), or None."""
    lines = os.path.join(out, f"{tag}.lines")
    with open(lines, "w") as f:
        for sets in tasks:
            f.write(" ".join(sum((["--set", x] for x in sets), [])) + "\n")
    env = dict(os.environ, RINGTRAIN_SWEEP=lines, RINGTRAIN_BIN=binary, RINGTRAIN_REQUEUE="0")
    cmd = ["sbatch", "--wait", "--parsable", f"--array=0-{len(tasks) - 1}%1", "-n", str(n), "-J", tag,
           "-o", os.path.join(out, "%x-%A_%a.out"), "-t", str(max(1, int(spec["timeout_s"]) // 60))] + \
        spec["slurm_flags"] + [os.path.join(ROOT, "scripts/slurm/cpu.sbatch"), cfg]
    with open(os.path.join(out, f"{tag}.log"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        try:
            p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               timeout=spec["timeout_s"] * (len(tasks) + 1))
        except subprocess.TimeoutExpired:
            return f"the Slurm array {tag} ran past {len(tasks) + 1} x timeout_s; see {out}/{tag}.log"
    if p.returncode != 0:
        return f"the Slurm array {tag} failed (exit {p.returncode}); see {out}/{tag}.log and {out}/{tag}-*.out"
    return None


def trainer_error(lines):
    """The trainer's own one-line reason among its output lines (bad input names the file or key and what to do),
    without the rank prefix mpirun's ranks add; None when there is none."""
    for line in lines:
        if line.startswith("ringtrain: error: "):
            why = line[len("ringtrain: error: "):].strip()
            return why.split(": ", 1)[1] if re.match(r"rank \d+: ", why) else why
    return None


def first_error(log):
    """trainer_error of a failed point's log."""
    try:
        with open(log, errors="replace") as f:
            return trainer_error(f)
    except OSError:
        return None


def check_overrides(spec, groups, path, binary):
    """Every distinct (config, overrides) the points pass to the trainer (their ceiling copies and the predictor pass
    the same), checked before any point runs with one `ringtrain info --config C --set ...` each (well under a
    second; it reads no data): a bad key or value in a later sync group would otherwise stop the sweep only after
    every earlier point ran. `info` exits 2 with one line naming the key; the sweep then exits 2 naming the file, the
    first point with those overrides and that line. Any other failure of `info` (it cannot start here) leaves the
    check to the points, with a note."""
    seen = set()
    for gi, (cfg, sync, b, rate) in enumerate(groups):
        for n in spec["ranks"]:
            sets = point_sets(spec, sync, b, n)
            if (cfg, tuple(sets)) in seen:
                continue
            seen.add((cfg, tuple(sets)))
            cmd = [binary, "info", "--config", cfg] + sum((["--set", x] for x in sets), [])
            try:
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as e:
                print(f"sweep.py: note: the overrides were not checked up front ({e}); the points will",
                      file=sys.stderr)
                return
            if p.returncode == 2:
                lines = p.stderr.splitlines()
                why = trainer_error(lines) or (lines[-1].strip() if lines else "exit 2")
                fail(f"{path}: point g{gi}-n{n}-r0 ({point_text(cfg, sync, b, rate, n, 0)}): the trainer refuses "
                     f"its overrides: {why}")
            if p.returncode != 0:
                print(f"sweep.py: note: the overrides were not checked up front (`ringtrain info` exited "
                      f"{p.returncode}: {p.stderr.strip()[-200:]}); the points will", file=sys.stderr)
                return


class Failed(Exception):
    """A step of the sweep failed; the message is the one line to print."""


class PointFailed(Failed):
    """A point of the sweep failed (its run or a ceiling copy exited non-zero, ran past timeout_s, or left no
    complete summary.json): `tag` is its folder's name under points/, `log` the log to read, `where` what it was."""

    def __init__(self, msg, tag, log, where):
        super().__init__(msg)
        self.tag, self.log, self.where = tag, log, where


def run(cmd, log, timeout, what="a point"):
    """Run cmd with its output in log; Failed (naming `what`, the trainer's own reason and the log) when it fails or
    runs past timeout."""
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        # Its own process group: a timeout (or the sweep being stopped) ends mpirun and its ranks, none left
        # writing into the point's folder that a --resume clears and runs again.
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(p)
            raise Failed(f"{what} ran past timeout_s ({timeout} s); see {log}") from None
        except BaseException:  # SIGTERM (sys.exit), Ctrl-C
            stop_group(p)
            raise
    if code != 0:
        why = first_error(log)
        raise Failed(f"{what} failed (exit {code}){': ' + why if why else ''}; see {log}")


def stop_group(p):
    """SIGTERM to p's process group (mpirun passes it to its ranks), then SIGKILL to whatever is left of it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def read_summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


SUMMARY_PROBLEMS = (OSError, ValueError, KeyError, TypeError, AttributeError, statistics.StatisticsError)


def write_atomically(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(path + ".tmp", path)


def finished_row(d):
    """The row of a point whose run finished, for --resume: POINT.row.json (written once the run, its summary.json
    and its ceiling copies were done) and a summary.json with every field a row reads; None otherwise (never run,
    failed, killed half-way): that point runs again."""
    try:
        with open(d + ".row.json") as f:
            row = json.load(f)
        point_row(read_summary(d), row["ranks"])
        if "ceiling_samples_per_s" in row:
            for di in sorted(glob.glob(glob.escape(d) + "-alone*[0-9]")):
                point_row(read_summary(di), 1)
    except SUMMARY_PROBLEMS:
        return None
    return row


def clear_point(d):
    """Remove what an earlier, unfinished run of this point left (its folder, log, row, ceiling copies), so that
    its rerun starts from nothing (no stale checkpoint to resume from, no old summary.json)."""
    for path in [d, d + ".log", d + ".row.json", d + ".row.json.tmp"] + glob.glob(glob.escape(d) + "-alone*"):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


def spec_identity(spec):
    """What --resume compares: the normalized sweep (defaults filled in) less the keys that do not change what a
    point measures, and its sha256."""
    kept = {k: v for k, v in spec.items() if k not in RESUME_FREE}
    return kept, hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def check_resume(spec, out):
    """--resume on a folder with points: refused (exit 2, one line) unless SPEC_FILE there says the same sweep."""
    path = os.path.join(out, SPEC_FILE)
    try:
        with open(path) as f:
            stored = json.load(f)
        old, digest = stored["spec"], stored["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"--resume: {out} holds points but no readable {SPEC_FILE} ({e.__class__.__name__}): it cannot be shown "
             "to be this sweep's; remove it or pass another --out")
    new, new_digest = spec_identity(spec)
    if digest != new_digest:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)) if isinstance(old, dict) else []
        what = f"{diff[0]!r} is {json.dumps(old.get(diff[0]))} there, {json.dumps(new.get(diff[0]))} here" if diff \
            else "its sha256 differs"
        fail(f"--resume: {out} was made by a different sweep ({what}); resume with the sweep file that made it, or "
             "pass another --out")


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
        # After the first step (the trainer's steady_step_s; None from a binary before it, or a sparse run): what a
        # prediction, a warm step's, is compared with. train_s / steps spreads the first step's set-up over a short run.
        "steady_step_s": summary.get("steady_step_s"),
        "phase_s": {k: v / steps for k, v in summary["phase_s"].items()},
        "bytes_sent_per_step_per_rank": statistics.mean(summary["bytes_sent_per_rank"]) / steps,
        "test_accuracy": summary.get("test_accuracy"),
        "test_auc": summary.get("test_auc"),  # sparse runs: accuracy alone can be the constant predictor's
        "learning_stalled": summary.get("learning_stalled"),  # a note when the model ended at chance
        "wait_for_slowest": summary.get("stragglers", {}).get("wait_for_slowest_fraction"),
        "wait_for_slowest_s": slowest_wait_per_step(summary),  # per step, part of sync_wait
    }


def main():
    # The docstring's first paragraph (whole sentences: its first line stops mid-sentence), then where the rest is.
    paragraphs = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(description=paragraphs[0], epilog=paragraphs[1].split("\n", 1)[1])
    ap.add_argument("sweep")
    ap.add_argument("--out", help="output folder [runs/sweeps/NAME]")
    ap.add_argument("--bin", default=os.environ.get("RINGTRAIN_BIN", os.path.join(ROOT, "build/ringtrain")))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--resume", action="store_true",
                    help="continue the sweep in --out (same sweep file): reuse every point that finished, run the rest")
    a = ap.parse_args()
    # SIGTERM (a kill, a time limit) unwinds like an error, so the emulated hosts are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    spec = load_spec(a.sweep)
    a.bin = os.path.abspath(a.bin)
    out = os.path.abspath(a.out or os.path.join(ROOT, "runs/sweeps", spec["name"]))
    if not a.dry_run and not os.access(a.bin, os.X_OK):
        fail(f"{a.bin}: no ringtrain binary; build it (scripts/build.sh) or pass --bin")
    if not a.dry_run and os.path.isdir(os.path.join(out, "points")) and os.listdir(os.path.join(out, "points")):
        if not a.resume:
            fail(f"{out} holds an earlier sweep's points; remove it, pass another --out, or pass --resume to continue "
                 "that sweep (same sweep file: its finished points are kept, the rest run)")
        check_resume(spec, out)
    if os.geteuid() == 0:
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # Groups share one efficiency baseline: (config, sync, batch value, link rate).
    groups = [(c, s, b, r) for c in spec["configs"] for s in spec["sync"] for b in spec["batch"] for r in spec["rates"]]
    if os.access(a.bin, os.X_OK):
        check_overrides(spec, groups, a.sweep, a.bin)
    else:  # (--dry-run only: a real run needs the binary, above)
        print(f"sweep.py: note: no ringtrain binary at {a.bin}: the overrides are listed unchecked", file=sys.stderr)
    os.makedirs(os.path.join(out, "points"), exist_ok=True)
    if not a.dry_run:
        kept, digest = spec_identity(spec)
        write_atomically(os.path.join(out, SPEC_FILE), {"spec": kept, "sha256": digest,
                                                        "sweep_file": os.path.abspath(a.sweep)})

    if spec["placement"] == "slurm" and not a.dry_run:
        why = slurm_running()
        if why:
            print(f"sweep.py: placement slurm: skipped: {why}", file=sys.stderr)
            sys.exit(SKIPPED)

    raw = []  # every run, in the sweep's order; with --resume a finished point's row is reused as it was (same
    reused = []  # point name, repeat and load), so the medians come out as in a sweep that never stopped
    failed = None
    hosts = EmulatedHosts(max(spec["ranks"]), a.dry_run) if spec["placement"] == "netns" else contextlib.nullcontext()
    with hosts:
        try:
            for rep in range(spec["repeats"]):  # interleaved: every N of a group inside each repeat
                if spec["placement"] == "slurm":
                    for cfg in spec["configs"]:
                        slurm_arrays(spec, groups, cfg, rep, a, out, raw, reused)
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
                        row = run_point(spec, a, out, gi, cfg, sync, b, rate, n, rep, reused)
                        if row:
                            raw.append(row)
        except PointFailed as e:  # the runs that finished are written all the same, below; --resume continues
            failed = e
        if a.dry_run:  # raw holds the points' stand-in rows: the predictor's runs follow from them as from real ones
            if "predict" in spec:
                predict_points(list({key(r): r for r in raw}.values()), spec, a.bin, out, hosts, dry_run=True)
        else:
            points = aggregate(raw, spec)
            predict_failed = None
            if "predict" in spec and not failed:  # (netns: still on the emulated hosts, --measure over each rate)
                try:
                    predict_points(points, spec, a.bin, out, hosts)
                except Failed as e:  # the measured points are written all the same, below
                    predict_failed = str(e)
    if a.dry_run:  # (here: the emulated hosts' removal is listed too) what the real run would start, by kind
        print("# --dry-run: " + ", ".join(f"{v} {DRY_KINDS[k]}" for k, v in DRY_RUN.items()))
        return
    resume_cmd = shlex.join(sys.argv + ([] if a.resume else ["--resume"]))
    doc = {"sweep": spec, "command": " ".join(sys.argv), "points": points, "runs": raw}
    if a.resume:
        doc["resumed"] = {"reused_points": reused, "runs_reused": len(reused)}
    if failed:
        doc["incomplete"] = {"failed_point": failed.tag, "point": failed.where, "reason": str(failed),
                             "log": failed.log, "runs_kept": len(raw), "resume": resume_cmd}
    if predict_failed:
        doc["predict_failed"] = predict_failed
    write_atomically(os.path.join(out, "rows.json"), doc)
    pngs = plot(points, out) if points else []
    write_report(doc, pngs, out)
    print(f"wrote {out}/rows.json, {out}/report.md and {len(pngs)} plots" +
          (f" ({len(reused)} run(s) reused)" if a.resume else "") + (" (incomplete)" if failed else ""))
    if failed:
        fail(f"point {failed.tag} ({failed.where}): {failed}; the {len(raw)} run(s) that finished are kept in "
             f"{out}/rows.json and report.md (marked incomplete); fix the cause and continue with: {resume_cmd}")
    if predict_failed:
        fail(f"the prediction step failed, not a point: {predict_failed}. Every point was measured and kept: "
             f"{out}/rows.json and report.md, with the predictions made before it only (predict them later: "
             f"bench/device/extrapolate.py {out}/rows.json --out DIR [--link RATE,LATENCY], or rerun only the "
             f"prediction: {resume_cmd})")


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


def batch_text(b):
    return " (the config's batch)" if b is None else f" batch {b}"


def point_text(cfg, sync, b, rate, n, rep):
    return f"{cfg} {sync['name']}{batch_text(b)}{'' if rate is None else ' ' + rate} N={n} rep {rep}"


def dry_row(cfg, sync, b, rate, n, rep, spec):
    """--dry-run's stand-in for a point's row: what grouping it and predicting it read."""
    return {"config": cfg, "sync": sync["name"], "batch": b, "rate": rate, "ranks": n, "repeat": rep,
            "batch_per_rank": None if b is None else (b if spec["scaling"] == "weak" else b // n)}


def ceiling_copies(spec, args, d, n):
    """The ceiling's N independent single-rank copies of a point (args: its ringtrain train arguments, d: its
    folder): (command, the copy's folder) each, started all at once."""
    copies = []
    for i in range(n):  # no communication at all
        di = f"{d}-alone{i}"
        # Where the ranks are bound one to a core, so is each copy (a copy free to use every core would start
        # a parse or prefetch thread the bound ranks do not have).
        pin = ["taskset", "-c", str(i % os.cpu_count())] if binds_to_core(spec) else []
        copies.append((pin + ["mpirun"] + LOCAL_FLAGS + ["-np", "1"] + [x if not x.startswith("output.dir=") else
                                                                     f"output.dir={di}" for x in args], di))
    return copies


def run_point(spec, a, out, gi, cfg, sync, b, rate, n, rep, reused):
    """One point: its row (reused as it was when an earlier run of it finished: --resume), or PointFailed. With
    --dry-run its commands (the point's, then its ceiling copies') are listed and a stand-in row returned."""
    sets = point_sets(spec, sync, b, n)
    tag = f"g{gi}-n{n}-r{rep}"
    d = os.path.join(out, "points", tag)
    args = [a.bin, "train", "--config", cfg] + sum((["--set", s] for s in sets), []) + \
           ["--set", f"output.dir={d}", "--set", "output.progress=none"]
    cmd = launcher(spec, n) + args
    if a.dry_run:
        list_command(cmd, "point")
        for ci, _ in ceiling_copies(spec, args, d, n) if spec["ceiling"] and n > 1 else ():
            list_command(ci, "ceiling")
        return dry_row(cfg, sync, b, rate, n, rep, spec)
    where = point_text(cfg, sync, b, rate, n, rep)
    row = finished_row(d) if a.resume else None
    if row is not None:
        reused.append(tag)
        print(f"[reused] {where}: {row['samples_per_s']:.0f} samples/s", flush=True)
        return row
    clear_point(d)  # a half-written folder of a failed or killed earlier run
    t0 = time.time()
    load_before = os.getloadavg()[0]  # other tenants' load: the model cannot see it, the report shows it
    try:
        run(cmd, d + ".log", spec["timeout_s"])
    except Failed as e:
        raise PointFailed(str(e), tag, d + ".log", where) from None
    try:
        row = measured_row(read_summary(d), cfg, sync, b, rate, n, rep,
                           os.path.relpath(os.path.join(d, "summary.json"), out), load_before)
    except SUMMARY_PROBLEMS as e:
        raise PointFailed(f"a point exited 0 without a complete {d}/summary.json ({e!r}); see {d}.log", tag,
                          d + ".log", where) from None
    print(f"[{time.time() - t0:6.1f}s] {where}: {row['samples_per_s']:.0f} samples/s" +
          (f", own prediction {100 * row['inrun_error']:+.0f} %" if "inrun_error" in row else ""), flush=True)
    if spec["ceiling"] and n > 1:  # (weak scaling, not under Slurm: load_spec refuses the others)
        procs = []
        for ci, di in ceiling_copies(spec, args, d, n):  # N independent single-rank copies at once
            procs.append((subprocess.Popen(ci, stdout=subprocess.DEVNULL, stderr=open(di + ".log", "w"),
                                           cwd=ROOT), di))
        codes = [p.wait() for p, _ in procs]  # all of them, so that none is left running
        for code, (_, di) in zip(codes, procs):
            if code != 0:
                why = first_error(di + ".log")
                raise PointFailed(f"a ceiling copy failed (exit {code}){': ' + why if why else ''}; see {di}.log",
                                  tag, di + ".log", where + " (ceiling)")
        try:
            row["ceiling_samples_per_s"] = sum(read_summary(di)["samples_per_s"] for _, di in procs)
        except SUMMARY_PROBLEMS as e:
            raise PointFailed(f"a ceiling copy left no complete summary.json ({e!r}); see {d}-alone*.log", tag,
                              procs[0][1] + ".log", where + " (ceiling)") from None
    write_atomically(d + ".row.json", row)  # the point is finished: what --resume reuses
    return row


def slurm_arrays(spec, groups, cfg, rep, a, out, raw, reused):
    """placement slurm: per rank count, one sbatch array whose tasks are this config's points (sync x batch), in the
    order of ranks (an array's tasks share -n, and cpu.sbatch takes one config); their rows are appended to raw, in
    the sweep's order. With --resume a finished point is reused and the array holds only the others. A failed array:
    its points that finished are kept, then PointFailed (the first point without a complete summary.json)."""
    for n in spec["ranks"]:
        tag = f"{os.path.basename(cfg).replace('.json', '')}-n{n}-r{rep}"
        points = []
        for gi, (c, sync, b, rate) in enumerate(groups):
            if c != cfg:
                continue
            d = os.path.join(out, "points", f"g{gi}-n{n}-r{rep}")
            points.append((sync, b, rate, d, point_sets(spec, sync, b, n) + [f"output.dir={d}", "output.progress=none"]))
        if a.dry_run:  # one array; a line per task (its point)
            DRY_RUN["sbatch"] += 1
            for i, (sync, b, rate, _, sets) in enumerate(points):
                list_command(["sbatch", f"--array={i}", "-n", str(n), "-J", tag, "scripts/slurm/cpu.sbatch", cfg] +
                             sum((["--set", x] for x in sets), []), "point")
                raw.append(dry_row(cfg, sync, b, rate, n, rep, spec))
            continue
        done = {pt[3]: finished_row(pt[3]) if a.resume else None for pt in points}
        todo = [pt for pt in points if done[pt[3]] is None]
        for pt in todo:
            clear_point(pt[3])  # a half-written folder of a failed or killed earlier run
        load_before = os.getloadavg()[0]
        why = run_slurm_array(spec, cfg, n, [p[4] for p in todo], a.bin, out, tag) if todo else None
        failed = None
        for sync, b, rate, d, _ in points:
            where = point_text(cfg, sync, b, rate, n, rep)
            if done[d] is not None:
                raw.append(done[d])
                reused.append(os.path.basename(d))
                print(f"[reused] {where}: {done[d]['samples_per_s']:.0f} samples/s", flush=True)
                continue
            try:
                row = measured_row(read_summary(d), cfg, sync, b, rate, n, rep,
                                   os.path.relpath(os.path.join(d, "summary.json"), out), load_before)
            except SUMMARY_PROBLEMS as e:  # the array's other points are kept all the same
                failed = failed or PointFailed((why or f"the Slurm array {tag} exited 0") + "; this point left no "
                                               f"complete summary.json ({e.__class__.__name__})", os.path.basename(d),
                                               os.path.join(out, f"{tag}.log"), where)
                continue
            write_atomically(d + ".row.json", row)
            raw.append(row)
            print(f"{where} (Slurm array {tag}): {row['samples_per_s']:.0f} samples/s", flush=True)
        if failed:
            raise failed
        if why:  # every point has its summary, yet sbatch failed: stop all the same (rows kept)
            raise PointFailed(why, tag, os.path.join(out, f"{tag}.log"), f"{cfg} N={n} rep {rep} (Slurm array)")


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
             "steady_step_s": (statistics.median(r["steady_step_s"] for r in rs)
                               if all(r.get("steady_step_s") for r in rs) else None),
             "bytes_sent_per_step_per_rank": med(lambda r: r["bytes_sent_per_step_per_rank"]),
             "phase_s": {k: med(lambda r: r["phase_s"][k]) for k in rs[0]["phase_s"]}}
        acc = [r["test_accuracy"] for r in rs if r["test_accuracy"] is not None]
        p["test_accuracy"] = statistics.median(acc) if acc else None
        p["learning_stalled"] = next((r["learning_stalled"] for r in rs if r.get("learning_stalled")), None)
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
        base = next((q for q in points if key(q) == key(p, 1)), None)
        if base is None:  # an incomplete sweep that stopped before this group's one-rank baseline ran
            p["efficiency"] = None
            continue
        p["efficiency"] = p["samples_per_s"] / (p["ranks"] * base["samples_per_s"])
        if "ceiling_samples_per_s" in p:
            p["ceiling"] = p["ceiling_samples_per_s"] / (p["ranks"] * base["samples_per_s"])
            p["of_ceiling"] = p["samples_per_s"] / p["ceiling_samples_per_s"]
    return points


def add_predictions(points, spec, binary, out, hosts):
    """predict_points, a failure stopping the caller (exit 2, one line): bench/device/extrapolate.py's pass."""
    try:
        predict_points(points, spec, binary, out, hosts)
    except Failed as e:
        fail(str(e))


def median_run(runs, n):
    """Of repeated predictions (each {N: row}), the one whose step at N is the median (the lower of the middle two
    when a failed round left an even count), whole: its one-rank row (what calibration scales by), terms and
    dominant term come from the same profile. None when no run has N."""
    having = sorted((r for r in runs if n in r), key=lambda r: r[n]["step_s"])
    return having[(len(having) - 1) // 2] if having else None


def predict_points(points, spec, binary, out, hosts, dry_run=False):
    """`ringtrain predict` once per (config, sync, per-rank batch, rate): the link given, or fitted with --measure
    (over the emulated hosts at that rate with placement netns). With --measure, once per point's rank count N too,
    launched on N ranks (at least 2): they profile side by side, so the prediction carries N ranks' contention and
    the wait for the slowest of them. predict.repeats R > 1 (odd): each of those R times, in R interleaved rounds
    (every prediction once a round, as the points' repeats are), and per N the run with the median step
    (predict-K-rR.json). Failed when the predictor fails or its output is unreadable; the points get what the runs
    before that gave. dry_run: list the commands (points: dry_row's), run nothing."""
    link = spec["predict"].get("link", "measure")
    repeats = spec["predict"].get("repeats", 1)
    ranks = sorted({p["ranks"] for p in points})  # 1 too: how well one rank's profile matches the training loop
    wanted = {}  # prediction key -> a point that needs it, in the points' order

    def prediction_key(p):
        measured_on = max(2, p["ranks"]) if link == "measure" else None
        return (p["config"], p["sync"], p["batch_per_rank"], p.get("rate") if link == "measure" else None, measured_on)

    for p in points:
        wanted.setdefault(prediction_key(p), p)
    runs = {ck: [] for ck in wanted}
    try:
        for rep in range(repeats):
            for k, (ck, p) in enumerate(wanted.items()):
                sync = next(s for s in spec["sync"] if s["name"] == p["sync"])
                js = os.path.join(out, f"predict-{k}.json" if repeats == 1 else f"predict-{k}-r{rep}.json")
                bpr = p["batch_per_rank"]  # (None: --dry-run without batch: the config's, read once a point ran)
                sets = list(spec["set"]) + list(sync["set"]) + ([] if bpr is None else [f"train.batch_size={bpr}"])
                args = [binary, "predict", "--config", p["config"], "--ranks", ",".join(map(str, ranks)),
                        "--json", js] + sum((["--set", s] for s in sets), [])
                if link == "measure":
                    if p.get("rate") is not None:
                        hosts.shape(p["rate"])
                    cmd = launcher(spec, ck[4]) + args + ["--measure"]
                else:
                    cmd = args + ["--link", link]
                if dry_run:
                    list_command(cmd, "predict")
                    continue
                run(cmd, js[:-5] + ".log", spec["timeout_s"], what="the predictor (ringtrain predict)")
                try:
                    with open(js) as f:
                        runs[ck].append({r["ranks"]: r for r in json.load(f)["rows"]})
                except (OSError, ValueError, KeyError, TypeError) as e:
                    raise Failed(f"the predictor's output {js} is unreadable ({e!r}); see {js[:-5]}.log") from None
    finally:  # also after a failed run: the points keep what the runs before it gave
        for p in points:
            add_prediction(p, points, runs[prediction_key(p)], repeats)


def add_prediction(p, points, runs, repeats):
    """Point p's predicted fields from its prediction runs (each {N: row}): the median run at p's N."""
    chosen = median_run(runs, p["ranks"])
    if not chosen:
        return
    pred = chosen[p["ranks"]]
    if repeats > 1:
        p["predicted_step_s_repeats"] = sorted(r[p["ranks"]]["step_s"] for r in runs if p["ranks"] in r)
    else:  # (extrapolate.py predicts a finished sweep's rows again: not an earlier pass's list)
        p.pop("predicted_step_s_repeats", None)
    base = next((q for q in points if key(q) == key(p, 1)), None)
    measured, base_measured, p["measured_as"] = measured_steps(p, base)
    p["measured_step_s"] = measured
    p["predicted_step_s"] = pred["step_s"]
    p["predicted_dominant"] = pred["dominant"]
    p["prediction_error"] = (pred["step_s"] - measured) / measured
    exposed = pred["terms_s"]["communication"] + pred["terms_s"]["latency"]
    one = chosen.get(1)  # the same run's: its profile is the one the prediction scaled
    # Calibrated: the model's compute scaled so that its one-rank step is the sweep's own measured one (same
    # interleaved runs), i.e. only the communication model is being tested.
    calib = base_measured / one["step_s"] if one and base and one["step_s"] > 0 else 1.0
    if p.get("ceiling"):  # and slowed as much as N independent copies were (ranks sharing cores)
        calib /= p["ceiling"]
    if p["ranks"] > 1:
        p["predicted_step_calibrated_s"] = (pred["step_s"] - exposed) * calib + exposed
        p["prediction_calibrated_error"] = (p["predicted_step_calibrated_s"] - measured) / measured


def prediction_tally(points):
    """The report's line on `ringtrain predict` over the multi-rank points (issue 15's goal: within 15 % at every
    point), or nothing when none was predicted."""
    pred = [p for p in points if p["ranks"] > 1 and "prediction_error" in p]
    if not pred:
        return []
    errs = [abs(p["prediction_error"]) for p in pred]
    cal = [abs(p["prediction_calibrated_error"]) for p in pred if "prediction_calibrated_error" in p]
    line = (f"`ringtrain predict` at the {len(pred)} multi-rank point(s): {sum(e <= 0.15 for e in errs)} within 15 %, "
            f"|error| median {100 * statistics.median(errs):.1f} %, at most {100 * max(errs):.1f} %")
    if cal:
        line += f"; calibrated {sum(e <= 0.15 for e in cal)} of {len(cal)} within 15 %"
    return [line + ".", ""]


def measured_steps(p, base):
    """(the point's measured step, its one-rank base's (None without one), how both were measured). The predictor's
    step is a warm one, so the warm step (steady_step_s: the runs' mean step after the first, median over repeats)
    where the point and its base both have it; else train_s / steps for both (GPU and sparse runs, one-step runs,
    rows of a binary before steady_step_s), never the two ways in one comparison."""
    if p.get("steady_step_s") and (base is None or base.get("steady_step_s")):
        return p["steady_step_s"], base and base["steady_step_s"], "warm"
    return p["step_s"], base and base["step_s"], "train_s/steps"


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
    shown = [1.0]  # every efficiency and ceiling drawn (one above 1, e.g. a ceiling of 1.2, must not be cut off)
    for s in series:
        ps = sorted((p for p in points if label(p) == s), key=lambda p: p["ranks"])
        line, = ax1.plot([p["ranks"] for p in ps], [p["samples_per_s"] for p in ps], "o-", label=s)
        ps = [p for p in ps if p["efficiency"] is not None]  # (an incomplete sweep: no baseline yet)
        ax2.plot([p["ranks"] for p in ps], [p["efficiency"] for p in ps], "o-", color=line.get_color(), label=s)
        cs = [p for p in ps if "ceiling" in p]
        if cs:
            ax2.plot([p["ranks"] for p in cs], [p["ceiling"] for p in cs], "x--", color=line.get_color())
        shown += [p["efficiency"] for p in ps] + [p["ceiling"] for p in cs]
    ax1.set(xlabel="ranks", ylabel="samples/s", title="throughput")
    ax2.set(xlabel="ranks", ylabel="efficiency", title="efficiency (x--: ceiling)", ylim=(0, 1.1 * max(shown)))
    for ax in (ax1, ax2):  # ranks are whole: a tick at each measured count, none between them
        ax.set_xticks(sorted({p["ranks"] for p in points}))
    legend(ax1)
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
    legend(ax)
    fig.tight_layout()
    pngs.append(save(fig, out, "time_split.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for n in sorted({p["ranks"] for p in points if p["ranks"] > 1}):
        ps = sorted((p for p in points if p["ranks"] == n), key=lambda p: p["batch_per_rank"])
        ax.plot([p["batch_per_rank"] for p in ps], [p["bytes_sent_per_step_per_rank"] / 1e6 for p in ps], "o",
                label=f"N={n}")
    ax.set(xlabel="batch per rank", ylabel="MB sent per step per rank", title="bytes per step")
    legend(ax)
    fig.tight_layout()
    pngs.append(save(fig, out, "bytes_vs_batch.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in series:
        ps = sorted((p for p in points if label(p) == s and p["test_accuracy"] is not None),
                    key=lambda p: p["global_batch"])
        ax.plot([p["global_batch"] for p in ps], [p["test_accuracy"] for p in ps], "o", label=s)
    ax.set(xlabel="global batch", ylabel="test accuracy", title="accuracy vs global batch", xscale="log")
    legend(ax)
    fig.tight_layout()
    pngs.append(save(fig, out, "accuracy_vs_global_batch.png"))
    return pngs


def legend(ax):
    if ax.get_legend_handles_labels()[0]:  # (one rank only: no N > 1 series, and matplotlib warns at an empty one)
        ax.legend(fontsize=7)


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
             "/ (N x samples/s at 1). Prediction error = (predicted - measured) / measured step, measured as the warm step (the mean step after the first, median over repeats; step ms spreads the first step's set-up over the run; \"(all steps)\": train_s / steps, for the point and its one-rank base alike, where the runs do not give a warm step: GPU and sparse runs). Calibrated: the prediction with its compute scaled to the sweep's own measured one-rank step (and divided by the "
             "ceiling where there is one: ranks sharing cores), so only the communication model is tested. Load avg: the "
             "1-minute load average before the point (other tenants; the model assumes none). The time split is rank 0's, ms per step: "
             "compute (forward + backward), input, optimizer, waiting for gradients (sync_wait less the next column) and "
             "waiting for the slowest rank (the ranks' uneven local work: dense runs' stragglers.wait_for_slowest_s per "
             "step, sparse and local SGD runs' predicted straggler term; '-' where the run has neither: one rank, a GPU).", ""]
    if doc.get("incomplete"):
        inc = doc["incomplete"]
        lines[1:1] = ["", f"**Incomplete sweep**: point {inc['failed_point']} ({inc['point']}) failed: {inc['reason']}. "
                      f"This report holds the {inc['runs_kept']} run(s) that finished before it (medians over those; "
                      "no predictions); the points after it did not run. Fix the cause and continue with "
                      f"`{inc['resume']}`: the finished points are reused, the rest run."]
    if doc.get("resumed"):
        lines += [f"Resumed: {doc['resumed']['runs_reused']} run(s) reused from the earlier, interrupted sweep in this "
                  "folder (same points, same rows).", ""]
    if doc.get("predict_failed"):
        lines += [f"**Predictions missing**: the prediction step failed ({doc['predict_failed']}); the measured "
                  "columns are complete.", ""]
    has_pred = any("predicted_step_s" in p for p in points)
    has_ceil = any("ceiling" in p for p in points)
    has_rate = any(p.get("rate") for p in points)
    head = ["config", "sync"] + (["rate"] if has_rate else []) + ["ranks", "batch/rank", "global batch", "samples/s",
                                                                  "step ms", "efficiency"]
    head += ["ceiling"] if has_ceil else []
    head += ["warm step ms", "predicted ms", "error", "predicted dominant"] if has_pred else []
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
                 f"{1e3 * p['step_s']:.2f}", "-" if p["efficiency"] is None else f"{p['efficiency']:.3f}"]
        if has_ceil:
            cells.append(f"{p['ceiling']:.3f}" if "ceiling" in p else "-")
        if has_pred:
            cells += ([f"{1e3 * p['measured_step_s']:.2f}" + ("" if p["measured_as"] == "warm" else " (all steps)"),
                       f"{1e3 * p['predicted_step_s']:.2f}",
                       f"{100 * p['prediction_error']:+.1f}%", p["predicted_dominant"]]
                      if "predicted_step_s" in p else ["-", "-", "-", "-"])
        if has_pred:
            cells += ([f"{1e3 * p['predicted_step_calibrated_s']:.2f}", f"{100 * p['prediction_calibrated_error']:+.1f}%"]
                      if "predicted_step_calibrated_s" in p else ["-", "-"])
        split = time_split(p)
        cells += [f"{1e3 * split[k]:.2f}" for k in ("compute", "input", "optimizer", "waiting for gradients")]
        cells += ["-" if p.get("wait_for_slowest_s") is None else f"{1e3 * split['waiting for the slowest rank']:.2f}"]
        cells += [f"{p['bytes_sent_per_step_per_rank'] / 1e6:.3f}",
                  ("-" if p["test_accuracy"] is None else f"{p['test_accuracy']:.4f}") +
                  (" (at chance)" if p.get("learning_stalled") else "")]
        if has_auc:
            cells.append("-" if p.get("test_auc") is None else f"{p['test_auc']:.4f}")
        cells.append(f"{p['load_before']:.1f}")
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines.append("")
    lines += prediction_tally(points)
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
                  "(predicted - measured) / measured; with repeats, the repeat with the median error.",
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
