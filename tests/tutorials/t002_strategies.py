"""The R tutorial (002_14f4d7ac3042165e.txt) in Python, as a user writes it with `import tandem as tf`:
the strategies it makes (compat.v1's MirroredStrategy, CentralStorageStrategy,
MultiWorkerMirroredStrategy and ParameterServerStrategy; with no cluster given, one worker and a
cluster in this process), the MLP with dropout under each strategy's scope, RMSprop, categorical
cross-entropy on to_categorical labels, validation_split 0.2. Prints one ACCURACY line per strategy
trained."""
import sys

import tandem as tf

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10

strategy = {}
strategy["mirrored"] = tf.compat.v1.distribute.MirroredStrategy()
strategy["central_storage"] = tf.distribute.experimental.CentralStorageStrategy()
strategy["multiworker_mirrored"] = tf.distribute.experimental.MultiWorkerMirroredStrategy()
strategy["parameter_server"] = tf.distribute.experimental.ParameterServerStrategy()

# mnist dataset
(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x_train = x_train.reshape(len(x_train), 784) / 255
x_test = x_test.reshape(len(x_test), 784) / 255
y_train = tf.keras.utils.to_categorical(y_train, 10)
y_test = tf.keras.utils.to_categorical(y_test, 10)

for name in ("central_storage", "mirrored", "multiworker_mirrored", "parameter_server"):
    model = tf.keras.Sequential()
    with strategy[name].scope():
        model.add(tf.keras.layers.Dense(units=256, activation="relu", input_shape=(784,)))
        model.add(tf.keras.layers.Dropout(rate=0.4))
        model.add(tf.keras.layers.Dense(units=128, activation="relu"))
        model.add(tf.keras.layers.Dropout(rate=0.3))
        model.add(tf.keras.layers.Dense(units=10, activation="softmax"))
    model.compile(loss="categorical_crossentropy", optimizer=tf.keras.optimizers.RMSprop(), metrics=["accuracy"])
    history = model.fit(x_train, y_train, epochs=epochs, batch_size=128, validation_split=0.2, verbose=2)
    print("STRATEGY", name, model.distribute_strategy.name)
    print("ACCURACY", name, model.evaluate(x_test, y_test, verbose=0)[1])
