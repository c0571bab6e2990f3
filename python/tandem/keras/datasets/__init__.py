"""Datasets as tf.keras.datasets gives them (numpy arrays), from the files the set-up command fetched."""
from . import mnist, fashion_mnist, cifar10
