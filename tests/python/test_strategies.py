"""Every strategy by scope from Python, as tf.distribute is used: the model made inside
``with strategy.scope():`` trains under it. MultiWorkerMirroredStrategy under `tandem launch -np 2`
ends at one process's bits, as in C++ (the launched job has a watchdog)."""
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from conftest import CLI, small_data


def train(tf, strategy, epochs=2, batch_size=64):
    x, y = small_data(512)
    scope = strategy.scope() if strategy is not None else None
    if scope:
        scope.__enter__()
    try:
        model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(20,)),
                                     tf.keras.layers.Dense(24, activation="relu"), tf.keras.layers.Dense(5)], seed=4)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), metrics=["accuracy"],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    finally:
        if scope:
            scope.__exit__(None, None, None)
    history = model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    return model, history


@pytest.mark.parametrize("make, replicas", [
    (lambda d: d.MirroredStrategy(num_replicas=2), 2),
    (lambda d: d.MirroredStrategy(num_replicas=2, deterministic=True), 2),
    (lambda d: d.experimental.CentralStorageStrategy(num_replicas=2), 2),
    (lambda d: d.OneDeviceStrategy(), 1),
    (lambda d: d.ModelParallelStrategy(2), 2),
    (lambda d: d.PipelineStrategy(num_stages=3, micro_batches=4), 3),
    (lambda d: d.PipelineStrategy(2, 2, schedule="gpipe", data_replicas=2), 4),
])
def test_each_strategy_by_scope_trains_as_one_device(tf, make, replicas):
    strategy = make(tf.distribute)
    assert strategy.num_replicas_in_sync == replicas
    alone, h1 = train(tf, None)
    model, h2 = train(tf, strategy)
    # The replicas ran: every one of this process's replicas (devices) took part in every step.
    runs = strategy._handle.replica_runs
    if replicas > 1:
        assert len(runs) == replicas and min(runs) > 0 and len(set(runs)) == 1, runs
    assert model.distribute_strategy is strategy
    assert model._model.strategy_name == strategy.name
    for a, b in zip(alone.get_weights(), model.get_weights()):  # within 1e-5, relative, per tensor
        assert np.max(np.abs(b - a)) <= 1e-5 * np.max(np.abs(a)), np.max(np.abs(b - a)) / np.max(np.abs(a))
    assert h2.history["loss"][-1] == pytest.approx(h1.history["loss"][-1], rel=1e-5)
    assert tf.distribute.get_strategy() is None  # the scope closed


def test_strategies_come_from_the_registry_with_their_options(tf):
    from tandem import _tandem
    names = [name for name, _, _ in _tandem.strategy_names()]
    assert names[:3] == ["default", "one_device", "mirrored"]
    assert {"ps-async", "ps-sync", "ps-ssp", "model-parallel", "pipeline", "multiworker"} <= set(names)
    settings = _tandem.StrategySettings()
    settings.threads_per_replica = 1
    settings.device_memory_bytes = 1_500_000  # read by model-parallel: a model needing more is refused at fit
    assert _tandem.Strategy("model-parallel:2", settings).num_replicas_in_sync == 2
    with pytest.raises(tf.Error, match=r'unknown strategy "mirored"; expected default, one_device, mirrored'):
        _tandem.Strategy("mirored:2", settings)
    with pytest.raises(tf.Error, match="timeout must be positive"):
        settings.timeout = 0


def test_pipeline_mistakes_are_named(tf):
    with pytest.raises(tf.Error, match="micro_batches must be at least 1, got 0"):  # the engine's check
        tf.distribute.PipelineStrategy(2, 0)
    with pytest.raises(tf.Error, match="PipelineStrategy: num_stages must be an int, got '2'"):
        tf.distribute.PipelineStrategy("2")
    with pytest.raises(tf.Error, match="schedule must be '1f1b' or 'gpipe'"):
        tf.distribute.PipelineStrategy(2, 4, schedule="interleaved")


def test_scope_nests_and_models_keep_their_strategy(tf):
    outer, inner = tf.distribute.MirroredStrategy(num_replicas=2), tf.distribute.OneDeviceStrategy()
    with outer.scope():
        with inner.scope() as s:
            assert s is inner and tf.distribute.get_strategy() is inner
            m = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
        assert tf.distribute.get_strategy() is outer
    del inner  # the model keeps its strategy alive
    assert m._model.strategy_name == "one_device"


