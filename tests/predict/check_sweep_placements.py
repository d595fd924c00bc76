#!/usr/bin/python3
"""ctest: bench/sweep.py's placements. `check_sweep_placements.py ROOT BIN inputs`: bad placement keys (and a ceiling
where it cannot run), every other key of the wrong type or range, a repeated sync name, config, rank count, batch or
rate (the points are grouped by them) and a predict.link `ringtrain predict --link` would refuse exit 2 with one line
naming the file and the key before anything runs, as does an override the trainer refuses (a typo in the last sync
group: `ringtrain info` checks each point's overrides first, naming the point and the trainer's reason; nothing
runs); a point failing on bad input exits 2 with the trainer's reason in that line; a point failing half-way keeps the runs that finished (rows.json "incomplete", report.md) and names the
point, its log and --resume, which (same sweep only; a plain rerun is refused) reruns just the failed point and those
after it; a predictor failing after the points ran keeps them (rows.json, report.md) and says it was the predictor;
every shipped sweep passes --dry-run, which lists every command the real run starts (tiny.json: its 2 points, the
ceiling's 2 copies, the predictor) with a closing count per kind, and placement slurm's --dry-run lists one sbatch
array of scripts/slurm/cpu.sbatch per (group, ranks); --help shows the whole description; cpu.sbatch and gpu.sbatch
name the folder a missing config was looked for in once where the job's directory is the checkout.
`... netns`: a 2-point sweep on emulated hosts at a tc rate, with each point's own prediction in the rows and the
report; exit 77 (skipped, with the reason) without root or network namespaces. `... slurm`: a private single-node
Slurm (own directory and ports, scripts/cluster/start-slurm.sh) runs a 2-point sweep as sbatch arrays, then goes;
once it is gone, the same sweep exits 77 with the reason; exit 77 without root or Slurm."""
import shutil
import json
import os
import subprocess
import sys
import tempfile

root, binary, part = sys.argv[1], sys.argv[2], sys.argv[3]
sweep = os.path.join(root, "bench/sweep.py")


