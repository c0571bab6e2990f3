"""Strategies (tf.distribute): make the model inside ``with strategy.scope():`` and it trains under
the strategy; nothing else changes.

    strategy = tandem.distribute.MirroredStrategy()          # one replica per core
    with strategy.scope():
        model = tandem.keras.Sequential([...])
        model.compile(...)
    model.fit(x, y, batch_size=256)                          # the global batch, split over replicas
"""
import weakref

from . import _tandem
from .errors import Error

__all__ = ["Strategy", "MirroredStrategy", "CentralStorageStrategy", "OneDeviceStrategy",
           "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "ModelParallelStrategy", "PipelineStrategy",
           "get_strategy",
           "has_strategy", "experimental", "PerReplica", "ReduceOp"]

class _Scope:
    def __init__(self, strategy):
        self._strategy = strategy

    def __enter__(self):
        self._strategy._handle.enter()  # on the engine's one stack of scopes, this thread's
        return self._strategy

    def __exit__(self, *exc):
        self._strategy._handle.exit()
        return False


class Strategy:
    """A distribution strategy by its Tandem name ('mirrored:4', 'ps-async', 'model-parallel:2', ...)."""

    def __init__(self, spec, threads_per_replica=0, auth_dir=None, insecure=False, record=None, replay=None,
                 min_workers=1):
        settings = _tandem.StrategySettings()
        settings.threads_per_replica = int(threads_per_replica)
        settings.auth_dir = str(auth_dir or "")
        settings.insecure = bool(insecure)
        settings.record = str(record or "")
        settings.replay = str(replay or "")
        settings.min_workers = int(min_workers)
        self._handle = _tandem.Strategy(spec, settings, weakref.ref(self))

    def scope(self):
        """Models made inside train under this strategy."""
        return _Scope(self)

    @property
    def num_replicas_in_sync(self):
        return self._handle.num_replicas_in_sync

    @property
    def name(self):
        return self._handle.name

    def run(self, fn, args=(), kwargs=None):
        """Runs ``fn(*args)`` on every replica (its thread), each argument's rows split evenly over
        the replicas (pass the global batch); returns a PerReplica of the results. Inside, the
        model, the tape and the optimizer are the replica's, and apply_gradients sums over them."""
        if kwargs:
            raise Error("run: keyword arguments are not supported; pass them positionally")
        return PerReplica(self._handle.run(fn, tuple(args)))

    def reduce(self, reduce_op, value, axis=None):
        """The per-replica values summed ("SUM") or averaged ("MEAN"), as a Tensor."""
        op = getattr(reduce_op, "name", reduce_op)
        values = value.values if isinstance(value, PerReplica) else [value]
        if axis is not None:
            raise Error("reduce: axis is not supported; reduce the per-sample values in the step")
        return self._handle.reduce(str(op).upper(), list(values))

    @property
    def is_chief(self):
        """Whether this process writes the job's files (the chief, or the only process)."""
        return self._handle.is_chief

    def __repr__(self):
        return f"<tandem.distribute {type(self).__name__} {self.name!r}>"


class PerReplica:
    """One value per replica, as strategy.run returns them."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({list(self.values)!r})"


class ReduceOp:
    SUM = "SUM"
    MEAN = "MEAN"


def _count(devices, num, what):
    if devices is not None:
        if isinstance(devices, str) or not hasattr(devices, "__len__") or len(devices) == 0:
            raise Error(f"{what}: devices must be a non-empty list such as ['/cpu:0', '/cpu:1'], got {devices!r}")
        return len(devices)
    if num is not None:
        if isinstance(num, bool) or not isinstance(num, int) or num <= 0:
            raise Error(f"{what}: num_replicas must be a positive int, got {num!r}")
        return num
    return None


class MirroredStrategy(Strategy):
    """Synchronous data parallelism over replicas in this process (one per core by default; or
    one per entry of ``devices``, or ``num_replicas``), gradients summed before every update."""

    def __init__(self, devices=None, cross_device_ops=None, num_replicas=None, threads_per_replica=0,
                 deterministic=False):
        n = _count(devices, num_replicas, "MirroredStrategy")
        if deterministic:  # Tandem's: the bits do not depend on the replica count
            n = n or Strategy("mirrored").num_replicas_in_sync
            super().__init__(f"mirrored:{n}:deterministic", threads_per_replica)
            return
        super().__init__("mirrored" if n is None else f"mirrored:{n}", threads_per_replica)


class CentralStorageStrategy(Strategy):
    """Replicas in this process sharing one copy of the variables, updated once per step."""

    def __init__(self, compute_devices=None, parameter_device=None, num_replicas=None, threads_per_replica=0):
        n = _count(compute_devices, num_replicas, "CentralStorageStrategy")
        super().__init__("central" if n is None else f"central:{n}", threads_per_replica)


class OneDeviceStrategy(Strategy):
    """Everything on one device."""

    def __init__(self, device="/cpu:0"):
        super().__init__("one_device")


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism over the processes `tandem launch -np N -- python3 train.py`
    starts (one replica each), gradients all-reduced over MPI. Started without a launcher and
    without TF_CONFIG, the process is the only worker, as TensorFlow runs it without a cluster."""

    def __init__(self, communication_options=None, cluster_resolver=None, num_workers=None, deterministic=False,
                 zero=False):
        """``zero=True``: ZeRO stage 1, each worker keeps and updates the optimizer's state for its
        1/N of every variable (gradients reduce-scattered, updated pieces all-gathered)."""
        spec = "multiworker" if num_workers is None else f"multiworker:{int(num_workers)}"
        super().__init__(spec + (":deterministic" if deterministic else "") + (":zero" if zero else ""))


