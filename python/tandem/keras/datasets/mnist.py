"""MNIST (tf.keras.datasets.mnist), from the files the set-up command fetched."""
from ._files import idx_dataset


def load_data(path="mnist.npz"):
    """((x_train, y_train), (x_test, y_test)): uint8 images (n, 28, 28) and uint8 labels (n,), as Keras."""
    return idx_dataset("mnist")
