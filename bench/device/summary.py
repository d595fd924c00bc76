#!/usr/bin/python3
"""The one-page result of scripts/device-check.sh: reads LOG_DIR (stages.jsonl and each stage's folder) and writes
LOG_DIR/summary.md (printed too) and LOG_DIR/results.json (every stage's rows in one document).

Usage: bench/device/summary.py LOG_DIR [--total-s S]"""
import argparse
import glob
import json
import os
import re
import statistics

CEILING_GOAL = 0.95
PREDICT_GOAL = 0.15
CPUREF_GOAL = 1.3
INPUT_BOUND = 0.10  # a step that waits this share of its time for data is input-bound


def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def load_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def table(head, rows):
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
           ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def ms(x):
    return "-" if x is None else f"{1e3 * x:.2f}"


def pct(x, signed=False):
    return "-" if x is None else (f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %")


def gpu_section(logs, res):
    lines = ["## gpu: `ctest -L gpu` and the single-GPU benchmark against PyTorch", ""]
    log = os.path.join(logs, "gpu.log")
    if os.path.exists(log):  # what the stage said about what it could not run, and where the data came from
        lines += ["- " + l.strip() for l in open(log) if "not built" in l or "synthetic" in l]
        lines.append("")
    tests = []
    for line in open(os.path.join(logs, "gpu/ctest.log")) if os.path.exists(os.path.join(logs, "gpu/ctest.log")) else []:
        m = re.search(r"Test +#\d+: (\S+) \.+\**\s*(\w[\w ]*?)\s+([0-9.]+ sec)", line)
        if m:
            tests.append({"test": m.group(1), "status": m.group(2).strip(), "time": m.group(3)})
    res["gpu"] = {"ctest": tests}
    if tests:
        lines += table(["test", "status", "time"], [[t["test"], t["status"], t["time"]] for t in tests]) + [""]
    rows = load_jsonl(os.path.join(logs, "gpu/gpu_bench.jsonl"))
    res["gpu"]["bench"] = rows
    ours = {(r["model"], r["batch"]): r for r in rows if r.get("impl") == "ringtrain"}
    ref = {(r["model"], r["batch"]): r for r in rows if r.get("impl") == "pytorch-eager"}
    if ours or ref:
        out = []
        for k in sorted(set(ours) | set(ref), key=str):
            a, b = ours.get(k, {}).get("samples_per_s"), ref.get(k, {}).get("samples_per_s")
            util = ours.get(k, {}).get("gpu_percent")
            out.append([k[0], k[1], f"{a:,.0f}" if a else "-", f"{b:,.0f}" if b else "-",
                        f"{a / b:.2f}" if a and b else "-", "-" if util is None else f"{util:.0f} %"])
        lines += table(["model", "batch", "ringtrain samples/s", "PyTorch samples/s", "ratio", "GPU busy"], out) + [""]
    return lines


def cpu16_section(logs, res):
    lines = ["## cpu16: weak scaling, one core a rank (bench/sweeps/cpu16_weak_*.json)", "",
             "Efficiency = samples/s at N / (N x samples/s at 1); ceiling = N independent single-rank copies (pinned "
             f"one to a core) / (N x 1 rank); of ceiling = efficiency / ceiling (goal >= {CEILING_GOAL}).", ""]
    res["cpu16"] = {}
    out = []
    for rows_path in sorted(glob.glob(os.path.join(logs, "cpu16/*/rows.json"))):
        w = os.path.basename(os.path.dirname(rows_path))
        doc = load_json(rows_path, {})
        pts = doc.get("points", [])
        res["cpu16"][w] = pts
        for p in sorted(pts, key=lambda p: (p.get("sync", ""), p["ranks"])):
            ofc = p.get("of_ceiling")
            label = w if p.get("sync", "default") == "default" else f"{w} ({p['sync']})"
            out.append([label, p["ranks"], p["batch_per_rank"], f"{p['samples_per_s']:,.0f}", ms(p["step_s"]),
                        f"{p['efficiency']:.3f}", f"{p['ceiling']:.3f}" if "ceiling" in p else "-",
                        f"{ofc:.3f}" if ofc is not None else "-",
                        "-" if ofc is None else ("yes" if ofc >= CEILING_GOAL else "**no**"),
                        ms(p["phase_s"].get("sync_wait")), p["repeats"]])
    if out:
        lines += table(["workload", "N", "batch/rank", "samples/s", "step ms", "efficiency", "ceiling", "of ceiling",
                        f">= {CEILING_GOAL}", "sync_wait ms", "repeats"], out) + [""]
    for f in sorted(glob.glob(os.path.join(logs, "cpu16/*.skipped"))):
        lines.append("- " + open(f).read().strip())
    lines.append("")
    return lines


def extrapolate_section(logs, res):
    lines = ["## extrapolate: `ringtrain predict` (one rank's profile, link from --measure) vs the measured step", "",
             "Error = (predicted - measured) / measured step (goal within 15 %); calibrated: the predicted compute "
             "scaled to the sweep's own one-rank step and divided by the ceiling (tests the communication model "
             "alone; bench/sweep.py).", ""]
    res["extrapolate"] = {}
    out, links = [], []
    for path in sorted(glob.glob(os.path.join(logs, "extrapolate/*/extrapolation.json"))):
        w = os.path.basename(os.path.dirname(path))
        doc = load_json(path, {})
        res["extrapolate"][w] = doc
        if doc.get("skipped"):
            lines.append(f"- {w}: {doc['skipped']}")
        for link in doc.get("link") or []:
            if link:
                links.append(f"{w}: alpha {1e6 * link.get('alpha_s', 0):.1f} us, "
                             f"{link.get('gbit_per_s', 0):.1f} Gbit/s ({link.get('source', '?')})")
        for r in doc.get("rows", []):
            out.append([w, r["kind"], r["ranks"], ms(r["predicted_step_s"]), ms(r["measured_step_s"]),
                        pct(r["error"], True), pct(r.get("calibrated_error"), True),
                        "yes" if r["within_goal"] else "**no**"])
    netns = load_json(os.path.join(logs, "extrapolate/netns/rows.json"), {})
    for p in netns.get("points", []):  # EXTRAPOLATE_NETNS=1: emulated hosts, one rank each
        if p["ranks"] > 1 and "prediction_error" in p:
            res["extrapolate"].setdefault("netns", []).append(p)
            out.append([os.path.basename(p["config"]).replace(".json", ""), f"predict, netns {p.get('rate')}",
                        p["ranks"], ms(p["predicted_step_s"]), ms(p.get("measured_step_s", p["step_s"])),
                        pct(p["prediction_error"], True),
                        pct(p.get("prediction_calibrated_error"), True),
                        "yes" if abs(p["prediction_error"]) <= PREDICT_GOAL else "**no**"])
    if out:
        lines += [""] + table(["workload", "prediction", "N", "predicted ms", "measured ms", "error", "calibrated",
                               "within 15 %"], out)
    if links:
        lines += ["", "Links fitted: " + "; ".join(links)]
    log = os.path.join(logs, "extrapolate.log")
    if os.path.exists(log):
        lines += [""] + ["- " + l.strip() for l in open(log) if l.startswith("emulated hosts")]
    lines.append("")
    return lines


def workers_section(logs, res):
    lines = ["## workers: AlexNet 224x224 from a JPEG folder, GPU busy vs data.workers", "",
             f"Input-bound: the step waits more than {100 * INPUT_BOUND:.0f} % of its time for its batch.", ""]
    rows = load_jsonl(os.path.join(logs, "workers/rows.jsonl"))
    res["workers"] = rows
    out = []
    for r in rows:
        if "samples_per_s" not in r:
            out.append([str(r["workers"]) + (", cache" if r.get("cache") else "") + (", staged" if r.get("staged") else ""),
                        r.get("skipped") or r.get("failed"), "", "", "", "", "", ""])
            continue
        bound = r["data_wait_fraction"] is not None and r["data_wait_fraction"] > INPUT_BOUND
        loader = r.get("loader_wait_s_per_step")
        label = str(r["workers"]) + (", cache" if r.get("cache") else "") + (
            ", staged" if str(r.get("upload") or "").startswith("staged") else "")
        steady = r.get("steady_samples_per_s")
        out.append([label, f"{r['samples_per_s']:,.0f}" + ("" if steady is None else f" (steady {steady:,.0f})"),
                    ms(r["step_s"]), ms(r["data_wait_s_per_step"]),
                    "-" if loader is None else ms(loader), pct(r["data_wait_fraction"]),
                    "-" if r["gpu_mean_percent"] is None else f"{r['gpu_mean_percent']:.0f} / {r['gpu_max_percent']:.0f}",
                    "**yes**" if bound else "no"])
    if out:
        dev = next((r.get("device_name") for r in rows if r.get("device_name")), "?")
        data = next((r.get("data") for r in rows if r.get("data")), "?")
        lines += [f"Device {dev}; {data}.", ""]
        lines += table(["data.workers", "samples/s", "step ms", "data wait ms", "of it the loader ms", "wait share",
                        "GPU % mean / max", "input-bound"], out)
    lines.append("")
    return lines


def cpuref_section(logs, res):
    lines = ["## cpuref: CPU models vs PyTorch on this CPU (one thread each, pinned, side by side)", ""]
    env = load_json(os.path.join(logs, "cpuref/env.json"), {})
    rows = load_jsonl(os.path.join(logs, "cpuref/rows.jsonl"))
    res["cpuref"] = {"env": env, "rows": rows}
    ref = (env or {}).get("reference_env") or {}
    if env:
        blas = "; ".join(f"{b.get('config', '?')} (core {b.get('core', '?')})" for b in ref.get("openblas", []))
        lines += [f"torch {env.get('torch')} ({env.get('python')}); CPU {ref.get('cpu_model', '?')}, flags "
                  f"{' '.join(ref.get('cpu_flags', []))}; oneDNN (mkldnn) available {ref.get('mkldnn_available')}; "
                  f"OpenBLAS {blas or '?'}; torch.__config__.show() in cpuref/torch_config.txt.", ""]
    by = {}
    for r in rows:
        if "ratio_wall" in r:
            by.setdefault((r["model"], r.get("precision", "fp32")), []).append(r)
    out = []
    for (m, prec), rs in by.items():
        rw = statistics.median(r["ratio_wall"] for r in rs)
        rc = statistics.median(r["ratio_cpu_s"] for r in rs)
        out.append([m, prec if prec == "fp32" else "bf16 (PyTorch: autocast)", rs[0]["batch"], " · ".join(f"{r['ringtrain_samples_per_s']:.0f}" for r in rs),
                    " · ".join(f"{r['pytorch_samples_per_s']:.0f}" for r in rs), f"{rw:.2f}x", f"{rc:.2f}x",
                    "yes" if min(rw, rc) >= CPUREF_GOAL else "**no**"])
    if out:
        lines += table(["model", "precision", "batch", "ringtrain samples/s (rounds)", "PyTorch samples/s (rounds)",
                        "ratio wall (median)", "ratio per CPU-s", f">= {CPUREF_GOAL}x"], out)
        conv = next((r.get("cpu_conv") for rs in by.values() for r in rs if r.get("cpu_conv")), None)
        if conv:
            lines += ["", f"ringtrain's CPU convolutions: {conv}."]
    for r in rows:
        if "skipped" in r or "failed" in r:
            lines.append(f"- {r['model']} {r.get('precision', 'fp32')} round {r['round']}: "
                         f"{r.get('skipped') or r.get('failed')}")
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs")
    ap.add_argument("--total-s", type=int)
    a = ap.parse_args()
    logs = a.logs
    stages = load_jsonl(os.path.join(logs, "stages.jsonl"))
    machine = open(os.path.join(logs, "machine.txt")).read().strip().splitlines() \
        if os.path.exists(os.path.join(logs, "machine.txt")) else []
    res = {"machine": machine, "stages": stages, "total_s": a.total_s}
    lines = ["# Device check", ""] + [f"- {m}" for m in machine]
    if a.total_s is not None:
        lines.append(f"- whole command: {a.total_s} s")
    lines += ["", "## Stages", ""]
    lines += table(["stage", "status", "seconds", "why"],
                   [[s["stage"], s["status"] if s["status"] != "failed" else "**failed**", s["seconds"], s["why"] or ""]
                    for s in stages]) + [""]
    ran = {s["stage"] for s in stages if s["status"] in ("ok", "failed")}
    for name, fn in (("gpu", gpu_section), ("cpu16", cpu16_section), ("extrapolate", extrapolate_section),
                     ("workers", workers_section), ("cpuref", cpuref_section)):
        if name in ran:
            lines += fn(logs, res)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(logs, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(logs, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(text)


if __name__ == "__main__":
    main()
