"""The first reference tutorial (000_679b1d54cd8d00ff.txt), its notebook's cells as a user types them
with `import tandem as tf`: a normal model and a MirroredStrategy one, fit, evaluate. Two changes,
both stated: epochs come from the command line (the notebook trains 10), and the test images are
scaled as the training ones (the notebook scales y_train by mistake: `y_train = y_train/255.0`
makes every label 0 and evaluates unscaled test images). Prints one ACCURACY line per model."""
import sys
import time

import tandem as tf

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
print(tf.__version__)

# load mnist dataset
(X_train, y_train), (X_test, y_test) = tf.keras.datasets.mnist.load_data()

# image normalization
X_train = X_train / 255.0
X_test = X_test / 255.0
print(X_train.shape)

# dataset reshaping
X_train = X_train.reshape(-1, 28 * 28)
X_test = X_test.reshape(-1, 28 * 28)

# DEFINING A NON DISTRIBUTED MODEL (NORMAL MODEL)
model_normal = tf.keras.Sequential()
model_normal.add(tf.keras.layers.Dense(units=128, activation='relu', input_shape=(784,)))
model_normal.add(tf.keras.layers.Dropout(rate=0.2))
model_normal.add(tf.keras.layers.Dense(units=10, activation='softmax'))
model_normal.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['sparse_categorical_accuracy'])

# DISTRIBUTED MODEL
distribute = tf.distribute.MirroredStrategy()
with distribute.scope():
    model_dis = tf.keras.Sequential()
    model_dis.add(tf.keras.layers.Dense(units=128, activation='relu', input_shape=(784,)))
    model_dis.add(tf.keras.layers.Dropout(rate=0.2))
    model_dis.add(tf.keras.layers.Dense(units=10, activation='softmax'))
    model_dis.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['sparse_categorical_accuracy'])

# SPEED TEST - NORMAL VS DISTRIBUTED MODEL
start_time = time.time()
model_dis.fit(X_train, y_train, epochs=epochs, batch_size=25)
print("Time taken by distributed training : {}".format(time.time() - start_time))

start_time = time.time()
model_normal.fit(X_train, y_train, epochs=epochs, batch_size=25)
print("Time taken by normal training : {}".format(time.time() - start_time))

for name, model in (("distributed", model_dis), ("normal", model_normal)):
    loss, accuracy = model.evaluate(X_test, y_test)
    print("ACCURACY", name, accuracy)
