"""keras.regularizers and sample weights from Python, against hand-computed values: the penalties
join fit's loss and its gradient, evaluate's loss, and model.losses for a custom loop; sample_weight,
class_weight, validation_data's weights and a dataset's third component weigh each row's loss as
Keras does (Σ weight·loss ÷ rows); bad ones are refused by name."""
import numpy as np
import pytest

import tandem


def ones_model(tf, **dense):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones",
                                                       input_shape=(2,), **dense)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    return model


X = np.array([[1, 2], [0, 1]], np.float32)
Y = np.zeros((2, 1), np.float32)


def test_penalties_train_and_are_reported(tf):
    # Predictions 3 and 1: mse 9 and 1 (mean 5); activity l2 0.5: 4.5 and 0.5 (mean 2.5); kernel l2
    # 0.25 · 2 = 0.5. Gradient (3, 7) + (1.5, 3.5) + (0.5, 0.5) = (5, 11): w' = (0.5, -0.1).
    model = ones_model(tf, kernel_regularizer=tf.keras.regularizers.l2(0.25),
                       activity_regularizer=tf.keras.regularizers.L2(0.5))
    history = model.fit(X, Y, batch_size=2, epochs=1, verbose=0)
    assert history.history["loss"][0] == pytest.approx(8.0, abs=1e-5)
    np.testing.assert_allclose(model.get_weights()[0].ravel(), [0.5, -0.1], atol=1e-6)
    assert model.evaluate(X, Y, verbose=0) == pytest.approx(0.14, abs=1e-6)


def test_a_custom_loop_adds_model_losses_itself(tf):
    model = ones_model(tf, kernel_regularizer="l1_l2", activity_regularizer=tf.keras.regularizers.l1(0.1))
    with tf.GradientTape() as tape:
        model(X, training=True)
        losses = model.losses
    # kernel ones: 0.01·2 + 0.01·2; activity l1 0.1: (3 + 1) ÷ 2 rows · 0.1.
    assert [float(v) for v in losses] == pytest.approx([0.04, 0.2], abs=1e-6)
    grads = tape.gradient(losses[0], model.trainable_variables)
    np.testing.assert_allclose(grads[0].numpy().ravel(), [0.03, 0.03], atol=1e-7)  # 0.01·sign + 2·0.01·w
    model.optimizer.apply_gradients(zip([np.zeros((2, 1), np.float32)], model.trainable_variables))
    np.testing.assert_array_equal(model.get_weights()[0].ravel(), [1, 1])  # apply_gradients adds no penalty


def test_regularizers_module_and_model_files(tf):
    r = tf.keras.regularizers
    assert r.get("l2").get_config() == {"l2": 0.01}
    assert r.l1_l2(0.1, 0.2).get_config() == pytest.approx({"l1": 0.1, "l2": 0.2})
    assert r.get({"class_name": "L1", "config": {"l1": 0.5}}).l1 == 0.5
    assert r.L1L2(l2=0.3)(np.array([1.0, -2.0])) == pytest.approx(1.5)
    model = ones_model(tf, kernel_regularizer=r.l1(0.25), activity_regularizer=r.l2(0.125))
    again = tf.keras.models.model_from_json(model.to_json())
    assert again.layers[0].regularizers["kernel"] == (0.25, 0.0)
    assert again.layers[0].regularizers["activity"] == (0.0, 0.125)
    with pytest.raises(tandem.Error, match="kernel_regularizer: .*custom function or class is not supported"):
        tf.keras.layers.Dense(2, kernel_regularizer=lambda w: 0.0)
    with pytest.raises(tandem.Error, match="L2: l2 must be a finite, non-negative number, got -1"):
        r.l2(-1)
    with pytest.raises(tandem.Error, match="kernel_constraint is not supported"):
        tf.keras.layers.Dense(2, kernel_constraint="non_neg")
    with pytest.raises(tandem.Error, match="bias_regularizer is given, but the layer has no bias"):
        m = tf.keras.Sequential([tf.keras.layers.Dense(2, use_bias=False, bias_regularizer="l2", input_shape=(3,))])
        m.build()


