"""A tandem tensor in a custom loop takes a TensorFlow tensor's operators: + - * / @ and unary minus
on the tape (their gradients checked against the hand-derived ones), comparisons, indexing, len()
and numpy conversion on the values; what is not built is refused by name."""
import numpy as np
import pytest


def model_and_data(tf):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    t = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))], seed=1)
    model.build((4,))
    return model, x, t


def test_arithmetic_is_recorded_and_differentiated(tf):
    model, x, t = model_and_data(tf)
    w, b = model.get_weights()
    with tf.GradientTape() as tape:
        y = model(x)
        # ((2·y - t) · 0.5 + 1 - 1 - y·t) / 3, summed: written with every operator
        e = (2.0 * y - t) * 0.5 + 1.0 - 1 - y * t
        loss = tf.reduce_sum(-(-e) / 3.0)
    grads = tape.gradient(loss, model.trainable_variables)
    # d/dy of Σ (y - t/2 - y·t) / 3 = (1 - t) / 3
    dy = (1.0 - t) / 3.0
    np.testing.assert_allclose(grads[0].numpy(), x.T @ dy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), dy.sum(0), rtol=1e-5, atol=1e-6)
    assert float(loss) == pytest.approx(float(((x @ w + b) - t / 2 - (x @ w + b) * t).sum() / 3), rel=1e-5)


def test_matmul_numbers_on_either_side_and_the_values(tf):
    model, x, t = model_and_data(tf)
    y = model(x)
    values = np.asarray(y)
    np.testing.assert_allclose((1.0 - y).numpy(), 1.0 - values, rtol=1e-6)
    np.testing.assert_allclose((3 * y).numpy(), 3 * values, rtol=1e-6)
    np.testing.assert_allclose((y + np.ones(3, np.float32)).numpy(), values + 1, rtol=1e-6)  # the last axis
    np.testing.assert_allclose((y @ np.eye(3, dtype=np.float32)).numpy(), values, rtol=1e-6)
    np.testing.assert_allclose((np.ones((2, 6), np.float32) @ y).numpy(), values.sum(0, keepdims=True).repeat(2, 0),
                               rtol=1e-5)
    np.testing.assert_array_equal(y > 0, values > 0)
    np.testing.assert_array_equal(y == y, np.ones_like(values, bool))
    assert len(y) == 6 and y[2, 1] == values[2, 1]
    np.testing.assert_array_equal(y[1:3], values[1:3])


def test_strategy_run_takes_the_operators(tf):
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    per_replica = strategy.run(lambda a: a * 2.0 + 1.0, args=(x,))
    parts = [np.asarray(p) for p in strategy.experimental_local_results(per_replica)]
    np.testing.assert_array_equal(np.concatenate(parts), x * 2 + 1)


def test_what_is_not_built_is_refused_by_name(tf):
    model, x, _ = model_and_data(tf)
    y = model(x)
    with pytest.raises(tf.Error, match="division by a tensor is not built"):
        y / y
    with pytest.raises(tf.Error, match="division by a tensor is not built"):
        1.0 / y
    with pytest.raises(tf.Error, match="division by zero"):
        y / 0
    with pytest.raises(tf.Error, match="a bool is not a number here"):
        y + True
    with pytest.raises(tf.Error, match="expected a number, a numpy array or a tandem Tensor"):
        y + "1"
    with pytest.raises(tf.Error, match=r"shapes \(6, 3\) and \(2,\)"):
        y + np.ones(2, np.float32)
