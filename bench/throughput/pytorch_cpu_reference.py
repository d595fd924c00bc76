#!/usr/bin/python3
"""PyTorch CPU reference for bench_throughput: the same models, optimizers and batch sizes as the configs
(logreg SGD batch 200, LeNet-5 Adam batch 64, MNIST CNN Adadelta batch 128, the quality CNN SGD momentum 0.9 batch
256 on 3x64x64 with one logit and BCEWithLogits), one intra-op thread, on 4 cycled in-memory batches;
samples/s = median of --runs timed runs after a warm-up (wall clock; samples_per_cpu_s from process CPU time, less
disturbed by other load on a shared machine).
This is the issue's reference protocol ("PyTorch 1.13 with OpenBLAS, single thread, median of 3"); Debian 12's
python3-torch is exactly that build, so `apt-get install python3-torch` lets both run on the same machine in one
session. First prints what it runs on (stderr: torch.__config__.show(); stdout: one JSON line "pytorch-cpu-env" with
the CPU model, oneDNN availability, the OpenBLAS core and threads), then one JSON line per model.
With --bf16 the forward and loss run under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's CPU mixed
precision: convolutions and linear layers in bf16 through oneDNN), the peer of ringtrain's train.cpu_precision bf16.
Usage: /usr/bin/python3 bench/throughput/pytorch_cpu_reference.py [--runs 3] [--only lenet5] [--steps N] [--bf16]"""
import argparse, contextlib, ctypes, json, os, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import peer_malloc  # noqa: E402  (bench/peer_malloc.py: before torch, it may re-execute this script)

peer_malloc.ensure()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from pytorch_models import lenet5, logreg, mnist_cnn  # noqa: E402  (bench/pytorch_models.py)


def quality_cnn():
    """models/quality_cnn.json: conv3x3 (no bias) + BatchNorm + ReLU + max-pool, three times (16, 32, 64 channels),
    global average pool, one logit."""
    layers, c = [], 3
    for k in (16, 32, 64):
        layers += [nn.Conv2d(c, k, 3, padding=1, bias=False), nn.BatchNorm2d(k), nn.ReLU(), nn.MaxPool2d(2)]
        c = k
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1))


# name: (constructor, optimizer, batch, timed steps per run, warm-up steps, sample shape, outputs)
# — as bench/RESULTS.md's commands.
MODELS = {
    "logreg": (logreg, "sgd", 200, 2000, 50, (1, 28, 28), 10),
    "lenet5": (lenet5, "adam", 64, 300, 20, (1, 28, 28), 10),
    "mnist_cnn": (mnist_cnn, "adadelta", 128, 20, 3, (1, 28, 28), 10),
    "quality_cnn": (quality_cnn, "sgd_momentum", 256, 5, 2, (3, 64, 64), 1),
}


def openblas_info():
    """The OpenBLAS this process loaded: threadpoolctl's view when installed, else the library's own config string
    (openblas_get_config: version, DYNAMIC_ARCH, the core it picked) read through ctypes."""
    try:
        import threadpoolctl
        return [i for i in threadpoolctl.threadpool_info() if i.get("internal_api") == "openblas"]
    except ImportError:
        pass
    with open("/proc/self/maps") as f:
        # Debian's torch links libblas.so.3, which the alternatives point at openblas-pthread/libopenblasp-r*.so.
        paths = sorted({line.split()[-1] for line in f
                        if "libopenblas" in line.rsplit("/", 1)[-1] and ".so" in line.rsplit("/", 1)[-1]})
    out = []
    for path in paths:
        lib = ctypes.CDLL(path)
        lib.openblas_get_config.restype = ctypes.c_char_p
        info = {"filepath": path, "config": lib.openblas_get_config().decode()}
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            info["core"] = lib.openblas_get_corename().decode()
        if hasattr(lib, "openblas_get_num_threads"):
            info["num_threads"] = lib.openblas_get_num_threads()
        out.append(info)
    return out


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))
    return []


def print_environment():
    print(torch.__config__.show(), file=sys.stderr, flush=True)
    print(json.dumps({"impl": "pytorch-cpu-env", "torch": torch.__version__, "cpu_model": cpu_model(),
                      "cpu_flags": cpu_flags(), "mkldnn_available": torch.backends.mkldnn.is_available(),
                      "mkldnn_enabled": torch.backends.mkldnn.enabled, "threads": torch.get_num_threads(),
                      "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"), "openblas": openblas_info(),
                      "malloc": peer_malloc.describe()}),
          flush=True)


def run(name, runs, steps_override=0, bf16=False):
    make, opt_name, batch, steps, warmup, sample, outputs = MODELS[name]
    steps = steps_override or steps
    torch.manual_seed(0)
    model = make()
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    elif opt_name == "sgd_momentum":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-7)
    xs = [torch.rand(batch, *sample) for _ in range(4)]
    if outputs == 1:
        ys = [torch.randint(0, 2, (batch, 1)).float() for _ in range(4)]
        loss_fn = nn.BCEWithLogitsLoss()
    else:
        ys = [torch.randint(0, 10, (batch,)) for _ in range(4)]
        loss_fn = nn.CrossEntropyLoss()
    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = loss_fn(model(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
    for i in range(warmup):
        step(i)
    rates, cpu_rates = [], []
    faults0 = peer_malloc.minor_faults()
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(i)
        rates.append(steps * batch / (time.perf_counter() - t0))
        cpu_rates.append(steps * batch / (time.process_time() - c0))
    print(json.dumps({"impl": "pytorch-cpu", "model": name, "batch": batch, "optimizer": opt_name,
                      "precision": "bf16 autocast" if bf16 else "fp32",
                      "samples_per_s": statistics.median(rates), "runs": rates,
                      "samples_per_cpu_s": statistics.median(cpu_rates), "cpu_runs": cpu_rates, "cpu_model": cpu_model(), "threads": torch.get_num_threads(),
                      # page faults per timed step: near 0 at full speed (bench/peer_malloc.py)
                      "minor_faults_per_step": (peer_malloc.minor_faults() - faults0) / (runs * steps),
                      "torch": torch.__version__}), flush=True)

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run (default: the table above)")
    ap.add_argument("--bf16", action="store_true", help="forward and loss under torch.autocast(cpu, bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print_environment()
    for name in MODELS:
        if not a.only or a.only == name:
            run(name, a.runs, a.steps, a.bf16)
