#!/usr/bin/python3
"""ctest: scripts/device-check.sh's CPU stages at toy size on this machine (N = 1, 2; no build, no GPU), so the one
command a lent device machine runs does not rot between the sessions that have one: cpu16 writes weak-scaling rows
with the ceiling for a dense and the sparse workload, extrapolate puts a prediction next to each multi-rank point,
and the skipped GPU stages say why. Exit 77 (skipped, with the reason) without matplotlib (bench/sweep.py's plots)."""
import json
import os
import subprocess
import sys
import tempfile

root, build_dir = sys.argv[1], sys.argv[2]
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: matplotlib is missing (apt-get install python3-matplotlib)")
    sys.exit(77)
if (os.cpu_count() or 1) < 2:
    print("skipped: the weak-scaling points need 2 CPUs, one per rank")
    sys.exit(77)

with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as work:
    env = dict(os.environ, SKIP_BUILD="1", BUILD_DIR=build_dir, STAGES="cpu16 extrapolate workers",
               CPU16_WORKLOADS="logreg sparse", CPU16_RANKS="1 2", CPU16_STEPS_SCALE="0.05", CPU16_REPEATS="1",
               CLICKLOG_ROWS="20000", LOG_DIR=out, WORK_DIR=work)
    p = subprocess.run([os.path.join(root, "scripts/device-check.sh")], capture_output=True, text=True, env=env,
                       cwd=root, timeout=240)
    print(p.stdout[-6000:], p.stderr[-3000:])
    assert p.returncode == 0, f"device-check.sh exited {p.returncode}"
    doc = json.load(open(os.path.join(out, "results.json")))
    status = {s["stage"]: s for s in doc["stages"]}
    assert status["cpu16"]["status"] == "ok" and status["extrapolate"]["status"] == "ok", status
    assert status["workers"]["status"] == "skipped" and status["workers"]["why"], status["workers"]  # no GPU here
    for workload in ("logreg", "sparse"):
        rows = {r["ranks"]: r for r in doc["cpu16"][workload]}
        assert sorted(rows) == [1, 2], (workload, rows.keys())
        # The definition, not a bound: toy-size runs beside other tests on two vCPUs can come out at any ratio.
        want = rows[2]["samples_per_s"] / (2 * rows[1]["samples_per_s"])
        assert rows[2]["samples_per_s"] > 0 and abs(rows[2]["efficiency"] - want) <= 1e-6 * want, rows
        assert rows[2]["ceiling"] > 0, rows[2]  # the pinned independent copies ran
    summary = open(os.path.join(out, "summary.md")).read()
    assert "## cpu16" in summary and "## extrapolate" in summary, summary
    assert "| logreg | predict | 2 |" in summary and "| sparse | in-run | 2 |" in summary, summary
print("ok")
