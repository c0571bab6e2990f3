"""Keras losses (tf.keras.losses)."""
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


class Loss:
    """A loss: given to compile, or called in a custom loop, ``loss(y_true, y_pred)``: the
    per-sample losses with reduction=Reduction.NONE, else their mean (or sum)."""

    def __init__(self, name, from_logits=False, reduction=Reduction.AUTO):
        if reduction not in (Reduction.AUTO, Reduction.NONE, Reduction.SUM, Reduction.SUM_OVER_BATCH_SIZE):
            raise Error(f"loss: unknown reduction {reduction!r}")
        self._loss = _tandem.Loss(name, bool(from_logits))
        self.reduction = reduction

    @property
    def name(self):
        return self._loss.name

    @property
    def from_logits(self):
        return self._loss.from_logits

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise Error("loss: sample_weight is not supported")
        per_sample = self._loss.per_sample(y_true, y_pred)
        if self.reduction == Reduction.NONE:
            return per_sample
        if self.reduction == Reduction.SUM:
            return _tandem.compute_average_loss(per_sample, 1)
        return _tandem.reduce_mean(per_sample)

    def __repr__(self):
        return f"<tandem.keras.losses {self.name} from_logits={self.from_logits}>"


def SparseCategoricalCrossentropy(from_logits=False, reduction=Reduction.AUTO, **kwargs):
    """Cross-entropy between integer labels and predicted class scores (logits when from_logits)."""
    return Loss("sparse_categorical_crossentropy", from_logits, reduction)


def CategoricalCrossentropy(from_logits=False, reduction=Reduction.AUTO, **kwargs):
    """Cross-entropy between one-hot labels and predicted class scores."""
    return Loss("categorical_crossentropy", from_logits, reduction)


def BinaryCrossentropy(from_logits=False, reduction=Reduction.AUTO, **kwargs):
    """Cross-entropy between 0/1 labels and predicted probabilities."""
    return Loss("binary_crossentropy", from_logits, reduction)


def MeanSquaredError(reduction=Reduction.AUTO, **kwargs):
    """Mean of the squared errors."""
    return Loss("mse", False, reduction)
