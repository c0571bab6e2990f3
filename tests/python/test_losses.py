"""Keras' loss arguments act or are refused: label smoothing gives Keras' formula (hand-computed),
in a loss called directly and in fit; a reduction fit cannot honour, ignore_class, another axis,
and an unknown keyword are refused by name."""
import math

import numpy as np
import pytest


def test_label_smoothing_is_kerass_formula(tf):
    losses = tf.keras.losses
    p = np.array([[0.2, 0.7, 0.1], [0.5, 0.25, 0.25]], dtype=np.float32)
    y = np.array([[0, 1, 0], [1, 0, 0]], dtype=np.float32)
    # y·(1 - 0.3) + 0.3 / 3: (0.1, 0.8, 0.1) and (0.8, 0.1, 0.1).
    want = [-(0.1 * math.log(0.2) + 0.8 * math.log(0.7) + 0.1 * math.log(0.1)),
            -(0.8 * math.log(0.5) + 0.1 * math.log(0.25) + 0.1 * math.log(0.25))]
    smoothed = losses.CategoricalCrossentropy(label_smoothing=0.3, reduction=losses.Reduction.NONE)
    np.testing.assert_allclose(smoothed(y, p).numpy(), want, rtol=1e-6)
    assert float(losses.CategoricalCrossentropy(label_smoothing=0.3)(y, p)) == pytest.approx(sum(want) / 2, rel=1e-6)
    plain = losses.CategoricalCrossentropy(reduction=losses.Reduction.NONE)
    np.testing.assert_allclose(plain(y, p).numpy(), [-math.log(0.7), -math.log(0.5)], rtol=1e-6)
    # Binary: y·(1 - 0.2) + 0.1: 1 → 0.9, 0 → 0.1.
    pb = np.array([[0.8], [0.3]], dtype=np.float32)
    yb = np.array([[1.0], [0.0]], dtype=np.float32)
    want_b = [-(0.9 * math.log(0.8) + 0.1 * math.log(0.2)), -(0.1 * math.log(0.3) + 0.9 * math.log(0.7))]
    binary = losses.BinaryCrossentropy(label_smoothing=0.2, reduction=losses.Reduction.NONE)
    np.testing.assert_allclose(binary(yb, pb).numpy(), want_b, rtol=1e-6)


def test_label_smoothing_acts_in_fit(tf):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y = tf.keras.utils.to_categorical(np.arange(64) % 3, 3)
    weights = []
    for smoothing in (0.0, 0.4):
        model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax", input_shape=(4,))], seed=3)
        model.compile(optimizer="sgd", loss=tf.keras.losses.CategoricalCrossentropy(label_smoothing=smoothing))
        model.fit(x, y, epochs=2, batch_size=16, verbose=0)
        weights.append(model.get_weights()[0])
    assert not np.allclose(weights[0], weights[1]), "label_smoothing changed nothing in fit"


def test_what_fit_or_tandem_cannot_honour_is_refused_by_name(tf):
    losses = tf.keras.losses
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    with pytest.raises(tf.Error, match="the loss's reduction is 'sum'; fit trains on the batch's mean"):
        model.compile(optimizer="sgd", loss=losses.MeanSquaredError(reduction="sum"))
    with pytest.raises(tf.Error, match="ignore_class is not built"):
        losses.SparseCategoricalCrossentropy(ignore_class=0)
    with pytest.raises(tf.Error, match="axis must be -1"):
        losses.CategoricalCrossentropy(axis=0)
    with pytest.raises(tf.Error, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        losses.BinaryCrossentropy(label_smoothing=1.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'label_smoothing'"):
        losses.SparseCategoricalCrossentropy(label_smoothing=0.1)
    with pytest.raises(tf.Error, match="unknown reduction 'mean'"):
        losses.MeanSquaredError(reduction="mean")


def test_bad_labels_and_features_are_refused_before_any_step_with_their_row(tf):
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))], seed=1)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.get_weights()
    for bad, shown in ((np.nan, "nan"), (np.inf, "inf"), (0.5, "0.5"), (3e9, "3000000000")):
        y = np.zeros(8, np.float64)
        y[3] = bad
        with pytest.raises(tf.Error, match=f"fit: y: label {shown} at row 3 is not a class index"):
            model.fit(x, y, verbose=0)
    wide = x.astype(np.float64)
    wide[5, 2] = 1e300
    with pytest.raises(tf.Error, match=r"fit: x at row 5 is 1e\+300, beyond float32's range"):
        model.fit(wide, np.zeros(8, np.int32), verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)  # no step ran
