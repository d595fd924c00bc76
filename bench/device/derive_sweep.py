#!/usr/bin/python3
"""Writes a copy of a sweep file (bench/sweeps/*.json) with some of its keys replaced, for a run that differs from
the shipped sweep in a stated way (fewer ranks on a smaller machine, shorter runs for a smoke test, the data where
this machine has it). The copy goes next to the sweep's results, so the report says exactly what ran.

Usage: bench/device/derive_sweep.py SWEEP.json --out FILE [--ranks "1 2 4"] [--repeats K] [--no-ceiling]
                                    [--steps-scale F] [--set key=value ...] [--name NAME] [--configs "A B"]
                                    [--rates "10gbit ..."] [--syncs "ring ..."] [--mpirun-flags "--bind-to core ..."]
--set replaces the sweep's own override of the same key (or adds it); --steps-scale multiplies train.max_steps
(at least 2 steps are kept)."""
import argparse
import json
import sys


def fail(msg):
    print(f"derive_sweep.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def replace_set(sets, item):
    if "=" not in item:
        fail(f"--set {item!r}: expected key=value")
    k = item.split("=", 1)[0]
    out = [s for s in sets if s.split("=", 1)[0] != k]
    out.append(item)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", help="rank counts, space or comma separated (1 is added: the baseline)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--no-ceiling", action="store_true")
    ap.add_argument("--steps-scale", type=float)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--name")
    ap.add_argument("--configs", help="keep only these of the sweep's configs (space separated)")
    ap.add_argument("--rates", help="placement netns: these tc rates instead (space separated)")
    ap.add_argument("--syncs", help="keep only the sync settings of these names (space separated)")
    ap.add_argument("--mpirun-flags", help="the sweep's mpirun_flags instead (space separated; '' for none)")
    a = ap.parse_args()
    try:
        with open(a.sweep) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{a.sweep}: {e}")
    changes = []
    if a.ranks:
        try:
            ranks = sorted({int(x) for x in a.ranks.replace(",", " ").split()} | {1})
        except ValueError:
            fail(f"--ranks {a.ranks!r}: expected positive integers")
        if ranks[0] < 1:
            fail(f"--ranks {a.ranks!r}: expected positive integers")
        spec["ranks"] = ranks
        changes.append(f"ranks {ranks}")
    if a.repeats is not None:
        if a.repeats < 1:
            fail("--repeats must be at least 1")
        spec["repeats"] = a.repeats
        changes.append(f"repeats {a.repeats}")
        if isinstance(spec.get("predict"), dict) and spec["predict"].get("repeats", 1) > a.repeats:
            spec["predict"]["repeats"] = a.repeats  # the predictor's too: a time budget counts both
            changes.append(f"predict.repeats {a.repeats}")
    if a.no_ceiling:
        spec["ceiling"] = False
        changes.append("no ceiling")
    if a.configs:
        keep = a.configs.split()
        missing = [c for c in keep if c not in spec.get("configs", [])]
        if missing:
            fail(f"--configs: {missing[0]!r} is not one of {a.sweep}'s configs")
        spec["configs"] = keep
        changes.append(f"configs {' '.join(keep)}")
    if a.syncs:
        keep = a.syncs.split()
        names = [s.get("name") for s in spec.get("sync", [])]
        missing = [n for n in keep if n not in names]
        if missing:
            fail(f"--syncs: {missing[0]!r} is not one of {a.sweep}'s sync names ({', '.join(map(str, names))})")
        spec["sync"] = [s for s in spec["sync"] if s.get("name") in keep]
        changes.append(f"syncs {' '.join(keep)}")
    if a.rates:
        if spec.get("placement") != "netns":
            fail(f"--rates: {a.sweep} is not placement netns")
        spec["rates"] = a.rates.split()
        changes.append(f"rates {' '.join(spec['rates'])}")
    if a.mpirun_flags is not None:
        spec["mpirun_flags"] = a.mpirun_flags.split()
        changes.append(f"mpirun_flags {a.mpirun_flags or '(none)'}")
    sets = list(spec.get("set", []))
    if a.steps_scale is not None:
        steps = [s for s in sets if s.startswith("train.max_steps=")]
        if not steps:
            fail(f"{a.sweep}: --steps-scale needs a train.max_steps override in the sweep's set")
        n = max(2, round(int(steps[0].split("=", 1)[1]) * a.steps_scale))
        sets = replace_set(sets, f"train.max_steps={n}")
        changes.append(f"train.max_steps={n}")
    for item in a.set:
        sets = replace_set(sets, item)
        changes.append(item)
    spec["set"] = sets
    if a.name:
        spec["name"] = a.name
    if changes:
        spec["description"] = spec.get("description", "") + f" [Derived from {a.sweep}: {'; '.join(changes)}.]"
    with open(a.out, "w") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
