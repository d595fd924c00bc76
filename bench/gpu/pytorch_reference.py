#!/usr/bin/python3
"""PyTorch eager reference for ringtrain's single-GPU throughput: the same models (LeNet-5, the Keras/Horovod MNIST
CNN), optimizers and batch sizes, trained on Fashion-MNIST-shaped batches that come from host memory each step
(pinned, copied to the GPU), as ringtrain's loader does. Prints one JSON line per (model, batch).
Usage: python3 bench/gpu/pytorch_reference.py [--steps 200]"""
import argparse, json, os, sys, time
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pytorch_models import alexnet, lenet5, mnist_cnn  # noqa: E402  (bench/pytorch_models.py)


def run(name, make, opt_name, batch, steps, shape=(1, 28, 28), classes=10):
    dev = torch.device("cuda")
    model = make().to(dev)
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    elif opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-7)
    xs = [torch.rand(batch, *shape).pin_memory() for _ in range(4)]
    ys = [torch.randint(0, classes, (batch,)).pin_memory() for _ in range(4)]
    loss_fn = nn.CrossEntropyLoss()
    def step(i):
        x = xs[i % 4].to(dev, non_blocking=True)
        y = ys[i % 4].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    for i in range(20):
        step(i)
    torch.cuda.synchronize()
    rates = []
    for r in range(3):
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
        rates.append(steps * batch / (time.perf_counter() - t0))
    rates.sort()
    print(json.dumps({"impl": "pytorch-eager", "model": name, "batch": batch, "samples_per_s": rates[1],
                      "torch": torch.__version__, "device": torch.cuda.get_device_name()}))

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--models", default="lenet5,mnist_cnn,alexnet")
    a = ap.parse_args()
    ap_models = a.models.split(",")
    for batch in (128, 1024):
        if "lenet5" in ap_models:
            run("lenet5", lenet5, "adam", batch, a.steps)
        if "mnist_cnn" in ap_models:
            run("mnist_cnn", mnist_cnn, "adadelta", batch, a.steps)
    if "alexnet" in ap_models:  # compute-bound: fewer steps
        run("alexnet", alexnet, "sgd", 128, max(a.steps // 5, 20), shape=(3, 224, 224), classes=1000)
