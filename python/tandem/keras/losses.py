"""Keras losses (tf.keras.losses), with Keras 3's arguments: each acts or is refused by name."""
from .. import _arrays, _tandem
from ..errors import Error

__all__ = ["SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy", "MeanSquaredError",
           "Reduction", "Loss"]


class Reduction:
    """How a loss object called on a batch reduces its per-sample losses (tf.keras.losses.Reduction)."""
    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"


_REDUCTIONS = (Reduction.AUTO, Reduction.NONE, Reduction.SUM, Reduction.SUM_OVER_BATCH_SIZE, None)


class Loss:
    """Keras' loss base class: ``loss(y_true, y_pred, sample_weight=None)`` gives the per-sample
    losses (times ``sample_weight``, a number or one per sample) reduced as ``reduction`` says:
    each with Reduction.NONE (or None), their sum with SUM, else their sum ÷ the rows
    (sum_over_batch_size, Keras'). A subclass defines ``call(y_true, y_pred)`` (the per-sample
    losses, as tandem Tensors) for a custom loop; ``fit`` computes its losses in the engine, so
    compile takes Tandem's built-in losses (these functions' objects) and names only."""

    def __init__(self, name=None, reduction=Reduction.SUM_OVER_BATCH_SIZE, dtype=None):
        if reduction not in _REDUCTIONS:
            raise Error(f"loss: unknown reduction {reduction!r}; expected one of "
                        f"{', '.join(repr(r) for r in _REDUCTIONS)}")
        if dtype not in (None, "float32") and getattr(dtype, "name", None) != "float32":
            raise Error(f"loss: dtype must be float32 (losses are computed in float32), got {dtype!r}")
        self._name = name
        self.reduction = reduction

    @property
    def name(self):
        return self._name

    def call(self, y_true, y_pred):
        raise Error(f"{type(self).__name__}: a Loss subclass defines call(y_true, y_pred)")

    def __call__(self, y_true, y_pred, sample_weight=None):
        per_sample = self.call(y_true, y_pred)
        if sample_weight is not None:
            per_sample = per_sample * _arrays.loss_weights(sample_weight, len(per_sample), "loss")
        if self.reduction in (Reduction.NONE, None):
            return per_sample
        if self.reduction == Reduction.SUM:
            return _tandem.compute_average_loss(per_sample, 1)
        return _tandem.reduce_mean(per_sample)

    def __repr__(self):
        return f"<tandem.keras.losses.{type(self).__name__} {self.name!r}>"


class _Builtin(Loss):
    """One of the engine's losses (what compile gives fit)."""

    def __init__(self, kind, from_logits=False, reduction=Reduction.SUM_OVER_BATCH_SIZE, label_smoothing=0.0,
                 name=None, dtype=None):
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
            raise Error(f"loss: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
        super().__init__(name, reduction, dtype)
        self._loss = _tandem.Loss(kind, bool(from_logits), float(label_smoothing))
        if name is None:
            self._name = self._loss.name

    @property
    def from_logits(self):
        return self._loss.from_logits

    @property
    def label_smoothing(self):
        return self._loss.label_smoothing

    def call(self, y_true, y_pred):
        return self._loss.per_sample(y_true, y_pred)

    def __repr__(self):
        return f"<tandem.keras.losses {self.name} from_logits={self.from_logits}>"


def _axis(what, axis):
    if axis != -1:
        raise Error(f"{what}: axis must be -1 (the classes on the last axis), got {axis!r}")


def SparseCategoricalCrossentropy(from_logits=False, ignore_class=None, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                                  name="sparse_categorical_crossentropy", dtype=None):
    """Cross-entropy between integer labels and predicted class scores (logits when from_logits)."""
    if ignore_class is not None:
        raise Error("SparseCategoricalCrossentropy: ignore_class is not built in Tandem (every label counts)")
    return _Builtin("sparse_categorical_crossentropy", from_logits, reduction, name=name, dtype=dtype)


def CategoricalCrossentropy(from_logits=False, label_smoothing=0.0, axis=-1, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                            name="categorical_crossentropy", dtype=None):
    """Cross-entropy between one-hot labels (smoothed: y·(1 - s) + s / classes) and class scores."""
    _axis("CategoricalCrossentropy", axis)
    return _Builtin("categorical_crossentropy", from_logits, reduction, label_smoothing, name, dtype)


def BinaryCrossentropy(from_logits=False, label_smoothing=0.0, axis=-1, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                       name="binary_crossentropy", dtype=None):
    """Cross-entropy between 0/1 labels (smoothed: y·(1 - s) + s / 2) and predicted probabilities."""
    _axis("BinaryCrossentropy", axis)
    return _Builtin("binary_crossentropy", from_logits, reduction, label_smoothing, name, dtype)


def MeanSquaredError(reduction=Reduction.SUM_OVER_BATCH_SIZE, name="mean_squared_error", dtype=None):
    """Mean of the squared errors."""
    return _Builtin("mse", False, reduction, name=name, dtype=dtype)
