"""tf.data over Tandem's C++ input pipeline (tandem::data::Dataset).

Every stage runs in C++: slicing reads numpy arrays in place, ``batch`` copies each row once into
its batch, ``shuffle``, ``repeat``, ``take``, ``skip``, ``cache`` and ``prefetch`` (a background
thread) never touch Python. ``map`` and ``filter`` call a Python function on each element, as
TensorFlow's do, with the GIL held on the pipeline's thread: that costs a trip into Python per
element, the arrays made and read back (measured 2026-11-27 on a loaded 2-core host: 60,000
rows of 784 floats through an identity ``map`` then ``batch(250)`` took 1.1 s against 0.11 s
without it, about 17 us per element), so ``map`` after ``batch`` (one call per batch: 0.14 s)
is the fast form. Elements arrive in Python as numpy arrays, in the shape they were
given: an array, a tuple or a dict of them.

Randomness is Tandem's: ``shuffle`` without a seed takes the model seed
(``keras.utils.set_random_seed``, else 0), so a pipeline gives the same order on every run.
"""
import numpy as np

from . import _tandem
from .errors import Error

__all__ = ["Dataset", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "experimental"]

AUTOTUNE = _tandem.AUTOTUNE
INFINITE_CARDINALITY = _tandem.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY = _tandem.UNKNOWN_CARDINALITY


class experimental:  # noqa: N801 - tf.data.experimental's names
    AUTOTUNE = AUTOTUNE
    INFINITE_CARDINALITY = INFINITE_CARDINALITY
    UNKNOWN_CARDINALITY = UNKNOWN_CARDINALITY


# --- an element's shape: nested tuples and dicts of arrays, flat in C++ ---

_LEAF = "leaf"


def _flatten(value):
    """(leaves, structure) of a nested tuple / dict of arrays (a list is an array, as tf.data reads it)."""
    if isinstance(value, dict):
        keys = sorted(value)
        leaves, parts = [], []
        for k in keys:
            sub, shape = _flatten(value[k])
            leaves += sub
            parts.append(shape)
        return leaves, ("dict", keys, parts)
    if isinstance(value, tuple):
        leaves, parts = [], []
        for v in value:
            sub, shape = _flatten(v)
            leaves += sub
            parts.append(shape)
        return leaves, ("tuple", None, parts)
    return [value], _LEAF


def _pack(structure, leaves):
    """The nested value of `structure` over the flat `leaves`."""
    it = iter(leaves)

    def build(shape):
        if shape == _LEAF:
            return next(it)
        kind, keys, parts = shape
        values = [build(p) for p in parts]
        return dict(zip(keys, values)) if kind == "dict" else tuple(values)

    return build(structure)


def _component(value, what):
    """A component as the engine takes it: a C-contiguous float32, int32 or uint8 array (floats
    become float32, integers int32, booleans uint8; arrays already so are used in place)."""
    if isinstance(value, _tandem.Tensor):
        value = value.numpy()
    a = np.asarray(value)
    if a.dtype in (np.float32, np.int32, np.uint8):
        return np.require(a, requirements=["C", "A"])
    if a.dtype.kind == "f":
        return np.require(a, dtype=np.float32, requirements=["C", "A"])  # (ascontiguousarray makes scalars 1-d)
    if a.dtype.kind == "b":
        return np.require(a, dtype=np.uint8, requirements=["C", "A"])
    if a.dtype.kind in "iu":
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise Error(f"{what}: integers must fit in int32, got values from {a.min()} to {a.max()}")
        return np.require(a, dtype=np.int32, requirements=["C", "A"])
    raise Error(f"{what}: components must be arrays of numbers, got {a.dtype} ({type(value).__name__})")


def _describe(structure):
    if structure == _LEAF:
        return "an array"
    kind, keys, parts = structure
    if kind == "dict":
        return "a dict of " + ", ".join(f"{k!r}: {_describe(p)}" for k, p in zip(keys, parts))
    return f"a tuple of {len(parts)} (" + ", ".join(_describe(p) for p in parts) + ")"


class _Structure:
    """An element's shape; after a map it is learnt from the function's first result."""

    def __init__(self, value=None):
        self.value = value

    def get(self, what):
        if self.value is None:
            raise Error(f"{what}: the element's structure is not known yet (the map function has not run)")
        return self.value


