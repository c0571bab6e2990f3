"""keras.regularizers: L1, L2 and L1L2 weight penalties, as a layer's kernel_regularizer,
bias_regularizer or activity_regularizer. fit and evaluate add them to the loss they report and
train on; a custom loop adds ``sum(model.losses)`` to its own loss, as in Keras."""
import math

from ..errors import Error

__all__ = ["Regularizer", "L1", "L2", "L1L2", "l1", "l2", "l1_l2", "get", "serialize", "deserialize"]


def _factor(value, name, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise Error(f"{what}: {name} must be a finite, non-negative number, got {value!r}")
    return float(value)


class Regularizer:
    """The base of Tandem's regularizers: l1·Σ|x| + l2·Σx²."""
    l1 = 0.0
    l2 = 0.0

    def __call__(self, x):
        """The penalty of x (an array or tandem Tensor), as a float."""
        values = x.numpy() if hasattr(x, "numpy") else x
        import numpy as np
        v = np.asarray(values, dtype=np.float32)
        return float(self.l1 * np.abs(v).sum(dtype=np.float32) + self.l2 * np.square(v).sum(dtype=np.float32))

    def _pair(self):
        return (self.l1, self.l2)

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class L1L2(Regularizer):
    """l1·Σ|x| + l2·Σx² (Keras' defaults: 0 and 0)."""

    def __init__(self, l1=0.0, l2=0.0):
        self.l1 = _factor(l1, "l1", type(self).__name__)
        self.l2 = _factor(l2, "l2", type(self).__name__)

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}

    def __repr__(self):
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(L1L2):
    """l1·Σ|x| (default 0.01)."""

    def __init__(self, l1=0.01):
        super().__init__(l1=l1)

    def get_config(self):
        return {"l1": self.l1}


class L2(L1L2):
    """l2·Σx² (default 0.01)."""

    def __init__(self, l2=0.01):
        super().__init__(l2=l2)

    def get_config(self):
        return {"l2": self.l2}


def l1(l1=0.01):
    return L1(l1)


def l2(l2=0.01):
    return L2(l2)


def l1_l2(l1=0.01, l2=0.01):
    return L1L2(l1, l2)


_NAMES = {"l1": L1, "l2": L2, "l1_l2": l1_l2, "L1": L1, "L2": L2, "L1L2": L1L2}


def get(identifier):
    """None, a regularizer, a name ("l1", "l2", "l1_l2") or a config dict -> a regularizer or None."""
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _NAMES:
            raise Error(f"regularizers.get: unknown regularizer {identifier!r} (expected 'l1', 'l2' or 'l1_l2')")
        return _NAMES[identifier]()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    raise Error(f"regularizers.get: {identifier!r} is not a regularizer; Tandem implements keras.regularizers.l1, "
                "l2 and l1_l2 (a custom function or class is not supported)")


def serialize(regularizer, use_legacy_format=False):
    return None if regularizer is None else {"class_name": type(regularizer).__name__,
                                             "config": regularizer.get_config()}


def deserialize(config, custom_objects=None, use_legacy_format=False):
    if custom_objects:
        raise Error("regularizers.deserialize: custom_objects are not supported: Tandem implements L1, L2 and L1L2")
    name = config.get("class_name") if isinstance(config, dict) else None
    if name not in ("L1", "L2", "L1L2"):
        raise Error(f"regularizers.deserialize: expected class_name L1, L2 or L1L2, got {config!r}")
    return _NAMES[name](**config.get("config", {}))


def _pairs(layer_name, kernel=None, bias=None, activity=None):
    """The three regularizers as the engine's (l1, l2) pairs."""
    out = []
    for what, r in (("kernel_regularizer", kernel), ("bias_regularizer", bias), ("activity_regularizer", activity)):
        try:
            r = get(r)
        except Error as e:
            raise Error(f"{layer_name}: {what}: {e}") from None
        out.append((0.0, 0.0) if r is None else r._pair())
    return out


def _of_pair(pair):
    """The regularizer object for an engine's (l1, l2) pair, or None."""
    a, b = (float(v) for v in pair)
    if a == 0 and b == 0:
        return None
    return L2(b) if a == 0 else L1(a) if b == 0 else L1L2(a, b)

