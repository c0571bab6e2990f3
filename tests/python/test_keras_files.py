"""Keras 3's own files from Python: ``model.save('m.keras')`` and ``keras.models.load_model``,
``save_weights('w.weights.h5')`` in Keras 3's HDF5 layout, and broken files as tandem.Error.

How the layout was checked: Debian has no Keras 3, so these tests cannot load the files into Keras
itself. The layout was read from Keras 3.16's source (keras/src/saving/saving_lib.py: save_model,
_save_state, _save_container_state, H5IOStore; keras/src/utils/naming.py: to_snake_case;
keras/src/optimizers/base_optimizer.py, adam.py, rmsprop.py: the optimizer's variables), and the
tests below read the files with h5py and check the groups, datasets, attributes and values
H5IOStore.get would look up: "vars" (the model's, with its name), "layers/<class in snake case,
counted>/vars/<i>" in Keras' variable order, "optimizer/vars/<i>" (iteration as int64,
learning_rate, then the slots in Keras' order). The zip holds metadata.json, config.json and
model.weights.h5 as Keras' _save_model_to_fileobj writes them.
"""
import json
import zipfile

import numpy as np
import pytest

from conftest import small_data


def mlp(tf, seed=4):
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(20,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(5, activation="softmax"),
    ], seed=seed)
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def h5py_or_skip():
    try:
        import h5py
    except ImportError:
        print("h5py is missing (Debian: python3-h5py, installed by `bash scripts/setup tests`): skipping")
        pytest.skip("h5py is missing (Debian: python3-h5py, installed by `bash scripts/setup tests`)")
    return h5py


def test_keras_file_round_trip_predicts_the_same_bits(tf, tmp_path):
    x, y = small_data()
    model = mlp(tf)
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    back = tf.keras.models.load_model(path, seed=4)
    assert [type(layer).__name__ for layer in back.layers] == [type(layer).__name__ for layer in model.layers]
    np.testing.assert_array_equal(back.predict(x, verbose=0), model.predict(x, verbose=0))
    for a, b in zip(back.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert back.optimizer.iterations == model.optimizer.iterations
    # Compiled from compile_config: evaluate gives the same loss and accuracy.
    assert back.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)
    # compile=False: weights only.
    bare = tf.keras.models.load_model(str(path), compile=False)
    np.testing.assert_array_equal(bare.predict(x, verbose=0), model.predict(x, verbose=0))

    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["metadata.json", "config.json", "model.weights.h5"]
        assert zf.testzip() is None
        meta = json.loads(zf.read("metadata.json"))
        config = json.loads(zf.read("config.json"))
    assert meta["keras_version"].startswith("3.") and "date_saved" in meta
    assert config["module"] == "keras" and config["class_name"] == "Sequential"
    assert config["registered_name"] is None
    assert config["build_config"] == {"input_shape": [None, 20]}
    assert config["compile_config"]["optimizer"]["class_name"] == "Adam"
    assert config["compile_config"]["optimizer"]["config"]["learning_rate"] == 0.01
    assert config["compile_config"]["loss"] == "sparse_categorical_crossentropy"
    assert config["compile_config"]["metrics"] == ["accuracy"]
    layers = config["config"]["layers"]
    assert [l["class_name"] for l in layers] == ["InputLayer", "Dense", "Dropout", "Dense"]
    assert layers[0]["config"]["batch_shape"] == [None, 20]
    assert all(l["module"] == "keras.layers" for l in layers)
    assert layers[1]["build_config"] == {"input_shape": [None, 20]}
    assert layers[1]["config"]["dtype"]["class_name"] == "DTypePolicy"