def test_scopes_are_the_engines_one_stack_per_thread(tf):
    outer, inner = tf.distribute.OneDeviceStrategy(), tf.distribute.MirroredStrategy(num_replicas=2)
    a, b = outer.scope(), inner.scope()
    a.__enter__()
    b.__enter__()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(tf.distribute.get_strategy()))
    worker.start()
    worker.join()
    assert seen == [None] and tf.distribute.get_strategy() is inner
    with pytest.raises(tf.Error, match="the scope of one_device is not the innermost open on this thread"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    assert tf.distribute.get_strategy() is outer and tf.distribute.has_strategy()
    a.__exit__(None, None, None)
    assert tf.distribute.get_strategy() is None and not tf.distribute.has_strategy()


def test_a_scope_keeps_its_strategy_alive_while_open(tf):
    import gc
    tf.distribute.MirroredStrategy(num_replicas=2).scope().__enter__()  # no reference kept
    gc.collect()
    strategy = tf.distribute.get_strategy()
    assert strategy is not None and strategy.num_replicas_in_sync == 2
    x, y = small_data()
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(x.shape[1],))])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert model._model.strategy_name == "mirrored:2"
    strategy.scope().__exit__(None, None, None)
    assert tf.distribute.get_strategy() is None


SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tandem as tf
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "multi":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(deterministic=True)
    else:
        strategy = tf.distribute.MirroredStrategy(num_replicas=1, deterministic=True)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(20,)),
                                     tf.keras.layers.Dropout(0.2), tf.keras.layers.Dense(5)], seed=5)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=(600, 20)).astype(np.float32)
    y = (np.arange(600) % 5).astype(np.int32)
    model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    np.savez(f"{out}.{rank}.npz", *model.get_weights())
""")


def test_multi_worker_under_launch_ends_at_one_process_bits(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (Debian: openmpi-bin)")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    one = subprocess.run([sys.executable, str(script), "one", str(tmp_path / "one")], capture_output=True, text=True,
                         timeout=120, env=env)
    assert one.returncode == 0, one.stdout + one.stderr
    launched = subprocess.run([str(CLI), "launch", "-np", "2", "--", sys.executable, str(script), "multi",
                               str(tmp_path / "multi")], capture_output=True, text=True, timeout=180, env=env)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    reference = np.load(tmp_path / "one.0.npz")
    for rank in (0, 1):
        worker = np.load(tmp_path / f"multi.{rank}.npz")
        for name in reference.files:
            assert np.array_equal(reference[name], worker[name]), f"worker {rank}: {name} differs"


PS_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tandem as tf
    mode, out = sys.argv[1], sys.argv[2]
    extra = sys.argv[3] if len(sys.argv) > 3 else None  # the keys' directory, or the record's file
    if mode == "ps":
        strategy = tf.distribute.ParameterServerStrategy(mode="sync", auth_dir=extra)
    elif mode in ("record", "replay"):  # asynchronous
        strategy = tf.distribute.ParameterServerStrategy(**{mode: extra})
    else:
        strategy = None
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(73, 6)).astype(np.float32)
    y = (np.arange(73) % 4).astype(np.int32)
    def build():
        m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(6,)),
                                 tf.keras.layers.Dropout(0.3), tf.keras.layers.Dense(4, activation="softmax")], seed=3)
        m.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
        return m
    if strategy is None:
        model = build()
    else:
        with strategy.scope():
            model = build()
    model.fit(x, y, epochs=3, batch_size=24, shuffle=False, verbose=0)
    if strategy is None or strategy.is_chief:
        np.savez(out, *model.get_weights())
""")


