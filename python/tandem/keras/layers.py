"""Keras layers (tf.keras.layers), with Keras' names and defaults. Each is the engine's layer."""
from .. import _tandem
from ..errors import Error
from . import regularizers as _regularizers

__all__ = ["Dense", "Dropout", "Conv2D", "MaxPooling2D", "AveragePooling2D", "Flatten", "BatchNormalization",
           "Activation", "ReLU", "GlobalAveragePooling2D", "ZeroPadding2D", "Add", "Subtract", "Multiply", "Concatenate",
           "add", "subtract", "multiply", "concatenate",
           "Input", "InputLayer"]


def _shape(input_shape, input_dim, what):
    if input_dim is not None:
        return [int(input_dim)]
    if input_shape is None:
        return None
    if isinstance(input_shape, int):
        return [input_shape]
    try:
        dims = [int(d) for d in input_shape]
    except (TypeError, ValueError):
        raise Error(f"{what}: input_shape must be a tuple of sizes such as (784,), got {input_shape!r}") from None
    if any(d <= 0 for d in dims):
        raise Error(f"{what}: input_shape sizes must be positive, got {tuple(dims)}")
    return dims


def _pair(v, what, name):
    if isinstance(v, int):
        return (v, v)
    try:
        a, b = v
        return (int(a), int(b))
    except (TypeError, ValueError):
        raise Error(f"{what}: {name} must be an int or a pair of ints, got {v!r}") from None


def _activation(a, what):
    if a is None:
        return ""
    if not isinstance(a, str):
        raise Error(f"{what}: activation must be a name such as 'relu' or None, got {a!r}")
    return "" if a == "linear" else a


def _initializer(v, what):
    if not isinstance(v, str):
        raise Error(f"{what}: initializers are given by name ('glorot_uniform', 'he_normal', 'zeros'), got {v!r}")
    return v


def Dense(units, activation=None, use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
          kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
          bias_constraint=None, lora_rank=None, name=None, input_shape=None, input_dim=None, trainable=True, dtype=None,
          dynamic=False, autocast=True):
    """Densely-connected layer: ``activation(dot(x, kernel) + bias)``.

    Args:
        units: positive int, the output size.
        activation: a name ('relu', 'elu', 'tanh', 'sigmoid', 'softmax', ...) or None for linear.
        use_bias: whether the layer adds a bias vector.
        kernel_initializer, bias_initializer: initializer names.
        kernel_regularizer, bias_regularizer, activity_regularizer: keras.regularizers l1, l2 or
            l1_l2 (or their names): penalties fit adds to the loss.
        name: the layer's name (default dense, dense_1, ...).
        input_shape: per-sample input shape of the first layer, e.g. (784,).
    """
    _no_constraints("Dense", kernel_constraint, bias_constraint)
    if lora_rank is not None:
        raise Error("Dense: lora_rank (LoRA) is not supported by Tandem")
    layer = _tandem.Dense(int(units), _activation(activation, "Dense"), bool(use_bias),
                          _initializer(kernel_initializer, "Dense"), _initializer(bias_initializer, "Dense"),
                          name or "", _shape(input_shape, input_dim, "Dense"))
    return _base(layer, "Dense", trainable, dtype, dynamic, autocast, activity_regularizer, kernel_regularizer,
                 bias_regularizer)


def Dropout(rate, noise_shape=None, seed=None, name=None, input_shape=None, trainable=True, dtype=None,
            dynamic=False, autocast=True, activity_regularizer=None):
    """Sets input units to 0 with frequency ``rate`` during training, scaling the rest by 1/(1 - rate).
    With ``seed``, the layer's masks come from that seed alone (by step and row), not the model's."""
    if noise_shape is not None:
        raise Error("Dropout: noise_shape is not supported (the mask covers every element)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise Error(f"Dropout: seed must be a non-negative int or None, got {seed!r}")
    return _base(_tandem.Dropout(float(rate), name or "", _shape(input_shape, None, "Dropout"), seed), "Dropout",
                 trainable, dtype, dynamic, autocast, activity_regularizer)


def Conv2D(filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1), groups=1,
           activation=None, use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, name=None, input_shape=None, trainable=True, dtype=None, dynamic=False,
           autocast=True):
    """2D convolution over (batch, height, width, channels) inputs (channels last, as Keras)."""
    _no_constraints("Conv2D", kernel_constraint, bias_constraint)
    _channels_last(data_format, "Conv2D")
    if _pair(dilation_rate, "Conv2D", "dilation_rate") != (1, 1):
        raise Error(f"Conv2D: dilation_rate={dilation_rate!r} is not supported (Tandem's convolutions are undilated)")
    if groups != 1:
        raise Error(f"Conv2D: groups={groups!r} is not supported (Tandem's convolutions are not grouped)")
    layer = _tandem.Conv2D(int(filters), _pair(kernel_size, "Conv2D", "kernel_size"),
                           _pair(strides, "Conv2D", "strides"), padding, _activation(activation, "Conv2D"),
                           bool(use_bias), _initializer(kernel_initializer, "Conv2D"),
                           _initializer(bias_initializer, "Conv2D"), name or "", _shape(input_shape, None, "Conv2D"))
    return _base(layer, "Conv2D", trainable, dtype, dynamic, autocast, activity_regularizer, kernel_regularizer,
                 bias_regularizer)


