#!/usr/bin/python3
"""The peer: PyTorch training the same reference models, same batch, same data shape.

Usage: /usr/bin/python3 bench/torch_models.py WORKLOAD THREADS [SECONDS] [bf16]   (THREADS 0: PyTorch's default;
bf16: the step under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision on a CPU)
Prints one JSON line like bench_models. Run one workload per process (peak RSS is per process).
"""
import json
import resource
import sys
import time

import torch
from torch import nn


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
    if kind == "mlp5":
        layers, width = [], 784
        for _ in range(5):
            layers += [nn.Linear(width, 160), nn.ELU()]
            width = 160
        return nn.Sequential(*layers, nn.Linear(160, 10))
    if kind == "cifar-mlp":  # the third tutorial's: Flatten, 3000 relu, 1000 relu, 10 sigmoid
        return nn.Sequential(nn.Flatten(), nn.Linear(3072, 3000), nn.ReLU(), nn.Linear(3000, 1000), nn.ReLU(),
                             nn.Linear(1000, 10), nn.Sigmoid())
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))


def make_optimizer(kind, model):
    if kind == "mlp5":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.95)
    return torch.optim.Adam(model.parameters(), lr=0.001, eps=1e-7)


def main():
    workloads = {"mlp25": ("mlp", 25), "mlp256": ("mlp", 256), "mlp5_50": ("mlp5", 50),
                 "mlp5_256": ("mlp5", 256), "cnn64": ("cnn", 64), "cnn256": ("cnn", 256),
                 "cifar_mlp256": ("cifar-mlp", 256)}
    name, threads = sys.argv[1], int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    bf16 = len(sys.argv) > 4 and sys.argv[4] == "bf16"
    kind, batch = workloads[name]
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    n = 60000
    x = torch.rand(n, 1, 28, 28) if kind == "cnn" else torch.rand(n, 3, 32, 32) if kind == "cifar-mlp" else torch.rand(n, 784)
    y = torch.randint(0, 10, (n,))
    model = make_model(kind)
    opt = make_optimizer(kind, model)
    loss_fn = nn.CrossEntropyLoss()

    def run(rows):
        perm = torch.randperm(rows)
        start = time.perf_counter()
        for begin in range(0, rows - batch + 1, batch):
            idx = perm[begin:begin + batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model(xb).float(), yb)
            loss.backward()
            opt.step()
        return rows / (time.perf_counter() - start)

    rows = min(n, batch * 40)
    run(rows)  # warm-up
    start = time.perf_counter()
    run(rows)
    one = time.perf_counter() - start
    rows = min(n, max(batch, int(rows * (seconds / 3) / one)))
    rows -= rows % batch
    best = max(run(rows) for _ in range(3))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"workload": name, "threads": threads, "samples_per_s": round(best),
                      "precision": "autocast_bf16" if bf16 else "float32",
                      "peak_rss_mb": round(rss, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
