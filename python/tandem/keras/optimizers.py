"""Keras optimizers (tf.keras.optimizers), with Keras' defaults."""
from .. import _tandem

__all__ = ["SGD", "Adam", "RMSprop", "Adagrad", "get"]


def SGD(learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs):
    """Gradient descent, with momentum (and Nesterov's) when asked."""
    return _tandem.SGD(float(learning_rate), float(momentum), bool(nesterov))


def Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, **kwargs):
    """Adam (Kingma and Ba), as Keras defines it."""
    return _tandem.Adam(float(learning_rate), float(beta_1), float(beta_2), float(epsilon))


def RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, **kwargs):
    """RMSprop, as Keras defines it."""
    return _tandem.RMSprop(float(learning_rate), float(rho), float(momentum), float(epsilon))


def Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, **kwargs):
    """Adagrad, as Keras defines it."""
    return _tandem.Adagrad(float(learning_rate), float(initial_accumulator_value), float(epsilon))


def get(identifier):
    """An optimizer from its name ('adam') or the optimizer itself."""
    if isinstance(identifier, str):
        return {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adagrad": Adagrad}[identifier.lower()]()
    return identifier


def _apply_gradients(self, grads_and_vars, **kwargs):
    """Applies each gradient to its variable (a custom loop's step): under a strategy's run, the
    gradients are summed over the replicas first, as fit does."""
    pairs = list(grads_and_vars)
    self._apply([g for g, _ in pairs], [v for _, v in pairs])


_tandem.Optimizer.apply_gradients = _apply_gradients
