"""Strategies (tf.distribute): make the model inside ``with strategy.scope():`` and it trains under
the strategy; nothing else changes.

    strategy = tandem.distribute.MirroredStrategy()          # one replica per core
    with strategy.scope():
        model = tandem.keras.Sequential([...])
        model.compile(...)
    model.fit(x, y, batch_size=256)                          # the global batch, split over replicas

Past 500 lines: tf.distribute's names in one module, as TensorFlow's users import them.
"""
import os
import weakref

import numpy as np

from . import _tandem, config, data
from .cluster_resolver import SimpleClusterResolver, SlurmClusterResolver, TFConfigClusterResolver, _cluster_json
from .errors import Error
from . import cluster_resolver

__all__ = ["Strategy", "MirroredStrategy", "CentralStorageStrategy", "OneDeviceStrategy",
           "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "ModelParallelStrategy", "PipelineStrategy",
           "get_strategy",
           "has_strategy", "experimental", "PerReplica", "ReduceOp", "CrossDeviceOps", "NcclAllReduce",
           "HierarchicalCopyAllReduce", "ReductionToOneDevice", "cluster_resolver", "DistributedDataset", "InputContext", "SimpleClusterResolver",
           "SlurmClusterResolver", "TFConfigClusterResolver"]

class _Scope:
    def __init__(self, strategy):
        self._strategy = strategy

    def __enter__(self):
        self._strategy._handle.enter()  # on the engine's one stack of scopes, this thread's
        return self._strategy

    def __exit__(self, *exc):
        self._strategy._handle.exit()
        return False


