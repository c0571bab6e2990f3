"""The Keras models (tf.keras.Model, functional, and tf.keras.Sequential) over the engine's Model."""
import json

import numpy as np

from .. import _tandem, _arrays, data
from ..errors import Error
from . import callbacks as callbacks_module
from . import losses as losses_module
from .layers import InputLayer
from ._model_args import (_batch_size, _by_name, _class_weight, _dataset_of, _loss_for, _packed_targets, _refuse_overwrite,
                          _seed_of, _steps, _symbolic, _unpacked_outputs, _verbose, _weights)

__all__ = ["Model", "Sequential", "model_from_json", "load_model"]


class Model:
    """A model with compile / fit / evaluate / predict as in Keras. ``Model(inputs, outputs)`` is
    Keras' functional model: the layers called from ``keras.Input`` tensors to the outputs, a graph
    (residual connections, shared layers, merges); ``Sequential`` is a stack of layers.

    Made inside ``strategy.scope()``, the model trains under that strategy (replicas, processes,
    parameter servers, split layers); otherwise on this process's cores. ``seed`` fixes the
    weights, dropout and shuffling (Tandem's runs repeat bit for bit); without one, the last
    ``keras.utils.set_random_seed``'s, else 0.
    """

    def __init__(self, inputs=None, outputs=None, name=None, trainable=True, seed=None):
        if inputs is None or outputs is None:
            raise Error("Model: give inputs and outputs (keras.Model(inputs, outputs), the functional API); a "
                        "subclassed model with its own call() is not supported by Tandem")
        if not isinstance(trainable, bool):
            raise Error(f"Model: trainable must be True or False, got {trainable!r}")
        ins, outs = _symbolic(inputs, "inputs"), _symbolic(outputs, "outputs")
        self._adopt(_tandem.Model.functional(ins, outs, name or "functional", _seed_of(seed)))
        if not trainable:
            self.trainable = False

    def _features(self, x, what):
        """x as the engine takes it: one array, or for a model of several inputs a list (or a dict
        by input name) of arrays, one per input, packed side by side (each row's inputs flattened,
        in the inputs' order)."""
        names, shapes = self._model.input_names, self._model.input_shapes
        if len(shapes) <= 1:
            return _arrays.features(x, what)
        x = _by_name(x, list(names), f"{what}: x", "inputs")
        parts = []
        for name, shape, a in zip(names, shapes, x):
            a = _arrays.features(a, f"{what} (input {name!r})")
            if a.ndim < 1 or tuple(a.shape[1:]) != tuple(shape):
                raise Error(f"{what}: input {name!r} has shape {a.shape}, expected (rows, {', '.join(map(str, shape))})")
            if len(a) != len(x[0]):
                raise Error(f"{what}: input {name!r} has {len(a)} rows, input {names[0]!r} has {len(x[0])}")
            parts.append(a.reshape(len(a), -1))
        return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)

    def _targets(self, y, what):
        """y as the engine takes it; for a model of several outputs a list (or a dict by output
        name), packed side by side."""
        if len(self._model.output_names) > 1:
            return _packed_targets(self._model, y, what)
        return _arrays.targets(y, what)

    @property
    def output_names(self):
        """The outputs' names (a functional model's: the layers that make them), as Keras'."""
        return list(self._model.output_names)

    def _adopt(self, handle):
        """Takes the engine's model, made under the strategy whose scope is open (kept alive with it)."""
        from .. import distribute

        self._strategy = distribute.get_strategy()
        self._model = handle
        if self._strategy is not None:
            _tandem.attach_strategy(self._model, self._strategy._handle)
        self._input_shape = None
        self.history = None

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
            raise Error(f"{type(self).__name__}.trainable must be True or False, got {value!r}")
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

    def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False, show_trainable=False,
                layer_range=None):
        """Prints the layers, their output shapes and parameter counts (Keras' table, its trainable
        and non-trainable counts), through ``print_fn`` (default print). The table's layout is
        fixed: ``line_length``, ``positions``, ``show_trainable`` and ``layer_range`` are refused by
        name; ``expand_nested`` has nothing to expand in a Sequential of layers."""
        for name, value, default in (("line_length", line_length, None), ("positions", positions, None),
                                     ("show_trainable", show_trainable, False), ("layer_range", layer_range, None)):
            if value != default:
                raise Error(f"summary: {name}={value!r} is not supported: Tandem prints Keras' table in its fixed "
                            "layout")
        text = self._model.summary()
        (print_fn or print)(text.rstrip("\n"))

    # --- training ---

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True,
                pss_evaluation_shards=0):
        """Configures training: ``optimizer`` (a name such as 'adam' or a tandem.keras.optimizers
        object), ``loss`` (a name such as 'sparse_categorical_crossentropy' or a losses object; a model of several outputs: one
        for all, or a list or dict by output name) and
        ``metrics`` (names: 'accuracy', 'sparse_categorical_accuracy', ...), in tf.keras' order (TensorFlow
        2's: metrics third, as the tutorials pass them; name the others). ``run_eagerly``,
        ``steps_per_execution`` and ``auto_scale_loss`` change no result in Tandem (its steps run
        eagerly through the engine; bf16 needs no loss scaling) and are accepted; ``loss_weights``
        (a list or dict, one per output, beside a loss per output), ``weighted_metrics`` (no sample weights yet) and ``jit_compile=True``
        (XLA) and ``pss_evaluation_shards`` (evaluation on parameter-server workers) are refused."""
        if pss_evaluation_shards != 0:
            raise Error(f"compile: pss_evaluation_shards={pss_evaluation_shards!r} is not supported: under "
                        "ParameterServerStrategy Tandem's chief evaluates")
        if weighted_metrics:
            raise Error("compile: weighted_metrics are not supported by Tandem (the loss is weighted by sample_weight "
                        "and class_weight; metrics count every row)")
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
                raise Error(f"compile: metrics are given by name ('accuracy'), got {m!r} (a model of several "
                            "outputs reports each metric on every output)")
        if getattr(loss, "reduction", "auto") not in ("auto", "sum_over_batch_size"):
            raise Error(f"compile: the loss's reduction is {loss.reduction!r}; fit trains on the batch's mean "
                        "(reduction 'sum_over_batch_size'): a summed or unreduced loss is for custom loops")
        if isinstance(loss, losses_module.Loss) and not hasattr(loss, "_loss"):
            raise Error(f"compile: {type(loss).__name__} is a custom Loss; fit computes its loss in the engine, so "
                        "compile takes Tandem's losses (keras.losses.*, or their names); use it in a custom loop")
        self._model.compile(optimizer, _loss_for(self._model, loss, loss_weights), list(metrics))

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1,
            max_queue_size=10, workers=1, use_multiprocessing=False):
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
            validation_data: (x_val, y_val), (x_val, y_val, val_sample_weights) or a Dataset to
                evaluate at each epoch's end.
            shuffle: shuffle the training samples each epoch (arrays; a Dataset shuffles itself).
            class_weight: {class: weight}, each row's loss times its class's weight (every class
                in y needs one).
            sample_weight: one weight per sample of x, each row's loss times its weight (a batch's
                loss is Σ weight·loss ÷ its rows, as Keras'); a Dataset's elements carry theirs
                as (x, y, sample_weight).
            initial_epoch: the epoch to start at (resuming).
            steps_per_epoch: with a Dataset, the batches of an epoch; its iterator then runs on
                across epochs, as Keras 3's: running out at an epoch's start begins a new pass;
                inside an epoch, that epoch ends short with a warning.

        Returns:
            A History whose ``history`` dict holds each logged value per epoch.

        Ctrl-C stops between batches with KeyboardInterrupt; the weights of the last finished
        batch are kept. The GIL is released while the engine trains.
        """
        for name, value in (("validation_steps", validation_steps), ("validation_batch_size", validation_batch_size)):
            if value is not None:
                raise Error(f"fit: {name} is not supported by Tandem (validation reads all of validation_data in "
                            "batches of batch_size)")
        if not isinstance(shuffle, bool):
            raise Error(f"fit: shuffle must be True or False (Tandem has no shuffle='batch'), got {shuffle!r}")
        if validation_freq != 1:
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
            if sample_weight is not None:
                raise Error("fit: sample_weight does not apply to a Dataset; make its elements (x, y, sample_weight)")
            dataset_pass = x._next_passes(int(epochs))  # epoch e reads pass dataset_pass + e
            x = x._pairs("fit")
        else:
            if steps_per_epoch:
                raise Error("fit: steps_per_epoch applies to a Dataset; with arrays every epoch covers x")
            x = self._features(x, "fit")
            y = self._targets(y, "fit")
            if sample_weight is not None:
                sample_weight = _weights(sample_weight, "fit: sample_weight")
        validation = None
        if isinstance(validation_data, data.Dataset):
            validation = validation_data._pairs("fit (validation_data)")
        elif validation_data is not None:
            try:
                val_x, val_y = validation_data[:2]
            except (TypeError, ValueError):
                raise Error("fit: validation_data must be a tuple (x_val, y_val) or a Dataset") from None
            if len(validation_data) > 3:
                raise Error(f"fit: validation_data has {len(validation_data)} items; expected (x_val, y_val) or "
                            "(x_val, y_val, val_sample_weights)")
            validation = (self._features(val_x, "fit (validation_data)"),
                          self._targets(val_y, "fit (validation_data)"))
            if len(validation_data) == 3 and validation_data[2] is not None:
                validation += (_weights(validation_data[2], "fit: validation_data's sample weights"),)
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
                                              int(initial_epoch), sample_weight, _class_weight(class_weight))
        self.history = callbacks_module.History(history, epochs_run, self, params)
        return self.history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, max_queue_size=10, workers=1, use_multiprocessing=False, return_dict=False):
        """The loss and metrics on (x, y) or a Dataset of (x, y) batches: a scalar loss without
        metrics, else [loss, metrics...] (or a dict with return_dict=True), as Keras returns them.
        ``sample_weight`` weighs each row's loss as fit's; ``callbacks`` are refused (not built for
        evaluate yet)."""
        if callbacks:
            raise Error("evaluate: callbacks are not supported by Tandem's evaluate")
        printing = 0 if _verbose(verbose) == 0 else 1
        x = _dataset_of(x, "evaluate")
        if isinstance(x, data.Dataset):
            if y is not None:
                raise Error("evaluate: y must be None when x is a Dataset (its elements are (x, y) batches)")
            if sample_weight is not None:
                raise Error("evaluate: sample_weight does not apply to a Dataset; make its elements (x, y, "
                            "sample_weight)")
            steps = 0 if steps is None else _steps(steps, "evaluate: steps")
            logs = self._model.evaluate_dataset(x._pairs("evaluate"), steps, printing, x._next_passes(1))
        else:
            if steps is not None:
                raise Error("evaluate: steps applies to a Dataset; with arrays all of x is evaluated")
            x = self._features(x, "evaluate")
            y = self._targets(y, "evaluate")
            weights = None if sample_weight is None else _weights(sample_weight, "evaluate: sample_weight")
            logs = self._model.evaluate(x, y, _batch_size(batch_size), printing, weights)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, max_queue_size=10, workers=1,
                use_multiprocessing=False):
        """The model's outputs for x (or each batch of a Dataset, whose elements are x or (x, y)
        batches), as a numpy array; x without rows gives an empty array, as Keras. ``callbacks``
        are refused (not built for predict yet)."""
        if callbacks:
            raise Error("predict: callbacks are not supported by Tandem's predict")
        x = _dataset_of(x, "predict")
        if isinstance(x, data.Dataset):
            steps = 0 if steps is None else _steps(steps, "predict: steps")
            return self._model.predict_dataset(x._inputs("predict"), steps, x._next_passes(1))
        if steps is not None:
            raise Error("predict: steps applies to a Dataset; with arrays all of x is predicted")
        out = self._model.predict(self._features(x, "predict"), _batch_size(batch_size))
        return _unpacked_outputs(self._model, out) if len(self._model.output_names) > 1 else out

    def __call__(self, inputs, training=False, mask=None):
        """The model on ``inputs`` as a tandem Tensor (``.numpy()`` for its values; a model of
        several outputs: a list of them), recorded by an open GradientTape: a custom loop's forward
        pass (inside strategy.run, this replica's).
        ``mask`` is refused (no layer here takes one)."""
        if mask is not None:
            raise Error("model(inputs): mask is not supported: no Tandem layer takes a mask")
        if not isinstance(inputs, _tandem.Tensor):
            inputs = self._features(inputs, "model(x)")
        return self._model.call(inputs, bool(training))

    @property
    def losses(self):
        """Keras' model.losses: each kernel and bias regularizer's penalty at the current weights, then
        the last call's activity penalties, as tandem Tensors recorded by an open GradientTape (a
        custom loop adds ``sum(model.losses)`` to its loss; fit adds them itself)."""
        return list(self._model.losses)

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

    def save_weights(self, filepath, overwrite=True, save_format=None, options=None, max_shard_size=None):
        """Writes the weights (and the optimizer's state when compiled): a path ending in
        ``.weights.h5`` gets Keras 3's HDF5 layout (Keras' ``load_weights`` reads it), any other a
        safetensors file (the file `tandem evaluate` reads). ``overwrite=False`` refuses an
        existing file."""
        if max_shard_size is not None:
            raise Error("save_weights: max_shard_size (sharded weight files) is not supported by Tandem")
        if save_format is not None:
            raise Error(f"save_weights: save_format={save_format!r} is Keras 2's; Tandem picks the format by the "
                        "file's name (.weights.h5: Keras 3's HDF5, else safetensors)")
        if options is not None:
            raise Error("save_weights: options (tf.train.CheckpointOptions) are not supported by Tandem")
        _refuse_overwrite(filepath, overwrite, "save_weights")
        self._model.save_weights(str(filepath))

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, options=None):
        """Reads weights written by save_weights (either format), ModelCheckpoint or `tandem fit
        --save`, Keras 3's ``.weights.h5``, or the weights of a ``.keras`` file. Every weight must
        match: ``skip_mismatch`` and Keras 2's ``by_name`` are refused."""
        if options is not None:
            raise Error("load_weights: options (tf.train.CheckpointOptions) are not supported by Tandem")
        if skip_mismatch or by_name:
            raise Error("load_weights: skip_mismatch and by_name are not supported by Tandem (every weight of the "
                        "file must match the model's, or the file is refused naming the first that does not)")
        self._model.load_weights(str(filepath))

    def save(self, filepath, overwrite=True, zipped=None, save_format=None, include_optimizer=True, signatures=None,
             options=None, save_traces=True):
        """Writes the model as Keras 3's ``.keras`` file: config.json (the architecture, its build
        and compile configs), metadata.json and model.weights.h5 (weights and optimizer state).
        ``keras.models.load_model`` (Keras 3's or Tandem's) reads it back. Keras 2's arguments
        (save_format, include_optimizer, signatures, options) are refused."""
        for name, value, default in (("save_format", save_format, None), ("include_optimizer", include_optimizer, True),
                                     ("signatures", signatures, None), ("options", options, None),
                                     ("save_traces", save_traces, True)):
            if value is not default and value != default:
                raise Error(f"save: {name} is Keras 2's; Tandem writes Keras 3's .keras file, optimizer included")
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
        return f"<tandem.keras.{type(self).__name__} {self.name!r}: {len(self._model.layers)} layers>"


