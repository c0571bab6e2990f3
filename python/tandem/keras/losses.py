"""Keras losses (tf.keras.losses), with Keras 3's arguments: each acts or is refused by name."""
from .. import _tandem
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
    """A loss: given to compile, or called in a custom loop, ``loss(y_true, y_pred)``: the
    per-sample losses with reduction=Reduction.NONE (or None), their sum with SUM, else their
    mean. ``fit`` trains on the batch's mean, so compile takes AUTO and SUM_OVER_BATCH_SIZE only."""

    def __init__(self, name, from_logits=False, reduction=Reduction.SUM_OVER_BATCH_SIZE, label_smoothing=0.0):
        if reduction not in _REDUCTIONS:
            raise Error(f"loss: unknown reduction {reduction!r}; expected one of "
                        f"{', '.join(repr(r) for r in _REDUCTIONS)}")
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
            raise Error(f"loss: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
        self._loss = _tandem.Loss(name, bool(from_logits), float(label_smoothing))
        self.reduction = reduction

    @property
    def name(self):
        return self._loss.name

    @property
    def from_logits(self):
        return self._loss.from_logits

    @property
    def label_smoothing(self):
        return self._loss.label_smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise Error("loss: sample_weight is not supported")
        per_sample = self._loss.per_sample(y_true, y_pred)
        if self.reduction in (Reduction.NONE, None):
            return per_sample
        if self.reduction == Reduction.SUM:
            return _tandem.compute_average_loss(per_sample, 1)
        return _tandem.reduce_mean(per_sample)

    def __repr__(self):
        return f"<tandem.keras.losses {self.name} from_logits={self.from_logits}>"


def _check(what, dtype, kwargs, axis=-1):
    if kwargs:
        raise TypeError(f"{what}: unexpected argument{'s' if len(kwargs) > 1 else ''} {', '.join(sorted(kwargs))}")
    if axis != -1:
        raise Error(f"{what}: axis must be -1 (the classes on the last axis), got {axis!r}")
    if dtype not in (None, "float32"):
        raise Error(f"{what}: dtype must be float32 (losses are computed in float32), got {dtype!r}")


def SparseCategoricalCrossentropy(from_logits=False, ignore_class=None, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                                  name="sparse_categorical_crossentropy", dtype=None, **kwargs):
    """Cross-entropy between integer labels and predicted class scores (logits when from_logits)."""
    _check("SparseCategoricalCrossentropy", dtype, kwargs)
    if ignore_class is not None:
        raise Error("SparseCategoricalCrossentropy: ignore_class is not built in Tandem (every label counts)")
    return Loss("sparse_categorical_crossentropy", from_logits, reduction)


def CategoricalCrossentropy(from_logits=False, label_smoothing=0.0, axis=-1, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                            name="categorical_crossentropy", dtype=None, **kwargs):
    """Cross-entropy between one-hot labels (smoothed: y·(1 - s) + s / classes) and class scores."""
    _check("CategoricalCrossentropy", dtype, kwargs, axis)
    return Loss("categorical_crossentropy", from_logits, reduction, label_smoothing)


def BinaryCrossentropy(from_logits=False, label_smoothing=0.0, axis=-1, reduction=Reduction.SUM_OVER_BATCH_SIZE,
                       name="binary_crossentropy", dtype=None, **kwargs):
    """Cross-entropy between 0/1 labels (smoothed: y·(1 - s) + s / 2) and predicted probabilities."""
    _check("BinaryCrossentropy", dtype, kwargs, axis)
    return Loss("binary_crossentropy", from_logits, reduction, label_smoothing)


def MeanSquaredError(reduction=Reduction.SUM_OVER_BATCH_SIZE, name="mean_squared_error", dtype=None, **kwargs):
    """Mean of the squared errors."""
    _check("MeanSquaredError", dtype, kwargs)
    return Loss("mse", False, reduction)