def MaxPooling2D(pool_size=(2, 2), strides=None, padding="valid", data_format=None, name=None, input_shape=None,
                 trainable=True, dtype=None, dynamic=False, autocast=True, activity_regularizer=None):
    """Max pooling over 2D windows (strides default to the pool size)."""
    _channels_last(data_format, "MaxPooling2D")
    return _base(_tandem.Pooling2D(True, _pair(pool_size, "MaxPooling2D", "pool_size"),
                                     None if strides is None else _pair(strides, "MaxPooling2D", "strides"), padding,
                                     name or "", _shape(input_shape, None, "MaxPooling2D")), "MaxPooling2D",
                 trainable, dtype, dynamic, autocast, activity_regularizer)


def AveragePooling2D(pool_size=(2, 2), strides=None, padding="valid", data_format=None, name=None, input_shape=None,
                 trainable=True, dtype=None, dynamic=False, autocast=True, activity_regularizer=None):
    """Average pooling over 2D windows (strides default to the pool size)."""
    _channels_last(data_format, "AveragePooling2D")
    return _base(_tandem.Pooling2D(False, _pair(pool_size, "AveragePooling2D", "pool_size"),
                                     None if strides is None else _pair(strides, "AveragePooling2D", "strides"), padding,
                                     name or "", _shape(input_shape, None, "AveragePooling2D")), "AveragePooling2D",
                 trainable, dtype, dynamic, autocast, activity_regularizer)


def Flatten(data_format=None, name=None, input_shape=None, trainable=True, dtype=None, dynamic=False, autocast=True,
            activity_regularizer=None):
    """Flattens each sample to one dimension."""
    _channels_last(data_format, "Flatten")
    return _base(_tandem.Flatten(name or "", _shape(input_shape, None, "Flatten")), "Flatten", trainable, dtype,
                 dynamic, autocast, activity_regularizer)


def BatchNormalization(axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True, beta_initializer="zeros",
                       gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                       beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                       synchronized=False, name=None, input_shape=None, trainable=True, dtype=None, dynamic=False,
                       autocast=True, activity_regularizer=None):
    """Normalizes each feature (the last axis) over the batch (moving statistics for inference)."""
    what = "BatchNormalization"
    if axis not in (-1, [-1], (-1,)):
        raise Error(f"{what}: axis={axis!r} is not supported: Tandem normalizes the last axis (channels last)")
    for arg, value in (("center", center), ("scale", scale)):
        if value is not True:
            raise Error(f"{what}: {arg}={value!r} is not supported: Tandem's batch normalization has beta and gamma")
    for arg, value, default in (("beta_initializer", beta_initializer, "zeros"),
                                ("gamma_initializer", gamma_initializer, "ones"),
                                ("moving_mean_initializer", moving_mean_initializer, "zeros"),
                                ("moving_variance_initializer", moving_variance_initializer, "ones")):
        if not (isinstance(value, str) and value == default):
            raise Error(f"{what}: {arg}={value!r} is not supported: Tandem starts from {default!r}")
    for arg, value in (("beta_regularizer", beta_regularizer), ("gamma_regularizer", gamma_regularizer),
                       ("beta_constraint", beta_constraint), ("gamma_constraint", gamma_constraint)):
        if value is not None:
            raise Error(f"{what}: {arg} is not supported by Tandem")
    return _base(_tandem.BatchNormalization(float(momentum), float(epsilon), bool(synchronized), name or "",
                                            _shape(input_shape, None, what)), what, trainable, dtype, dynamic,
                 autocast, activity_regularizer)


def Activation(activation, name=None, input_shape=None, trainable=True, dtype=None, dynamic=False, autocast=True,
               activity_regularizer=None):
    """Applies an activation function to its input."""
    return _base(_tandem.Activation(_activation(activation, "Activation") or "linear", name or "",
                                    _shape(input_shape, None, "Activation")), "Activation", trainable, dtype, dynamic,
                 autocast, activity_regularizer)


