#!/usr/bin/python3
"""ResNet-20 (He et al. 2016, the CIFAR network) in Keras' functional API, trained with Tandem.

Three stages of three basic blocks (16, 32 and 64 filters; the second and third stages halve the
image at their first block, with a strided 1×1 convolution on the shortcut), global average
pooling and 10 logits: 0.27 M parameters, the network `tandem fit --model resnet20` trains.

Usage: PYTHONPATH=build/python /usr/bin/python3 examples/resnet20.py [epochs] [replicas]
  on CIFAR-10 where its files are (keras.datasets.cifar10), else on Fashion-MNIST padded to
  32×32 with the grey channel repeated; with replicas > 1, under MirroredStrategy.
"""
import sys

import numpy as np

import tandem as tf


def resnet20(seed=1):
    layers = tf.keras.layers

    def conv(filters, size, stride):
        return layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False,
                             kernel_initializer="he_normal")

    x = inputs = tf.keras.Input((32, 32, 3))
    x = layers.ReLU()(layers.BatchNormalization()(conv(16, 3, 1)(x)))
    for filters in (16, 32, 64):
        for block in range(3):
            stride = 2 if block == 0 and filters != 16 else 1
            y = layers.ReLU()(layers.BatchNormalization()(conv(filters, 3, stride)(x)))
            y = layers.BatchNormalization()(conv(filters, 3, 1)(y))
            shortcut = x if stride == 1 else layers.BatchNormalization()(conv(filters, 1, stride)(x))
            x = layers.ReLU()(layers.add([y, shortcut]))
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    return tf.keras.Model(inputs, outputs, name="resnet20", seed=seed)


def images():
    """CIFAR-10 scaled to [0, 1], else Fashion-MNIST padded to 32×32, three channels."""
    try:
        (x, y), (xt, yt) = tf.keras.datasets.cifar10.load_data()
        return x / np.float32(255), y.ravel(), xt / np.float32(255), yt.ravel()
    except tf.FileNotFoundError:
        (x, y), (xt, yt) = tf.keras.datasets.fashion_mnist.load_data()

        def pad(a):
            a = np.pad(a.astype(np.float32) / 255, ((0, 0), (2, 2), (2, 2)))
            return np.repeat(a[..., None], 3, axis=3)

        return pad(x), y, pad(xt), yt


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    replicas = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    x, y, xt, yt = images()
    strategy = tf.distribute.MirroredStrategy(num_replicas=replicas) if replicas > 1 else None
    if strategy is not None:
        with strategy.scope():
            model = resnet20()
    else:
        model = resnet20()
    model.summary()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=128, epochs=epochs, validation_data=(xt, yt))


if __name__ == "__main__":
    main()
