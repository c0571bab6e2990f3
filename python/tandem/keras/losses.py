"""Keras losses (tf.keras.losses)."""
from .. import _tandem

__all__ = ["SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy", "MeanSquaredError"]


def SparseCategoricalCrossentropy(from_logits=False, **kwargs):
    """Cross-entropy between integer labels and predicted class scores (logits when from_logits)."""
    return _tandem.Loss("sparse_categorical_crossentropy", bool(from_logits))


def CategoricalCrossentropy(from_logits=False, **kwargs):
    """Cross-entropy between one-hot labels and predicted class scores."""
    return _tandem.Loss("categorical_crossentropy", bool(from_logits))


def BinaryCrossentropy(from_logits=False, **kwargs):
    """Cross-entropy between 0/1 labels and predicted probabilities."""
    return _tandem.Loss("binary_crossentropy", bool(from_logits))


def MeanSquaredError(**kwargs):
    """Mean of the squared errors."""
    return _tandem.Loss("mse", False)
