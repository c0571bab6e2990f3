"""Fashion-MNIST (tf.keras.datasets.fashion_mnist), from Debian's dataset-fashion-mnist."""
from ._files import idx_dataset


def load_data():
    """((x_train, y_train), (x_test, y_test)): uint8 images (n, 28, 28) and uint8 labels (n,), as Keras."""
    return idx_dataset("fashion-mnist")