class Sequential(Model):
    """A linear stack of layers, trained with compile / fit / evaluate / predict as in Keras (and
    strategies and seeds as ``Model``)."""

    def __init__(self, layers=None, name=None, trainable=True, seed=None):
        if not isinstance(trainable, bool):
            raise Error(f"Sequential: trainable must be True or False, got {trainable!r}")
        self._adopt(_tandem.Model(name or "sequential", _seed_of(seed)))
        for layer in layers or []:
            self.add(layer)
        if not trainable:
            self.trainable = False

    def _adopt_open_scope(self):
        """A model made outside any scope whose first layer is added inside one trains under that
        scope's strategy, as TensorFlow's variables are made where the layer is built (the R
        tutorial: keras_model_sequential(), then its layers inside with(strategy$scope(), ...))."""
        from .. import distribute

        if self._strategy is None and not self._model.layers and self._input_shape is None:
            if distribute.get_strategy() is not None:
                self._adopt(_tandem.Model(self._model.name, self._model.seed))

    # --- building ---

    def add(self, layer, rebuild=True):
        """Adds a layer on top of the stack (or, first, a ``keras.Input`` giving the input shape).
        ``rebuild`` (Keras 3's) changes nothing: the model builds itself when its input shape is
        known."""
        if isinstance(layer, InputLayer) or (isinstance(layer, _tandem.SymbolicTensor) and layer.is_input):
            if self._model.layers:
                raise Error("Sequential.add: an Input goes first, before any layer")
            self._input_shape = [int(d) for d in layer.shape if d is not None]
            return
        if not isinstance(layer, _tandem.Layer):
            raise Error(f"Sequential.add: expected a layer (tandem.keras.layers.*), got {layer!r}")
        self._adopt_open_scope()
        self._model.add(layer)
        if self._input_shape is not None and len(self._model.layers) == 1:
            self._model.build(self._input_shape)