def ReLU(max_value=None, negative_slope=0.0, threshold=0.0, name=None, input_shape=None, trainable=True, dtype=None,
         dynamic=False, autocast=True, activity_regularizer=None):
    """max(x, 0), as Keras' ReLU layer with its defaults (a cap, a slope or a threshold is refused)."""
    for arg, value, default in (("max_value", max_value, None), ("negative_slope", negative_slope, 0.0),
                                ("threshold", threshold, 0.0)):
        if value != default:
            raise Error(f"ReLU: {arg}={value!r} is not supported: Tandem's ReLU is max(x, 0)")
    return _base(_tandem.ReLU(name or "", _shape(input_shape, None, "ReLU")), "ReLU", trainable, dtype, dynamic,
                 autocast, activity_regularizer)


def GlobalAveragePooling2D(data_format=None, keepdims=False, name=None, input_shape=None, trainable=True, dtype=None,
                           dynamic=False, autocast=True, activity_regularizer=None):
    """Each channel's mean over height and width: (batch, channels), or (batch, 1, 1, channels) with keepdims."""
    _channels_last(data_format, "GlobalAveragePooling2D")
    if not isinstance(keepdims, bool):
        raise Error(f"GlobalAveragePooling2D: keepdims must be True or False, got {keepdims!r}")
    return _base(_tandem.GlobalAveragePooling2D(keepdims, name or "",
                                                _shape(input_shape, None, "GlobalAveragePooling2D")),
                 "GlobalAveragePooling2D", trainable, dtype, dynamic, autocast, activity_regularizer)


def ZeroPadding2D(padding=(1, 1), data_format=None, name=None, input_shape=None, trainable=True, dtype=None,
                  dynamic=False, autocast=True, activity_regularizer=None):
    """Rows of zeros above and below each image and columns left and right: ``padding`` an int, (rows,
    columns), or ((top, bottom), (left, right))."""
    what = "ZeroPadding2D"
    _channels_last(data_format, what)
    try:
        if isinstance(padding, int):
            sides = (padding,) * 4
        elif all(isinstance(p, int) for p in padding):
            rows, cols = _pair(padding, what, "padding")
            sides = (rows, rows, cols, cols)
        else:
            (top, bottom), (left, right) = padding
            sides = (int(top), int(bottom), int(left), int(right))
    except (TypeError, ValueError):
        raise Error(f"{what}: padding must be an int, (rows, columns) or ((top, bottom), (left, right)), "
                    f"got {padding!r}") from None
    return _base(_tandem.ZeroPadding2D(list(sides), name or "", _shape(input_shape, None, what)), what, trainable,
                 dtype, dynamic, autocast, activity_regularizer)


def _merge(make, what, name, trainable, dtype, dynamic, autocast, activity_regularizer):
    return _base(make(name or ""), what, trainable, dtype, dynamic, autocast, activity_regularizer)


def Add(name=None, trainable=True, dtype=None, dynamic=False, autocast=True, activity_regularizer=None):
    """The sum of its inputs (a list of tensors of one shape)."""
    return _merge(_tandem.Add, "Add", name, trainable, dtype, dynamic, autocast, activity_regularizer)


def Subtract(name=None, trainable=True, dtype=None, dynamic=False, autocast=True, activity_regularizer=None):
    """inputs[0] - inputs[1] (two tensors of one shape)."""
    return _merge(_tandem.Subtract, "Subtract", name, trainable, dtype, dynamic, autocast, activity_regularizer)


def Multiply(name=None, trainable=True, dtype=None, dynamic=False, autocast=True, activity_regularizer=None):
    """The elementwise product of its inputs (a list of tensors of one shape)."""
    return _merge(_tandem.Multiply, "Multiply", name, trainable, dtype, dynamic, autocast, activity_regularizer)


def Concatenate(axis=-1, name=None, trainable=True, dtype=None, dynamic=False, autocast=True,
                activity_regularizer=None):
    """Its inputs side by side along ``axis`` (counted with the batch axis, -1 the last)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise Error(f"Concatenate: axis must be an int, got {axis!r}")
    return _merge(lambda n: _tandem.Concatenate(axis, n), "Concatenate", name, trainable, dtype, dynamic, autocast,
                  activity_regularizer)


def add(inputs, name=None):
    """``Add()(inputs)``, Keras' functional form."""
    return Add(name=name)(inputs)


def subtract(inputs, name=None):
    """``Subtract()(inputs)``, Keras' functional form."""
    return Subtract(name=name)(inputs)


