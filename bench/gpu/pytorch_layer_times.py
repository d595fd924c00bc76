#!/usr/bin/python3
"""Per-layer GPU times of the PyTorch eager reference (the layer-by-layer twin of ringtrain's train.profile_layers on
a GPU): each module's forward and backward timed with the device synchronised before and after it, median over
steps. Prints one JSON line per model. Usage: python3 bench/gpu/pytorch_layer_times.py [--steps 20]"""
import argparse, json, os, statistics, sys, time
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pytorch_models import alexnet, lenet5, mnist_cnn  # noqa: E402


def profile(name, make, batch, shape, classes, steps):
    dev = torch.device("cuda")
    model = make().to(dev)
    times = {i: {"forward": [], "backward": []} for i in range(len(model))}
    t0 = {}

    # Hooks with a synchronise on each side, so each span is the GPU time of that module's work.
    def start(i, kind):
        def hook(*_):
            torch.cuda.synchronize()
            t0[(i, kind)] = time.perf_counter()
        return hook

    def stop(i, kind):
        def hook(*_):
            torch.cuda.synchronize()
            times[i][kind].append(time.perf_counter() - t0[(i, kind)])
        return hook

    for i, m in enumerate(model):
        m.register_forward_pre_hook(start(i, "forward"))
        m.register_forward_hook(stop(i, "forward"))
        m.register_full_backward_pre_hook(start(i, "backward"))
        m.register_full_backward_hook(stop(i, "backward"))
    x = torch.rand(batch, *shape, device=dev, requires_grad=True)  # so the first layer's backward hook fires too
    y = torch.randint(0, classes, (batch,), device=dev)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(steps):
        loss_fn(model(x), y).backward()
    layers = []
    for i, m in enumerate(model):
        f, b = times[i]["forward"][3:], times[i]["backward"][3:]
        layers.append({"layer": f"{i}:{type(m).__name__}", "forward_s": statistics.median(f) if f else None,
                       "backward_s": statistics.median(b) if b else None})
    print(json.dumps({"impl": "pytorch-eager-layers", "model": name, "batch": batch, "layers": layers}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    profile("mnist_cnn", mnist_cnn, 1024, (1, 28, 28), 10, a.steps)
    profile("alexnet", alexnet, 128, (3, 224, 224), 1000, a.steps)
