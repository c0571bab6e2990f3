"""tf.nn's loss helpers for custom loops."""
from . import _tandem
from . import distribute as _distribute
from .errors import Error


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """The per-sample losses (times ``sample_weight``, a number or one weight per sample) summed and
    divided by the global batch size (by default the batch times the replicas in sync): each
    replica's share of the global batch's mean loss."""
    if sample_weight is not None:
        per_example_loss = per_example_loss * _weights(sample_weight, per_example_loss)
    if global_batch_size is not None and (isinstance(global_batch_size, bool) or int(global_batch_size) <= 0):
        raise Error(f"compute_average_loss: global_batch_size must be a positive int, got {global_batch_size!r}")
    return _tandem.compute_average_loss(per_example_loss, int(global_batch_size or 0))


def scale_regularization_loss(regularization_loss):
    """A regularization loss (``sum(model.losses)``) divided by the replicas in sync, so that the
    replicas' gradients sum to its gradient once."""
    replicas = _distribute.get_strategy().num_replicas_in_sync
    return regularization_loss * (1.0 / replicas)


def _weights(sample_weight, per_example_loss):
    import numpy as np
    w = np.asarray(sample_weight.numpy() if hasattr(sample_weight, "numpy") else sample_weight, dtype=np.float32)
    rows = len(per_example_loss)
    if w.ndim == 0:
        return float(w)
    w = w.reshape(-1) if w.ndim == 2 and w.shape[1] == 1 else w
    if w.shape != (rows,):
        raise Error(f"compute_average_loss: sample_weight has shape {w.shape}, expected a number or ({rows},)")
    return _tandem.as_tensor(w)
