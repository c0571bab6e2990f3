"""The checks and conversions of the Keras models' arguments (models.py): verbose, batch sizes,
steps, seeds, sample and class weights, datasets, functional inputs and outputs."""
import numpy as np

from .. import _tandem
from ..errors import Error


def _verbose(verbose):
    if verbose == "auto":
        return 1
    if verbose in (0, 1, 2):
        return int(verbose)
    raise Error(f"verbose must be 0, 1, 2 or 'auto', got {verbose!r}")


def _batch_size(batch_size, default=32):
    if batch_size is None:
        return default
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise Error(f"batch_size must be a positive int, got {batch_size!r}")
    return int(batch_size)


def _dataset_of(x, what):
    """A distributed dataset's own dataset (fit cuts its batches as the strategy does); anything
    else as it is."""
    from .. import distribute

    if isinstance(x, distribute.DistributedDataset):
        if x._per_replica:
            raise Error(f"{what}: a dataset of per-replica batches (distribute_datasets_from_function) is for "
                        "strategy.run; give fit the global batches (experimental_distribute_dataset or the dataset)")
        return x._dataset
    return x


def _refuse_overwrite(filepath, overwrite, what):
    import os

    if not overwrite and os.path.exists(str(filepath)):
        raise Error(f"{what}: {str(filepath)!r} exists and overwrite=False")


def _steps(steps, what):
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps <= 0:
        raise Error(f"{what} must be a positive int, got {steps!r}")
    return int(steps)


def _symbolic(tensors, what):
    """Model's inputs or outputs: one keras.Input or layer output, or a list of them."""
    listed = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    for t in listed:
        if not isinstance(t, _tandem.SymbolicTensor):
            raise Error(f"Model: {what} must be keras.Input tensors or layers' outputs (the functional API), got "
                        f"{t!r}")
    return listed


def _seed_of(seed):
    from . import utils

    return utils.default_seed() if seed is None else int(seed)


def _weights(sample_weight, what):
    """Sample weights as a float32 array (the engine checks their count and values)."""
    if hasattr(sample_weight, "numpy"):
        sample_weight = sample_weight.numpy()
    try:
        return np.ascontiguousarray(sample_weight, dtype=np.float32)
    except (TypeError, ValueError):
        raise Error(f"{what} must be numbers, one per sample, got {type(sample_weight).__name__}") from None


def _class_weight(class_weight):
    """Keras' class_weight {class index: weight} as the engine's map."""
    if class_weight is None:
        return {}
    if not isinstance(class_weight, dict):
        raise Error(f"fit: class_weight must be a dict {{class index: weight}}, got {class_weight!r}")
    out = {}
    for k, v in class_weight.items():
        if isinstance(k, bool) or not hasattr(k, "__index__"):
            raise Error(f"fit: class_weight's keys are class indices (ints), got {k!r}")
        if isinstance(v, bool) or not hasattr(v, "__float__"):
            raise Error(f"fit: class_weight for class {k} must be a number, got {v!r}")
        out[k.__index__()] = float(v)
    return out
