#!/usr/bin/python3
"""ctest: bench/sweep.py's placements. `check_sweep_placements.py ROOT BIN inputs`: bad placement keys (and a ceiling
where it cannot run) exit 2 with one line, a point failing on bad input exits 2 with the trainer's reason in that
line, every shipped sweep passes --dry-run, and placement slurm's --dry-run lists one sbatch array of scripts/slurm/cpu.sbatch per (group, ranks).
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
                      # a ceiling where it cannot run is refused, not skipped
                      (dict(base, scaling="strong", batch=[64], ceiling=True), "ceiling needs weak scaling"),
                      (dict(base, placement="slurm", ceiling=True), "ceiling is not run under placement slurm"),
                      (dict(base, ceiling="yes"), "ceiling must be true or false")):
        p = run_sweep(bad, "--dry-run")
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and says in lines[0], (bad, p.returncode, p.stderr)
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
    assert "a point failed (exit 2): " in lines[0] and "CIFAR-10 file not found" in lines[0], lines[0]
    assert "rank 0:" not in lines[0] and "see " in lines[0], lines[0]
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
