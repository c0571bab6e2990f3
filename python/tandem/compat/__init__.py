"""tf.compat: the TensorFlow 1 names that mean what today's do (``compat.v1``)."""
from . import v1

__all__ = ["v1"]
