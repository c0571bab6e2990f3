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


def _by_name(value, names, what, kind):
    """One value per input or output (`kind`: "inputs" or "outputs", named `names`): a list or tuple
    in their order, or a dict by name, as a list in their order; an Error naming what is wrong."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise Error(f"{what} names {kind} {unknown}; the model's are {names}")
        missing = [n for n in names if n not in value]
        if missing:
            raise Error(f"{what} has no entry for {kind} {missing}; the model's are {names}")
        value = [value[n] for n in names]
    if not isinstance(value, (list, tuple)) or len(value) != len(names):
        raise Error(f"{what}: the model has {len(names)} {kind} {names}; give a list of {len(names)} (or a dict by "
                    f"name), got {type(value).__name__}")
    return list(value)


def _loss_for(model, loss, loss_weights):
    """compile's loss for the engine: one loss, or for a model of several outputs a list or dict of
    them (one loss alone serves every output) weighted by loss_weights (a list or dict)."""
    names = list(model.output_names)
    if len(names) <= 1:
        if loss_weights is not None:
            raise Error("compile: loss_weights weigh the losses of several outputs; this model has one")
        if isinstance(loss, (list, tuple, dict)):
            raise Error(f"compile: a list of losses for a model of one output; give one loss, got {loss!r}")
        return getattr(loss, "_loss", loss)
    per = isinstance(loss, (list, tuple, dict))
    losses = _by_name(loss, names, "compile: loss", "outputs") if per else [loss] * len(names)
    weights = [] if loss_weights is None else _by_name(loss_weights, names, "compile: loss_weights", "outputs")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise Error(f"compile: loss_weights hold numbers, got {w!r}")
    losses = [getattr(each, "_loss", each) for each in losses]
    for each in losses:
        if not isinstance(each, (str, _tandem.Loss)):
            raise Error(f"compile: each output's loss is a name or a tandem.keras.losses object, got {each!r}")
    return _tandem.Loss.outputs([_tandem.Loss(l, False) if isinstance(l, str) else l for l in losses],
                                [float(w) for w in weights])


def _packed_targets(model, y, what):
    """y for a model of several outputs (a list, or a dict by output name): each output's targets
    flattened per row (labels one column), side by side as the engine takes them, float32."""
    from .. import _arrays

    names = list(model.output_names)
    y = _by_name(y, names, f"{what}: y", "outputs")
    parts = []
    for name, each in zip(names, y):
        a = _arrays.targets(each, f"{what} (output {name!r})")
        if a.ndim < 1 or len(a) != len(y[0]):
            raise Error(f"{what}: output {name!r}'s targets have shape {a.shape}; every output needs one row per "
                        f"row of x ({len(y[0])})")
        parts.append(a.reshape(len(a), -1).astype(np.float32))
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def _unpacked_outputs(model, packed):
    """predict's packed outputs as a list, each in its output's shape."""
    out, at = [], 0
    for shape in model.output_shapes:
        width = int(np.prod(shape)) if shape else 1
        out.append(packed[:, at:at + width].reshape((len(packed),) + tuple(shape)))
        at += width
    return out
