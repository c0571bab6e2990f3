"""A custom training loop from Python, as tf.distribute's custom-loop tutorial writes it: the tape,
the model called on a batch, compute_average_loss, apply_gradients, strategy.run and
strategy.reduce. Under MirroredStrategy(2) it trains as the same loop on one device."""
import numpy as np
import pytest

from conftest import small_data


def loop(tf, strategy, steps=12, global_batch=32):
    x, y = small_data(steps * global_batch)

    def build():
        model = tf.keras.Sequential([tf.keras.layers.Dense(24, activation="relu", input_shape=(20,)),
                                     tf.keras.layers.Dropout(0.25), tf.keras.layers.Dense(5)], seed=6)
        optimizer = tf.keras.optimizers.Adam(0.01)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        return model, optimizer, loss_object

    if strategy is None:
        model, optimizer, loss_object = build()
    else:
        with strategy.scope():
            model, optimizer, loss_object = build()
    model.build((20,))

    @tf.function  # the tutorial's decorator: Tandem runs the step eagerly, as written
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            predictions = model(inputs, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    losses = []
    for step in range(steps):
        xb, yb = x[step * global_batch:(step + 1) * global_batch], y[step * global_batch:(step + 1) * global_batch]
        if strategy is None:
            losses.append(float(train_step(xb, yb)))
        else:
            per_replica = strategy.run(train_step, args=(xb, yb))
            assert len(strategy.experimental_local_results(per_replica)) == strategy.num_replicas_in_sync
            losses.append(float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)))
    return model, losses


def test_custom_loop_under_mirrored_trains_as_one_device(tf):
    alone, alone_losses = loop(tf, None)
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    model, losses = loop(tf, strategy)
    assert losses == pytest.approx(alone_losses, rel=1e-5)
    assert alone_losses[-1] < alone_losses[0]
    for a, b in zip(alone.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_tape_misuse_is_named(tf):
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    x = np.ones((2, 4), np.float32)
    tape = tf.GradientTape()
    with pytest.raises(tf.Error, match="recorded nothing"):
        tape.gradient(model(x), model.trainable_variables)
    with tf.GradientTape() as tape:
        out = tf._tandem.reduce_mean(model(x, training=True))
    grads = tape.gradient(out, model.trainable_variables)
    assert [g.shape for g in grads] == [(4, 3), (3,)]
    with pytest.raises(tf.Error, match="gives its gradients once"):
        tape.gradient(out, model.trainable_variables)
    with pytest.raises(tf.Error, match="shape"):  # each gradient paired with the other's variable
        tf.keras.optimizers.SGD().apply_gradients(zip(reversed(grads), model.trainable_variables))


def test_tape_starts_backward_from_output_gradients(tf):
    """tf.GradientTape.gradient's output_gradients: the gradients of sum(target * seed)."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))], seed=2)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    seed = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], np.float32)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
    kernel, bias = tape.gradient(out, model.trainable_variables, output_gradients=seed)
    np.testing.assert_allclose(kernel.numpy(), x.T @ seed, rtol=1e-6)
    np.testing.assert_allclose(bias.numpy(), seed.sum(axis=0), rtol=1e-6)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
    with pytest.raises(tf.Error, match="the output gradient must be float32 of the target's shape"):
        tape.gradient(out, model.trainable_variables, output_gradients=seed.T.copy())


def test_run_gives_each_model_parallel_device_the_whole_batch(tf):
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    strategy = tf.distribute.ModelParallelStrategy(2)
    per_replica = strategy.run(lambda inputs: inputs, args=(x,))
    assert [tuple(v.shape) for v in per_replica.values] == [(8, 4), (8, 4)]
    assert [float(v.numpy().sum()) for v in per_replica.values] == [496.0, 496.0]
    mirrored = tf.distribute.MirroredStrategy(num_replicas=2).run(lambda inputs: inputs, args=(x,))
    assert [float(v.numpy().sum()) for v in mirrored.values] == [120.0, 376.0]  # mirrored replicas: halves


def test_custom_loop_under_model_parallelism_trains_as_one_device(tf):
    alone, alone_losses = loop(tf, None, steps=6)
    model, losses = loop(tf, tf.distribute.ModelParallelStrategy(2), steps=6)
    # Each device computes the whole batch's loss: the sum over the two is twice one device's.
    assert [v / 2 for v in losses] == pytest.approx(alone_losses, rel=1e-5)
    for a, b in zip(alone.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