def _count(value, what, allow_none=False, minimum=0):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise Error(f"{what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _default_seed():
    from .keras import utils

    return utils.default_seed()


class Dataset:
    """A pipeline of elements, as tf.data.Dataset: build it with ``from_tensor_slices`` and chain
    stages; iterate it, or pass it to ``model.fit`` / ``evaluate`` / ``predict``."""

    def __init__(self, native, structure, passes=None):
        self._native = native
        self._structure = structure
        # Iterators made over this pipeline and those built on it: each is a new pass, which a
        # reshuffling shuffle orders anew (as TensorFlow's shuffle keeps its seed's state).
        self._passes = passes if passes is not None else [0]

    # --- sources ---

    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """Element i is row i of every array in ``tensors`` (an array, a tuple or a dict of
        arrays, all with the same first axis). float32, int32 and uint8 C-contiguous arrays are
        read in place, not copied; others are converted once."""
        leaves, structure = _flatten(tensors)
        arrays = [_component(v, "Dataset.from_tensor_slices") for v in leaves]
        return Dataset(_tandem.Dataset.from_tensor_slices(arrays), _Structure(structure))

    @staticmethod
    def from_tensors(tensors, name=None):
        """One element: ``tensors`` whole."""
        leaves, structure = _flatten(tensors)
        arrays = [_component(v, "Dataset.from_tensors")[np.newaxis] for v in leaves]
        return Dataset(_tandem.Dataset.from_tensor_slices(arrays), _Structure(structure))

    @staticmethod
    def range(*args, output_type=None, name=None):
        """The integers of Python's range(start, stop, step), one per element. ``output_type``: an
        integer type (Tandem holds integers as int32, TensorFlow's default int64 included; values
        beyond int32 are refused) or float32."""
        kind = np.dtype(getattr(output_type, "as_numpy_dtype", output_type) or np.int64)
        values = np.arange(*args, dtype=np.int64)
        if kind == np.float32:
            return Dataset.from_tensor_slices(values.astype(np.float32))
        if kind.kind not in "iu":
            raise Error(f"Dataset.range: output_type must be an integer type or float32, got {output_type!r}")
        if values.size and (values.min() < np.iinfo(np.int32).min or values.max() > np.iinfo(np.int32).max):
            raise Error(f"Dataset.range: values from {values.min()} to {values.max()} do not fit in int32, which "
                        "holds Tandem's integers")
        return Dataset.from_tensor_slices(values.astype(np.int32))

    # --- stages ---

    def _then(self, native, structure=None):
        return Dataset(native, structure or self._structure, self._passes)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        """``batch_size`` consecutive elements stacked on a new first axis (the last, shorter batch
        kept unless ``drop_remainder``)."""
        size = _count(batch_size, "Dataset.batch: batch_size", minimum=1)
        return self._then(self._native.batch(size, bool(drop_remainder)))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None, name=None):
        """Elements drawn at random from a buffer of ``buffer_size`` (the dataset's size for a
        full shuffle); a new order each pass unless ``reshuffle_each_iteration=False``."""
        size = _count(buffer_size, "Dataset.shuffle: buffer_size", minimum=1)
        seed = _default_seed() if seed is None else _count(seed, "Dataset.shuffle: seed")
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        return self._then(self._native.shuffle(size, seed, reshuffle))

    def repeat(self, count=None, name=None):
        """The dataset ``count`` times (None or -1: without end)."""
        if count is None or count == -1:
            count = INFINITE_CARDINALITY
        else:
            count = _count(count, "Dataset.repeat: count")
        return self._then(self._native.repeat(count))

    def take(self, count, name=None):
        """The first ``count`` elements (-1: all)."""
        if count == -1:
            return self
        return self._then(self._native.take(_count(count, "Dataset.take: count")))

    def skip(self, count, name=None):
        """All but the first ``count`` elements."""
        return self._then(self._native.skip(_count(count, "Dataset.skip: count")))

    def cache(self, filename="", name=None):
        """Keeps the first full pass in memory (or in ``filename``), so later passes skip the stages
        before it."""
        return self._then(self._native.cache(str(filename)))

    def prefetch(self, buffer_size, name=None):
        """A background thread keeps up to ``buffer_size`` elements ready (AUTOTUNE: 8)."""
        if buffer_size != AUTOTUNE:
            buffer_size = _count(buffer_size, "Dataset.prefetch: buffer_size", minimum=1)
        return self._then(self._native.prefetch(int(buffer_size)))

    def shard(self, num_shards, index, name=None):
        """Every ``num_shards``-th element from ``index`` on."""
        n = _count(num_shards, "Dataset.shard: num_shards", minimum=1)
        i = _count(index, "Dataset.shard: index")
        if i >= n:
            raise Error(f"Dataset.shard: index must be below num_shards {n}, got {i}")
        return self._then(self._native.shard(n, i))

    def _call(self, fn, leaves):
        """fn on an element as TensorFlow calls it: a tuple's components as arguments."""
        value = _pack(self._structure.get("Dataset.map"), leaves)
        return fn(*value) if isinstance(value, tuple) else fn(value)

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """``map_func`` on every element (a tuple's components as its arguments), in Python with
        the GIL held; it returns an array, a tuple or a dict of them. With
        ``num_parallel_calls`` (or AUTOTUNE) on that many threads, in the input's order."""
        if not callable(map_func):
            raise Error(f"Dataset.map: expected a function, got {map_func!r}")
        calls = 1 if num_parallel_calls is None else num_parallel_calls
        if calls != AUTOTUNE:
            calls = _count(calls, "Dataset.map: num_parallel_calls", minimum=1)
        out = _Structure()

        def flat(leaves):
            result = self._call(map_func, leaves)
            values, structure = _flatten(result)
            if out.value is None:
                out.value = structure
            elif out.value != structure:
                raise Error(f"Dataset.map: the function returned {_describe(structure)} after "
                            f"{_describe(out.value)}; it must return the same structure for every element")
            return [_component(v, "Dataset.map") for v in values]

        return self._then(self._native.map(flat, int(calls)), out)

    def filter(self, predicate, name=None):
        """The elements for which ``predicate`` (called as map's function) is true."""
        if not callable(predicate):
            raise Error(f"Dataset.filter: expected a function, got {predicate!r}")
        def keep(leaves):
            result = np.asarray(self._call(predicate, leaves))
            if result.size != 1:
                raise Error(f"Dataset.filter: the predicate must return one bool, got an array of shape {result.shape}")
            return bool(result.reshape(()))

        return self._then(self._native.filter(keep))

    # --- reading ---

    def cardinality(self):
        """Elements in one pass; INFINITE_CARDINALITY (-1) or UNKNOWN_CARDINALITY (-2)."""
        return self._native.cardinality()

    def __len__(self):
        n = self.cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    def _iterate(self):
        it = self._native.iterate(self._passes[0])
        self._passes[0] += 1
        while True:
            leaves = it.next()
            if leaves is None:
                return
            yield _pack(self._structure.get("Dataset"), leaves)

    def __iter__(self):
        """The elements of one pass as read-only numpy arrays, as TensorFlow's tensors are immutable
        (each pass a new order where a shuffle reshuffles)."""
        return self._iterate()

    def as_numpy_iterator(self):
        return self._iterate()

    def _pairs(self, what):
        """The native pipeline, checked to give (x, y) or (x, y, sample_weight) elements where that
        is known yet."""
        s = self._structure.value
        if s is not None and s not in (("tuple", None, [_LEAF, _LEAF]), ("tuple", None, [_LEAF, _LEAF, _LEAF])):
            raise Error(f"{what}: the dataset's elements must be (x, y) or (x, y, sample_weight) tuples of arrays, "
                        f"got {_describe(s)}")
        return self._native

    def _inputs(self, what):
        """The native pipeline, checked to give x, or (x, ...) tuples whose first part is an array."""
        s = self._structure.value
        if s is not None and s != _LEAF and not (s[0] == "tuple" and s[2] and s[2][0] == _LEAF):
            raise Error(f"{what}: the dataset's elements must be arrays or (x, ...) tuples of arrays, got "
                        f"{_describe(s)}")
        return self._native

    def _next_passes(self, count):
        """The pass a reader making `count` passes starts at; later readers start after them."""
        first = self._passes[0]
        self._passes[0] += max(1, int(count))
        return first

    def __repr__(self):
        n = self.cardinality()
        size = {INFINITE_CARDINALITY: "infinite", UNKNOWN_CARDINALITY: "unknown"}.get(n, n)
        return f"<tandem.data.Dataset: {size} elements>"
