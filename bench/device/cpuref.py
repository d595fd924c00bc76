#!/usr/bin/python3
"""The CPU models against PyTorch on this machine's CPU (issue 17): LeNet-5, the MNIST CNN and the quality CNN,
`bench_throughput` (the trainer's own step, one thread) against bench/throughput/pytorch_cpu_reference.py (the same
model, optimizer and batch, one intra-op thread), with the protocol of bench/RESULTS.md: 3 timed runs each after a
warm-up, medians, samples per wall second and per CPU second, OPENBLAS_NUM_THREADS=1. Per round and model the two
run at the same time, each pinned to its own physical core (same conditions for both, half the wall time; the two
swap cores every round, so a core that runs slower for a while, as a VM's vCPUs do, favours neither side); the
reference's first run prints torch.__config__.show() (kept as torch_config.txt) and the CPU, oneDNN and OpenBLAS it
runs on. --precisions "fp32 bf16" adds, per round and model, both sides in bf16: ringtrain with --cpu-precision bf16
(train.cpu_precision), PyTorch under torch.autocast("cpu", bfloat16); where this CPU cannot run ringtrain's bf16
(no AVX512-BF16 or AMX) that arm is recorded as skipped with the reason.

Usage: bench/device/cpuref.py --bench build/bench/throughput/bench_throughput --out DIR [--python PY]
         [--rounds 2] [--models "lenet5 mnist_cnn quality_cnn"] [--precisions "fp32 bf16"] [--steps-scale F]
         [--deadline EPOCH_S]
--python: the interpreter that imports torch (default: $TORCH_PYTHON; where neither names one, /usr/bin/python3
or else python3 on PATH, the first that imports it). Rows: DIR/rows.jsonl (one per model and round) and DIR/env.json. Exit 77 (nothing run)
when no interpreter imports torch, 1 when a run fails."""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(ROOT, "bench/throughput/pytorch_cpu_reference.py")
# name: (bench_throughput arguments, timed steps) — bench/RESULTS.md's commands (the pytorch reference takes
# --steps; its warm-up and batch are its own table's, the same values).
MODELS = {
    "lenet5": (["--model", "models/lenet5.json", "--batch", "64", "--optimizer", "adam"], 150, []),
    "mnist_cnn": (["--model", "models/mnist_cnn.json", "--batch", "128", "--optimizer", "adadelta"], 10,
                  ["--warmup", "2"]),
    "quality_cnn": (["--model", "models/quality_cnn.json", "--batch", "256", "--optimizer", "sgd", "--momentum", "0.9"],
                    3, ["--warmup", "1"]),
}


FALLBACK_CORES = ("Prescott", "Nehalem", "Core2", "Katmai", "Penryn", "Dunnington", "Atom")
PROBE = """import ctypes, torch
for line in open("/proc/self/maps"):
    if "libopenblas" in line:
        lib = ctypes.CDLL(line.split()[-1])
        lib.openblas_get_corename.restype = ctypes.c_char_p
        print(lib.openblas_get_corename().decode())
        break
"""