def multiply(inputs, name=None):
    """``Multiply()(inputs)``, Keras' functional form."""
    return Multiply(name=name)(inputs)


def concatenate(inputs, axis=-1, name=None):
    """``Concatenate(axis)(inputs)``, Keras' functional form."""
    return Concatenate(axis=axis, name=name)(inputs)


class InputLayer:
    """The per-sample shape of a model's input (``keras.Input(shape=(784,))``). ``batch_size`` is
    a hint (Tandem's models take any batch); ``batch_shape`` is the shape with its batch axis;
    what makes other inputs (sparse, ragged, a given tensor or spec, another dtype, optional) is
    refused by name."""

    def __init__(self, input_shape=None, shape=None, batch_size=None, dtype=None, input_tensor=None, sparse=None,
                 name=None, ragged=None, type_spec=None, batch_shape=None, optional=False):
        _input_refusals(dtype, sparse, ragged, type_spec, optional, ("input_tensor", input_tensor))
        if batch_shape is not None:
            if shape is not None or input_shape is not None:
                raise Error("Input: give shape or batch_shape, not both")
            shape = tuple(batch_shape)[1:]
        self.shape = tuple(_shape(shape if shape is not None else input_shape, None, "Input") or ())
        if not self.shape:
            raise Error("Input: shape is required, e.g. Input(shape=(784,))")
        self.name = name

    def __repr__(self):
        return f"Input(shape={self.shape})"


def Input(shape=None, batch_size=None, name=None, dtype=None, sparse=None, tensor=None, ragged=None, type_spec=None,
          batch_shape=None, optional=False):
    """A model's input, as keras.Input: a symbolic tensor of per-sample ``shape`` that layers are
    called on (``keras.Model(inputs, outputs)``), or the first entry of a Sequential
    (``Sequential([Input((784,)), Dense(10)])``)."""
    _input_refusals(dtype, sparse, ragged, type_spec, optional, ("tensor", tensor))
    layer = InputLayer(shape=shape, batch_size=batch_size, name=name, batch_shape=batch_shape)
    if name is not None and not isinstance(name, str):
        raise Error(f"Input: name must be a string, got {name!r}")
    return _tandem.Input(list(layer.shape), name or "")


def _input_refusals(dtype, sparse, ragged, type_spec, optional, given):
    if dtype not in (None, "float32") and getattr(dtype, "name", None) != "float32":
        raise Error(f"Input: dtype={dtype!r} is not supported: Tandem's models take float32 inputs (others are "
                    "converted by fit)")
    for arg, value in (("sparse", sparse), ("ragged", ragged), ("optional", optional)):
        if value:
            raise Error(f"Input: {arg}=True is not supported: Tandem's inputs are dense arrays")
    for arg, value in (("type_spec", type_spec), given):
        if value is not None:
            raise Error(f"Input: {arg} is not supported: Tandem's input is given by its shape")


def _base(layer, what, trainable, dtype, dynamic, autocast, activity_regularizer=None, kernel_regularizer=None,
          bias_regularizer=None):
    """Keras' base-layer arguments: ``dtype`` (a policy name, "float32" or "mixed_bfloat16", or a
    Policy), ``trainable`` (False: the layer is frozen), the regularizers (``activity_regularizer``
    every layer takes); ``dynamic=True`` and ``autocast=False`` are refused by name."""
    if dynamic is not False:
        raise Error(f"{what}: dynamic={dynamic!r} is not supported: Tandem's layers run through the engine")
    if autocast is not True:
        raise Error(f"{what}: autocast={autocast!r} is not supported: a mixed_bfloat16 layer always computes its "
                    "products in bfloat16")
    if dtype is not None:
        layer.set_dtype_policy(getattr(dtype, "name", dtype))
    if not isinstance(trainable, bool):
        raise Error(f"{what}: trainable must be True or False, got {trainable!r}")
    layer.trainable = trainable
    if kernel_regularizer is not None or bias_regularizer is not None or activity_regularizer is not None:
        layer.set_regularizers(*_regularizers._pairs(what, kernel_regularizer, bias_regularizer,
                                                     activity_regularizer))
    return layer


def _channels_last(data_format, what):
    if data_format not in (None, "channels_last"):
        raise Error(f"{what}: data_format={data_format!r} is not supported: Tandem's tensors are channels_last")


def _no_constraints(what, kernel_constraint, bias_constraint):
    for name, value in (("kernel_constraint", kernel_constraint), ("bias_constraint", bias_constraint)):
        if value is not None:
            raise Error(f"{what}: {name} is not supported (Tandem projects no weights after an update)")
