#!/usr/bin/python3
"""The peer on the third tutorial's code: PyTorch 1.13 training its model (784 -> 3000 relu -> 1000 relu
-> 10 sigmoid, Glorot-uniform kernels and zero biases as Keras initialises them) with SGD at 0.01
(Keras' default), Keras' categorical cross-entropy on probabilities (normalised, clipped to
[1e-7, 1 - 1e-7]), batch 250, on Fashion-MNIST from Debian's dataset-fashion-mnist; prints the test
accuracy after each of 2 epochs. tests/python/test_tutorials.py says what Tandem reaches on the same code.

Usage: /usr/bin/python3 bench/peer_003_accuracy.py
"""
import gzip

import numpy as np
import torch
from torch import nn


def idx(path):
    """An IDX file (gzipped) as a numpy array."""
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    d = "/usr/share/datasets/fashion-mnist/"
    x = torch.tensor(idx(d + "train-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0, dtype=torch.float32)
    y = torch.tensor(np.eye(10, dtype=np.float32)[idx(d + "train-labels-idx1-ubyte.gz")])
    x_test = torch.tensor(idx(d + "t10k-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0, dtype=torch.float32)
    y_test = torch.tensor(idx(d + "t10k-labels-idx1-ubyte.gz").astype(np.int64))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 3000), nn.ReLU(), nn.Linear(3000, 1000), nn.ReLU(), nn.Linear(1000, 10),
                          nn.Sigmoid())
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = 250
    for epoch in range(2):
        for b in range(0, len(x), batch):
            p = model(x[b:b + batch])
            p = p / p.sum(1, keepdim=True)
            loss = -(y[b:b + batch] * torch.log(p.clamp(1e-7, 1 - 1e-7))).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch + 1}: test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