def openblas_kernels_for_this_cpu(py):
    """OPENBLAS_CORETYPE for the peer where its DYNAMIC_ARCH OpenBLAS runs an SSE-era fallback on a CPU with AVX2 or
    AVX-512 (an OpenBLAS older than the CPU model), as ringtrain does for itself; None where nothing is to fix or the
    user set one."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    try:
        core = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, timeout=120).stdout.strip()
        flags = open("/proc/cpuinfo").read()
    except (OSError, subprocess.SubprocessError):
        return None
    if core not in FALLBACK_CORES:
        return None
    return "SkylakeX" if " avx512f" in flags else "Haswell" if " avx2" in flags else None


def torch_python(explicit):
    tried = []
    chosen = explicit or os.environ.get("TORCH_PYTHON")  # named: that one only
    for py in [chosen] if chosen else ["/usr/bin/python3", shutil.which("python3")]:
        if not py or py in tried:
            continue
        tried.append(py)
        try:
            p = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0:
            return py, p.stdout.strip(), tried
    return None, None, tried


def physical_cores():
    """One logical CPU per physical core among those this process may use, CPU 0 last (the system's interrupts)."""
    seen, cpus = set(), []
    for cpu in sorted(os.sched_getaffinity(0)):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                core = f.read().strip()
        except OSError:
            core = str(cpu)
        if core not in seen:
            seen.add(core)
            cpus.append(cpu)
    return sorted(cpus, key=lambda c: (c == 0, c))


def last_json(text, impl):
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    rows = [r for r in rows if r.get("impl", impl) == impl]
    return rows[-1] if rows else None


def swapped_pair_ratios(rows):
    """Rounds 1+2, 3+4, ...: the two sides swapped cores between them, so the geometric mean of the pair's wall
    ratios holds no factor of one core being faster than the other (as long as the speeds held for the pair)."""
    by_round = {r["round"]: r["ratio_wall"] for r in rows if "ratio_wall" in r}
    return [math.sqrt(by_round[k] * by_round[k + 1]) for k in sorted(by_round) if k % 2 == 1 and k + 1 in by_round]


def append_row(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def run_pair(a, m, prec, rnd, py, cores, pinned, env, env_row):
    """One round of model m in precision prec: ringtrain and PyTorch side by side. Returns (row, env_row)."""
    args, steps, extra = MODELS[m]
    steps = max(1, math.ceil(steps * a.steps_scale))
    tag = f"{m}-{prec}-r{rnd + 1}"
    js = os.path.join(a.out, f"{tag}-ringtrain.json")
    ours = [a.bench] + args + ["--steps", str(steps), "--runs", "3", "--threads", "1", "--json", js,
                               "--cpu-precision", prec] + extra
    ref = [py, REFERENCE, "--only", m, "--steps", str(steps), "--runs", "3"] + (["--bf16"] if prec == "bf16" else [])
    mine, theirs = (cores[0], cores[1]) if rnd % 2 == 0 else (cores[1], cores[0])
    if pinned:
        ours = ["taskset", "-c", str(mine)] + ours
        ref = ["taskset", "-c", str(theirs)] + ref
    t0 = time.time()
    logs = [open(os.path.join(a.out, f"{tag}-{n}.log"), "w") for n in ("ringtrain", "pytorch")]
    err_path = os.path.join(a.out, f"{tag}-pytorch.err")
    with open(err_path, "w") as err:
        procs = [subprocess.Popen(ours, stdout=logs[0], stderr=subprocess.STDOUT, cwd=ROOT, env=env)]
        if pinned:
            procs.append(subprocess.Popen(ref, stdout=logs[1], stderr=err, cwd=ROOT, env=env, text=True))
        rcs = [p.wait() for p in procs]
        if not pinned:
            rcs.append(subprocess.run(ref, stdout=logs[1], stderr=err, cwd=ROOT, env=env).returncode)
    for f in logs:
        f.close()
    took = time.time() - t0
    if env_row is None and os.path.getsize(err_path):
        shutil.copy(err_path, os.path.join(a.out, "torch_config.txt"))
    torch_text, ours_text = open(logs[1].name).read(), open(logs[0].name).read()
    torch_row = last_json(torch_text, "pytorch-cpu")
    env_row = env_row or last_json(torch_text, "pytorch-cpu-env")
    base = {"model": m, "precision": prec, "round": rnd + 1}
    if prec == "bf16" and rcs[0] == 2 and "train.cpu_precision" in ours_text:  # this CPU has no bf16 (exit 2)
        why = ours_text.strip().splitlines()[-1]
        print(f"cpuref.py: {m} bf16 round {rnd + 1}: skipped: {why}", file=sys.stderr)
        return dict(base, skipped=why), env_row
    ours_row = json.load(open(js))[0] if rcs[0] == 0 and os.path.exists(js) else None
    if rcs[0] != 0 or rcs[1] != 0 or not ours_row or not torch_row:
        why = f"ringtrain exit {rcs[0]}, pytorch exit {rcs[1]}"
        print(f"cpuref.py: {m} {prec} round {rnd + 1} failed ({why}); logs in {a.out}", file=sys.stderr)
        return dict(base, failed=why), env_row
    row = dict(base, steps=steps, batch=ours_row["batch"],
               ringtrain_samples_per_s=ours_row["samples_per_s"],
               ringtrain_samples_per_cpu_s=ours_row["samples_per_cpu_s"], cpu_conv=ours_row.get("cpu_conv"),
               pytorch_samples_per_s=torch_row["samples_per_s"],
               pytorch_samples_per_cpu_s=torch_row["samples_per_cpu_s"],
               ratio_wall=ours_row["samples_per_s"] / torch_row["samples_per_s"],
               ratio_cpu_s=ours_row["samples_per_cpu_s"] / torch_row["samples_per_cpu_s"],
               cpu_model=torch_row.get("cpu_model"), torch=torch_row.get("torch"),
               pytorch_minor_faults_per_step=torch_row.get("minor_faults_per_step"),
               pinned=[mine, theirs] if pinned else None, wall_s=took)
    print(f"[{took:5.1f}s] {m} {prec} round {rnd + 1}: ringtrain {row['ringtrain_samples_per_s']:.0f}, PyTorch "
          f"{row['pytorch_samples_per_s']:.0f} samples/s: {row['ratio_wall']:.2f}x wall, "
          f"{row['ratio_cpu_s']:.2f}x per CPU second (PyTorch page faults a step: "
          f"{row['pytorch_minor_faults_per_step']})", flush=True)
    return row, env_row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="lenet5 mnist_cnn quality_cnn")
    ap.add_argument("--precisions", default="fp32", help='"fp32", "bf16" or both')
    ap.add_argument("--steps-scale", type=float, default=1.0)
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: no round starts after it")
    a = ap.parse_args()
    models = a.models.replace(",", " ").split()
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit(f"cpuref.py: unknown model {unknown[0]!r}; known: {', '.join(MODELS)}")
    precisions = a.precisions.replace(",", " ").split()
    if not precisions or any(p not in ("fp32", "bf16") for p in precisions):
        sys.exit(f"cpuref.py: --precisions {a.precisions!r}: use fp32, bf16 or both")
    os.makedirs(a.out, exist_ok=True)
    py, version, tried = torch_python(a.python)
    if not py:
        print(f"cpuref.py: skipped: no Python here imports torch (tried {', '.join(tried)}; Debian: apt-get install "
              "python3-torch, or set TORCH_PYTHON)", file=sys.stderr)
        sys.exit(77)
    if not os.access(a.bench, os.X_OK):
        sys.exit(f"cpuref.py: {a.bench}: no bench_throughput (configure with -DRINGTRAIN_BENCH=ON and build it)")
    cores = physical_cores()
    pinned = len(cores) >= 2 and shutil.which("taskset") is not None
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    fix = openblas_kernels_for_this_cpu(py)
    if fix:  # what ringtrain sets for itself (ops/threads.hpp): both sides at full speed
        env["OPENBLAS_CORETYPE"] = fix
        print(f"cpuref.py: the OpenBLAS PyTorch loads does not know this CPU model (SSE3 kernels): both sides run "
              f"with OPENBLAS_CORETYPE={fix}, as ringtrain sets for itself", file=sys.stderr)
    print(f"cpuref.py: torch {version} from {py}; " +
          (f"ringtrain and PyTorch on CPUs {cores[0]} and {cores[1]} at the same time, swapping every round" if pinned
           else
           "one core: one after the other, unpinned"), file=sys.stderr)
    rows_path = os.path.join(a.out, "rows.jsonl")
    open(rows_path, "w").close()
    failed, env_row, last = 0, None, 0.0
    took = {}  # (model, precision): seconds its last round took (a later round's estimate)
    for rnd in range(a.rounds):
        for m in models:
            for prec in precisions:
                key = (m, prec)
                if a.deadline and time.time() + took.get(key, last) > a.deadline:
                    why = f"{m} {prec} round {rnd + 1}: skipped, the stage's time is up"
                    print(f"cpuref.py: {why}", file=sys.stderr)
                    append_row(rows_path, {"model": m, "precision": prec, "round": rnd + 1, "skipped": why})
                    continue
                t0 = time.time()
                row, env_row = run_pair(a, m, prec, rnd, py, cores, pinned, env, env_row)
                last = took[key] = time.time() - t0
                append_row(rows_path, row)
                if "failed" in row:
                    failed += 1
    with open(os.path.join(a.out, "env.json"), "w") as f:
        json.dump({"python": py, "torch": version, "reference_env": env_row, "cores": cores[:2] if pinned else None,
                   "concurrent": pinned, "rounds": a.rounds, "precisions": precisions, "steps_scale": a.steps_scale},
                  f, indent=2)
    summary = {}
    for line in open(rows_path):
        r = json.loads(line)
        if "ratio_wall" in r:
            summary.setdefault(f"{r['model']} {r.get('precision', 'fp32')}", []).append(r)
    for m, rs in summary.items():
        pairs = swapped_pair_ratios(rs)
        print(f"{m}: median {statistics.median(r['ratio_wall'] for r in rs):.2f}x wall, "
              f"{statistics.median(r['ratio_cpu_s'] for r in rs):.2f}x per CPU second over {len(rs)} round(s)" +
              (f"; per swapped pair of rounds (geometric mean, the cores' speeds cancel): "
               f"{', '.join(f'{p:.2f}' for p in pairs)}x wall" if pairs else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
