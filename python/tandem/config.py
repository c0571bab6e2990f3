"""tf.config over Tandem's devices: the machine's CPU, shared out as logical CPU devices (each with
its threads and an optional memory limit), and ``tf.device`` placing layers on one of them.

    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration(memory_limit=64)])
    with tf.device("/cpu:1"):
        layer = tf.keras.layers.Dense(10)        # its variables live, and it runs, on cpu:1

NVIDIA GPUs, where the build has the CUDA device and the machine a GPU (docs/gpu.md: built, not yet
run on a GPU), are listed as ``GPU`` devices, and ``tf.device("/gpu:0")`` places layers there.
Elsewhere ``list_physical_devices("GPU")`` is empty and ``tf.device("/gpu:0")`` says why.
"""
import collections

from . import _tandem
from .errors import Error

__all__ = ["PhysicalDevice", "LogicalDevice", "LogicalDeviceConfiguration", "list_physical_devices",
           "list_logical_devices", "set_logical_device_configuration", "get_logical_device_configuration",
           "get_visible_devices", "set_visible_devices", "experimental", "threading", "device"]

PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])
LogicalDevice = collections.namedtuple("LogicalDevice", ["name", "device_type"])

_CPU = PhysicalDevice("/physical_device:CPU:0", "CPU")


class LogicalDeviceConfiguration:
    """One logical device of a physical one: ``memory_limit`` in MiB (None: no limit), as
    TensorFlow's; ``threads`` (Tandem's): its ops' intra-op threads (0: the calling thread's)."""

    def __init__(self, memory_limit=None, experimental_priority=None, experimental_device_ordinal=None, threads=0):
        if experimental_priority is not None or experimental_device_ordinal is not None:
            raise Error("LogicalDeviceConfiguration: experimental_priority and experimental_device_ordinal are GPU "
                        "settings; Tandem's logical devices are CPU ones")
        if memory_limit is not None and (isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, float))
                                         or memory_limit <= 0):
            raise Error(f"LogicalDeviceConfiguration: memory_limit must be a positive number of MiB, got "
                        f"{memory_limit!r}")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise Error(f"LogicalDeviceConfiguration: threads must be an int >= 0, got {threads!r}")
        self.memory_limit = memory_limit
        self.threads = threads

    def __repr__(self):
        return f"LogicalDeviceConfiguration(memory_limit={self.memory_limit!r}, threads={self.threads!r})"

    def __eq__(self, other):
        return isinstance(other, LogicalDeviceConfiguration) and (self.memory_limit, self.threads) == (
            other.memory_limit, other.threads)


def _check_type(device_type, what):
    if device_type is None:
        return None
    kind = str(device_type).upper()
    if kind not in ("CPU", "GPU", "TPU"):
        raise Error(f"{what}: device_type must be 'CPU' or 'GPU', got {device_type!r}")
    return kind


def _gpus():
    return [PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(_tandem.physical_gpu_count())]


def list_physical_devices(device_type=None):
    """The machine's devices: its CPU (one, whatever its cores), then its GPUs."""
    kind = _check_type(device_type, "list_physical_devices")
    return ([_CPU] if kind in (None, "CPU") else []) + (_gpus() if kind in (None, "GPU") else [])


def list_logical_devices(device_type=None):
    """The logical CPU devices (/device:CPU:0 ... N-1: one unless configured), then the logical GPUs
    (/device:GPU:0 ...: one per GPU, or per part of a GPU split by set_logical_device_configuration)."""
    kind = _check_type(device_type, "list_logical_devices")
    cpus = [LogicalDevice(f"/device:CPU:{i}", "CPU") for i in range(_tandem.num_cpu_devices())]
    gpus = [LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(len(_tandem.gpu_names()))]
    return (cpus if kind in (None, "CPU") else []) + (gpus if kind in (None, "GPU") else [])


