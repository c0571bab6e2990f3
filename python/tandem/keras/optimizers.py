"""Keras optimizers (tf.keras.optimizers), with Keras 3's arguments and defaults. Every argument
acts or is refused by name: gradient clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``)
and decoupled ``weight_decay`` act on every optimizer; what Tandem does not do (an exponential
moving average of the weights, loss scaling, gradient accumulation, AMSGrad, centered RMSprop)
is refused."""
from .. import _tandem
from ..errors import Error

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "get"]


def _positive_or_none(value, what, name):
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise Error(f"{name}: {what} must be a positive number or None, got {value!r}")
    return float(value)


def _common(optimizer, name, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
            ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps):
    """The arguments of Keras' base optimizer, each acting or refused by name (``name`` and tf.keras
    2's ``jit_compile`` are hints: the update runs in the engine either way)."""
    if use_ema:
        raise Error(f"{name}: use_ema (an exponential moving average of the weights) is not built in Tandem")
    if ema_momentum != 0.99 or ema_overwrite_frequency is not None:
        raise Error(f"{name}: ema_momentum and ema_overwrite_frequency apply with use_ema, which Tandem does not do")
    if loss_scale_factor is not None:
        raise Error(f"{name}: loss_scale_factor is not built in Tandem (bf16 mixed precision needs no loss scaling)")
    if gradient_accumulation_steps is not None:
        raise Error(f"{name}: gradient_accumulation_steps is not built in Tandem (a larger batch, or a strategy's "
                    "replicas, sums more rows a step)")
    optimizer._set_clipping(_positive_or_none(clipnorm, "clipnorm", name),
                            _positive_or_none(clipvalue, "clipvalue", name),
                            _positive_or_none(global_clipnorm, "global_clipnorm", name))
    if weight_decay is not None:
        if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)) or weight_decay < 0:
            raise Error(f"{name}: weight_decay must be a non-negative number or None, got {weight_decay!r}")
        optimizer.weight_decay = float(weight_decay)
    return optimizer


def SGD(learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None, clipnorm=None, clipvalue=None,
        global_clipnorm=None, use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None,
        loss_scale_factor=None, gradient_accumulation_steps=None, name="SGD", jit_compile=True):
    """Gradient descent, with momentum (and Nesterov's) when asked."""
    return _common(_tandem.SGD(float(learning_rate), float(momentum), bool(nesterov)), "SGD", weight_decay, clipnorm,
                   clipvalue, global_clipnorm, use_ema, ema_momentum, ema_overwrite_frequency, loss_scale_factor,
                   gradient_accumulation_steps)


def _no_amsgrad(amsgrad, name):
    if amsgrad:
        raise Error(f"{name}: amsgrad is not built in Tandem")


def Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, weight_decay=None, clipnorm=None,
         clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None,
         loss_scale_factor=None, gradient_accumulation_steps=None, name="adam", jit_compile=True):
    """Adam (Kingma and Ba), as Keras defines it."""
    _no_amsgrad(amsgrad, "Adam")
    return _common(_tandem.Adam(float(learning_rate), float(beta_1), float(beta_2), float(epsilon)), "Adam",
                   weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                   ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps)


def AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
          clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99,
          ema_overwrite_frequency=None, loss_scale_factor=None, gradient_accumulation_steps=None, name="adamw",
          jit_compile=True):
    """Adam with decoupled weight decay (Loshchilov and Hutter): each weight times (1 - lr · weight_decay)
    before Adam's step, as Keras 3 and torch.optim.AdamW."""
    _no_amsgrad(amsgrad, "AdamW")
    if weight_decay is None:
        raise Error("AdamW: weight_decay must be a non-negative number, got None")
    return _common(_tandem.AdamW(float(learning_rate), 0.0, float(beta_1), float(beta_2), float(epsilon)), "AdamW",
                   weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                   ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps)


def RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, weight_decay=None,
            clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99,
            ema_overwrite_frequency=None, loss_scale_factor=None, gradient_accumulation_steps=None, name="rmsprop",
            jit_compile=True):
    """RMSprop, as Keras defines it."""
    if centered:
        raise Error("RMSprop: centered is not built in Tandem")
    return _common(_tandem.RMSprop(float(learning_rate), float(rho), float(momentum), float(epsilon)), "RMSprop",
                   weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                   ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps)


def Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, weight_decay=None, clipnorm=None,
            clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None,
            loss_scale_factor=None, gradient_accumulation_steps=None, name="adagrad", jit_compile=True):
    """Adagrad, as Keras defines it."""
    return _common(_tandem.Adagrad(float(learning_rate), float(initial_accumulator_value), float(epsilon)),
                   "Adagrad", weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                   ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps)


def get(identifier):
    """An optimizer from its name ('adam') or the optimizer itself."""
    if isinstance(identifier, str):
        makers = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad}
        if identifier.lower() not in makers:
            raise Error(f"optimizers.get: unknown optimizer {identifier!r}; expected one of {', '.join(makers)}")
        return makers[identifier.lower()]()
    return identifier


def _apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False):
    """Applies each gradient to its variable (a custom loop's step): under a strategy's run, the
    gradients are summed over the replicas first, as fit does (``skip_gradients_aggregation=True``
    is refused; ``name`` is a hint)."""
    if skip_gradients_aggregation:
        raise Error("apply_gradients: skip_gradients_aggregation=True is not supported: under a strategy's run "
                    "Tandem sums the replicas' gradients before the update")
    pairs = list(grads_and_vars)
    self._apply([g for g, _ in pairs], [v for _, v in pairs])


_tandem.Optimizer.apply_gradients = _apply_gradients
