#!/usr/bin/python3
"""The third tutorial's model (Flatten -> 3000 relu -> 1000 relu -> 10 sigmoid, SGD, categorical
cross-entropy on one-hot labels, batch 250 per replica) on Fashion-MNIST-shaped data, trained
through tandem.data (from_tensor_slices.batch.prefetch(AUTOTUNE), the tutorial's pipeline) and
through fit(x, y) at the same batch; the peer is PyTorch 1.13 on the same model through its own
input pipeline (TensorDataset + DataLoader). Each side: a warm-up epoch, then the best of ROUNDS
alternated rounds of one epoch over ROWS rows. Prints one JSON line per side and round.

Usage: /usr/bin/python3 bench/tf_data.py [ROWS] [ROUNDS] [REPLICAS]   (defaults 10000, 3, 1)
REPLICAS > 1: the Tandem sides train under MirroredStrategy(REPLICAS) at 250 x REPLICAS.
"""
import json
import sys
import time

import numpy as np

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
replicas = int(sys.argv[3]) if len(sys.argv) > 3 else 1
batch = 250 * replicas
rng = np.random.default_rng(0)
x = rng.random((rows, 28, 28), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, rows)]


def tandem_model(tf):
    k = tf.keras
    model = k.Sequential([k.layers.Flatten(input_shape=(28, 28)), k.layers.Dense(3000, activation="relu"),
                          k.layers.Dense(1000, activation="relu"), k.layers.Dense(10, activation="sigmoid")])
    model.compile(optimizer="SGD", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


def tandem_sides():
    import tandem as tf

    def made():
        if replicas == 1:
            return tandem_model(tf)
        with tf.distribute.MirroredStrategy(num_replicas=replicas).scope():
            return tandem_model(tf)

    arrays, piped = made(), made()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(tf.data.AUTOTUNE)
    return {"fit(x, y)": lambda: arrays.fit(x, y, batch_size=batch, epochs=1, verbose=0),
            "tandem.data": lambda: piped.fit(dataset, epochs=1, verbose=0)}


def torch_side():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 3000), nn.ReLU(), nn.Linear(3000, 1000), nn.ReLU(),
                          nn.Linear(1000, 10), nn.Sigmoid())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                         batch_size=batch, shuffle=True)

    def epoch():
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            p = model(xb)
            p = p / p.sum(dim=1, keepdim=True)  # Keras' categorical cross-entropy on probabilities
            loss = -(yb * torch.log(p.clamp(1e-7, 1 - 1e-7))).sum(dim=1).mean()
            loss.backward()
            opt.step()

    return {"PyTorch DataLoader": epoch}


sides = {**tandem_sides(), **torch_side()}
for run in sides.values():
    run()  # warm-up
for r in range(rounds):
    for name, run in sides.items():
        start = time.perf_counter()
        run()
        print(json.dumps({"side": name, "round": r, "replicas": replicas, "batch": batch,
                          "samples_per_s": round(rows / (time.perf_counter() - start))}), flush=True)
