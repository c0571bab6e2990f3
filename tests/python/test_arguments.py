"""Keras' arguments of compile, fit, evaluate, predict, the weight files and the callbacks act, are
accepted as hints that change no result, or are refused by name; an unknown keyword is a TypeError."""
import json

import numpy as np
import pytest

from conftest import small_data


@pytest.fixture
def model(tf):
    m = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(20,))], seed=1)
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_compile_hints_are_accepted_and_the_rest_refused(tf, model):
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss, run_eagerly=True, steps_per_execution=4, jit_compile=False,
                  auto_scale_loss=False)
    for kwargs, message in (({"loss_weights": [1.0]}, "loss_weights weigh the losses of several outputs"),
                            ({"weighted_metrics": ["accuracy"]}, "weighted_metrics are not supported"),
                            ({"jit_compile": True}, "jit_compile=True asks for XLA"),
                            ({"steps_per_execution": 0}, "steps_per_execution must be a positive int")):
        with pytest.raises(tf.Error, match=message):
            model.compile(optimizer="sgd", loss=loss, **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sample_weight_mode'"):
        model.compile(optimizer="sgd", loss=loss, sample_weight_mode="temporal")


def test_fit_evaluate_and_predict_refuse_what_they_do_not_do(tf, model):
    x, y = small_data(64)
    with pytest.raises(tf.Error, match="shuffle must be True or False"):
        model.fit(x, y, shuffle="batch", verbose=0)
    with pytest.raises(tf.Error, match="validation_data has 4 items"):
        model.fit(x, y, validation_data=(x, y, np.ones(64), None), verbose=0)
    model.fit(x, y, validation_data=(x, y, None), verbose=0)  # a third item of None is no weights
    with pytest.raises(tf.Error, match="evaluate: sample_weight does not apply to a Dataset"):
        model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), sample_weight=np.ones(64), verbose=0)
    with pytest.raises(tf.Error, match="evaluate: callbacks are not supported"):
        model.evaluate(x, y, callbacks=[tf.keras.callbacks.TerminateOnNaN()], verbose=0)
    with pytest.raises(tf.Error, match="predict: callbacks are not supported"):
        model.predict(x, callbacks=[tf.keras.callbacks.TerminateOnNaN()])
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch'"):
        model.predict(x, batch=4)
    model.evaluate(x, y, verbose=0, workers=2, use_multiprocessing=False)  # hints


def test_files_and_json(tf, model, tmp_path):
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    with pytest.raises(tf.Error, match="skip_mismatch and by_name are not supported"):
        model.load_weights(path, skip_mismatch=True)
    with pytest.raises(tf.Error, match="skip_mismatch and by_name are not supported"):
        model.load_weights(path, by_name=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strict'"):
        model.load_weights(path, strict=True)
    with pytest.raises(tf.Error, match="max_shard_size"):
        model.save_weights(tmp_path / "x.weights.h5", max_shard_size="1GB")
    with pytest.raises(tf.Error, match="save_format is Keras 2's"):
        model.save(tmp_path / "m.keras", save_format="h5")
    pretty = model.to_json(indent=2)
    assert "\n  " in pretty and json.loads(pretty) == json.loads(model.to_json())


def test_callbacks_arguments(tf, model, tmp_path):
    x, y = small_data(64)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0,
              callbacks=[tf.keras.callbacks.TensorBoard(tmp_path / "tb", update_freq="batch")])
    assert any((tmp_path / "tb" / "train").iterdir())
    cb = tf.keras.callbacks
    with pytest.raises(tf.Error, match="update_freq must be 'epoch', 'batch' or a positive number"):
        cb.TensorBoard(tmp_path, update_freq="step")
    for kwargs in ({"histogram_freq": 1}, {"profile_batch": 2}, {"write_images": True}, {"embeddings_freq": 1}):
        with pytest.raises(tf.Error, match=f"TensorBoard: {next(iter(kwargs))}="):
            cb.TensorBoard(tmp_path, **kwargs)
    with pytest.raises(tf.Error, match="start_from_epoch is not supported"):
        cb.EarlyStopping(start_from_epoch=3)
    with pytest.raises(tf.Error, match="initial_value_threshold is not supported"):
        cb.ModelCheckpoint(tmp_path / "c", initial_value_threshold=0.5)
    with pytest.raises(tf.Error, match="double_checkpoint=True is not supported"):
        cb.BackupAndRestore(tmp_path / "b", double_checkpoint=True)


def test_dropout_seed_acts_and_dataset_options_are_refused(tf):
    x = np.ones((4, 8), np.float32)
    masks = []
    for model_seed in (1, 2):
        for layer_seed in (5, None):
            m = tf.keras.Sequential([tf.keras.layers.Dropout(0.5, seed=layer_seed, input_shape=(8,))], seed=model_seed)
            masks.append(m(x, training=True).numpy())
    # Its own seed: the same masks under two model seeds; without one, the model's seed decides.
    np.testing.assert_array_equal(masks[0], masks[2])
    assert not np.array_equal(masks[1], masks[3])
    with pytest.raises(tf.Error, match="Dropout: seed must be a non-negative int"):
        tf.keras.layers.Dropout(0.5, seed=-1)
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(2)
    with pytest.raises(tf.Error, match="options .tf.distribute.InputOptions"):
        strategy.experimental_distribute_dataset(dataset, options=object())
    with pytest.raises(tf.Error, match="options .tf.distribute.InputOptions"):
        strategy.distribute_datasets_from_function(lambda ctx: dataset, options=object())