def model_from_json(json_string, custom_objects=None, seed=None):
    """A model from Keras' JSON (``model.to_json()``, or a Keras file's architecture); Tandem's
    layers only, so ``custom_objects`` are refused."""
    if custom_objects:
        raise Error("model_from_json: custom_objects are not supported: Tandem reads its own layers only")
    if not isinstance(json_string, str):
        raise Error(f"model_from_json: expected a JSON string, got {type(json_string).__name__}")
    return _wrapped(_tandem.model_from_json(json_string, _seed_of(seed)))


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True, seed=None):
    """A model from a Keras 3 ``.keras`` file (``model.save``'s, or Keras' own Sequential and
    functional ones of the layers Tandem has): built, compiled from its compile_config (unless compile=False) and
    holding its weights and optimizer state. ``seed`` as for Sequential (dropout, shuffling)."""
    path = str(filepath)
    if custom_objects:
        raise Error("load_model: custom_objects are not supported by Tandem")
    return _wrapped(_tandem.load_model(path, _seed_of(seed), bool(compile)))


def _wrapped(handle):
    """The engine's model read from a file, as a Sequential or a functional Model."""
    model = Model.__new__(Model) if handle.kind == "Functional" else Sequential.__new__(Sequential)
    model._adopt(handle)
    return model