def _int(value, name, what):
    """value as an int, or an Error naming it: the type only (the engine checks the value)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise Error(f"{what}: {name} must be an int, got {value!r}")
    return int(value)


def _settings(what, threads_per_replica=0, timeout=None, bucket_bytes=0, cluster=""):
    """The settings every family shares (the engine's StrategySettings)."""
    settings = _tandem.StrategySettings()
    settings.threads_per_replica = _int(threads_per_replica, "threads_per_replica", what)
    if timeout is not None:
        settings.timeout = float(timeout)
    settings.bucket_bytes = _int(bucket_bytes, "bytes_per_pack", what)
    settings.cluster_json = cluster
    return settings


class Strategy:
    """A distribution strategy by its Tandem name ('mirrored:4', 'ps-async', 'model-parallel:2', ...,
    as `tandem fit --strategy` takes them). The classes below make theirs from TensorFlow's
    arguments, filled into the engine's option structs."""

    def __init__(self, spec, threads_per_replica=0, timeout=None, bucket_bytes=0):
        self._handle = _tandem.Strategy(spec, _settings("Strategy", threads_per_replica, timeout, bucket_bytes),
                                        weakref.ref(self))

    def scope(self):
        """Models made inside train under this strategy."""
        return _Scope(self)

    @property
    def num_replicas_in_sync(self):
        return self._handle.num_replicas_in_sync

    @property
    def name(self):
        return self._handle.name

    def run(self, fn, args=(), kwargs=None, options=None):
        """Runs ``fn(*args)`` on every replica (its thread), each array's rows cut for the replicas
        as the strategy cuts a batch (pass the global batch: an element of a distributed dataset,
        or arrays; tuples and dicts of them keep their shape); returns a PerReplica of the
        results. Inside, the model, the tape and the optimizer are the replica's, and
        apply_gradients sums over them."""
        if kwargs:
            raise Error("run: kwargs (keyword arguments for fn) are not supported; pass them positionally in args")
        if options is not None:
            raise Error("run: options (tf.distribute.RunOptions) are not supported: Tandem's replicas take no "
                        "run-time options")
        leaves, structure = data._flatten(tuple(args))
        leaves = [v if isinstance(v, _tandem.Tensor) else data._component(v, "run") for v in leaves]
        return PerReplica(self._handle.run(lambda *parts: fn(*data._pack(structure, parts)), tuple(leaves)))

    def experimental_distribute_dataset(self, dataset, options=None):
        """The dataset's elements as global batches for ``run``, which cuts each for the replicas
        (batch the dataset by the global batch size, e.g. 64 * num_replicas_in_sync)."""
        _no_input_options(options, "experimental_distribute_dataset")
        if not isinstance(dataset, data.Dataset):
            raise Error(f"experimental_distribute_dataset: expected a tandem.data.Dataset, got {dataset!r}")
        return DistributedDataset(dataset, self)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """``dataset_fn(input_context)`` makes a dataset of per-replica batches
        (``input_context.get_per_replica_batch_size(global_batch)``); each ``num_replicas_in_sync``
        consecutive batches are joined into the global batch that ``run`` cuts for the replicas (one
        copy of the rows; a replica's rows are its batch where the batches are the same size, and
        the summed gradient is the same either way). A last, shorter group is joined the same way."""
        _no_input_options(options, "distribute_datasets_from_function")
        context = InputContext(1, 0, self.num_replicas_in_sync)
        dataset = dataset_fn(context)
        if not isinstance(dataset, data.Dataset):
            raise Error(f"distribute_datasets_from_function: the function returned {dataset!r}, not a Dataset")
        return DistributedDataset(dataset, self, per_replica=True)

    def experimental_local_results(self, value):
        """The values of this process's replicas, as a tuple (a PerReplica's, or the value alone)."""
        return tuple(value.values) if isinstance(value, PerReplica) else (value,)

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


class InputContext:
    """What a dataset function learns of the job (tf.distribute.InputContext)."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync:
            raise Error(f"get_per_replica_batch_size: the global batch {global_batch_size} does not divide over "
                        f"{self.num_replicas_in_sync} replicas")
        return global_batch_size // self.num_replicas_in_sync


class DistributedDataset:
    """A dataset whose elements are global batches for strategy.run
    (strategy.experimental_distribute_dataset's result); iterate it as the dataset."""

    def __init__(self, dataset, strategy, per_replica=False):
        self._dataset = dataset
        self._strategy = strategy
        self._per_replica = per_replica

    def __iter__(self):
        if not self._per_replica:
            yield from self._dataset
            return
        replicas = self._strategy.num_replicas_in_sync
        group = []

        def joined():
            structure = group[0][1]
            return data._pack(structure, [np.concatenate([leaves[i] for leaves, _ in group])
                                          for i in range(len(group[0][0]))])

        for element in self._dataset:
            group.append(data._flatten(element))
            if len(group) == replicas:
                yield joined()
                group = []
        if group:  # the last, short group: its rows still train once (run cuts them over the replicas)
            yield joined()


class PerReplica:
    """One value per replica, as strategy.run returns them."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({list(self.values)!r})"


class ReduceOp:
    SUM = "SUM"
    MEAN = "MEAN"


def _gpus(devices, num, what):
    """The GPUs of ``devices`` when they are GPUs (a replica each: '/gpu:0', '/device:GPU:1', ...),
    else [] (CPU replicas, counted by _count); a mix of the two kinds, or a GPU not here, refused."""
    if devices is None or isinstance(devices, str) or not hasattr(devices, "__len__"):
        return []
    kinds = [config._device_of(d) for d in devices]
    gpus = [index for gpu, index in kinds if gpu]
    if not gpus:
        return []
    if len(gpus) != len(kinds):
        raise Error(f"{what}: devices {list(devices)!r} mix CPUs and GPUs; give a replica per GPU, or CPU replicas")
    if num is not None and num != len(gpus):
        raise Error(f"{what}: num_replicas={num!r} but {len(gpus)} GPUs were given; give one or the other")
    present = len(_tandem.gpu_names())
    for name, index in zip(devices, gpus):
        if index >= present:
            raise Error(f"{what}: there is no device {name!r} ("
                        + (f"this machine has {present} GPUs" if present else
                           "no GPU can be used here: " + _tandem.why_no_gpu()) + ")")
    return gpus


def _count(devices, num, what):
    """The replicas: one per device of ``devices`` (each this machine's CPU), else ``num`` (0: one per core)."""
    if devices is not None:
        if isinstance(devices, str) or not hasattr(devices, "__len__") or len(devices) == 0:
            raise Error(f"{what}: devices must be a non-empty list such as ['/cpu:0', '/cpu:1'], got {devices!r}")
        for device in devices:  # each a replica on this machine's cores
            if "cpu" not in str(device).lower():
                raise Error(f"{what}: device {device!r} is not a CPU; Tandem's replicas are this machine's cores "
                            "('/cpu:0', '/cpu:1', ...)")
        return len(devices)
    if num is None:
        return 0  # the engine's default: one per usable core
    if _int(num, "num_replicas", what) < 1:  # (0 is the engine's "default", not TensorFlow's)
        raise Error(f"{what}: num_replicas must be a positive int, got {num!r}")
    return int(num)


def _cpu_device(device, what):
    """A TensorFlow device string naming this machine's CPU ('/cpu:0', '/device:CPU:0', ...), else an Error."""
    name = str(device).lower().split("/device:")[-1].lstrip("/")
    if name not in ("cpu:0", "cpu"):
        raise Error(f"{what}: {device!r} is not this machine's CPU ('/cpu:0'); Tandem's replicas are its cores"
                    + (" (strategies over GPUs are not built yet: docs/gpu.md)" if "gpu" in name else ""))


def _no_input_options(options, what):
    if options is not None:
        raise Error(f"{what}: options (tf.distribute.InputOptions: prefetching to devices, replication modes) are "
                    "not supported by Tandem, whose replicas read the host's batches in place")


class CrossDeviceOps:
    """How the replicas' gradients are summed (tf.distribute's cross_device_ops). On this machine's
    CPU replicas every kind is the same in-process all-reduce: the sum, in replica order.
    ``num_packs`` (how many buffers the gradients are packed into) is a hint that changes no
    result here: it is checked and accepted."""

    def __init__(self, num_packs=1):
        if isinstance(num_packs, bool) or not isinstance(num_packs, int) or num_packs < 1:
            raise Error(f"{type(self).__name__}: num_packs must be a positive int, got {num_packs!r}")


class NcclAllReduce(CrossDeviceOps):
    """NCCL's all-reduce between GPUs; on CPU replicas, the in-process all-reduce (the same sum)."""


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """A hierarchical copy between GPUs; on CPU replicas, the in-process all-reduce (the same sum)."""


class ReductionToOneDevice(CrossDeviceOps):
    """Sums on one device, then copies back; on CPU replicas, the in-process all-reduce (the same sum)."""

    def __init__(self, reduce_to_device=None, accumulation_dtype=None):
        super().__init__()
        if reduce_to_device is not None:
            _cpu_device(reduce_to_device, "ReductionToOneDevice")
        if accumulation_dtype not in (None, "float32"):
            raise Error(f"ReductionToOneDevice: accumulation_dtype={accumulation_dtype!r} is not supported: Tandem sums "
                        "float32 gradients in float32")


class CommunicationImplementation:  # noqa: N801 - tf.distribute.experimental's enum
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


class CommunicationOptions:
    """How MultiWorkerMirroredStrategy's workers all-reduce: ``bytes_per_pack`` (gradients packed
    in buckets of this size and all-reduced while backward goes on; 0: one all-reduce after it),
    ``timeout_seconds`` (how long a worker waits for the others before every worker stops, naming
    the one missing), ``implementation`` (AUTO or RING: Tandem's MPI all-reduce; NCCL is for GPUs
    and refused)."""

    def __init__(self, bytes_per_pack=0, timeout_seconds=None, implementation=CommunicationImplementation.AUTO):
        if isinstance(bytes_per_pack, bool) or not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
            raise Error(f"CommunicationOptions: bytes_per_pack must be an int >= 0, got {bytes_per_pack!r}")
        if timeout_seconds is not None and not (isinstance(timeout_seconds, (int, float)) and timeout_seconds > 0):
            raise Error(f"CommunicationOptions: timeout_seconds must be positive seconds, got {timeout_seconds!r}")
        implementation = getattr(implementation, "name", implementation)
        if implementation not in (CommunicationImplementation.AUTO, CommunicationImplementation.RING):
            raise Error(f"CommunicationOptions: implementation {implementation!r}: Tandem's workers all-reduce over "
                        "MPI on CPUs; use AUTO or RING (NCCL is for GPUs)")
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation


class _Partitioner:
    def __init__(self, made):
        self._partitioner = made


class MinSizePartitioner(_Partitioner):
    """Shards of at least ``min_shard_bytes`` each, at most ``max_shards`` (and one per server)."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
        super().__init__(_tandem.Partitioner.min_size(int(min_shard_bytes), int(max_shards)))


class FixedShardsPartitioner(_Partitioner):
    """``num_shards`` shards of every variable (at most one per server and per row)."""

    def __init__(self, num_shards):
        super().__init__(_tandem.Partitioner.fixed_shards(int(num_shards)))


class MaxSizePartitioner(_Partitioner):
    """As few shards as keep each within ``max_shard_bytes``, at most ``max_shards`` (None: no
    limit; always at most one per server)."""

    def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
        super().__init__(_tandem.Partitioner.max_size(int(max_shard_bytes), int(max_shards or 0)))


class partitioners:  # noqa: N801 - tf.distribute.experimental.partitioners
    MinSizePartitioner = MinSizePartitioner
    FixedShardsPartitioner = FixedShardsPartitioner
    MaxSizePartitioner = MaxSizePartitioner


class MirroredStrategy(Strategy):
    """Synchronous data parallelism over replicas in this process (one per core by default; or
    one per entry of ``devices``: CPU replicas, or a replica per GPU, each its variables on its GPU;
    or ``num_replicas``), gradients summed before every update.
    ``cross_device_ops``: any of NcclAllReduce, HierarchicalCopyAllReduce, ReductionToOneDevice,
    which on CPU replicas are one and the same in-process sum."""

    def __init__(self, devices=None, cross_device_ops=None, num_replicas=None, threads_per_replica=0,
                 deterministic=False):
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise Error("MirroredStrategy: cross_device_ops must be NcclAllReduce(), HierarchicalCopyAllReduce() or "
                        f"ReductionToOneDevice(), got {type(cross_device_ops).__name__}")
        options = _tandem.MirroredOptions()
        options.gpus = _gpus(devices, num_replicas, "MirroredStrategy")  # a replica per GPU, where they are GPUs
        if not options.gpus:
            options.num_replicas = _count(devices, num_replicas, "MirroredStrategy")
        options.deterministic = bool(deterministic)  # Tandem's: the bits do not depend on the replica count
        self._handle = _tandem.Strategy.make_mirrored(options, False, _settings("MirroredStrategy",
                                                                                 threads_per_replica),
                                                      weakref.ref(self))


class CentralStorageStrategy(Strategy):
    """Replicas in this process sharing one copy of the variables, updated once per step."""

    def __init__(self, compute_devices=None, parameter_device=None, num_replicas=None, threads_per_replica=0):
        if parameter_device is not None:
            _cpu_device(parameter_device, "CentralStorageStrategy: parameter_device")
        options = _tandem.MirroredOptions()
        options.num_replicas = _count(compute_devices, num_replicas, "CentralStorageStrategy")
        self._handle = _tandem.Strategy.make_mirrored(options, True, _settings("CentralStorageStrategy",
                                                                                threads_per_replica),
                                                      weakref.ref(self))


class OneDeviceStrategy(Strategy):
    """Everything on one device."""

    def __init__(self, device="/cpu:0"):
        _cpu_device(device, "OneDeviceStrategy")
        super().__init__("one_device")


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism over the processes `tandem launch -np N -- python3 train.py`
    starts (one replica each), gradients all-reduced over MPI. Started without a launcher and
    without TF_CONFIG, the process is the only worker, as TensorFlow runs it without a cluster."""

    def __init__(self, communication_options=None, cluster_resolver=None, num_workers=None, deterministic=False,
                 zero=False):
        """``zero=True``: ZeRO stage 1, each worker keeps and updates the optimizer's state for its
        1/N of every variable (gradients reduce-scattered, updated pieces all-gathered).
        ``communication_options``: a CommunicationOptions (its pack size and timeout)."""
        if isinstance(cluster_resolver, SlurmClusterResolver):  # the step's tasks are the MPI ranks srun started
            if set(cluster_resolver.cluster_spec().jobs) != {"worker"}:
                raise Error("MultiWorkerMirroredStrategy: a SlurmClusterResolver's tasks are all workers here (its "
                            f"jobs are {cluster_resolver.cluster_spec().as_dict()}); start them with `tandem launch` "
                            "inside the allocation")
        elif _cluster_json(cluster_resolver, "MultiWorkerMirroredStrategy"):
            jobs = cluster_resolver.cluster_spec().as_dict()
            if set(jobs) != {"worker"} or len(jobs["worker"]) != 1:
                raise Error("MultiWorkerMirroredStrategy: a cluster of more than one task runs under `tandem launch` "
                            "(-np N, or --tf-config with the cluster), which starts every worker; only a "
                            f"SimpleClusterResolver of one worker is this process alone, got {jobs}")
        communication = communication_options or CommunicationOptions()
        if not isinstance(communication, CommunicationOptions):
            raise Error("MultiWorkerMirroredStrategy: communication_options must be a CommunicationOptions, got "
                        f"{type(communication).__name__}")
        options = _tandem.MultiWorkerOptions()
        if num_workers is not None:
            options.num_workers = _int(num_workers, "num_workers", "MultiWorkerMirroredStrategy")
        options.deterministic = bool(deterministic)
        options.zero = bool(zero)
        settings = _settings("MultiWorkerMirroredStrategy", timeout=communication.timeout_seconds,
                             bucket_bytes=communication.bytes_per_pack)
        self._handle = _tandem.Strategy.make_multiworker(options, settings, weakref.ref(self))


class ParameterServerStrategy(Strategy):
    """Parameter servers and workers, asynchronous by default, with bounded staleness
    (``max_staleness=S``), or synchronous (``mode='sync'``, with ``backup_workers=B``: each round
    applies the first W - B gradients).

    The cluster: a cluster resolver's, else TF_CONFIG's (as TensorFlow reads it; `tandem launch
    --tf-config FILE -- python3 train.py` starts one), else one in this process: ``num_ps``
    servers (default 1) and ``num_workers`` workers (default one per usable core), threads started
    by each ``fit`` and ended with it, each worker computing with ``threads_per_worker`` intra-op
    threads (default: the cores shared among them). Across processes: ``auth_dir`` names the
    CurveZMQ keys of `tandem keys DIR` (every connection encrypted and authenticated),
    ``insecure`` lets tasks listen on non-loopback addresses without them, and ``min_workers``: a
    synchronous job drops a worker that dies and ends below this many. ``record``/``replay`` name
    a file that records an asynchronous run's order of updates, or forces it again (the same final
    weights, in process or across processes)."""

    def __init__(self, cluster_resolver=None, mode="async", variable_partitioner=None, max_staleness=None,
                 backup_workers=0, auth_dir=None, insecure=False, record=None, replay=None, min_workers=1,
                 num_ps=None, num_workers=None, threads_per_worker=None):
        what = "ParameterServerStrategy"
        cluster = _cluster_json(cluster_resolver, what)
        local = not cluster and not os.environ.get("TF_CONFIG")
        if not local and (num_ps is not None or num_workers is not None or threads_per_worker is not None):
            raise Error(f"{what}: num_ps, num_workers and threads_per_worker make a cluster in this process; this "
                        f"one's tasks come from {'the cluster resolver' if cluster else 'TF_CONFIG'}")
        if variable_partitioner is not None and not isinstance(variable_partitioner, _Partitioner):
            raise Error(f"{what}: variable_partitioner must be one of "
                        "tf.distribute.experimental.partitioners (MinSizePartitioner, FixedShardsPartitioner, "
                        f"MaxSizePartitioner), got {type(variable_partitioner).__name__}")
        options = _tandem.ParameterServerOptions()
        options.mode = str(mode)
        if max_staleness is not None:
            options.max_staleness = _int(max_staleness, "max_staleness", what)
        options.backup_workers = _int(backup_workers, "backup_workers", what)
        options.min_workers = _int(min_workers, "min_workers", what)
        if variable_partitioner is not None:
            options.partitioner = variable_partitioner._partitioner
        options.auth_dir = str(auth_dir or "")
        options.insecure = bool(insecure)
        options.record = str(record or "")
        options.replay = str(replay or "")
        settings = _settings(what, cluster=cluster)
        settings.in_process = local
        if num_ps is not None:
            settings.local_ps = _int(num_ps, "num_ps", what)
        if num_workers is not None:
            settings.local_workers = _int(num_workers, "num_workers", what)
        if threads_per_worker is not None:
            options.threads_per_worker = _int(threads_per_worker, "threads_per_worker", what)
        self._handle = _tandem.Strategy.make_parameter_servers(options, settings, weakref.ref(self))


class ModelParallelStrategy(Strategy):
    """The model's Dense layers split over ``num_shards`` devices (tensor parallelism)."""

    def __init__(self, num_shards=2):
        options = _tandem.ModelParallelOptions()
        options.num_shards = _int(num_shards, "num_shards", "ModelParallelStrategy")
        self._handle = _tandem.Strategy.make_model_parallel(options, _settings("ModelParallelStrategy"),
                                                            weakref.ref(self))


class PipelineStrategy(Strategy):
    """The model's layers cut into ``num_stages`` consecutive stages, one per device (or, under
    `tandem launch -np S`, one per process), each global batch into ``micro_batches`` that flow
    through them; ``schedule`` '1f1b' (one forward, one backward) or 'gpipe'; ``data_replicas``
    copies of the pipeline, each on its rows of the batch."""

    def __init__(self, num_stages=2, micro_batches=4, schedule="1f1b", data_replicas=1):
        what = "PipelineStrategy"
        options = _tandem.PipelineOptions()
        options.num_stages = _int(num_stages, "num_stages", what)
        options.micro_batches = _int(micro_batches, "micro_batches", what)
        options.data_replicas = _int(data_replicas, "data_replicas", what)
        options.schedule = str(schedule)
        self._handle = _tandem.Strategy.make_pipeline(options, _settings(what), weakref.ref(self))


def get_strategy():
    """The strategy whose scope is open on this thread (None outside any scope: the default)."""
    return _tandem.current_strategy()


def has_strategy():
    return _tandem.current_strategy() is not None


class experimental:  # noqa: N801 - tf.distribute.experimental's names
    CentralStorageStrategy = CentralStorageStrategy
    MultiWorkerMirroredStrategy = MultiWorkerMirroredStrategy
    ParameterServerStrategy = ParameterServerStrategy
    CommunicationOptions = CommunicationOptions
    CommunicationImplementation = CommunicationImplementation
    partitioners = partitioners
