"""The Keras model (tf.keras.Sequential) over the engine's Sequential."""
import json

import numpy as np

from .. import _tandem, _arrays, data
from ..errors import Error
from . import callbacks as callbacks_module
from .layers import InputLayer

__all__ = ["Sequential", "model_from_json", "load_model"]


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


def _seed_of(seed):
    from . import utils

    return utils.default_seed() if seed is None else int(seed)


class Sequential:
    """A linear stack of layers, trained with compile / fit / evaluate / predict as in Keras.

    Made inside ``strategy.scope()``, the model trains under that strategy (replicas, processes,
    parameter servers, split layers); otherwise on this process's cores. ``seed`` fixes the
    weights, dropout and shuffling (Tandem's runs repeat bit for bit); without one, the last
    ``keras.utils.set_random_seed``'s, else 0.
    """

    def __init__(self, layers=None, name=None, seed=None):
        self._adopt(_tandem.Model(name or "sequential", _seed_of(seed)))
        for layer in layers or []:
            self.add(layer)

    def _adopt(self, handle):
        """Takes the engine's model, made under the strategy whose scope is open (kept alive with it)."""
        from .. import distribute

        self._strategy = distribute.get_strategy()
        self._model = handle
        if self._strategy is not None:
            _tandem.attach_strategy(self._model, self._strategy._handle)
        self._input_shape = None
        self.history = None

    def _adopt_open_scope(self):
        """A model made outside any scope whose first layer is added inside one trains under that
        scope's strategy, as TensorFlow's variables are made where the layer is built (the R
        tutorial: keras_model_sequential(), then its layers inside with(strategy$scope(), ...))."""
        from .. import distribute

        if self._strategy is None and not self._model.layers and self._input_shape is None:
            if distribute.get_strategy() is not None:
                self._adopt(_tandem.Model(self._model.name, self._model.seed))

    # --- building ---

    def add(self, layer):
        """Adds a layer on top of the stack (or, first, a ``keras.Input`` giving the input shape)."""
        if isinstance(layer, InputLayer):
            if self._model.layers:
                raise Error("Sequential.add: an Input goes first, before any layer")
            self._input_shape = list(layer.shape)
            return
        if not isinstance(layer, _tandem.Layer):
            raise Error(f"Sequential.add: expected a layer (tandem.keras.layers.*), got {layer!r}")
        self._adopt_open_scope()
        self._model.add(layer)
        if self._input_shape is not None and len(self._model.layers) == 1:
            self._model.build(self._input_shape)

    def build(self, input_shape):
        """Builds the model for inputs of ``input_shape`` (with or without the batch axis as None)."""
        shape = list(input_shape)
        if shape and shape[0] is None:
            shape = shape[1:]
        self._model.build([int(d) for d in shape])

    @property
    def layers(self):
        return list(self._model.layers)

    @property
    def trainable(self):
        """Keras' model.trainable: False freezes every layer (True unfreezes them); a layer may then
        be set on its own (``model.layers[-1].trainable = True``). The next fit follows it."""
        return getattr(self, "_trainable", True)

    @trainable.setter
    def trainable(self, value):
        if not isinstance(value, bool):
            raise Error(f"Sequential.trainable must be True or False, got {value!r}")
        for layer in self._model.layers:
            layer.trainable = value
        self._trainable = value

    @property
    def name(self):
        return self._model.name

    @property
    def built(self):
        return self._model.built

    @property
    def optimizer(self):
        return self._model.optimizer

    @property
    def stop_training(self):
        return self._model.stop_training

    @stop_training.setter
    def stop_training(self, value):
        self._model.stop_training = bool(value)

    @property
    def distribute_strategy(self):
        return self._strategy

    def count_params(self):
        return self._model.count_params()

    def summary(self, print_fn=None):
        """Prints the layers, their output shapes and parameter counts (Keras' table)."""
        text = self._model.summary()
        (print_fn or print)(text.rstrip("\n"))

    # --- training ---

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True, **kwargs):
        """Configures training: ``optimizer`` (a name such as 'adam' or a tandem.keras.optimizers
        object), ``loss`` (a name such as 'sparse_categorical_crossentropy' or a losses object) and
        ``metrics`` (names: 'accuracy', 'sparse_categorical_accuracy', ...), in tf.keras' order (TensorFlow
        2's: metrics third, as the tutorials pass them; name the others). ``run_eagerly``,
        ``steps_per_execution`` and ``auto_scale_loss`` change no result in Tandem (its steps run
        eagerly through the engine; bf16 needs no loss scaling) and are accepted; ``loss_weights``
        (one output here), ``weighted_metrics`` (no sample weights yet) and ``jit_compile=True``
        (XLA) are refused."""
        if kwargs:
            raise TypeError(f"compile() got an unexpected keyword argument{'s' if len(kwargs) > 1 else ''} "
                            f"{', '.join(repr(k) for k in sorted(kwargs))}")
        if loss_weights is not None:
            raise Error("compile: loss_weights weigh the losses of several outputs; a Sequential model has one")
        if weighted_metrics:
            raise Error("compile: weighted_metrics need sample weights, which Tandem's fit does not take yet")
        if jit_compile is True:
            raise Error("compile: jit_compile=True asks for XLA, which Tandem does not have; its steps run through "
                        "the C++ engine")
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int) or steps_per_execution < 1:
            raise Error(f"compile: steps_per_execution must be a positive int, got {steps_per_execution!r}")
        if loss is None:
            raise Error("compile: loss is required, e.g. loss='sparse_categorical_crossentropy'")
        if metrics is None:
            metrics = []
        if isinstance(metrics, str):
            metrics = [metrics]
        for m in metrics:
            if not isinstance(m, str):
                raise Error(f"compile: metrics are given by name ('accuracy'), got {m!r}")
        if getattr(loss, "reduction", "auto") not in ("auto", "sum_over_batch_size"):
            raise Error(f"compile: the loss's reduction is {loss.reduction!r}; fit trains on the batch's mean "
                        "(reduction 'sum_over_batch_size'): a summed or unreduced loss is for custom loops")
        self._model.compile(optimizer, getattr(loss, "_loss", loss), list(metrics))

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0, steps_per_epoch=None, **kwargs):
        """Trains the model for ``epochs`` passes over (x, y).

        Args:
            x: numpy array of samples (float32 C-contiguous arrays are used in place; anything
                else is converted to float32 once), or a tandem.data.Dataset of (x, y) batches.
            y: numpy array of targets (integer labels, or float targets); None with a Dataset.
            batch_size: samples per step (default 32).
            epochs: the epoch to end at (counting from 0 with initial_epoch).
            verbose: 'auto' or 1 (progress bar), 2 (one line per epoch), 0 (silent).
            callbacks: tandem.keras.callbacks objects, or your Callback subclasses.
            validation_split: the last fraction of x, y held out for validation.
            validation_data: (x_val, y_val) or a Dataset to evaluate at each epoch's end.
            shuffle: shuffle the training samples each epoch (arrays; a Dataset shuffles itself).
            initial_epoch: the epoch to start at (resuming).
            steps_per_epoch: with a Dataset, the batches of an epoch; its iterator then runs on
                across epochs, as Keras 3's: running out at an epoch's start begins a new pass;
                inside an epoch, that epoch ends short with a warning.

        Returns:
            A History whose ``history`` dict holds each logged value per epoch.

        Ctrl-C stops between batches with KeyboardInterrupt; the weights of the last finished
        batch are kept. The GIL is released while the engine trains.
        """
        unknown = sorted(k for k in kwargs if k not in ("workers", "use_multiprocessing", "max_queue_size",
                                                        "class_weight", "sample_weight", "validation_steps",
                                                        "validation_batch_size", "validation_freq"))
        if unknown:
            raise TypeError(f"fit() got an unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(repr(k) for k in unknown)}")
        for name in ("class_weight", "sample_weight", "validation_steps", "validation_batch_size"):
            if kwargs.get(name) is not None:
                raise Error(f"fit: {name} is not supported by Tandem")
        if not isinstance(shuffle, bool):
            raise Error(f"fit: shuffle must be True or False (Tandem has no shuffle='batch'), got {shuffle!r}")
        if kwargs.get("validation_freq", 1) != 1:
            raise Error("fit: validation_freq other than 1 is not supported by Tandem (validation runs every epoch)")
        steps_per_epoch = 0 if steps_per_epoch is None else _steps(steps_per_epoch, "fit: steps_per_epoch")
        x = _dataset_of(x, "fit")
        validation_data = _dataset_of(validation_data, "fit (validation_data)")
        dataset_pass = 0
        if isinstance(x, data.Dataset):
            if y is not None:
                raise Error("fit: y must be None when x is a Dataset (its elements are (x, y) batches)")
            if batch_size is not None:
                raise Error("fit: batch_size does not apply to a Dataset (it is batched already: .batch(n))")
            dataset_pass = x._next_passes(int(epochs))  # epoch e reads pass dataset_pass + e
            x = x._pairs("fit")
        else:
            if steps_per_epoch:
                raise Error("fit: steps_per_epoch applies to a Dataset; with arrays every epoch covers x")
            x = _arrays.features(x, "fit")
            y = _arrays.targets(y, "fit")
        validation = None
        if isinstance(validation_data, data.Dataset):
            validation = validation_data._pairs("fit (validation_data)")
        elif validation_data is not None:
            try:
                val_x, val_y = validation_data[:2]
            except (TypeError, ValueError):
                raise Error("fit: validation_data must be a tuple (x_val, y_val) or a Dataset") from None
            if len(validation_data) > 2 and validation_data[2] is not None:
                raise Error("fit: validation_data's sample weights (its third item) are not supported by Tandem")
            validation = (_arrays.features(val_x, "fit (validation_data)"),
                          _arrays.targets(val_y, "fit (validation_data)"))
        verbose = _verbose(verbose)
        batch_size = _batch_size(batch_size)
        native = []
        if isinstance(x, _tandem.Dataset):
            steps = steps_per_epoch or x.cardinality()
            params = {"epochs": int(epochs), "steps": steps if steps >= 0 else None, "verbose": verbose}
        else:
            params = {"epochs": int(epochs), "steps": -(-len(x) // batch_size), "verbose": verbose}
        for cb in callbacks or []:
            if isinstance(cb, callbacks_module.Callback):
                cb.set_model(self)
                cb.set_params(params)
            elif not isinstance(cb, _tandem.NativeCallback):
                raise Error(f"fit: callbacks must be tandem.keras.callbacks objects or Callback subclasses, got {cb!r}")
            native.append(cb)
        history, epochs_run = self._model.fit(x, y, int(epochs), batch_size, steps_per_epoch, dataset_pass,
                                              float(validation_split), validation, bool(shuffle), native, verbose,
                                              int(initial_epoch))
        self.history = callbacks_module.History(history, epochs_run, self, params)
        return self.history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        """The loss and metrics on (x, y) or a Dataset of (x, y) batches: a scalar loss without
        metrics, else [loss, metrics...] (or a dict with return_dict=True), as Keras returns them.
        ``sample_weight`` and ``callbacks`` are refused (not built for evaluate yet)."""
        _hints_only(kwargs, "evaluate")
        if sample_weight is not None:
            raise Error("evaluate: sample_weight is not supported by Tandem")
        if callbacks:
            raise Error("evaluate: callbacks are not supported by Tandem's evaluate")
        printing = 0 if _verbose(verbose) == 0 else 1
        x = _dataset_of(x, "evaluate")
        if isinstance(x, data.Dataset):
            if y is not None:
                raise Error("evaluate: y must be None when x is a Dataset (its elements are (x, y) batches)")
            steps = 0 if steps is None else _steps(steps, "evaluate: steps")
            logs = self._model.evaluate_dataset(x._pairs("evaluate"), steps, printing, x._next_passes(1))
        else:
            if steps is not None:
                raise Error("evaluate: steps applies to a Dataset; with arrays all of x is evaluated")
            x = _arrays.features(x, "evaluate")
            y = _arrays.targets(y, "evaluate")
            logs = self._model.evaluate(x, y, _batch_size(batch_size), printing)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, **kwargs):
        """The model's outputs for x (or each batch of a Dataset, whose elements are x or (x, y)
        batches), as a numpy array; x without rows gives an empty array, as Keras. ``callbacks``
        are refused (not built for predict yet)."""
        _hints_only(kwargs, "predict")
        if callbacks:
            raise Error("predict: callbacks are not supported by Tandem's predict")
        x = _dataset_of(x, "predict")
        if isinstance(x, data.Dataset):
            steps = 0 if steps is None else _steps(steps, "predict: steps")
            return self._model.predict_dataset(x._inputs("predict"), steps, x._next_passes(1))
        if steps is not None:
            raise Error("predict: steps applies to a Dataset; with arrays all of x is predicted")
        return self._model.predict(_arrays.features(x, "predict"), _batch_size(batch_size))

    def __call__(self, x, training=False):
        """The model on x as a tandem Tensor (``.numpy()`` for its values), recorded by an open
        GradientTape: a custom loop's forward pass (inside strategy.run, this replica's)."""
        if not isinstance(x, _tandem.Tensor):
            x = _arrays.features(x, "model(x)")
        return self._model.call(x, bool(training))

    @property
    def trainable_variables(self):
        """The trainable variables (inside strategy.run, this replica's), for tape.gradient."""
        return self._model.trainable_variables

    # --- weights and files ---

    def get_weights(self):
        """Every variable's values, in layer order (copies)."""
        return self._model.get_weights()

    def set_weights(self, weights):
        """Sets every variable from arrays in get_weights' order and shapes."""
        self._model.set_weights([_arrays.features(w, "set_weights") for w in weights])

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """Writes the weights (and the optimizer's state when compiled): a path ending in
        ``.weights.h5`` gets Keras 3's HDF5 layout (Keras' ``load_weights`` reads it), any other a
        safetensors file (the file `tandem evaluate` reads). ``overwrite=False`` refuses an
        existing file."""
        if max_shard_size is not None:
            raise Error("save_weights: max_shard_size (sharded weight files) is not supported by Tandem")
        _refuse_overwrite(filepath, overwrite, "save_weights")
        self._model.save_weights(str(filepath))

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, **kwargs):
        """Reads weights written by save_weights (either format), ModelCheckpoint or `tandem fit
        --save`, Keras 3's ``.weights.h5``, or the weights of a ``.keras`` file. Every weight must
        match: ``skip_mismatch`` and Keras 2's ``by_name`` are refused."""
        if kwargs:
            raise TypeError(f"load_weights() got an unexpected keyword argument {sorted(kwargs)[0]!r}")
        if skip_mismatch or by_name:
            raise Error("load_weights: skip_mismatch and by_name are not supported by Tandem (every weight of the "
                        "file must match the model's, or the file is refused naming the first that does not)")
        self._model.load_weights(str(filepath))

    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Writes the model as Keras 3's ``.keras`` file: config.json (the architecture, its build
        and compile configs), metadata.json and model.weights.h5 (weights and optimizer state).
        ``keras.models.load_model`` (Keras 3's or Tandem's) reads it back. Keras 2's arguments
        (save_format, include_optimizer, signatures, options) are refused."""
        if kwargs:
            raise Error(f"save: {', '.join(sorted(kwargs))} {'is' if len(kwargs) == 1 else 'are'} Keras 2's; Tandem "
                        "writes Keras 3's .keras file, optimizer included")
        if zipped is False:
            raise Error("save: zipped=False is not supported by Tandem (it writes .keras files)")
        _refuse_overwrite(filepath, overwrite, "save")
        self._model.save(str(filepath))

    def to_json(self, **kwargs):
        """The architecture as Keras' JSON (model_from_json reads it back); ``kwargs`` go to
        json.dumps (``indent=2``), as Keras'."""
        text = self._model.to_json()
        return json.dumps(json.loads(text), **kwargs) if kwargs else text

    def __repr__(self):
        return f"<tandem.keras.Sequential {self.name!r}: {len(self._model.layers)} layers>"


