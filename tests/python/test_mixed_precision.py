"""Mixed precision from Python, as tf.keras.mixed_precision: the policy's names, layers taking the
global policy when made, and an MLP trained under mixed_bfloat16 within a point of float32."""
import numpy as np
import pytest


@pytest.fixture
def policy(tf):
    yield tf.keras.mixed_precision
    tf.keras.mixed_precision.set_global_policy("float32")


def blobs(n, seed):
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 4).astype(np.int32)
    x = rng.normal(0, 1, size=(n, 32)).astype(np.float32)
    x[np.arange(n), y] += 2.5
    x[np.arange(n), y + 4] += 2.5
    return x, y


def train(tf, seed=3):
    x, y = blobs(1024, 1)
    test_x, test_y = blobs(512, 2)
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(128, activation="relu", input_shape=(32,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(4, activation="softmax"),
    ])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=4, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(test_x, test_y, verbose=0)
    return model, accuracy


def test_policy_names_and_layers_taking_the_global_policy(tf, policy):
    assert policy.global_policy().name == "float32"
    before = tf.keras.layers.Dense(4)
    policy.set_global_policy("mixed_bfloat16")
    assert policy.global_policy() == policy.Policy("mixed_bfloat16")
    assert policy.global_policy().compute_dtype == "bfloat16"
    assert policy.global_policy().variable_dtype == "float32"
    assert tf.keras.layers.Dense(4).dtype_policy == "mixed_bfloat16"
    assert before.dtype_policy == "float32"
    policy.set_global_policy(policy.Policy("float32"))
    assert tf.keras.layers.Dense(4).dtype_policy == "float32"
    with pytest.raises(tf.Error, match="'mixed_float16' is not supported: float16 products are a GPU's"):
        policy.set_global_policy("mixed_float16")
    with pytest.raises(tf.Error, match="unknown dtype policy 'half'"):
        policy.Policy("half")
    # Keras' per-layer dtype, by name or Policy
    assert tf.keras.layers.Dense(4, dtype="mixed_bfloat16").dtype_policy == "mixed_bfloat16"
    assert tf.keras.layers.Conv2D(4, 3, dtype=policy.Policy("mixed_bfloat16")).dtype_policy == "mixed_bfloat16"
    with pytest.raises(tf.Error, match="unknown dtype policy 'float64'"):
        tf.keras.layers.Dense(4, dtype="float64")


def test_mixed_bfloat16_mlp_trains_within_a_point_of_float32(tf, policy):
    plain, plain_accuracy = train(tf)
    again, _ = train(tf)
    policy.set_global_policy("mixed_bfloat16")
    mixed, mixed_accuracy = train(tf)
    assert plain_accuracy > 0.9
    assert abs(mixed_accuracy - plain_accuracy) <= 0.01
    assert all(w.dtype == np.float32 for w in mixed.get_weights()), "variables stay float32"
    # The policy acted: float32 training gives the same bits twice; the mixed run other ones where
    # the CPU multiplies in bf16, float32's own where it does not (the engine keeps float32 there).
    from tandem import _tandem
    assert all(np.array_equal(a, b) for a, b in zip(plain.get_weights(), again.get_weights()))
    same = all(np.array_equal(a, b) for a, b in zip(plain.get_weights(), mixed.get_weights()))
    if _tandem.cpu_has_bf16_products():
        assert not same, "mixed_bfloat16 trained to float32's bits on a CPU with bf16 products: the policy did not act"
    else:
        assert same, "mixed_bfloat16 changed the bits on a CPU without bf16 products, which should keep float32"
