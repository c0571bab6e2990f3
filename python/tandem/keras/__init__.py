"""The Keras API (tf.keras) over Tandem's engine."""
from . import layers, optimizers, losses, callbacks, datasets, models, mixed_precision, regularizers, utils
from .models import Model, Sequential, model_from_json, load_model
from .layers import Input

__all__ = ["Model", "Sequential", "Input", "model_from_json", "layers", "optimizers", "losses", "callbacks",
           "datasets", "models", "mixed_precision", "regularizers", "utils"]
