"""tf.keras.utils: one-hot labels and the seeds."""
import random

import numpy as np

from ..errors import Error

__all__ = ["to_categorical", "set_random_seed"]

_seed = [0]  # the seed of models made without one (set_random_seed)


def to_categorical(x, num_classes=None, dtype="float32"):
    """Class indices as one-hot rows, as Keras: an array of shape ``x.shape + (num_classes,)``
    (a trailing axis of 1 is dropped first), 1 at each index. ``num_classes`` defaults to the
    largest index + 1; an index outside [0, num_classes), or one that is not a whole number, is
    an Error naming it and where it is."""
    labels = np.asarray(x)
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels.reshape(labels.shape[:-1])
    if labels.dtype.kind not in "biuf":
        raise Error(f"to_categorical: labels must be numbers, got an array of {labels.dtype}")
    flat = labels.reshape(-1)
    if labels.dtype.kind == "f":
        whole = np.isfinite(flat) & (flat == np.floor(flat))
        if not whole.all():
            at = int(np.argmin(whole))
            raise Error(f"to_categorical: label {flat[at]!r} at index {at} is not a class index (a whole number)")
    flat = flat.astype(np.int64)
    if num_classes is None:
        num_classes = int(flat.max()) + 1 if flat.size else 0
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise Error(f"to_categorical: num_classes must be a positive int, got {num_classes!r}")
    num_classes = int(num_classes)
    outside = (flat < 0) | (flat >= num_classes)
    if outside.any():
        at = int(np.argmax(outside))
        raise Error(f"to_categorical: label {int(flat[at])} at index {at} is outside [0, {num_classes})")
    out = np.zeros((flat.size, num_classes), dtype=dtype)
    out[np.arange(flat.size), flat] = 1
    return out.reshape(labels.shape + (num_classes,))


def set_random_seed(seed):
    """Seeds Python's ``random``, NumPy's global generator, and the models made afterwards without
    a seed of their own (their weights, dropout and shuffling), as keras.utils.set_random_seed."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise Error(f"set_random_seed: seed must be an int of 0 or more, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    _seed[0] = int(seed)


def default_seed():
    """The seed of a model made without one: 0, or the last set_random_seed's."""
    return _seed[0]