def _hints_only(kwargs, what):
    """Keras' hints that change no result (data-loading workers) are accepted; anything else is a TypeError."""
    unknown = sorted(k for k in kwargs if k not in ("workers", "use_multiprocessing", "max_queue_size"))
    if unknown:
        raise TypeError(f"{what}() got an unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(k) for k in unknown)}")


def model_from_json(json_string, custom_objects=None, seed=None):
    """A model from Keras' JSON (``model.to_json()``, or a Keras file's architecture)."""
    if not isinstance(json_string, str):
        raise Error(f"model_from_json: expected a JSON string, got {type(json_string).__name__}")
    model = Sequential.__new__(Sequential)
    model._adopt(_tandem.model_from_json(json_string, _seed_of(seed)))
    return model


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True, seed=None):
    """A model from a Keras 3 ``.keras`` file (``model.save``'s, or Keras' own Sequential ones of
    the layers Tandem has): built, compiled from its compile_config (unless compile=False) and
    holding its weights and optimizer state. ``seed`` as for Sequential (dropout, shuffling)."""
    path = str(filepath)
    if custom_objects:
        raise Error("load_model: custom_objects are not supported by Tandem")
    model = Sequential.__new__(Sequential)
    model._adopt(_tandem.load_model(path, _seed_of(seed), bool(compile)))
    return model