def test_sample_weight_weighs_each_rows_loss(tf):
    # Weights 2 and 0.5: (18 + 0.5) ÷ 2 = 9.25; gradient (6, 12.5): w' = (0.4, -0.25).
    w = np.array([2, 0.5], np.float32)
    model = ones_model(tf)
    history = model.fit(X, Y, batch_size=2, verbose=0, sample_weight=w, validation_data=(X, Y, w))
    assert history.history["loss"][0] == pytest.approx(9.25, abs=1e-5)
    np.testing.assert_allclose(model.get_weights()[0].ravel(), [0.4, -0.25], atol=1e-6)
    assert history.history["val_loss"][0] == pytest.approx(0.025625, abs=1e-7)
    assert model.evaluate(X, Y, sample_weight=w, verbose=0) == pytest.approx(0.025625, abs=1e-7)
    # The same rows as a dataset of (x, y, sample_weight).
    model = ones_model(tf)
    ds = tf.data.Dataset.from_tensor_slices((X, Y, w)).batch(2)
    assert model.fit(ds, verbose=0).history["loss"][0] == pytest.approx(9.25, abs=1e-5)


def test_class_weight_is_each_rows_class_weight(tf):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = (np.arange(64) % 3).astype(np.int32)

    def run(**weights):
        model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax", input_shape=(5,))], seed=1)
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False, **weights)
        return model.get_weights()

    by_class = run(class_weight={0: 2.0, 1: 0.5, 2: 1.0})
    by_row = run(sample_weight=np.array([2.0, 0.5, 1.0], np.float32)[y])
    for a, b in zip(by_class, by_row):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(by_class[0], run()[0])
    with pytest.raises(tandem.Error, match="class_weight has no weight for class 2 \\(row 2\\)"):
        run(class_weight={0: 1.0, 1: 1.0})
    with pytest.raises(tandem.Error, match=r"sample_weight has shape \(3,\), expected one weight per sample"):
        run(sample_weight=np.ones(3, np.float32))


def test_a_custom_loop_under_mirrored_adds_the_scaled_penalties_as_one_device(tf):
    """Each replica adds tf.nn.scale_regularization_loss(sum(model.losses)) to its share of the
    batch's loss; the replicas' gradients summed are one device's with the penalties added once."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = (np.arange(64) % 4).astype(np.int32)

    def loop(strategy):
        def build():
            model = tf.keras.Sequential([
                tf.keras.layers.Dense(8, activation="relu", input_shape=(6,), kernel_regularizer="l2",
                                      activity_regularizer=tf.keras.regularizers.l1(0.01)),
                tf.keras.layers.Dense(4, kernel_regularizer=tf.keras.regularizers.l1_l2(0.01, 0.02))], seed=3)
            return model, tf.keras.optimizers.SGD(0.1)

        if strategy is None:
            model, optimizer = build()
        else:
            with strategy.scope():
                model, optimizer = build()
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                    reduction=tf.keras.losses.Reduction.NONE)

        def step(xb, yb):
            with tf.GradientTape() as tape:
                per_sample = loss_object(yb, model(xb, training=True))
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=16)
                loss = loss + tf.nn.scale_regularization_loss(sum(model.losses))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        for i in range(4):
            xb, yb = x[16 * i:16 * (i + 1)], y[16 * i:16 * (i + 1)]
            if strategy is None:
                step(xb, yb)
            else:
                strategy.run(step, args=(xb, yb))
        return model.get_weights()

    assert tf.nn.scale_regularization_loss(2.0) == 2.0  # one replica outside a strategy
    alone = loop(None)
    mirrored = loop(tf.distribute.MirroredStrategy(num_replicas=2))
    for a, b in zip(alone, mirrored):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