def test_parameter_servers_from_tf_config_train_as_one_process(tmp_path):
    """A chief, a server and a worker (synchronous; the worker's batch is the global batch), each
    running the script with its TF_CONFIG: the chief's weights are one process's."""
    script = tmp_path / "ps.py"
    script.write_text(PS_SCRIPT)
    alone = subprocess.run([sys.executable, str(script), "alone", str(tmp_path / "alone.npz")], capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    cluster = subprocess.run([str(CLI), "launch", "--ps", "1", "--workers", "1", "--", sys.executable, str(script),
                              "ps", str(tmp_path / "ps.npz")], capture_output=True, text=True, timeout=180)
    assert cluster.returncode == 0, cluster.stdout + cluster.stderr
    a, b = np.load(tmp_path / "alone.npz"), np.load(tmp_path / "ps.npz")
    for name in a.files:  # one worker, synchronous: one process's bits
        np.testing.assert_array_equal(b[name], a[name])
    # Again with every connection under CurveZMQ keys (`tandem keys`, auth_dir=): the same weights.
    made = subprocess.run([str(CLI), "keys", str(tmp_path / "keys")], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    secured = subprocess.run([str(CLI), "launch", "--ps", "1", "--workers", "1", "--", sys.executable, str(script),
                              "ps", str(tmp_path / "auth.npz"), str(tmp_path / "keys")], capture_output=True,
                             text=True, timeout=180)
    assert secured.returncode == 0, secured.stdout + secured.stderr
    c = np.load(tmp_path / "auth.npz")
    for name in a.files:
        np.testing.assert_array_equal(c[name], b[name])


def test_an_asynchronous_run_replayed_from_its_record_ends_with_the_same_weights(tf, tmp_path):
    """ParameterServerStrategy(record=FILE), then (replay=FILE), 2 workers: the same weights, bit for bit."""
    script = tmp_path / "ps.py"
    script.write_text(PS_SCRIPT)
    record = tmp_path / "run.record"
    for mode in ("record", "replay"):
        run = subprocess.run([str(CLI), "launch", "--ps", "1", "--workers", "2", "--", sys.executable, str(script),
                              mode, str(tmp_path / f"{mode}.npz"), str(record)], capture_output=True, text=True,
                             timeout=180)
        assert run.returncode == 0, run.stdout + run.stderr
    a, b = np.load(tmp_path / "record.npz"), np.load(tmp_path / "replay.npz")
    for name in a.files:
        np.testing.assert_array_equal(b[name], a[name])
    # The engine checks the options (before any connection): a cluster of one worker, this task its chief.
    cluster = tf.distribute.cluster_resolver.SimpleClusterResolver(
        {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}, task_type="chief", task_id=0)
    with pytest.raises(tf.Error, match=r"min_workers \(--min-workers\) must be from 1 to the 1 workers, got 0"):
        tf.distribute.ParameterServerStrategy(cluster, mode="sync", min_workers=0)
    with pytest.raises(tf.Error, match="max_staleness bounds the asynchronous mode"):
        tf.distribute.ParameterServerStrategy(cluster, mode="sync", max_staleness=2)
    with pytest.raises(tf.Error, match="mode must be 'async' or 'sync', got 'eventual'"):
        tf.distribute.ParameterServerStrategy(cluster, mode="eventual")


def test_parameter_servers_in_this_process_as_the_last_tutorial_runs_them(tf, monkeypatch):
    """ParameterServerStrategy() with no cluster: a server and workers as threads of this process,
    started by each fit. Synchronous on one worker it is one device, bit for bit, across two fits
    (the second goes on from the servers' state and Adam's slots); the tutorial's loop trains
    asynchronously and in synchronous rounds; what needs processes is refused."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = tf.distribute.experimental.ParameterServerStrategy(mode="sync", num_workers=1)
    assert strategy.name == "ps-sync:1x1:threads"
    x, y = small_data(512)

    def model_under(s):
        scope = s.scope() if s is not None else None
        if scope:
            scope.__enter__()
        try:
            model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(20,)),
                                         tf.keras.layers.Dense(5)], seed=4)
            model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        finally:
            if scope:
                scope.__exit__(None, None, None)
        return model

    alone, local = model_under(None), model_under(strategy)
    for model in (alone, local):
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    for a, b in zip(alone.get_weights(), local.get_weights()):
        np.testing.assert_array_equal(b, a)
    assert strategy._handle.replica_runs == [2 * 16], "the worker did not train every step of both fits"

    for s in (tf.distribute.experimental.ParameterServerStrategy(num_workers=2),
              tf.distribute.experimental.ParameterServerStrategy(mode="sync", num_workers=2)):
        model = model_under(s)
        history = model.fit(x, y, epochs=3, batch_size=32, validation_data=(x, y), verbose=0)
        assert model.distribute_strategy is s and s.name in ("ps-async:1x2:threads", "ps-sync:1x2:threads")
        runs = s._handle.replica_runs
        assert len(runs) == 2 and min(runs) > 0 and sum(runs) == 3 * 16, runs  # both workers trained
        assert history.history["val_loss"][-1] < history.history["val_loss"][0]

    PS = tf.distribute.experimental.ParameterServerStrategy
    with pytest.raises(tf.Error, match="an in-process cluster has no network to secure"):
        PS(auth_dir="keys")
    with pytest.raises(tf.Error, match="--min-workers 2 is for a cluster of processes"):
        PS(mode="sync", min_workers=2)
    with pytest.raises(tf.Error, match="num_workers must be from 1 to 9999, got 0"):
        PS(num_workers=0)
    cluster = tf.distribute.cluster_resolver.SimpleClusterResolver(
        {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}, task_type="chief", task_id=0)
    with pytest.raises(tf.Error, match="num_ps, num_workers and threads_per_worker make a cluster in this process; "
                                       "this one's tasks come from the cluster resolver"):
        PS(cluster, num_workers=2)
