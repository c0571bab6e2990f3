#!/usr/bin/python3
"""The peer for the time-to-accuracy targets: PyTorch 1.13 training the same model with the same
recipe as `tandem fit`, on the same IDX files, timed from process start to the test accuracy.

Usage: /usr/bin/python3 bench/torch_time_to_accuracy.py DATASET_DIR EPOCHS BATCH LR DECAY THREADS [MODEL]
(MODEL: cnn, the default, or cnn-fast, as Tandem's presets)
"""
import time

START = time.perf_counter()

import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(directory, prefix):
    def find(name):
        path = os.path.join(directory, name)
        return path if os.path.exists(path) else path + ".gz"
    x = read_idx(find(prefix + "-images-idx3-ubyte")).astype(np.float32) / 255.0
    y = read_idx(find(prefix + "-labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def main():
    directory, epochs, batch, lr, decay, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = load(directory, "train")
    xt, yt = load(directory, "t10k")
    if len(sys.argv) > 7 and sys.argv[7] == "cnn-fast":  # strided convolutions, no pooling
        model = nn.Sequential(nn.Conv2d(1, 32, 5, stride=2), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(),
                              nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(32 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr, eps=1e-7)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=decay ** (1.0 / ((len(x) + batch - 1) // batch)))
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        perm = torch.randperm(len(x))
        for begin in range(0, len(x), batch):
            idx = perm[begin:begin + batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
    with torch.no_grad():
        correct = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(xt), 1000))
    print(json.dumps({"peer": "pytorch " + torch.__version__, "threads": threads, "epochs": epochs,
                      "test_accuracy": correct / len(xt), "wall_seconds": round(time.perf_counter() - START, 2)}))


if __name__ == "__main__":
    main()
