"""CIFAR-10 (tf.keras.datasets.cifar10), where its binary batches are present under the data folder."""
import numpy as np

from ._files import find


def _read(paths):
    xs, ys = [], []
    for p in paths:
        raw = np.fromfile(p, dtype=np.uint8)
        if raw.size % 3073:
            from ...errors import Error
            raise Error(f"{p}: {raw.size} bytes is not a whole number of 3073-byte CIFAR-10 records")
        records = raw.reshape(-1, 3073)
        ys.append(records[:, 0])
        xs.append(records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys).reshape(-1, 1)


def load_data():
    """((x_train, y_train), (x_test, y_test)): uint8 images (n, 32, 32, 3) and uint8 labels (n, 1), as Keras."""
    train = find("cifar10", [f"data_batch_{i}.bin" for i in range(1, 6)])
    test = find("cifar10", ["test_batch.bin"])
    return _read(train), _read(test)
