"""The opening of TensorFlow 2's parameter-server training guide, as a user writes it with
`import tandem as tf`, run on every task of the cluster that `tandem launch --ps 1 --workers 2`
starts (each with its TF_CONFIG): the cluster resolver, the strategy made from it, a model built
and compiled in its scope, model.fit on every task, and the chief evaluating. Tandem's servers and
workers serve inside fit, so no task needs the guide's server.join(). The chief prints ACCURACY."""
import sys

import tandem as tf

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
print(f"task {cluster_resolver.task_type} {cluster_resolver.task_id}", flush=True)  # one write: tasks share a pipe
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)

(x, y), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x, x_test = x.reshape(-1, 784) / 255.0, x_test.reshape(-1, 784) / 255.0

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

model.fit(x, y, epochs=epochs, batch_size=50, verbose=2)

if cluster_resolver.task_type == "chief":
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"ACCURACY ps {accuracy}", flush=True)
