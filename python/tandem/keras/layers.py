"""Keras layers (tf.keras.layers), with Keras' names and defaults. Each is the engine's layer."""
from .. import _tandem
from ..errors import Error

__all__ = ["Dense", "Dropout", "Conv2D", "MaxPooling2D", "AveragePooling2D", "Flatten", "BatchNormalization",
           "Activation", "Input", "InputLayer"]


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
          name=None, input_shape=None, input_dim=None, **kwargs):
    """Densely-connected layer: ``activation(dot(x, kernel) + bias)``.

    Args:
        units: positive int, the output size.
        activation: a name ('relu', 'elu', 'tanh', 'sigmoid', 'softmax', ...) or None for linear.
        use_bias: whether the layer adds a bias vector.
        kernel_initializer, bias_initializer: initializer names.
        name: the layer's name (default dense, dense_1, ...).
        input_shape: per-sample input shape of the first layer, e.g. (784,).
    """
    _no_extra(kwargs, "Dense")
    return _policy(_tandem.Dense(int(units), _activation(activation, "Dense"), bool(use_bias),
                                 _initializer(kernel_initializer, "Dense"), _initializer(bias_initializer, "Dense"),
                                 name or "", _shape(input_shape, input_dim, "Dense")), kwargs)


def Dropout(rate, noise_shape=None, seed=None, name=None, input_shape=None, **kwargs):
    """Sets input units to 0 with frequency ``rate`` during training, scaling the rest by 1/(1 - rate).
    With ``seed``, the layer's masks come from that seed alone (by step and row), not the model's."""
    _no_extra(kwargs, "Dropout")
    if noise_shape is not None:
        raise Error("Dropout: noise_shape is not supported (the mask covers every element)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise Error(f"Dropout: seed must be a non-negative int or None, got {seed!r}")
    return _policy(_tandem.Dropout(float(rate), name or "", _shape(input_shape, None, "Dropout"), seed), kwargs)


def Conv2D(filters, kernel_size, strides=(1, 1), padding="valid", activation=None, use_bias=True,
           kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None, input_shape=None, **kwargs):
    """2D convolution over (batch, height, width, channels) inputs (channels last, as Keras)."""
    _no_extra(kwargs, "Conv2D")
    return _policy(_tandem.Conv2D(int(filters), _pair(kernel_size, "Conv2D", "kernel_size"),
                                  _pair(strides, "Conv2D", "strides"), padding, _activation(activation, "Conv2D"),
                                  bool(use_bias), _initializer(kernel_initializer, "Conv2D"),
                                  _initializer(bias_initializer, "Conv2D"), name or "", _shape(input_shape, None, "Conv2D")),
                   kwargs)


def MaxPooling2D(pool_size=(2, 2), strides=None, padding="valid", name=None, input_shape=None, **kwargs):
    """Max pooling over 2D windows (strides default to the pool size)."""
    _no_extra(kwargs, "MaxPooling2D")
    return _policy(_tandem.Pooling2D(True, _pair(pool_size, "MaxPooling2D", "pool_size"),
                                     None if strides is None else _pair(strides, "MaxPooling2D", "strides"), padding,
                                     name or "", _shape(input_shape, None, "MaxPooling2D")), kwargs)


def AveragePooling2D(pool_size=(2, 2), strides=None, padding="valid", name=None, input_shape=None, **kwargs):
    """Average pooling over 2D windows (strides default to the pool size)."""
    _no_extra(kwargs, "AveragePooling2D")
    return _policy(_tandem.Pooling2D(False, _pair(pool_size, "AveragePooling2D", "pool_size"),
                                     None if strides is None else _pair(strides, "AveragePooling2D", "strides"), padding,
                                     name or "", _shape(input_shape, None, "AveragePooling2D")), kwargs)


def Flatten(name=None, input_shape=None, **kwargs):
    """Flattens each sample to one dimension."""
    _no_extra(kwargs, "Flatten")
    return _policy(_tandem.Flatten(name or "", _shape(input_shape, None, "Flatten")), kwargs)


def BatchNormalization(momentum=0.99, epsilon=0.001, synchronized=False, name=None, input_shape=None, **kwargs):
    """Normalizes each feature over the batch (moving statistics for inference)."""
    _no_extra(kwargs, "BatchNormalization")
    return _policy(_tandem.BatchNormalization(float(momentum), float(epsilon), bool(synchronized), name or "",
                                              _shape(input_shape, None, "BatchNormalization")), kwargs)


def Activation(activation, name=None, input_shape=None, **kwargs):
    """Applies an activation function to its input."""
    _no_extra(kwargs, "Activation")
    return _policy(_tandem.Activation(_activation(activation, "Activation") or "linear", name or "",
                                      _shape(input_shape, None, "Activation")), kwargs)


class InputLayer:
    """The per-sample shape of a model's input (``keras.Input(shape=(784,))``)."""

    def __init__(self, shape=None, batch_size=None, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Input")
        self.shape = tuple(_shape(shape if shape is not None else input_shape, None, "Input") or ())
        if not self.shape:
            raise Error("Input: shape is required, e.g. Input(shape=(784,))")
        self.name = name

    def __repr__(self):
        return f"Input(shape={self.shape})"


def Input(shape=None, batch_size=None, name=None, **kwargs):
    """The per-sample shape of a model's input, as keras.Input: ``Sequential([Input((784,)), Dense(10)])``."""
    return InputLayer(shape=shape, batch_size=batch_size, name=name, **kwargs)


def _policy(layer, kwargs):
    """Keras' per-layer ``dtype`` (a policy name, "float32" or "mixed_bfloat16", or a Policy) and
    ``trainable`` (False: the layer is frozen)."""
    dtype = kwargs.get("dtype")
    if dtype is not None:
        layer.set_dtype_policy(getattr(dtype, "name", dtype))
    trainable = kwargs.get("trainable", True)
    if not isinstance(trainable, bool):
        raise Error(f"{layer.type}: trainable must be True or False, got {trainable!r}")
    layer.trainable = trainable
    return layer


def _no_extra(kwargs, what):
    unknown = sorted(k for k in kwargs if k not in ("dtype", "trainable"))
    if unknown:
        raise Error(f"{what}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
