#!/usr/bin/python3
"""The same models as bench_models, built and trained through the Python module (tandem.keras),
with bench_models' protocol: a warm-up fit, one fit to size the runs to about SECONDS/3, then the
best of three fits. Prints one JSON line like bench_models.

Usage: /usr/bin/python3 bench/python_models.py WORKLOAD THREADS [SECONDS]   (mlp25, mlp256, cnn64, ...)
"""
import json
import sys
import time

import numpy as np

import tandem as tf


def make_model(kind):
    L = tf.keras.layers
    if kind == "mlp":
        m = tf.keras.Sequential([L.Dense(128, activation="relu", input_shape=(784,)), L.Dropout(0.2),
                                 L.Dense(10, activation="softmax")])
        m.compile(optimizer=tf.keras.optimizers.Adam(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    elif kind == "mlp5":
        m = tf.keras.Sequential([L.Dense(160, activation="elu", input_shape=(784,))] +
                                [L.Dense(160, activation="elu") for _ in range(4)] + [L.Dense(10)])
        m.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.95), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    else:
        m = tf.keras.Sequential([L.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)), L.MaxPooling2D(),
                                 L.Flatten(), L.Dense(64, activation="relu"), L.Dense(10)])
        m.compile(optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def main():
    workloads = {"mlp25": ("mlp", 25), "mlp256": ("mlp", 256), "mlp5_50": ("mlp5", 50),
                 "mlp5_256": ("mlp5", 256), "cnn64": ("cnn", 64), "cnn256": ("cnn", 256)}
    name, threads = sys.argv[1], int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    kind, batch = workloads[name]
    tf.set_num_threads(threads)
    n = 60000
    rng = np.random.default_rng(1)
    x = rng.random((n, 28, 28, 1) if kind == "cnn" else (n, 784), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    model = make_model(kind)

    def run(rows):
        start = time.perf_counter()
        model.fit(x[:rows], y[:rows], epochs=1, batch_size=batch, verbose=0)
        return rows / (time.perf_counter() - start)

    per_run = min(n, batch * 40)
    run(per_run)  # warm-up
    start = time.perf_counter()
    run(per_run)
    one = time.perf_counter() - start
    rows = min(n, max(batch, int(per_run * (seconds / 3) / one)))
    rows -= rows % batch
    best = max(run(rows) for _ in range(3))
    print(json.dumps({"workload": name, "strategy": "python", "threads": threads, "samples_per_s": round(best)}))


if __name__ == "__main__":
    main()
