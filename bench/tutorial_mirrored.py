#!/usr/bin/python3
"""The first reference tutorial's experiment (000_679b1d54cd8d00ff.txt) through `import tandem as
tf`, its code as written: real MNIST scaled to [0, 1] as float64 (and its labels divided by 255 too,
as the tutorial does), the MLP at batch 25, MirroredStrategy() against the model without a
strategy, 3 epochs each (the tutorial runs 10). Rounds alternate which goes first; prints each
fit's seconds and the best of each, and the ratio one device / mirrored (> 1: mirrored is faster).

Usage: /usr/bin/python3 bench/tutorial_mirrored.py [MNIST_DIR] [rounds]   (defaults data/mnist, 3)
"""
import json
import sys
import time

import numpy as np

import tandem as tf


def idx(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[4:8], "big")
    if raw[3] == 3:
        return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 28, 28)
    return np.frombuffer(raw, np.uint8, offset=8)


def make_model():
    m = tf.keras.Sequential()
    m.add(tf.keras.layers.Dense(units=128, activation="relu", input_shape=(784,)))
    m.add(tf.keras.layers.Dropout(rate=0.2))
    m.add(tf.keras.layers.Dense(units=10, activation="softmax"))
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"])
    return m


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "data/mnist"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    X_train, y_train = idx(data + "/train-images-idx3-ubyte"), idx(data + "/train-labels-idx1-ubyte")
    X_train = X_train / 255.0
    y_train = y_train / 255.0
    X_train = X_train.reshape(-1, 28 * 28)
    seconds = {"mirrored": [], "one device": []}
    for r in range(rounds):
        distribute = tf.distribute.MirroredStrategy()
        with distribute.scope():
            model_dis = make_model()
        model_normal = make_model()
        runs = [("mirrored", model_dis), ("one device", model_normal)]
        for name, model in runs if r % 2 == 0 else runs[::-1]:
            start = time.time()
            model.fit(X_train, y_train, epochs=3, batch_size=25, verbose=0)
            seconds[name].append(round(time.time() - start, 3))
    best = {k: min(v) for k, v in seconds.items()}
    print(json.dumps({"tutorial": "000 mirrored vs one device, batch 25, 3 epochs", "seconds": seconds,
                      "best": best, "one_device_over_mirrored": round(best["one device"] / best["mirrored"], 3)}))


if __name__ == "__main__":
    main()
