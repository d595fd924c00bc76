#!/usr/bin/python3
"""Extrapolation check of `ringtrain predict` (issue 15) against a measured sweep: one `ringtrain predict` per
(config, sync, per-rank batch) of the sweep's rows.json — one rank's profile on this machine, the link fitted with
`--measure` between two local ranks (the shared-memory transport, launched like the sweep's points) or given — and
its predicted step at every N of the sweep next to the measured one. This is bench/sweep.py's own `predict` pass
(sweep.add_predictions), run after the fact on rows measured without it, so a sweep measured once serves both.

Usage: bench/device/extrapolate.py ROWS.json --out DIR [--bin build/ringtrain] [--link measure|RATE,LATENCY]
Writes DIR/rows.json (the sweep's document with the predicted columns), DIR/report.md (sweep.py's report) and
DIR/extrapolation.json (one row per N > 1: predicted vs measured step, error, calibrated error, within 15 %).
Exit 0; 77 when the sweep's workload has no `ringtrain predict` (the sparse path: its rows' in-run prediction is
listed instead); 2 on bad input."""
import argparse
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sweep  # noqa: E402  (bench/sweep.py)

SPARSE_FORMATS = ("libsvm", "criteo")
GOAL = 0.15


def data_format(spec, config):
    """The data.format a point of `config` runs with: the sweep's override, else the config file's."""
    for s in spec.get("set", []):
        if s.startswith("data.format="):
            return s.split("=", 1)[1]
    with open(os.path.join(sweep.ROOT, config)) as f:
        return json.load(f).get("data", {}).get("format", "idx")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default=os.environ.get("RINGTRAIN_BIN", os.path.join(sweep.ROOT, "build/ringtrain")))
    ap.add_argument("--link", default="measure")
    a = ap.parse_args()
    try:
        with open(a.rows) as f:
            doc = json.load(f)
        spec, points = doc["sweep"], doc["points"]
    except (OSError, ValueError, KeyError) as e:
        sweep.fail(f"{a.rows}: not a sweep's rows.json ({e})")
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    rows = []
    sparse = sorted({p["config"] for p in points if data_format(spec, p["config"]) in SPARSE_FORMATS})
    if sparse:
        # `ringtrain predict` profiles the dense trainer only; the sparse runs predict themselves (summary.json).
        for p in points:
            if p["ranks"] > 1 and "inrun_error" in p:
                rows.append({"config": p["config"], "ranks": p["ranks"], "kind": "in-run",
                             "measured_step_s": p["inrun_measured_step_s"],
                             "predicted_step_s": p["inrun_predicted_step_s"], "error": p["inrun_error"],
                             "within_goal": abs(p["inrun_error"]) <= GOAL})
        with open(os.path.join(out, "extrapolation.json"), "w") as f:
            json.dump({"source": a.rows, "link": None, "rows": rows,
                       "skipped": f"ringtrain predict does not profile the sparse path ({', '.join(sparse)}); "
                                  "listed: each multi-rank run's own prediction (summary.json predicted)"}, f,
                      indent=2)
        print(f"extrapolate.py: {', '.join(sparse)}: sparse, `ringtrain predict` does not profile it; "
              f"{len(rows)} in-run predictions listed instead", file=sys.stderr)
        sys.exit(77)
    if not os.access(a.bin, os.X_OK):
        sweep.fail(f"{a.bin}: no ringtrain binary; pass --bin")
    if os.geteuid() == 0:
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    spec["predict"] = {"link": a.link}
    sweep.add_predictions(points, spec, os.path.abspath(a.bin), out, contextlib.nullcontext())
    for p in points:
        if p["ranks"] > 1 and "predicted_step_s" in p:
            rows.append({"config": p["config"], "sync": p["sync"], "ranks": p["ranks"], "kind": "predict",
                         "batch_per_rank": p["batch_per_rank"], "measured_step_s": p.get("measured_step_s", p["step_s"]),
                         "predicted_step_s": p["predicted_step_s"], "error": p["prediction_error"],
                         "predicted_dominant": p["predicted_dominant"],
                         "calibrated_step_s": p.get("predicted_step_calibrated_s"),
                         "calibrated_error": p.get("prediction_calibrated_error"),
                         "within_goal": abs(p["prediction_error"]) <= GOAL})
    links = []
    for name in sorted(os.listdir(out)):
        if name.startswith("predict-") and name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                links.append(json.load(f).get("link"))
    doc = dict(doc, command=" ".join(sys.argv), points=points, sweep=spec)
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump(doc, f, indent=2)
    sweep.write_report(doc, [], out)
    with open(os.path.join(out, "extrapolation.json"), "w") as f:
        json.dump({"source": a.rows, "link": links, "goal": GOAL, "rows": rows}, f, indent=2)
    for r in rows:
        print(f"{os.path.basename(r['config'])} N={r['ranks']}: predicted {1e3 * r['predicted_step_s']:.2f} ms, "
              f"measured {1e3 * r['measured_step_s']:.2f} ms, error {100 * r['error']:+.1f} %"
              + ("" if r["calibrated_error"] is None else f" (calibrated {100 * r['calibrated_error']:+.1f} %)"))


if __name__ == "__main__":
    main()
