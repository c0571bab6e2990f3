"""Keras' ``trainable``: fine-tuning a frozen base trains only the head (its bits unchanged) under
the default, mirrored and parameter-server strategies; the argument at construction, the attribute
set later, the model's, the summary's counts, and a non-boolean refused."""
import numpy as np
import pytest

from conftest import small_data


def fine_tune(tf, strategy, pretrain):
    x, y = small_data(96, 6, 4)
    scope = strategy.scope() if strategy is not None else None
    if scope:
        scope.__enter__()
    try:
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(6,)),
                                     tf.keras.layers.BatchNormalization(),
                                     tf.keras.layers.Dense(4, activation="softmax")], seed=2)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    finally:
        if scope:
            scope.__exit__(None, None, None)
    if pretrain:
        model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    before = model.get_weights()
    for layer in model.layers[:2]:
        layer.trainable = False
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")  # as Keras asks after a change
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    after = model.get_weights()
    for i, (a, b) in enumerate(zip(before, after)):
        if i < 6:  # the base: Dense's kernel and bias, and batch normalization's four
            np.testing.assert_array_equal(b, a, err_msg=f"weight {i} of the frozen base changed")
        else:
            assert not np.array_equal(b, a), f"weight {i} of the head did not train"
    return model


@pytest.mark.parametrize("make, pretrain", [
    (lambda d: None, True),
    (lambda d: d.MirroredStrategy(num_replicas=2), True),
    # Parameter servers do not train batch normalization's statistics: frozen from the start.
    (lambda d: d.experimental.ParameterServerStrategy(mode="sync", num_workers=2), False),
])
def test_a_frozen_base_keeps_its_bits_while_the_head_trains(tf, make, pretrain):
    fine_tune(tf, make(tf.distribute), pretrain)


def test_trainable_at_construction_on_the_model_and_in_the_summary(tf):
    base = tf.keras.layers.Dense(8, activation="relu", input_shape=(6,), trainable=False)
    assert base.trainable is False
    model = tf.keras.Sequential([base, tf.keras.layers.Dense(4)])
    lines = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "Trainable params: 36" in text and "Non-trainable params: 56" in text, text
    assert len(model.trainable_variables) == 2
    model.trainable = False
    assert model.trainable is False and len(model.trainable_variables) == 0
    model.trainable = True
    assert all(layer.trainable for layer in model.layers) and len(model.trainable_variables) == 4
    with pytest.raises(tf.Error, match="Dense: trainable must be True or False, got 'no'"):
        tf.keras.layers.Dense(3, trainable="no")
    with pytest.raises(tf.Error, match="Sequential.trainable must be True or False"):
        model.trainable = 0
