"""tf.nn's loss helper for custom loops."""
from . import _tandem


def compute_average_loss(per_example_loss, global_batch_size=None, **kwargs):
    """The per-sample losses summed and divided by the global batch size (by default the batch
    times the replicas in sync): each replica's share of the global batch's mean loss."""
    return _tandem.compute_average_loss(per_example_loss, int(global_batch_size or 0))
