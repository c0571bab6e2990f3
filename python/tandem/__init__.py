"""Tandem: Keras-style training on one device or many, with a C++ engine.

The tutorials' TensorFlow code runs with its import changed::

    import tandem as tf
    (x, y), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x.reshape(-1, 784) / 255.0, y, epochs=10, batch_size=25)

``tandem.keras`` is the Keras API, ``tandem.distribute`` the strategies, ``tandem.hvd`` Horovod's.
"""
def _engine_missing(error):
    """Why the engine (tandem._tandem) did not load, said plainly: built for another interpreter,
    not built at all, or a library it needs missing."""
    import importlib.machinery
    import pathlib
    import re
    import sys

    here = pathlib.Path(__file__).resolve().parent
    built = sorted(p.name for p in here.glob("_tandem*") if p.suffix == ".so")
    this = f"Python {sys.version_info.major}.{sys.version_info.minor} ({sys.executable})"
    how = ("build it for this interpreter from a Tandem clone: `pip install --no-build-isolation ./python` in a venv "
           "(README, Python), or `bash scripts/build` for Debian's /usr/bin/python3")
    if not built:
        return f"tandem: its engine (_tandem) is not built in {here}; {how}"
    if not any(name == "_tandem" + s for name in built for s in importlib.machinery.EXTENSION_SUFFIXES):
        tags = []
        for name in built:
            m = re.match(r"_tandem\.cpython-(\d)(\d+)", name)
            tags.append(f"CPython {m.group(1)}.{m.group(2)}" if m else name)
        return (f"tandem: its engine in {here} was built for {', '.join(tags)} ({', '.join(built)}), and this is "
                f"{this}, which cannot load it; {how}")
    return f"tandem: its engine ({built[0]}) did not load in {this}: {error}"


try:
    from . import _tandem
except ImportError as _error:
    raise ImportError(_engine_missing(_error)) from _error
from .errors import Error, FileError, FileNotFoundError
from . import config, data, keras, distribute, hvd, nn, compat, train
from .config import device
from ._tandem import Tensor

# numpy hands its operators over to a tensor's (an array @ a tensor is recorded on the tape).
Tensor.__array_ufunc__ = None


class GradientTape:
    """Records the engine's operations inside its ``with`` block (on this thread), for
    ``tape.gradient(loss, model.trainable_variables)`` after it, as tf.GradientTape."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        if watch_accessed_variables is not True:
            raise Error("GradientTape: watch_accessed_variables=False is not supported: a Tandem tape watches every "
                        "trainable variable (freeze a layer with trainable=False instead)")
        self._tape = _tandem.GradientTape(bool(persistent))

    def __enter__(self):
        self._tape.enter()
        return self

    def __exit__(self, *exc):
        self._tape.exit()
        return False

    def watch(self, tensor):
        self._tape.watch(tensor)

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="zero"):
        """d target / d source for each source (variables or tensors), as a list of Tensors.

        With output_gradients (the gradient flowing into a non-scalar target, of its shape), the
        gradients of sum(target * output_gradients), as tf.GradientTape.gradient takes it. A source
        the target does not depend on gets zeros (tf.UnconnectedGradients.ZERO; "none", TensorFlow's
        default None for it, is refused by name)."""
        if str(getattr(unconnected_gradients, "value", unconnected_gradients)).lower() != "zero":
            raise Error(f"GradientTape.gradient: unconnected_gradients={unconnected_gradients!r} is not supported: a "
                        "source the target does not depend on gets zeros (unconnected_gradients='zero')")
        return self._tape.gradient(target, list(sources), output_gradients)

def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_implements=None, experimental_autograph_options=None, experimental_attributes=None,
             experimental_relax_shapes=None, experimental_compile=None, experimental_follow_type_hints=None):
    """tf.function: Tandem runs every op eagerly through its C++ engine, so there is no graph to
    trace; the function is returned as it is and runs as written (a custom loop's
    ``@tf.function`` step works unchanged). The tracing hints (``autograph``,
    ``reduce_retracing``, ``experimental_autograph_options``, ``experimental_relax_shapes``,
    ``experimental_follow_type_hints``) change nothing; what asks for a graph or XLA is refused by
    name."""
    if jit_compile or experimental_compile:
        name = "jit_compile" if jit_compile else "experimental_compile"
        raise Error(f"tf.function: {name}=True asks for XLA, which Tandem does not have; its ops run eagerly "
                    "through the C++ engine")
    for name, value in (("input_signature", input_signature), ("experimental_implements", experimental_implements),
                        ("experimental_attributes", experimental_attributes)):
        if value is not None:
            raise Error(f"tf.function: {name} is not supported: Tandem traces no graph to give a signature or "
                        "attributes to (the function runs eagerly, as written)")
    if func is None:
        return lambda f: f
    return func


def _reduce(name, engine, input_tensor, axis, keepdims):
    if axis is not None or keepdims:
        raise Error(f"tf.{name}: Tandem reduces over every element (axis=None, keepdims=False), got axis={axis!r}, "
                    f"keepdims={keepdims!r}")
    return engine(input_tensor if isinstance(input_tensor, Tensor) else _tandem.as_tensor(input_tensor))


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    """tf.reduce_sum over every element, recorded on the tape."""
    return _reduce("reduce_sum", _tandem.reduce_sum, input_tensor, axis, keepdims)


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    """tf.reduce_mean over every element, recorded on the tape."""
    return _reduce("reduce_mean", _tandem.reduce_mean, input_tensor, axis, keepdims)


__version__ = "0.10.0"
__all__ = ["config", "device", "function", "data", "keras", "distribute", "hvd", "nn", "compat", "train", "GradientTape", "Tensor", "Error", "FileError", "FileNotFoundError", "set_num_threads",
           "cpu_isa", "reduce_sum", "reduce_mean"]


def set_num_threads(threads):
    """The intra-op threads of the calling thread's ops (0: one per usable core)."""
    _tandem.set_num_threads(int(threads))


def cpu_isa():
    """The vector level Tandem's own kernels run at: "avx512", "avx2" or "x86-64" (the CPU's,
    capped by the environment variable TANDEM_MAX_ISA=avx2)."""
    return _tandem.cpu_isa()


cpu_isa()  # a TANDEM_MAX_ISA Tandem does not know is refused at import, by name