class ParameterServerStrategy(Strategy):
    """Parameter servers and workers from TF_CONFIG (as TensorFlow reads it), asynchronous by
    default, with bounded staleness (``max_staleness=S``), or synchronous (``mode='sync'``, with
    ``backup_workers=B``: each round applies the first W - B gradients); ``auth_dir`` names the
    CurveZMQ keys of `tandem keys DIR` (every connection encrypted and authenticated), ``insecure``
    lets tasks listen on non-loopback addresses without them; ``record``/``replay`` name a file that
    records an asynchronous run's order of updates, or forces it again (the same final weights);
    ``min_workers``: a synchronous job drops a worker that dies and ends below this many;
    `tandem launch --tf-config FILE -- python3 train.py` starts the cluster."""

    def __init__(self, cluster_resolver=None, mode="async", variable_partitioner=None, max_staleness=None,
                 backup_workers=0, auth_dir=None, insecure=False, record=None, replay=None, min_workers=1):
        if mode not in ("async", "sync"):
            raise Error(f"ParameterServerStrategy: mode must be 'async' or 'sync', got {mode!r}")

        def count(value, name, with_mode):  # an int >= 0 that only one mode takes
            if mode != with_mode or isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise Error(f"ParameterServerStrategy: {name} must be an int >= 0 with mode={with_mode!r}, got {value!r}")
            return value

        spec = f"ps-{mode}"
        if backup_workers:  # each synchronous round applies the first W - B gradients
            spec = f"ps-sync:{count(backup_workers, 'backup_workers', 'sync')}"
        elif max_staleness is not None:  # stale synchronous parallel: no worker more than S steps ahead
            spec = f"ps-ssp:{count(max_staleness, 'max_staleness', 'async')}"
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
            raise Error(f"ParameterServerStrategy: min_workers must be an int >= 1, got {min_workers!r}")
        super().__init__(spec, auth_dir=auth_dir, insecure=insecure, record=record, replay=replay,
                         min_workers=min_workers)


class ModelParallelStrategy(Strategy):
    """The model's Dense layers split over ``num_shards`` devices (tensor parallelism)."""

    def __init__(self, num_shards=2):
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards <= 0:
            raise Error(f"ModelParallelStrategy: num_shards must be a positive int, got {num_shards!r}")
        super().__init__(f"model-parallel:{num_shards}")


class PipelineStrategy(Strategy):
    """The model's layers cut into ``num_stages`` consecutive stages, one per device (or, under
    `tandem launch -np S`, one per process), each global batch into ``micro_batches`` that flow
    through them; ``schedule`` '1f1b' (one forward, one backward) or 'gpipe'; ``data_replicas``
    copies of the pipeline, each on its rows of the batch."""

    def __init__(self, num_stages=2, micro_batches=4, schedule="1f1b", data_replicas=1):
        for value, name in ((num_stages, "num_stages"), (micro_batches, "micro_batches"),
                            (data_replicas, "data_replicas")):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise Error(f"PipelineStrategy: {name} must be a positive int, got {value!r}")
        if schedule not in ("1f1b", "gpipe"):
            raise Error(f"PipelineStrategy: schedule must be '1f1b' or 'gpipe', got {schedule!r}")
        spec = f"pipeline:{num_stages}:{micro_batches}:{schedule}"
        super().__init__(spec if data_replicas == 1 else f"mirrored:{data_replicas}+{spec}")


def get_strategy():
    """The strategy whose scope is open on this thread (None outside any scope: the default)."""
    return _tandem.current_strategy()


def has_strategy():
    return _tandem.current_strategy() is not None


class experimental:  # noqa: N801 - tf.distribute.experimental's names
    CentralStorageStrategy = CentralStorageStrategy
    MultiWorkerMirroredStrategy = MultiWorkerMirroredStrategy
    ParameterServerStrategy = ParameterServerStrategy
