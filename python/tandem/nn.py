"""tf.nn's loss helpers for custom loops."""
from . import _arrays, _tandem
from .errors import Error


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """The per-sample losses (times ``sample_weight``, a number or one weight per sample) summed and
    divided by the global batch size (by default the batch times the replicas in sync): each
    replica's share of the global batch's mean loss."""
    if sample_weight is not None:
        per_example_loss = per_example_loss * _arrays.loss_weights(sample_weight, len(per_example_loss),
                                                                   "compute_average_loss")
    if global_batch_size is not None and (isinstance(global_batch_size, bool) or int(global_batch_size) <= 0):
        raise Error(f"compute_average_loss: global_batch_size must be a positive int, got {global_batch_size!r}")
    return _tandem.compute_average_loss(per_example_loss, int(global_batch_size or 0))


def scale_regularization_loss(regularization_loss):
    """A regularization loss (``sum(model.losses)``) divided by the replicas in sync, so that the
    replicas' gradients sum to its gradient once."""
    return regularization_loss * (1.0 / _tandem.replicas_in_sync())