def _physical(device, what):
    """The CPU (None), or a GPU's index: the physical devices logical ones are made of."""
    if device == _CPU:
        return None
    if isinstance(device, PhysicalDevice) and device.device_type == "GPU":
        try:
            index = int(device.name.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            index = -1
        if device.name == f"/physical_device:GPU:{index}":
            return index
    raise Error(f"{what}: {device!r} is not a physical device of this machine (list_physical_devices() lists them)")


def _limit_bytes(config):
    return 0 if config.memory_limit is None else int(config.memory_limit * (1 << 20))


def set_logical_device_configuration(device, logical_devices):
    """Shares the CPU out as one logical device per configuration, or splits a GPU into one logical
    GPU per configuration (each its own stream and at most memory_limit MiB of the card), before
    tensors live on them."""
    gpu = _physical(device, "set_logical_device_configuration")
    configs = list(logical_devices or [])
    if not configs:
        raise Error("set_logical_device_configuration: give at least one LogicalDeviceConfiguration")
    for c in configs:
        if not isinstance(c, LogicalDeviceConfiguration):
            raise Error(f"set_logical_device_configuration: expected LogicalDeviceConfiguration objects, got {c!r}")
        if gpu is not None and c.threads:
            raise Error(f"set_logical_device_configuration: threads={c.threads} is a CPU device's setting; a logical "
                        "GPU runs its kernels on its own stream")
    if gpu is not None:
        _tandem.set_logical_gpus(gpu, [_limit_bytes(c) for c in configs])
        return
    _tandem.set_cpu_devices([(c.threads, _limit_bytes(c)) for c in configs])


def get_logical_device_configuration(device):
    """The configurations set for the CPU or a GPU (None when it was never split)."""
    gpu = _physical(device, "get_logical_device_configuration")
    if gpu is not None:
        limits = _tandem.logical_gpus(gpu)
        return [LogicalDeviceConfiguration(memory_limit=b / (1 << 20) if b else None) for b in limits] or None
    out = []
    for i in range(_tandem.num_cpu_devices()):
        threads, memory = _tandem.cpu_device_options(i)
        out.append(LogicalDeviceConfiguration(memory_limit=memory / (1 << 20) if memory else None, threads=threads))
    return out if len(out) > 1 or out[0] != LogicalDeviceConfiguration() else None


def get_visible_devices(device_type=None):
    return list_physical_devices(device_type)


def set_visible_devices(devices, device_type=None):
    """Hiding GPUs (``set_visible_devices([], 'GPU')``) is what is already so: Tandem places nothing
    on a GPU unless asked (``tf.device``); hiding the CPU is refused."""
    devices = [devices] if isinstance(devices, PhysicalDevice) else list(devices or [])
    kind = _check_type(device_type, "set_visible_devices")
    if kind in ("GPU", "TPU") and not devices:
        return
    if kind in (None, "CPU") and devices == [_CPU]:
        return
    if kind == "GPU" and all(d in _gpus() for d in devices):
        return
    raise Error(f"set_visible_devices: Tandem runs on this machine's CPU and cannot hide it or show another device "
                f"(got {devices!r}, {device_type!r})")


class experimental:  # noqa: N801 - tf.config.experimental's names
    list_physical_devices = staticmethod(list_physical_devices)
    list_logical_devices = staticmethod(list_logical_devices)
    set_virtual_device_configuration = staticmethod(set_logical_device_configuration)
    get_virtual_device_configuration = staticmethod(get_logical_device_configuration)
    get_visible_devices = staticmethod(get_visible_devices)
    set_visible_devices = staticmethod(set_visible_devices)
    VirtualDeviceConfiguration = LogicalDeviceConfiguration

    @staticmethod
    def enable_tensor_float_32_execution(enabled):
        """Float32 products on the GPUs' TF32 tensor cores (faster, operands rounded to 10 bits of
        mantissa). Off by default in Tandem, unlike TensorFlow, so that a GPU's results are the
        CPU's within float32 rounding; the CPU's products are float32 either way."""
        if isinstance(enabled, str) or enabled not in (True, False):
            raise Error(f"enable_tensor_float_32_execution: enabled must be True or False, got {enabled!r}")
        _tandem.enable_tensor_float_32(bool(enabled))

    @staticmethod
    def tensor_float_32_execution_enabled():
        return _tandem.tensor_float_32_enabled()

    @staticmethod
    def set_memory_growth(device, enable):
        """Tandem's GPU memory always grows as asked (a caching allocator): accepted for a GPU."""
        if device not in _gpus():
            raise Error(f"set_memory_growth: {device!r} is not a GPU of this machine ({_gpus()!r}); memory growth "
                        "applies to GPUs")


class threading:  # noqa: N801 - tf.config.threading's names
    @staticmethod
    def set_intra_op_parallelism_threads(num_threads):
        """The threads of each op on the calling thread (0: one per usable core)."""
        _tandem.set_num_threads(int(num_threads))

    @staticmethod
    def get_intra_op_parallelism_threads():
        return _tandem.num_threads()

    @staticmethod
    def set_inter_op_parallelism_threads(num_threads):
        """Tandem runs a step's ops one at a time (1; 0, the system's choice, is that too)."""
        if isinstance(num_threads, bool) or num_threads not in (0, 1):
            raise Error(f"set_inter_op_parallelism_threads: num_threads={num_threads!r} is not supported: Tandem runs "
                        "a step's ops in order, each over the intra-op threads; set those "
                        "(set_intra_op_parallelism_threads) or use a strategy's replicas")

    @staticmethod
    def get_inter_op_parallelism_threads():
        return 1


def _device_of(name):
    """(is a GPU, index) of a TensorFlow device string: '/cpu:1', 'CPU:1', '/device:CPU:1',
    '/job:localhost/replica:0/task:0/device:GPU:0' (no index: 0); other kinds refused by name."""
    text = str(name).strip()
    last = text.split("/device:")[-1] if "/device:" in text else text.rsplit("/", 1)[-1]
    kind, _, index = last.partition(":")
    if kind.upper() not in ("CPU", "GPU"):
        raise Error(f"tf.device: {name!r} is not a CPU or GPU device such as '/cpu:1' or '/gpu:0'")
    if index == "":
        return kind.upper() == "GPU", 0
    if not index.isdigit():
        raise Error(f"tf.device: {name!r}: the device index must be a number")
    return kind.upper() == "GPU", int(index)


class device:  # noqa: N801 - tf.device is a context manager
    """``with tf.device('/cpu:1'):`` layers made inside live and run on that logical CPU device
    (``'/gpu:0'``: on that GPU)."""

    def __init__(self, device_name):
        gpu, index = _device_of(device_name)
        self._placement = _tandem.Placement(gpu, index)

    def __enter__(self):
        self._placement.enter()
        return self

    def __exit__(self, *exc):
        self._placement.exit()
        return False
