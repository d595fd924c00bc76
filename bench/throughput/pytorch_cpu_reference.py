#!/usr/bin/env python3
"""PyTorch CPU reference for bench_throughput: the same three models, optimizers and batch sizes as the configs
(logreg SGD batch 200, LeNet-5 Adam batch 64, MNIST CNN Adadelta batch 128), one intra-op thread, on 4 cycled
in-memory batches of Fashion-MNIST-shaped data; samples/s = median of --runs timed runs after a warm-up.
This is the issue's reference protocol ("PyTorch 1.13 with OpenBLAS, single thread, median of 3"); Debian 12's
python3-torch is exactly that build, so `apt-get install python3-torch` lets both run on the same machine in one
session. Prints one JSON line per model.
Usage: /usr/bin/python3 bench/throughput/pytorch_cpu_reference.py [--runs 3] [--only lenet5]"""
import argparse, json, os, statistics, sys, time
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pytorch_models import lenet5, logreg, mnist_cnn  # noqa: E402  (bench/pytorch_models.py)


# name: (constructor, optimizer, batch, timed steps per run, warm-up steps) — as bench/RESULTS.md's commands.
MODELS = {
    "logreg": (logreg, "sgd", 200, 2000, 50),
    "lenet5": (lenet5, "adam", 64, 300, 20),
    "mnist_cnn": (mnist_cnn, "adadelta", 128, 20, 3),
}

def run(name, runs):
    make, opt_name, batch, steps, warmup = MODELS[name]
    torch.manual_seed(0)
    model = make()
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    elif opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-7)
    xs = [torch.rand(batch, 1, 28, 28) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(4)]
    loss_fn = nn.CrossEntropyLoss()
    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
    for i in range(warmup):
        step(i)
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        rates.append(steps * batch / (time.perf_counter() - t0))
    print(json.dumps({"impl": "pytorch-cpu", "model": name, "batch": batch, "optimizer": opt_name,
                      "samples_per_s": statistics.median(rates), "runs": rates, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}), flush=True)

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name in MODELS:
        if not a.only or a.only == name:
            run(name, a.runs)
