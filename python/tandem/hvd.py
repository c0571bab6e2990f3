"""Horovod's Keras API (``import tandem.hvd as hvd``), over Tandem's communicator: run the script
under `tandem launch -np N -- python3 train.py`, one process per worker."""
from . import _tandem
from .keras.optimizers import get as _get_optimizer

__all__ = ["init", "is_initialized", "rank", "size", "local_rank", "local_size", "shutdown", "DistributedOptimizer",
           "callbacks"]

_hvd = _tandem.hvd
init = _hvd.init
is_initialized = _hvd.is_initialized
rank = _hvd.rank
size = _hvd.size
local_rank = _hvd.local_rank
local_size = _hvd.local_size
shutdown = _hvd.shutdown


def DistributedOptimizer(optimizer, backward_passes_per_step=1, average_aggregated_gradients=False, **kwargs):
    """``optimizer`` averaging its gradients over the processes before each update."""
    return _hvd.DistributedOptimizer(_get_optimizer(optimizer), int(backward_passes_per_step),
                                     bool(average_aggregated_gradients))


class callbacks:  # noqa: N801 - hvd.callbacks' names
    @staticmethod
    def BroadcastGlobalVariablesCallback(root_rank=0, **kwargs):
        """At the start of training, root_rank's weights and optimizer state on every process."""
        return _hvd.BroadcastGlobalVariablesCallback(int(root_rank))

    @staticmethod
    def MetricAverageCallback(**kwargs):
        """Each epoch's metrics averaged over the processes."""
        return _hvd.MetricAverageCallback()
