"""tf.compat.v1: the distribution strategies under their TensorFlow 1 names, each the same class
as today's. Tandem has no TensorFlow 1 graph API (sessions, placeholders, graphs): any other
name is an AttributeError that says so."""
import types

from .. import distribute as _distribute

_NO_GRAPH_API = ("tandem has no TensorFlow 1 graph API (sessions, placeholders, graphs, variable scopes): "
                 "tf.compat.v1.{} does not exist here; write the TensorFlow 2 form (eager code, tf.keras, "
                 "tf.distribute)")


class _Names(types.ModuleType):
    """A namespace whose missing names are refused with the TF1 message."""

    def __init__(self, name, prefix, **names):
        super().__init__(name)
        self._prefix = prefix
        self.__dict__.update(names)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(_NO_GRAPH_API.format(self._prefix + attr))


distribute = _Names(
    __name__ + ".distribute", "distribute.",
    MirroredStrategy=_distribute.MirroredStrategy,
    OneDeviceStrategy=_distribute.OneDeviceStrategy,
    Strategy=_distribute.Strategy,
    ReduceOp=_distribute.ReduceOp,
    get_strategy=_distribute.get_strategy,
    has_strategy=_distribute.has_strategy,
    experimental=_Names(
        __name__ + ".distribute.experimental", "distribute.experimental.",
        CentralStorageStrategy=_distribute.CentralStorageStrategy,
        MultiWorkerMirroredStrategy=_distribute.MultiWorkerMirroredStrategy,
        ParameterServerStrategy=_distribute.ParameterServerStrategy,
    ),
)

__all__ = ["distribute"]


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    raise AttributeError(_NO_GRAPH_API.format(attr))