def test_weights_h5_has_keras_groups_and_values(tf, tmp_path):
    h5py = h5py_or_skip()
    x, y = small_data()
    model = mlp(tf)
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    weights = model.get_weights()  # kernel, bias, kernel, bias
    with h5py.File(path, "r") as f:
        assert sorted(f.keys()) == ["layers", "optimizer", "vars"]
        assert f["vars"].attrs["name"] == model.name and len(f["vars"]) == 0
        assert sorted(f["layers"].keys()) == ["dense", "dense_1", "dropout"]
        assert f["layers/dense/vars"].attrs["name"] == model.layers[0].name
        assert len(f["layers/dropout/vars"]) == 0
        for group, (kernel, bias) in (("dense", weights[0:2]), ("dense_1", weights[2:4])):
            assert sorted(f[f"layers/{group}/vars"].keys()) == ["0", "1"]
            np.testing.assert_array_equal(f[f"layers/{group}/vars/0"][()], kernel)
            np.testing.assert_array_equal(f[f"layers/{group}/vars/1"][()], bias)
            assert f[f"layers/{group}/vars/0"].dtype == np.float32
        opt = f["optimizer/vars"]
        assert opt.attrs["name"] == "adam"
        assert len(opt) == 2 + 2 * 4  # iteration, learning_rate, (momentum, velocity) per variable
        assert opt["0"].dtype == np.int64 and opt["0"].shape == ()
        assert opt["0"][()] == model.optimizer.iterations == 4  # 256 rows, batches of 64
        assert opt["1"].shape == () and opt["1"][()] == np.float32(0.01)
        for i in range(4):
            assert opt[str(2 + 2 * i)].shape == weights[i].shape
            assert opt[str(3 + 2 * i)].shape == weights[i].shape
            assert np.all(opt[str(3 + 2 * i)][()] >= 0)  # the velocity (second moment)

    fresh = mlp(tf, seed=9)
    fresh.build((None, 20))
    fresh.load_weights(path)
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))
    assert fresh.optimizer.iterations == 4


def test_weights_h5_written_by_h5py_as_keras_does_loads(tf, tmp_path):
    """A file written with h5py the way H5IOStore writes it (float64 values, which Keras converts
    on assign) loads; so does a .keras whose entries are deflated (other zip writers)."""
    h5py = h5py_or_skip()
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2)])
    kernel = np.arange(6, dtype=np.float64).reshape(3, 2) / 8
    bias = np.array([0.5, -0.25])
    path = tmp_path / "k.weights.h5"
    with h5py.File(path, "w") as f:
        f.create_group("vars").attrs["name"] = "sequential"
        g = f.create_group("layers").create_group("dense").create_group("vars")
        g.attrs["name"] = "dense"
        g["0"] = kernel
        g["1"] = bias
    model.load_weights(str(path))
    np.testing.assert_array_equal(model.get_weights()[0], kernel.astype(np.float32))
    np.testing.assert_array_equal(model.get_weights()[1], bias.astype(np.float32))

    model.save(tmp_path / "s.keras")
    with zipfile.ZipFile(tmp_path / "s.keras") as src, zipfile.ZipFile(tmp_path / "d.keras", "w",
                                                                        zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
    back = tf.keras.models.load_model(tmp_path / "d.keras")
    np.testing.assert_array_equal(back.get_weights()[0], kernel.astype(np.float32))


def test_broken_files_are_errors_naming_them(tf, tmp_path):
    model = mlp(tf)
    model.build((None, 20))
    good = tmp_path / "m.keras"
    model.save(good)
    data = good.read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[: len(data) // 2])
    with pytest.raises(tf.Error, match=r"cut\.keras\" is a damaged zip archive"):
        tf.keras.models.load_model(tmp_path / "cut.keras")
    (tmp_path / "no.keras").write_bytes(b"not a zip at all")
    with pytest.raises(tf.Error, match="is not a zip archive"):
        tf.keras.models.load_model(tmp_path / "no.keras")
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(tmp_path / "noconfig.keras", "w") as dst:
        for name in ("metadata.json", "model.weights.h5"):
            dst.writestr(name, src.read(name))
    with pytest.raises(tf.Error, match="has no config.json"):
        tf.keras.models.load_model(tmp_path / "noconfig.keras")

    wide = tf.keras.Sequential([tf.keras.Input(shape=(20,)), tf.keras.layers.Dense(32)])
    wide.save_weights(tmp_path / "wide.weights.h5")
    narrow = tf.keras.Sequential([tf.keras.Input(shape=(20,)), tf.keras.layers.Dense(16)])
    with pytest.raises(tf.Error, match=r"layer 'dense' \(layers/dense/vars/0\) has kernel float32 \(20, 32\), "
                                       r"the model expects float32 \(20, 16\)"):
        narrow.load_weights(tmp_path / "wide.weights.h5")