def run_sweep(spec, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        return subprocess.run(["/usr/bin/python3", sweep, f.name, "--bin", binary] + list(extra),
                              capture_output=True, text=True, cwd=root)
    finally:
        os.unlink(f.name)


base = {"name": "placements", "configs": ["configs/logreg_fashion.json"], "ranks": [1, 2],
        "set": ["data.format=synthetic", "train.max_steps=20", "checkpoint.every_epochs=0"]}

if part == "inputs":
    for bad, says in ((dict(base, rates=["1gbit"]), "rates (a tc rate per emulated link) need placement netns"),
                      (dict(base, placement="netns", rates=["fast"]), "rates must be a list of tc rates"),
                      (dict(base, placement="netns", rates="1gbit"), "rates must be a list of tc rates"),
                      (dict(base, placement="cloud"), "placement must be local, netns or slurm"),
                      (dict(base, slurm_flags=["-p", "cpu"]), "slurm_flags go to sbatch, which only placement slurm runs"),
                      (dict(base, placement="slurm", mpirun_flags=["--bind-to", "core"]), "mpirun_flags are not used under placement slurm"),
                      # a ceiling where it cannot run is refused, not skipped
                      (dict(base, scaling="strong", batch=[64], ceiling=True), "ceiling needs weak scaling"),
                      (dict(base, placement="slurm", ceiling=True), "ceiling is not run under placement slurm"),
                      (dict(base, ceiling="yes"), "ceiling must be true or false"),
                      # grouped keys: a repeat would merge two settings into one row and skip the second baseline
                      (dict(base, sync=[{"name": "a", "set": ["sync.backend=ring"]},
                                        {"name": "a", "set": ["sync.backend=mpi"]}]), "sync lists the name 'a' twice"),
                      (dict(base, configs=["configs/logreg_fashion.json", "./configs/logreg_fashion.json"]),
                       "configs lists './configs/logreg_fashion.json' twice"),
                      (dict(base, ranks=[1, 2, 2]), "ranks lists 2 twice"),
                      (dict(base, batch=[64, 64]), "batch lists 64 twice"),
                      (dict(base, placement="netns", rates=["1gbit", "1gbit"]), "rates lists '1gbit' twice"),
                      # predict: checked before the points run, with `ringtrain predict --link`'s grammar
                      (dict(base, predict={"link": "10gbps"}), "predict.link \"10gbps\" is not a link"),
                      (dict(base, predict={"link": "10gbit,5"}), "latency '5': unknown unit"),
                      (dict(base, predict={"link": "-10gbit"}), "needs a positive number first"),
                      (dict(base, predict={"link": 10}), "predict.link 10 is not a link"),
                      (dict(base, predict="measure"), "predict must be {\"link\": \"measure\"}"),
                      (dict(base, predict={"link": "measure", "links": "x"}), "predict must be"),
                      (dict(base, predict={"link": "measure", "repeats": 0}), "predict.repeats must be an odd whole"),
                      (dict(base, predict={"link": "measure", "repeats": 1.5}), "predict.repeats must be an odd whole"),
                      (dict(base, predict={"link": "measure", "repeats": 2}), "predict.repeats must be an odd whole"),
                      (dict(base, predict={"link": "measure", "repeats": True}), "predict.repeats must be an odd whole"),
                      # types and ranges: one line naming the key, no traceback
                      (dict(base, ranks=2), "ranks must be a list of positive integers"),
                      (dict(base, ranks=[True, 2]), "ranks must be a list of positive integers"),
                      (dict(base, placement="netns", ranks=2), "ranks must be a list of positive integers"),
                      (dict(base, batch=64), "batch must be a list of positive integers"),
                      (dict(base, batch=[0, -4]), "batch must be a list of positive integers"),
                      (dict(base, mpirun_flags="--bind-to core"), "mpirun_flags must be a list of strings"),
                      (dict(base, slurm_flags="-p cpu"), "slurm_flags must be a list of strings"),
                      (dict(base, set="train.max_steps=3"), "set must be a list of strings"),
                      (dict(base, set=["train.max_steps"]), "'train.max_steps' is not a key=value override"),
                      (dict(base, sync=[{"name": "a", "set": "sync.backend=ring"}]),
                       "sync[0] (a) set must be a list of strings"),
                      (dict(base, sync=[{"name": "a", "sets": []}]), "sync[0] must be"),
                      (dict(base, sync={"name": "a"}), "sync must be a non-empty list"),
                      (dict(base, scaling="strong"), "strong scaling needs batch"),
                      (dict(base, repeats=True), "repeats must be a positive integer"),
                      (dict(base, timeout_s="60"), "timeout_s must be a positive number"),
                      (dict(base, configs="configs/logreg_fashion.json"), "configs must be a non-empty list"),
                      (dict(base, name="../x"), "name must be a non-empty string without '/'"),
                      # overrides the trainer refuses (`ringtrain info`), in a later sync group or with a batch
                      (dict(base, sync=[{"name": "ring", "set": ["sync.backend=ring"]},
                                        {"name": "mpi", "set": ["sync.bakend=mpi"]}]),
                       "point g1-n1-r0 (configs/logreg_fashion.json mpi (the config's batch) N=1 rep 0): the trainer "
                       "refuses its overrides: --set sync.bakend"),
                      (dict(base, batch=[64], set=base["set"] + ["train.batch_size=32"]),
                       "the trainer refuses its overrides: --set train.batch_size")):
        p = run_sweep(bad, "--dry-run")
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and says in lines[0], (bad, p.returncode, p.stderr)
        assert lines[0].startswith("sweep.py: error: ") and ".json: " in lines[0], lines[0]  # names the file
    for good in ({"link": "1.5GBit,2ms"}, {"link": "100mbit"}, {"link": "measure"}, {}):  # predict's own forms
        p = run_sweep(dict(base, predict=good), "--dry-run")
        assert p.returncode == 0, (good, p.stderr)
    # A refused override stops the sweep before its first point, not after every earlier one: nothing runs.
    with tempfile.TemporaryDirectory() as out:
        p = run_sweep(dict(base, ranks=[1, 2, 3], sync=[{"name": "ring", "set": ["sync.backend=ring"]},
                                                        {"name": "mpi", "set": ["sync.bakend=mpi"]}]),
                      "--out", out + "/sw")
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "--set sync.bakend: unknown key" in lines[0], p.stderr
        assert not os.path.exists(os.path.join(out, "sw", "points")), os.listdir(os.path.join(out, "sw"))
    # --dry-run lists what the real run starts: tiny.json's 2 points, N=2's 2 ceiling copies (one rank each) and the
    # predictor, and a closing line with the count of each kind.
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run(["/usr/bin/python3", sweep, os.path.join(root, "bench/sweeps/tiny.json"), "--bin", binary,
                            "--dry-run", "--out", out], capture_output=True, text=True, cwd=root)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and len(lines) == 6, (p.returncode, p.stdout, p.stderr)
    assert [" -np 2 " in l for l in lines[:4]] == [False, True, False, False], lines
    assert [l.split("output.dir=")[1].split()[0][len(out):] for l in lines[:4]] == \
        ["/points/g0-n1-r0", "/points/g0-n2-r0", "/points/g0-n2-r0-alone0", "/points/g0-n2-r0-alone1"], lines
    assert " predict --config configs/logreg_fashion.json --ranks 1,2 " in lines[4] and "--link 10gbit,5us" in lines[4]
    assert lines[5].startswith("# --dry-run: 2 point run(s)") and "2 ceiling copies" in lines[5] and \
        "1 predictor run(s)" in lines[5], lines[5]
    # predict.repeats 3: the predictor three times, in rounds (each its own JSON), the points once.
    with tempfile.TemporaryDirectory() as out:
        p = run_sweep(dict(base, ranks=[1, 2], predict={"link": "10gbit,5us", "repeats": 3}), "--dry-run", "--out", out)
    lines = p.stdout.strip().splitlines()
    predicts = [l for l in lines if " predict --config " in l]
    assert p.returncode == 0 and len(predicts) == 3, (p.returncode, p.stdout, p.stderr)
    assert [l.split("--json ")[1].split()[0][len(out):] for l in predicts] == \
        ["/predict-0-r0.json", "/predict-0-r1.json", "/predict-0-r2.json"], predicts
    assert "2 point run(s)" in lines[-1] and "3 predictor run(s)" in lines[-1], lines[-1]
    # derive_sweep.py --repeats K (a lent machine's time budget) caps the predictor's repeats as well as the points'.
    with tempfile.TemporaryDirectory() as out:
        derived = os.path.join(out, "d.json")
        p = subprocess.run(["/usr/bin/python3", os.path.join(root, "bench/device/derive_sweep.py"),
                            os.path.join(root, "bench/sweeps/validation_extrapolate.json"), "--out", derived,
                            "--repeats", "1"], capture_output=True, text=True, cwd=root)
        assert p.returncode == 0, p.stderr
        d = json.load(open(derived))
        assert d["repeats"] == 1 and d["predict"] == {"link": "measure", "repeats": 1}, d
    # --help: the whole description (the docstring's first paragraph), not its first line cut mid-sentence.
    p = subprocess.run(["/usr/bin/python3", sweep, "--help"], capture_output=True, text=True)
    first = "".join(open(sweep).read().split('"""')[1].split("\n\n")[0].split())  # (argparse rewraps it)
    assert p.returncode == 0 and first.endswith("runningtherest.") and first in "".join(p.stdout.split()), p.stdout
    # The Slurm scripts' missing config: the folder it was looked in named once when the job runs in the checkout.
    for script in ("cpu.sbatch", "gpu.sbatch"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        p = subprocess.run(["bash", os.path.join(root, "scripts/slurm", script), "configs/nope.json"], cwd=root,
                           env=dict(env, RINGTRAIN_BIN=os.path.abspath(binary)), capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.strip() == \
            f"{script}: ERROR: config 'configs/nope.json' not found (in {os.path.realpath(root)})", p.stderr
    # Without batch the progress line says so (not "batch None").
    import importlib.util
    mod = importlib.util.spec_from_file_location("sweep", sweep)
    sw = importlib.util.module_from_spec(mod)
    mod.loader.exec_module(sw)
    assert sw.batch_text(None) == " (the config's batch)" and sw.batch_text(64) == " batch 64"
    # Every shipped sweep loads and lists its points (placement netns checks for root before it lists anything).
    shipped = sorted(f for f in os.listdir(os.path.join(root, "bench/sweeps")) if f.endswith(".json"))
    assert "sparse_batch_sync_local.json" in shipped and "tiny_strong.json" in shipped, shipped
    with tempfile.TemporaryDirectory() as out:
        for name in shipped:
            path = os.path.join(root, "bench/sweeps", name)
            if json.load(open(path)).get("placement") == "netns" and os.geteuid() != 0:
                continue
            p = subprocess.run(["/usr/bin/python3", sweep, path, "--bin", binary, "--dry-run", "--out", out],
                               capture_output=True, text=True, cwd=root)
            assert p.returncode == 0 and " train --config " in p.stdout, (name, p.returncode, p.stderr)
    # A point that fails on bad input: the trainer's own line (which file, what to do), not just "see the log".
    with tempfile.TemporaryDirectory() as out:
        p = run_sweep(dict(base, configs=["configs/alexnet_cifar10.json"], set=["data.dir=" + out + "/none"]),
                      "--out", out)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    assert "a point failed (exit 2): " in lines[0] and "data.dir: " in lines[0] and "cifar.html" in lines[0], lines[0]
    assert "rank 0:" not in lines[0] and "see " in lines[0], lines[0]
    # The predictor failing after every point ran: the points are kept (rows.json, report.md), exit 2 with one line
    # that blames the predictor, not a point. (A stand-in binary whose `predict` fails; `train` is the real one.)
    with tempfile.TemporaryDirectory() as out:
        fake = os.path.join(out, "ringtrain")
        with open(fake, "w") as f:
            f.write(f'#!/bin/sh\nif [ "$1" = predict ]; then echo "ringtrain: error: predictor broke" >&2; exit 3; fi\n'
                    f'exec {binary} "$@"\n')
        os.chmod(fake, 0o755)
        with open(os.path.join(out, "sw.json"), "w") as f:
            json.dump(dict(base, ranks=[1], set=base["set"][:1] + ["train.max_steps=5"] + base["set"][2:],
                           predict={"link": "10gbit,5us"}), f)
        p = subprocess.run(["/usr/bin/python3", sweep, os.path.join(out, "sw.json"), "--bin", fake, "--out",
                            out + "/sw"], capture_output=True, text=True, cwd=root)
        lines = [l for l in p.stderr.strip().splitlines() if not l.startswith("sweep.py: matplotlib")]
        assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stdout, p.stderr)
        assert "the prediction step failed, not a point: the predictor (ringtrain predict) failed (exit 3): " \
               "predictor broke" in lines[0] and "a point failed" not in lines[0], lines[0]
        doc = json.load(open(os.path.join(out, "sw", "rows.json")))
        assert [pt["ranks"] for pt in doc["points"]] == [1] and doc["points"][0]["samples_per_s"] > 0, doc["points"]
        assert "predictor broke" in doc["predict_failed"] and "predicted_step_s" not in doc["points"][0], doc
        assert "Predictions missing" in open(os.path.join(out, "sw", "report.md")).read()
    # A point failing half-way through a sweep: the runs that finished are written (rows.json "incomplete",
    # report.md), exit 2 with one line naming the point, its log and the --resume to continue; a plain rerun is
    # refused (naming --resume), so is --resume with another sweep; once the cause is fixed, --resume runs only the
    # failed point and those after it (its half-written folder cleared first), reusing the rest as they were.
    with tempfile.TemporaryDirectory() as out:
        fake, calls, broken = os.path.join(out, "ringtrain"), os.path.join(out, "calls.log"), os.path.join(out, "broken")
        # batch 64's train fails while `broken` exists, leaving a half-written point folder (train only: the sweep's
        # up-front `ringtrain info` check passes the same overrides, and must pass)
        with open(fake, "w") as f:
            f.write('#!/bin/sh\nfor x; do case "$x" in output.dir=*) d="${x#output.dir=}";; esac; done\n'
                    f'[ "$1" = train ] && echo "$(basename "$d")" >> {calls}\n'
                    f'[ "$1" = train ] && case "$*" in *train.batch_size=64*) if [ -e {broken} ]; then mkdir -p "$d"; '
                    f'echo {{}} > "$d/summary.json"; echo "ringtrain: error: wrapper broke" >&2; exit 3; fi;; esac\n'
                    f'exec {binary} "$@"\n')
        os.chmod(fake, 0o755)
        open(broken, "w").close()
        sw = dict(base, name="resume", ranks=[1], batch=[32, 64], repeats=2,
                  set=base["set"][:1] + ["train.max_steps=5"] + base["set"][2:])
        with open(os.path.join(out, "sw.json"), "w") as f:
            json.dump(sw, f)

        def resume_run(*extra, spec="sw.json"):
            open(calls, "w").close()
            p = subprocess.run(["/usr/bin/python3", sweep, os.path.join(out, spec), "--bin", fake, "--out",
                                out + "/sw"] + list(extra), capture_output=True, text=True, cwd=root)
            lines = [l for l in p.stderr.strip().splitlines() if not l.startswith("sweep.py: matplotlib")]
            return p, lines, open(calls).read().split()

        p, lines, ran = resume_run()
        assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stdout, p.stderr)
        assert ran == ["g0-n1-r0", "g1-n1-r0"], ran  # stopped at the failed point (repeat 0, batch 64)
        assert "point g1-n1-r0 (" in lines[0] and "wrapper broke" in lines[0], lines[0]
        assert "points/g1-n1-r0.log" in lines[0] and "--resume" in lines[0], lines[0]
        doc = json.load(open(os.path.join(out, "sw", "rows.json")))
        assert doc["incomplete"]["failed_point"] == "g1-n1-r0" and "wrapper broke" in doc["incomplete"]["reason"], doc
        assert [(pt["batch"], pt["repeats"]) for pt in doc["points"]] == [(32, 1)], doc["points"]
        assert doc["points"][0]["samples_per_s"] > 0 and doc["points"][0]["efficiency"] == 1.0, doc["points"]
        first = doc["runs"][0]
        assert "Incomplete sweep" in open(os.path.join(out, "sw", "report.md")).read().split("|")[0]
        p, lines, ran = resume_run()  # the same command again, without --resume: refused, naming --resume
        assert p.returncode == 2 and len(lines) == 1 and "--resume" in lines[0] and ran == [], (p.stderr, ran)
        with open(os.path.join(out, "other.json"), "w") as f:
            json.dump(dict(sw, repeats=3), f)
        p, lines, ran = resume_run("--resume", spec="other.json")  # another sweep's folder: refused
        assert p.returncode == 2 and len(lines) == 1 and "different sweep" in lines[0] and "'repeats'" in lines[0], \
            lines
        assert ran == [], ran
        os.remove(broken)
        with open(os.path.join(out, "sw.json"), "w") as f:  # (a longer timeout_s does not make it another sweep)
            json.dump(dict(sw, timeout_s=120), f)
        p, lines, ran = resume_run("--resume")
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert ran == ["g1-n1-r0", "g0-n1-r1", "g1-n1-r1"], ran  # the failed point and the rest, in order; once each
        doc = json.load(open(os.path.join(out, "sw", "rows.json")))
        assert "incomplete" not in doc and doc["resumed"]["reused_points"] == ["g0-n1-r0"], doc.get("resumed")
        assert [(pt["batch"], pt["repeats"]) for pt in doc["points"]] == [(32, 2), (64, 2)], doc["points"]
        assert doc["runs"][0] == first, (doc["runs"][0], first)  # reused as it was: the same point, load, speed
        assert [(r["batch"], r["repeat"], r["summary"]) for r in doc["runs"]] == \
            [(b, r, f"points/g{g}-n1-r{r}/summary.json") for r in (0, 1) for g, b in ((0, 32), (1, 64))], doc["runs"]
        assert all(r["samples_per_s"] > 0 for r in doc["runs"]), doc["runs"]
        report = open(os.path.join(out, "sw", "report.md")).read()
        assert "Incomplete sweep" not in report and "Resumed: 1 run(s) reused" in report, report
    p = run_sweep(dict(base, placement="slurm", sync=[{"name": "ring", "set": ["sync.backend=ring"]},
                                                      {"name": "mpi", "set": ["sync.backend=mpi"]}]), "--dry-run")
    assert p.returncode == 0, p.stderr
    arrays = [l for l in p.stdout.splitlines() if l.startswith("sbatch ")]
    assert len(arrays) == 4, p.stdout  # 2 sync settings x ranks 1, 2
    assert all("scripts/slurm/cpu.sbatch configs/logreg_fashion.json" in l for l in arrays), arrays
    assert sum(" -n 2 " in l for l in arrays) == 2 and sum("sync.backend=mpi" in l for l in arrays) == 2, arrays
    print("ok")
    sys.exit(0)

if part == "slurm":
    if os.geteuid() != 0:
        print("skipped: the Slurm daemons need root")
        sys.exit(77)
    missing = [c for c in ("slurmctld", "slurmd", "sbatch", "scontrol", "munged") if not shutil.which(c)]
    if missing:
        print(f"skipped: Slurm is not installed ({missing[0]} missing; scripts/setup.sh installs it)")
        sys.exit(77)
    lab = "/tmp/ringtrain-cluster/slurm-sweep-ctest"
    os.environ.update(RT_SLURM_DIR=lab, RT_SLURM_LINK_ETC="0", RT_SLURM_INSTALL="0", SLURMCTLD_PORT="16927",
                      SLURMD_PORT="16928", SLURM_CONF=lab + "/etc/slurm.conf")
    for v in [v for v in os.environ if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del os.environ[v]
    start = subprocess.run([os.path.join(root, "scripts/cluster/start-slurm.sh")], capture_output=True, text=True,
                           timeout=180)
    try:
        assert start.returncode == 0, start.stderr
        with tempfile.TemporaryDirectory() as out:
            p = run_sweep(dict(base, name="placements-slurm", placement="slurm", timeout_s=120,
                               sync=[{"name": "ring", "set": ["sync.backend=ring"]},
                                     {"name": "mpi", "set": ["sync.backend=mpi"]}]), "--out", out)
            print(p.stdout, p.stderr)
            assert p.returncode == 0, f"sweep.py exited {p.returncode}"
            doc = json.load(open(os.path.join(out, "rows.json")))
            assert sorted((pt["sync"], pt["ranks"]) for pt in doc["points"]) == \
                [("mpi", 1), ("mpi", 2), ("ring", 1), ("ring", 2)], doc["points"]
            assert all(pt["samples_per_s"] > 0 for pt in doc["points"])
            assert all(pt["inrun_predicted_step_s"] > 0 for pt in doc["points"] if pt["ranks"] == 2)
            outs = sorted(f for f in os.listdir(out) if f.endswith(".out"))
            assert len(outs) == 4 and sum(f.startswith("logreg_fashion-n2-r0-") for f in outs) == 2, outs  # 2 arrays
    finally:
        subprocess.run([os.path.join(root, "scripts/cluster/stop-slurm.sh"), "--purge"], capture_output=True)
    p = run_sweep(dict(base, placement="slurm"))
    assert p.returncode == 77 and "placement slurm: skipped:" in p.stderr, (p.returncode, p.stderr)
    print("ok")
    sys.exit(0)

# netns
if os.geteuid() != 0:
    print("skipped: placement netns needs root (ip netns, tc)")
    sys.exit(77)
if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
    print("skipped: no network namespaces here (ip netns list failed)")
    sys.exit(77)
with tempfile.TemporaryDirectory() as out:
    p = run_sweep(dict(base, name="placements-netns", placement="netns", rates=["1gbit"]), "--out", out)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, f"sweep.py exited {p.returncode}"
    doc = json.load(open(os.path.join(out, "rows.json")))
    points = {pt["ranks"]: pt for pt in doc["points"]}
    assert sorted(points) == [1, 2] and all(pt["rate"] == "1gbit" for pt in points.values()), doc["points"]
    two = points[2]
    assert two["bytes_sent_per_step_per_rank"] > 0, two
    assert two["inrun_predicted_step_s"] > 0 and two["inrun_measured_step_s"] > 0, two
    assert abs(two["inrun_error"]) < 1.0, two
    assert "inrun_error" not in points[1], points[1]  # one rank: nothing to predict
    report = open(os.path.join(out, "report.md")).read()
    assert "Each run's own prediction" in report and "| 1gbit | 2 |" in report, report
    # the emulated hosts are gone again
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "rtsweep" not in left, left
print("ok")
