"""numpy in: float32 C-contiguous aligned arrays go to the engine as they are (no copy); anything
else is converted once (floats to float32, integer labels to int32 after a range check)."""
import numpy as np

from .errors import Error


def features(x, what):
    """x as a float32 C-contiguous array; the same object when it already is one."""
    if x is None:
        raise Error(f"{what}: x is None; pass a numpy array of samples")
    if isinstance(x, (str, bytes)):
        raise Error(f"{what}: x must be an array of numbers, got a {type(x).__name__}")
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.c_contiguous and x.flags.aligned:
        return x
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise Error(f"{what}: x cannot be read as an array: {e}") from None
    if a.dtype.kind not in "fiub":
        raise Error(f"{what}: x must hold numbers, got an array of {a.dtype}")
    _fits_float32(a, what, "x")
    return np.require(a, dtype=np.float32, requirements=["C", "A"])


def _fits_float32(a, what, name):
    """A float64 (or wider) array whose finite values float32 cannot hold (they would become
    infinities) is refused, naming the first such sample (row) and its value."""
    if a.dtype.kind != "f" or a.dtype.itemsize <= 4 or a.size == 0:
        return
    big = np.isfinite(a) & (np.abs(a) > np.finfo(np.float32).max)
    if big.any():
        at = np.unravel_index(int(np.argmax(big)), a.shape)
        raise Error(f"{what}: {name} at row {at[0] if a.ndim else 0} is {float(a[at])!r}, beyond float32's range "
                    f"(±{float(np.finfo(np.float32).max):.4g}); scale the data")


def targets(y, what):
    """y as float32, int32 or uint8, C-contiguous: integer labels stay integers."""
    if y is None:
        raise Error(f"{what}: y is None; pass the targets (labels) as a numpy array")
    if isinstance(y, (str, bytes)):
        raise Error(f"{what}: y must be an array of numbers, got a {type(y).__name__}")
    try:
        a = np.asarray(y)
    except Exception as e:
        raise Error(f"{what}: y cannot be read as an array: {e}") from None
    if a.dtype in (np.float32, np.int32, np.uint8):
        return np.require(a, requirements=["C", "A"])
    if a.dtype.kind in "iub":
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise Error(f"{what}: labels must fit in int32, got values from {a.min()} to {a.max()}")
        return np.ascontiguousarray(a, dtype=np.int32)
    if a.dtype.kind == "f":
        _fits_float32(a, what, "y")
        return np.ascontiguousarray(a, dtype=np.float32)
    raise Error(f"{what}: y must hold numbers, got an array of {a.dtype}")


def loss_weights(sample_weight, rows, what):
    """A loss's sample_weight in a custom loop: a number, or one weight per sample ((rows,) or
    (rows, 1)) as a float32 tandem Tensor, to multiply the per-sample losses by."""
    from . import _tandem

    w = np.asarray(sample_weight.numpy() if hasattr(sample_weight, "numpy") else sample_weight, dtype=np.float32)
    if w.ndim == 0:
        return float(w)
    if w.ndim == 2 and w.shape[1] == 1:
        w = w.reshape(-1)
    if w.shape != (rows,):
        raise Error(f"{what}: sample_weight has shape {w.shape}, expected a number or ({rows},)")
    return _tandem.as_tensor(np.ascontiguousarray(w))
