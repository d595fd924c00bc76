#!/usr/bin/python3
"""ctest: bench/sweep.py on bench/sweeps/tiny.json (2 points) writes rows with the measured and predicted fields,
the report and the four PNGs. Exit 77 (skipped, with the reason) without matplotlib."""
import json
import os
import subprocess
import sys
import tempfile

root, binary = sys.argv[1], sys.argv[2]
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: matplotlib is missing (apt-get install python3-matplotlib)")
    sys.exit(77)

with tempfile.TemporaryDirectory() as out:
    p = subprocess.run(["/usr/bin/python3", os.path.join(root, "bench/sweep.py"), os.path.join(root, "bench/sweeps/tiny.json"),
                        "--bin", binary, "--out", out], capture_output=True, text=True)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, f"sweep.py exited {p.returncode}"
    doc = json.load(open(os.path.join(out, "rows.json")))
    points = {pt["ranks"]: pt for pt in doc["points"]}
    assert sorted(points) == [1, 2], points.keys()
    for n, pt in points.items():
        assert pt["samples_per_s"] > 0 and pt["step_s"] > 0, pt
        assert pt["global_batch"] == 64 * n, pt
        assert set(pt["phase_s"]) >= {"data", "forward", "backward", "optimizer", "sync_wait"}, pt["phase_s"]
    assert points[1]["efficiency"] == 1.0
    assert 0 < points[2]["efficiency"] < 2
    assert points[2]["bytes_sent_per_step_per_rank"] > 0, "two ranks must send gradients"
    assert points[2]["predicted_step_s"] > 0 and "prediction_error" in points[2], points[2]
    assert points[2]["ceiling"] > 0 and points[2]["predicted_step_calibrated_s"] > 0, points[2]  # N copies ran
    for png in ("throughput_efficiency.png", "time_split.png", "bytes_vs_batch.png", "accuracy_vs_global_batch.png"):
        path = os.path.join(out, png)
        assert os.path.getsize(path) > 1000, path
    report = open(os.path.join(out, "report.md")).read()
    assert "| config | sync | ranks |" in report and "predicted ms" in report, report
print("ok")
