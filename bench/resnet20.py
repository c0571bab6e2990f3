#!/usr/bin/python3
"""ResNet-20 (He et al. 2016, the CIFAR network: 3 stages of 3 basic blocks, 16/32/64 filters,
1×1 projection shortcuts where the shape changes) trained on 32×32×3 images, by Tandem (its
functional API, the same network as `tandem fit --model resnet20`) or by the peer, PyTorch.

Usage: /usr/bin/python3 bench/resnet20.py tandem|torch THREADS [SECONDS] [BATCH]
  training samples/s on random images (best of three timed passes of SECONDS each), and the
  process's peak resident memory. Prints one JSON line.
/usr/bin/python3 bench/resnet20.py tandem|torch THREADS accuracy TARGET [EPOCHS]
  Fashion-MNIST padded to 32×32 (the grey channel repeated three times), SGD with momentum 0.9 at
  0.05, batch 128: seconds of training until the test accuracy reaches TARGET (checked after each
  epoch), or the epochs run out. Prints one JSON line.
"""
import json
import pathlib
import resource
import sys
import time

import numpy as np


def fashion_32():
    import gzip

    root = pathlib.Path("/usr/share/datasets/fashion-mnist")

    def read(name, offset):
        return np.frombuffer(gzip.open(root / name).read(), np.uint8, offset=offset)

    def images(name):
        x = read(name, 16).reshape(-1, 28, 28, 1).astype(np.float32) / 255.0
        x = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
        return np.repeat(x, 3, axis=3)

    return (images("train-images-idx3-ubyte.gz"), read("train-labels-idx1-ubyte.gz", 8).astype(np.int32),
            images("t10k-images-idx3-ubyte.gz"), read("t10k-labels-idx1-ubyte.gz", 8).astype(np.int32))


def tandem_model(tf):
    """examples/resnet20.py's network, compiled as the peer's: SGD 0.05, momentum 0.9."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
    from resnet20 import resnet20

    model = resnet20(seed=1)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def torch_model(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout, momentum=0.01,
                                                                                               eps=1e-3)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout, momentum=0.01,
                                                                                           eps=1e-3)
            self.short = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout, momentum=0.01, eps=1e-3))

        def forward(self, x):
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.short is None else self.short(x)))

    blocks, cin = [], 16
    for filters in (16, 32, 64):
        for block in range(3):
            blocks.append(Block(cin, filters, 2 if block == 0 and filters != 16 else 1))
            cin = filters
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16, momentum=0.01, eps=1e-3),
                         nn.ReLU(), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


class Runner:
    """One framework's training: fit(x, y) one epoch over the arrays (NHWC), accuracy(x, y)."""

    def __init__(self, which, threads):
        self.which = which
        if which == "tandem":
            import tandem as tf

            tf.set_num_threads(threads)
            self.model = tandem_model(tf)
            self.params = self.model.count_params()
        else:
            import torch

            torch.set_num_threads(threads)
            torch.manual_seed(1)
            self.torch = torch
            self.model = torch_model(torch)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
            self.params = sum(p.numel() for p in self.model.parameters())

    def fit(self, x, y, batch):
        if self.which == "tandem":
            self.model.fit(x, y, batch_size=batch, epochs=1, shuffle=True, verbose=0)
            return
        torch, model = self.torch, self.model
        model.train()
        xt, yt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y).long()
        perm = torch.randperm(len(x))
        for begin in range(0, len(x), batch):
            idx = perm[begin:begin + batch]
            self.opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            self.opt.step()

    def accuracy(self, x, y):
        if self.which == "tandem":
            return float(np.mean(np.argmax(self.model.predict(x, batch_size=500, verbose=0), axis=1) == y))
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
            pred = torch.cat([self.model(xt[i:i + 500]) for i in range(0, len(x), 500)]).argmax(1).numpy()
        return float(np.mean(pred == y))


def main():
    which, threads = sys.argv[1], int(sys.argv[2])
    runner = Runner(which, threads)
    if len(sys.argv) > 3 and sys.argv[3] == "accuracy":
        target, epochs = float(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 10
        x, y, xt, yt = fashion_32()
        spent, reached, acc = 0.0, None, []
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            runner.fit(x, y, 128)
            spent += time.perf_counter() - start
            acc.append(runner.accuracy(xt, yt))
            if acc[-1] >= target:
                reached = epoch
                break
        print(json.dumps({"framework": which, "threads": threads, "target": target, "reached_at_epoch": reached,
                          "train_seconds": round(spent, 1), "test_accuracy": acc}))
        return
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    rng = np.random.default_rng(0)
    n = batch * 8
    x = rng.uniform(0, 1, size=(n, 32, 32, 3)).astype(np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    runner.fit(x[:2 * batch], y[:2 * batch], batch)  # warm-up
    best = 0.0
    for _ in range(3):
        start, rows = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            runner.fit(x, y, batch)
            rows += n
        best = max(best, rows / (time.perf_counter() - start))
    print(json.dumps({"framework": which, "threads": threads, "batch": batch, "params": runner.params,
                      "samples_per_s": round(best, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
