"""Horovod's Keras API (``import tandem.hvd as hvd``), over Tandem's communicator: run the script
under `tandem launch -np N -- python3 train.py`, one process per worker."""
from . import _tandem
from .errors import Error
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


def _only(what, given):
    """Horovod's arguments at the values Tandem acts as; any other is refused by name."""
    for name, value, allowed in given:
        if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
            raise Error(f"{what}: {name}={value!r} is not supported (Tandem averages float32 gradients over every "
                        f"process, on this machine's CPUs); it takes {' or '.join(repr(a) for a in allowed)}")


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None):
    """``optimizer`` averaging its gradients over the processes before each update, every
    ``backward_passes_per_step`` batches (their gradients summed, or averaged with
    ``average_aggregated_gradients``). Horovod's other arguments are taken at the values Tandem
    does (``name`` is a hint); any other is refused by name."""
    _only("DistributedOptimizer", (("device_dense", device_dense, ("",)), ("device_sparse", device_sparse, ("",)),
                                   ("compression", compression, (Compression.none,)),
                                   ("sparse_as_dense", sparse_as_dense, (False, True)),
                                   ("gradient_predivide_factor", gradient_predivide_factor, (1.0, 1)),
                                   ("op", op, (Average,)), ("num_groups", num_groups, (0,)),
                                   ("groups", groups, (None,))))
    return _hvd.DistributedOptimizer(_get_optimizer(optimizer), int(backward_passes_per_step),
                                     bool(average_aggregated_gradients))


class callbacks:  # noqa: N801 - hvd.callbacks' names
    @staticmethod
    def BroadcastGlobalVariablesCallback(root_rank=0, device=""):
        """At the start of training, root_rank's weights and optimizer state on every process."""
        _only("BroadcastGlobalVariablesCallback", (("device", device, ("",)),))
        return _hvd.BroadcastGlobalVariablesCallback(int(root_rank))

    @staticmethod
    def MetricAverageCallback(device=""):
        """Each epoch's metrics averaged over the processes."""
        _only("MetricAverageCallback", (("device", device, ("",)),))
        return _hvd.MetricAverageCallback()
