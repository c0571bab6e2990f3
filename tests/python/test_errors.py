"""Bad calls from Python raise tandem.Error (a ValueError) or, for files, an OSError subclass,
naming the problem; none crashes the interpreter."""
import numpy as np
import pytest

from conftest import small_data


def model_of(tf):
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(20,))])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_errors_name_the_problem(tf, tmp_path):
    x, y = small_data()
    model = model_of(tf)
    assert issubclass(tf.Error, ValueError)
    with pytest.raises(tf.Error, match=r"x has samples of shape \(19,\), the model expects \(20,\)"):
        model.fit(x[:, :19], y, verbose=0)
    with pytest.raises(tf.Error, match="x has 256 samples but y has 255"):
        model.fit(x, y[:255], verbose=0)
    with pytest.raises(tf.Error, match="x must be an array of numbers, got a str"):
        model.fit("images.npy", y, verbose=0)
    with pytest.raises(tf.Error, match="x is None"):
        model.fit(None, y, verbose=0)
    with pytest.raises(tf.Error, match="y is None"):
        model.fit(x, None, verbose=0)
    with pytest.raises(tf.Error, match=r'unknown loss "sparse_categorical_crossentropyy"'):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropyy")
    with pytest.raises(tf.Error, match="unknown metric"):
        model.compile(optimizer="adam", loss="mse", metrics=["accuracyy"])
    with pytest.raises(tf.Error, match="batch_size must be a positive int"):
        model.fit(x, y, batch_size=0, verbose=0)
    with pytest.raises(tf.Error, match="labels must fit in int32"):
        model.fit(x, np.full(256, 2**40), verbose=0)
    with pytest.raises(tf.Error, match="x must hold numbers"):
        model.fit(np.array([["a"] * 20] * 256), y, verbose=0)
    with pytest.raises(tf.Error, match="Dense: units must be positive"):
        tf.keras.layers.Dense(0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'unitz'"):
        tf.keras.layers.Dense(4, unitz=3)
    with pytest.raises(tf.Error, match="expected a layer"):
        tf.keras.Sequential().add("dense")
    with pytest.raises(tf.Error, match="num_replicas must be a positive int"):
        tf.distribute.MirroredStrategy(num_replicas=0)
    with pytest.raises(tf.FileNotFoundError) as missing:
        model.load_weights(tmp_path / "nowhere.safetensors")
    assert isinstance(missing.value, OSError) and missing.value.errno == 2
    assert "nowhere.safetensors" in str(missing.value)
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(tf.Error):
        model.load_weights(tmp_path / "broken.safetensors")
    # A model whose engine object was freed says so.
    model._model.free()
    with pytest.raises(tf.Error, match="this model was freed"):
        model.predict(x)
    # The model still trains after all this.
    model = model_of(tf)
    model.fit(x, y, verbose=0)


def test_a_second_thread_cannot_race_a_training_model(tf):
    import threading

    x, y = small_data(4096)
    model = model_of(tf)
    started, said = threading.Event(), []

    class Signal(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                started.set()
                # The other thread tries while this fit holds the model.
                other = threading.Thread(target=lambda: said.extend(attempts()))
                other.start()
                other.join()

    def attempts():
        out = []
        for call in (lambda: model.predict(x), lambda: model.fit(x, y, verbose=0), lambda: model._model.free()):
            try:
                call()
                out.append("ran")
            except tf.Error as e:
                out.append(str(e))
        return out

    model.fit(x, y, epochs=1, verbose=0, callbacks=[Signal()])
    assert started.is_set()
    assert len(said) == 3 and all("already training or predicting in another thread" in s for s in said), said
    model.predict(x)  # free again once fit ended


def test_the_vector_level_cap_is_honoured_or_refused_at_import():
    """TANDEM_MAX_ISA=avx2 lowers the level (where the CPU has AVX2 and FMA); a value Tandem does
    not know stops `import tandem` with an error naming it."""
    import os
    import subprocess
    import sys
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    def run(cap):
        env = dict(os.environ, TANDEM_MAX_ISA=cap)
        return subprocess.run([sys.executable, "-c", "import tandem; print(tandem.cpu_isa())"], env=env,
                              capture_output=True, text=True, timeout=120)
    capped = run("avx2")
    assert capped.returncode == 0, capped.stderr
    assert capped.stdout.strip() == ("avx2" if {"avx2", "fma"} <= flags else "x86-64")
    bad = run("avx3")
    assert bad.returncode != 0
    assert 'TANDEM_MAX_ISA: expected avx2 or avx512' in bad.stderr and 'got "avx3"' in bad.stderr, bad.stderr
