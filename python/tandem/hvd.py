"""Horovod's Keras API (``import tandem.hvd as hvd``), over Tandem's communicator: run the script
under `tandem launch -np N -- python3 train.py`, one process per worker."""
from . import _tandem
from .keras.optimizers import get as _get_optimizer

__all__ = ["init", "is_initialized", "rank", "size", "local_rank", "local_size", "shutdown", "DistributedOptimizer",
           "callbacks", "Average", "Sum", "Adasum", "Compression"]

# Horovod's reduction ops and compressions, by name (DistributedOptimizer takes Average and none).
Average, Sum, Adasum = "Average", "Sum", "Adasum"


class Compression:  # noqa: N801 - hvd.Compression's names
    none = "none"
    fp16 = "fp16"


_hvd = _tandem.hvd
init = _hvd.init
is_initialized = _hvd.is_initialized
rank = _hvd.rank
size = _hvd.size
local_rank = _hvd.local_rank
local_size = _hvd.local_size
shutdown = _hvd.shutdown


def _refuse(what, kwargs, allowed=()):
    """Horovod's keyword arguments that Tandem does not act on are refused, never dropped."""
    unknown = sorted(k for k, v in kwargs.items() if not (k in allowed and v in allowed[k]))
    if unknown:
        raise TypeError(f"{what}() got keyword arguments Tandem does not act on: {', '.join(unknown)} (Tandem "
                        "averages float32 gradients over every process, on this machine's CPUs)")


def DistributedOptimizer(optimizer, backward_passes_per_step=1, average_aggregated_gradients=False, **kwargs):
    """``optimizer`` averaging its gradients over the processes before each update. Horovod's
    other arguments are taken only at the values Tandem does (``name``, ``device_dense=''``,
    ``device_sparse=''``, ``op=hvd.Average``, ``compression=hvd.Compression.none``); any other is a
    TypeError naming it."""
    kwargs.pop("name", None)
    _refuse("DistributedOptimizer", kwargs, {"device_dense": ("",), "device_sparse": ("",), "op": (Average,),
                                             "compression": (Compression.none,)})
    return _hvd.DistributedOptimizer(_get_optimizer(optimizer), int(backward_passes_per_step),
                                     bool(average_aggregated_gradients))


class callbacks:  # noqa: N801 - hvd.callbacks' names
    @staticmethod
    def BroadcastGlobalVariablesCallback(root_rank=0, **kwargs):
        """At the start of training, root_rank's weights and optimizer state on every process."""
        _refuse("BroadcastGlobalVariablesCallback", kwargs, {"device": ("",)})
        return _hvd.BroadcastGlobalVariablesCallback(int(root_rank))

    @staticmethod
    def MetricAverageCallback(**kwargs):
        """Each epoch's metrics averaged over the processes."""
        _refuse("MetricAverageCallback", kwargs, {"device": ("",)})
        return _hvd.MetricAverageCallback()
