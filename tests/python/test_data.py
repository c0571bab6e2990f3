"""tandem.data: the tf.data stages over the C++ pipeline. Each stage gives what numpy computes and
what the engine's own Dataset (tandem._tandem.Dataset, no Python between the stages) gives, bit for
bit; map and filter run Python functions per element; fit, evaluate and predict take datasets and
train exactly as on the same batches from arrays, reading the rows in place."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import small_data


def rows(n=23, features=3):
    x = (np.arange(n * features, dtype=np.float32).reshape(n, features) / 7).astype(np.float32)
    y = (np.arange(n) % 5).astype(np.int32)
    return x, y


def batches_of(dataset):
    return [tuple(np.array(c) for c in e) if isinstance(e, tuple) else np.array(e) for e in dataset]


def assert_same(a, b):
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        for ca, cb in zip(ea if isinstance(ea, tuple) else (ea,), eb if isinstance(eb, tuple) else (eb,)):
            assert ca.dtype == cb.dtype and ca.shape == cb.shape
            assert ca.tobytes() == cb.tobytes()


def native_elements(native):
    it = native.iterate(0)
    out = []
    while (e := it.next()) is not None:
        out.append(tuple(np.array(c) for c in e))
    return out


def test_stages_give_what_numpy_gives(tf):
    x, y = rows()
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    assert len(ds) == 23 and ds.cardinality() == 23
    expected = [(x[i:i + 5], y[i:i + 5]) for i in range(0, 23, 5)]
    assert_same(batches_of(ds.batch(5)), expected)
    assert_same(batches_of(ds.batch(5, drop_remainder=True)), expected[:-1])
    assert ds.batch(5).cardinality() == 5 and ds.batch(5, drop_remainder=True).cardinality() == 4
    assert_same(batches_of(ds.skip(4).take(6).batch(4)), [(x[4:8], y[4:8]), (x[8:10], y[8:10])])
    assert_same(batches_of(ds.repeat(2).batch(23)), [(x, y), (x, y)])
    assert ds.repeat().cardinality() == tf.data.INFINITE_CARDINALITY
    assert_same(batches_of(ds.shard(3, 1).batch(100)), [(x[1::3], y[1::3])])
    assert_same(batches_of(ds.cache().batch(23)), [(x, y)])
    assert_same(batches_of(ds.batch(7).prefetch(tf.data.AUTOTUNE)), batches_of(ds.batch(7)))
    # A dict and a single array keep their shape; a list is one array, as tf.data reads it.
    d = next(iter(tf.data.Dataset.from_tensor_slices({"pixels": x, "label": y}).batch(4)))
    assert sorted(d) == ["label", "pixels"] and d["pixels"].tobytes() == x[:4].tobytes()
    single = batches_of(tf.data.Dataset.from_tensor_slices(x).batch(10))
    assert [b.shape for b in single] == [(10, 3), (10, 3), (3, 3)]
    assert [int(v) for v in tf.data.Dataset.range(2, 9, 3)] == [2, 5, 8]
    assert next(iter(tf.data.Dataset.from_tensors([1.0, 2.0]))).tolist() == [1.0, 2.0]


def test_every_stage_is_the_engines_own_bit_for_bit(tf):
    """The package adds nothing between the stages: the same stages built on the engine's Dataset
    directly give the same bytes, shuffles included."""
    x, y = rows(50)
    native = tf._tandem.Dataset.from_tensor_slices([x, y])
    built = (native.shuffle(16, 9, True).skip(3).take(40).batch(6, False).repeat(2).shard(2, 1).prefetch(4))
    python = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16, seed=9).skip(3).take(40).batch(6).repeat(2)
              .shard(2, 1).prefetch(4))
    assert_same(batches_of(python), native_elements(built))


def test_shuffle_orders_by_seed_and_pass(tf):
    x, y = rows(40)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=3)
    passes = [np.concatenate([b for _, b in ds.batch(8)]) for _ in range(2)]
    assert sorted(passes[0].tolist()) == sorted(y.tolist())  # a permutation
    assert passes[0].tolist() != passes[1].tolist()  # reshuffled on the next pass
    again = [np.concatenate([b for _, b in tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=3).batch(8)])]
    assert again[0].tolist() == passes[0].tolist()  # the same seed, the same first order
    fixed = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=3, reshuffle_each_iteration=False)
    assert [b.tolist() for _, b in fixed.batch(40)] == [b.tolist() for _, b in fixed.batch(40)]


def test_map_and_filter_run_python_functions_per_element(tf):
    x, y = rows(12)
    seen = []

    def scale(features, label):
        seen.append(features.shape)
        return features * 2.0, label + 1

    out = batches_of(tf.data.Dataset.from_tensor_slices((x, y)).map(scale).batch(12))
    assert seen == [(3,)] * 12  # one call per element, on the element (not the batch)
    assert_same(out, [((x * 2.0).astype(np.float32), (y + 1).astype(np.int32))])
    kept = [int(b) for _, b in tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: b % 2 == 0)]
    assert kept == [int(v) for v in y if v % 2 == 0]
    # A dict in, a tuple out; float64 results become float32, Python ints int32.
    pairs = tf.data.Dataset.from_tensor_slices({"a": x, "b": y}).map(lambda d: (d["a"].astype(np.float64), 7))
    a, b = next(iter(pairs.batch(3, drop_remainder=True).prefetch(2)))
    assert a.dtype == np.float32 and b.dtype == np.int32 and b.tolist() == [7, 7, 7]
    # Parallel calls keep the input's order.
    par = tf.data.Dataset.from_tensor_slices(y).map(lambda v: v * 3, num_parallel_calls=tf.data.AUTOTUNE)
    assert [int(v) for v in par] == [int(v) * 3 for v in y]


def test_pipeline_mistakes_are_named(tf):
    x, y = rows(6)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    with pytest.raises(ZeroDivisionError):  # the function's own exception, through the pipeline's thread
        list(ds.map(lambda a, b: 1 / 0).prefetch(2))
    with pytest.raises(tf.Error, match="component 1 has 5 rows, component 0 has 6"):
        tf.data.Dataset.from_tensor_slices((x, y[:5]))
    with pytest.raises(tf.Error, match="batch_size must be an int >= 1"):
        ds.batch(0)
    flip = ds.map(lambda a, b: (a, b) if int(b) < 2 else a)
    with pytest.raises(tf.Error, match="same structure for every element"):
        list(flip)
    with pytest.raises(tf.Error, match="components must be arrays of numbers"):
        list(ds.map(lambda a, b: "text"))
    with pytest.raises(TypeError, match="infinite"):
        len(ds.repeat())
    with pytest.raises(tf.Error, match=r"the predicate must return one bool, got an array of shape \(3,\)"):
        list(ds.filter(lambda a, b: a > 0))
    # Elements are read-only, as TensorFlow's tensors: writing into one would change x itself.
    with pytest.raises(ValueError, match="read-only"):
        list(tf.data.Dataset.from_tensor_slices(x).map(lambda a: a.__imul__(10)))
    a = next(iter(tf.data.Dataset.from_tensor_slices(x)))
    assert not a.flags.writeable and x[0, 1] == np.float32(1 / 7)


def test_an_open_iterator_at_exit_stops_cleanly(tmp_path):
    """A pipeline with Python map threads still open when the interpreter exits (an iterator kept
    in a module variable): its threads are stopped before the interpreter goes."""
    script = textwrap.dedent("""
        import numpy as np
        import tandem as tf
        ds = tf.data.Dataset.from_tensor_slices(np.arange(10000, dtype=np.float32))
        it = iter(ds.map(lambda v: v * 2, num_parallel_calls=tf.data.AUTOTUNE).prefetch(8))
        next(it)
        it2 = iter(ds.map(lambda v: v + 1).prefetch(8))
        next(it2)
        print("done")
    """)
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def model(tf, seed=4):
    m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(20,)),
                             tf.keras.layers.Dense(5, activation="softmax")], seed=seed)
    m.compile(tf.keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    return m


def test_fit_on_a_dataset_trains_as_on_the_same_arrays(tf):
    x, y = small_data(200)
    arrays, piped = model(tf), model(tf)
    h1 = arrays.fit(x, y, batch_size=32, epochs=2, shuffle=False, validation_data=(x[:50], y[:50]), verbose=0)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(tf.data.AUTOTUNE)
    val = tf.data.Dataset.from_tensor_slices((x[:50], y[:50])).batch(32)
    h2 = piped.fit(ds, epochs=2, validation_data=val, verbose=0)
    for a, b in zip(arrays.get_weights(), piped.get_weights()):
        assert a.tobytes() == b.tobytes()
    assert h1.history == h2.history
    assert piped.evaluate(val, verbose=0) == arrays.evaluate(x[:50], y[:50], batch_size=32, verbose=0)
    np.testing.assert_array_equal(piped.predict(tf.data.Dataset.from_tensor_slices(x).batch(64)), arrays.predict(x))
    np.testing.assert_array_equal(piped.predict(ds), arrays.predict(x))  # (x, y) elements: x is read
    assert piped.predict(x[:0]).shape == (0, 5)  # zero rows: an empty result, as Keras


def test_steps_per_epoch_runs_one_iterator_across_epochs(tf, capfd):
    x, y = small_data(64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    endless = model(tf)
    h = endless.fit(ds.repeat(), epochs=3, steps_per_epoch=3, verbose=0)
    assert len(h.history["loss"]) == 3
    # The same 9 batches in order from arrays: batch 4 of the data, then round again.
    ref = model(tf)
    order = np.concatenate([np.arange(64)] * 3)[:9 * 16]
    ref.fit(x[order], y[order], batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ref.get_weights(), endless.get_weights()):
        assert a.tobytes() == b.tobytes()
    # 4 batches, epochs of 3 (Keras 3's iterator): epoch 2 ends short after batch 4, epoch 3 starts
    # a new pass; the same as training on batches 0-3 then 0-2.
    short, ref = model(tf), model(tf)
    h = short.fit(ds, epochs=3, steps_per_epoch=3, verbose=0)
    assert len(h.history["loss"]) == 3
    assert "the dataset ran out after 1 of epoch 2's 3 steps" in capfd.readouterr().err
    order = np.concatenate([np.arange(64), np.arange(48)])
    ref.fit(x[order], y[order], batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ref.get_weights(), short.get_weights()):
        assert a.tobytes() == b.tobytes()
    # steps_per_epoch == len(ds) without repeat(): every epoch a whole pass, as Keras.
    assert len(model(tf).fit(ds, epochs=3, steps_per_epoch=len(ds), verbose=0).history["loss"]) == 3
    with pytest.raises(tf.Error, match="infinite .* pass steps_per_epoch"):
        model(tf).fit(ds.repeat(), epochs=1, verbose=0)
    with pytest.raises(tf.Error, match="batch the dataset"):
        model(tf).fit(tf.data.Dataset.from_tensor_slices((x, y)), verbose=0)
    with pytest.raises(tf.Error, match="batch_size does not apply to a Dataset"):
        model(tf).fit(ds, batch_size=16, verbose=0)
    with pytest.raises(tf.Error, match=r"\(x, y\) or \(x, y, sample_weight\) tuples"):
        model(tf).fit(tf.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(4), verbose=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch'"):
        model(tf).fit(ds, epoch=2)


def test_each_fit_reads_a_new_pass_of_a_shuffled_dataset(tf):
    """As TensorFlow makes a new iterator for each fit, each reshuffling: two fits of one epoch
    train as one fit of two epochs on the same pipeline (passes 0 and 1), which are two orders."""
    x, y = small_data(96)

    def pipeline():
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(96, seed=5).batch(16)

    twice, once = model(tf), model(tf)
    ds = pipeline()
    twice.fit(ds, epochs=1, verbose=0)
    twice.fit(ds, epochs=1, verbose=0)
    once.fit(pipeline(), epochs=2, verbose=0)
    for a, b in zip(once.get_weights(), twice.get_weights()):
        assert a.tobytes() == b.tobytes()
    fresh = pipeline()
    assert [b.tolist() for _, b in fresh] != [b.tolist() for _, b in fresh]
    # fit takes experimental_distribute_dataset's result as TensorFlow's does; predict wants x first.
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    with strategy.scope():
        mirrored = model(tf)
    mirrored.fit(strategy.experimental_distribute_dataset(pipeline()), epochs=1, verbose=0)
    with pytest.raises(tf.Error, match="arrays or \\(x, ...\\) tuples of arrays, got a dict"):
        model(tf).predict(tf.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(8))


def test_custom_loop_over_a_distributed_dataset_trains_as_one_device(tf):
    """tf.distribute's custom-loop tutorial: for each element of experimental_distribute_dataset,
    strategy.run(train_step, args=(element,)) with the (x, y) tuple unpacked inside."""
    x, y = small_data(8 * 32)

    def run(strategy):
        def build():
            m = tf.keras.Sequential([tf.keras.layers.Dense(12, activation="relu", input_shape=(20,)),
                                     tf.keras.layers.Dense(5)], seed=2)
            return m, tf.keras.optimizers.SGD(0.1)

        if strategy is None:
            m, opt = build()
        else:
            with strategy.scope():
                m, opt = build()
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

        def step(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_object(labels, m(images, training=True)), global_batch_size=32)
            grads = tape.gradient(loss, m.trainable_variables)
            opt.apply_gradients(zip(grads, m.trainable_variables))
            return loss

        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
        if strategy is None:
            for element in ds:
                step(element)
        else:
            for element in strategy.experimental_distribute_dataset(ds):
                strategy.run(step, args=(element,))
        return m.get_weights()

    alone = run(None)
    for a, b in zip(alone, run(tf.distribute.MirroredStrategy(num_replicas=2))):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


PEAK = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import tandem as tf
    x = np.random.default_rng(0).random((60000, 784), dtype=np.float32)
    y = (np.arange(60000) % 10).astype(np.int32)
    m = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax", input_shape=(784,))])
    m.compile("sgd", "sparse_categorical_crossentropy")
    if sys.argv[1] == "dataset":
        m.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(500).prefetch(tf.data.AUTOTUNE), epochs=1, verbose=0)
    else:
        m.fit(x, y, batch_size=500, epochs=1, shuffle=False, verbose=0)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, sum(float(w.sum()) for w in m.get_weights()))
""")


def test_a_dataset_reads_the_arrays_in_place(tf):
    """60,000 x 784 float32 (188 MB) through batch().prefetch() into fit: the process's peak
    resident memory stays within a quarter of the array of fit(x, y)'s, so the rows are not
    copied into the pipeline."""
    env = dict(os.environ)
    peaks, weights = {}, {}
    for kind in ("arrays", "dataset"):
        out = subprocess.run([sys.executable, "-c", PEAK, kind], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        rss, total = out.stdout.split()[-2:]
        peaks[kind], weights[kind] = int(rss) * 1024, total
    assert weights["dataset"] == weights["arrays"]  # the same rows trained, in the same batches
    array_bytes = 60000 * 784 * 4
    print(f"peak RSS: fit(x, y) {peaks['arrays'] / 2**20:.0f} MiB, fit(dataset) {peaks['dataset'] / 2**20:.0f} MiB")
    assert peaks["dataset"] < peaks["arrays"] + array_bytes // 4
