"""The third reference tutorial (003_5f25bbbc8ee52ba9.txt), a talk on tf.distribute whose code is the
usual one for it, written as a user would with `import tandem as tf`: a tf.data pipeline of
one-hot labels into an MLP, trained inside strategy.scope() and without. Fashion-MNIST stands in
for CIFAR-10, which no Debian package ships. Prints one ACCURACY line per model."""
import sys

import tandem as tf
from tandem import keras

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2

(x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0
y_train = keras.utils.to_categorical(y_train, num_classes=10, dtype="float32")
y_test = keras.utils.to_categorical(y_test, num_classes=10, dtype="float32")


def get_model():
    model = keras.Sequential([
        keras.layers.Flatten(input_shape=(28, 28)),
        keras.layers.Dense(3000, activation="relu"),
        keras.layers.Dense(1000, activation="relu"),
        keras.layers.Dense(10, activation="sigmoid"),
    ])
    model.compile(optimizer="SGD", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
batch_size = 250 * strategy.num_replicas_in_sync

train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size).prefetch(tf.data.AUTOTUNE)
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size).prefetch(tf.data.AUTOTUNE)

with strategy.scope():
    distributed = get_model()
distributed.fit(train, epochs=epochs, verbose=2)
print("ACCURACY mirrored", distributed.evaluate(test, verbose=0)[1])

single = get_model()
single.fit(train, epochs=epochs, verbose=2)
print("ACCURACY single", single.evaluate(test, verbose=0)[1])
