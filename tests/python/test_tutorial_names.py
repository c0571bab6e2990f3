"""The TensorFlow names the reference tutorials use beyond today's: keras.utils (to_categorical,
set_random_seed) and compat.v1's strategies, with TF1's graph API refused by name."""
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import CLI, small_data


def test_to_categorical_is_keras_one_hot(tf):
    out = tf.keras.utils.to_categorical([0, 2, 1, 2])
    assert out.dtype == np.float32 and out.shape == (4, 3)
    np.testing.assert_array_equal(out, np.eye(3, dtype=np.float32)[[0, 2, 1, 2]])
    # A trailing axis of 1 is dropped (labels as a column), the class count as given, the dtype as asked.
    col = tf.keras.utils.to_categorical(np.array([[1], [3]], dtype=np.int64), num_classes=5, dtype="float64")
    assert col.dtype == np.float64 and col.shape == (2, 5)
    np.testing.assert_array_equal(col.argmax(axis=1), [1, 3])
    # Other leading shapes are kept; whole floats are class indices (the R tutorial's labels are doubles).
    grid = tf.keras.utils.to_categorical(np.array([[0.0, 1.0], [1.0, 0.0]]), 2)
    assert grid.shape == (2, 2, 2) and grid[0, 1, 1] == 1 and grid[1, 0, 1] == 1 and grid.sum() == 4


def test_to_categorical_names_a_bad_label(tf):
    with pytest.raises(tf.Error, match=r"label 10 at index 2 is outside \[0, 10\)"):
        tf.keras.utils.to_categorical([1, 2, 10], num_classes=10)
    with pytest.raises(tf.Error, match=r"label -1 at index 0 is outside \[0, 3\)"):
        tf.keras.utils.to_categorical([-1, 2])
    with pytest.raises(tf.Error, match=r"label 1.5 at index 1 is not a class index"):
        tf.keras.utils.to_categorical([0.0, 1.5])
    with pytest.raises(tf.Error, match="num_classes must be a positive int, got 0"):
        tf.keras.utils.to_categorical([0], num_classes=0)


def test_to_categorical_labels_train_with_categorical_cross_entropy(tf):
    from conftest import small_data

    x, y = small_data()
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="softmax", input_shape=(x.shape[1],))], seed=1)
    model.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, tf.keras.utils.to_categorical(y, 5), batch_size=32, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


def test_set_random_seed_seeds_python_numpy_and_the_next_models(tf):
    def weights():
        model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,))])
        return model.get_weights()[0]

    tf.keras.utils.set_random_seed(7)
    a, r, n = weights(), random.random(), np.random.rand()
    tf.keras.utils.set_random_seed(7)
    b, r2, n2 = weights(), random.random(), np.random.rand()
    np.testing.assert_array_equal(a, b)
    assert (r, n) == (r2, n2)
    tf.keras.utils.set_random_seed(8)
    assert not np.array_equal(weights(), a)
    explicit = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,))], seed=7).get_weights()[0]
    np.testing.assert_array_equal(explicit, a)  # a model's own seed wins, whatever was set
    tf.keras.utils.set_random_seed(0)  # the default again, for the tests after
    with pytest.raises(tf.Error, match="seed must be an int of 0 or more, got -1"):
        tf.keras.utils.set_random_seed(-1)


def test_compat_v1_strategies_are_todays_classes(tf):
    v1 = tf.compat.v1.distribute
    assert v1.MirroredStrategy is tf.distribute.MirroredStrategy
    assert v1.experimental.CentralStorageStrategy is tf.distribute.experimental.CentralStorageStrategy
    assert v1.experimental.MultiWorkerMirroredStrategy is tf.distribute.experimental.MultiWorkerMirroredStrategy
    assert v1.experimental.ParameterServerStrategy is tf.distribute.experimental.ParameterServerStrategy
    strategy = tf.compat.v1.distribute.MirroredStrategy()  # the R tutorial's first strategy
    with strategy.scope():
        assert tf.distribute.get_strategy() is strategy


def test_compat_v1_refuses_the_graph_api_by_name(tf):
    with pytest.raises(AttributeError, match=r"no TensorFlow 1 graph API .*tf.compat.v1.Session does not exist"):
        tf.compat.v1.Session()
    with pytest.raises(AttributeError, match=r"tf.compat.v1.placeholder does not exist"):
        tf.compat.v1.placeholder
    with pytest.raises(AttributeError, match=r"tf.compat.v1.distribute.experimental.TPUStrategy does not exist"):
        tf.compat.v1.distribute.experimental.TPUStrategy
    assert not hasattr(tf.compat.v1, "__wrapped__")  # dunder lookups stay plain AttributeErrors


def test_the_r_tutorials_strategies_are_made_and_train_in_one_process(tf, capfd):
    from conftest import small_data

    x, y = small_data()
    strategies = {
        "mirrored": tf.compat.v1.distribute.MirroredStrategy(),
        "central_storage": tf.distribute.experimental.CentralStorageStrategy(),
        # No launcher and no TF_CONFIG: this process is the one worker, as TensorFlow runs it.
        "multiworker_mirrored": tf.distribute.experimental.MultiWorkerMirroredStrategy(),
    }
    assert "this process is the only worker" in capfd.readouterr().err
    assert strategies["multiworker_mirrored"].name == "multiworker:1"
    for name, strategy in strategies.items():
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="softmax", input_shape=(20,))], seed=3)
            model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
        history = model.fit(x, tf.keras.utils.to_categorical(y, 5), batch_size=32, epochs=2, verbose=0,
                            validation_split=0.2)
        assert len(history.history["val_loss"]) == 2, name


def test_tensorflows_arguments_act_or_are_refused(tf):
    d = tf.distribute
    # cross_device_ops: on CPU replicas every kind is the same in-process sum; anything else is refused.
    for ops in (d.NcclAllReduce(), d.HierarchicalCopyAllReduce(num_packs=2), d.ReductionToOneDevice("/cpu:0")):
        assert d.MirroredStrategy(num_replicas=2, cross_device_ops=ops).num_replicas_in_sync == 2
    with pytest.raises(tf.Error, match="cross_device_ops must be NcclAllReduce"):
        d.MirroredStrategy(cross_device_ops="nccl")
    if len(tf.config.list_logical_devices("GPU")) < 2:  # a replica per GPU, where there are GPUs
        with pytest.raises(tf.Error, match=r"MirroredStrategy: there is no device '/gpu:\d' \("):
            d.MirroredStrategy(devices=["/gpu:0", "/gpu:1"])
    with pytest.raises(tf.Error, match=r"devices \['/cpu:0', '/gpu:0'\] mix CPUs and GPUs"):
        d.MirroredStrategy(devices=["/cpu:0", "/gpu:0"])
    with pytest.raises(tf.Error, match=r"OneDeviceStrategy: '/gpu:0' is not this machine's CPU .*over GPUs are not built yet"):
        d.OneDeviceStrategy("/gpu:0")
    assert d.OneDeviceStrategy("/device:CPU:0").num_replicas_in_sync == 1
    with pytest.raises(tf.Error, match="parameter_device: '/job:ps/task:0' is not this machine's CPU"):
        d.experimental.CentralStorageStrategy(parameter_device="/job:ps/task:0")
    # communication_options: its pack size and timeout reach the workers; NCCL is refused.
    options = d.experimental.CommunicationOptions(bytes_per_pack=1 << 20, timeout_seconds=5,
                                                  implementation=d.experimental.CommunicationImplementation.RING)
    assert d.MultiWorkerMirroredStrategy(communication_options=options).name == "multiworker:1"
    with pytest.raises(tf.Error, match="implementation 'NCCL'"):
        d.experimental.CommunicationOptions(implementation=d.experimental.CommunicationImplementation.NCCL)
    with pytest.raises(tf.Error, match="cluster_resolver must be a TFConfigClusterResolver, a SimpleClusterResolver or a "
                                       "SlurmClusterResolver, got object"):
        d.MultiWorkerMirroredStrategy(cluster_resolver=object())
    with pytest.raises(tf.Error, match="variable_partitioner must be one of"):
        d.ParameterServerStrategy(variable_partitioner=lambda shape: 2)
    # An unknown keyword is Python's TypeError, naming it; Horovod's that Tandem does not act on are
    # refused by name.
    with pytest.raises(TypeError, match="num_gpus"):
        d.MirroredStrategy(num_gpus=2)
    with pytest.raises(tf.Error, match="compression="):
        tf.hvd.DistributedOptimizer("sgd", compression=tf.hvd.Compression.fp16)
    with pytest.raises(tf.Error, match="device="):
        tf.hvd.callbacks.MetricAverageCallback(device="/gpu:0")


def test_partitioners_are_the_engines():
    import tandem.distribute as d

    assert d.experimental.partitioners.MinSizePartitioner(min_shard_bytes=1024, max_shards=4)._partitioner.kind == 1
    assert d.experimental.partitioners.FixedShardsPartitioner(3)._partitioner.kind == 2
    assert d.experimental.partitioners.MaxSizePartitioner(1 << 20)._partitioner.kind == 3


def test_tf_config_cluster_resolver_reads_tf_config(tf, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["localhost:2222", "localhost:2223"], '
                                    '"ps": ["localhost:2224"]}, "task": {"type": "worker", "index": 1}}')
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    spec = resolver.cluster_spec()
    assert spec == tf.train.ClusterSpec({"worker": ["localhost:2222", "localhost:2223"], "ps": ["localhost:2224"]})
    assert sorted(spec.jobs) == ["ps", "worker"] and spec.num_tasks("worker") == 2
    assert spec.task_address("worker", 1) == "localhost:2223"
    with pytest.raises(tf.Error, match="task_id 0 is not TF_CONFIG's \\(1\\)"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver(task_id=0)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(tf.Error, match="TF_CONFIG is not JSON"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver()
    monkeypatch.delenv("TF_CONFIG")
    # Without TF_CONFIG: no cluster, and MultiWorkerMirroredStrategy takes it as the one worker.
    alone = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert not alone.cluster_spec() and alone.task_type is None
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=alone)
    assert strategy.name == "multiworker:1"
    with pytest.raises(ValueError, match="No such job"):
        tf.train.ClusterSpec({"worker": ["a:1"]}).num_tasks("chief")
    with pytest.raises(tf.Error, match="job 'worker' needs a list of 'host:port' addresses"):
        tf.train.ClusterSpec({"worker": "a:1"})


SIMPLE_RESOLVER = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tandem as tf
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(64, 6)).astype(np.float32)
    y = (np.arange(64) % 4).astype(np.int32)
    strategy = None
    if sys.argv[1] == "cluster":  # the cluster from the resolver alone: TF_CONFIG is read, then removed
        config = json.loads(os.environ.pop("TF_CONFIG"))
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(config["cluster"]), task_type=config["task"]["type"],
            task_id=config["task"]["index"])
        strategy = tf.distribute.ParameterServerStrategy(resolver, mode="sync")
    def build():
        m = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="softmax", input_shape=(6,))], seed=3)
        m.compile(optimizer="SGD", loss="sparse_categorical_crossentropy")
        return m
    if strategy is None:
        m = build()
    else:
        with strategy.scope():
            m = build()
    m.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0)
    if strategy is None or strategy.is_chief:
        np.savez(sys.argv[2], *m.get_weights())
""")


def test_a_simple_cluster_resolver_gives_the_cluster(tf, tmp_path):
    """Every task of `tandem launch --ps 1 --workers 1` makes its strategy from a
    SimpleClusterResolver (TF_CONFIG removed first): the job runs and ends at one process's weights."""
    script = tmp_path / "simple.py"
    script.write_text(SIMPLE_RESOLVER)
    for command in ([sys.executable, str(script), "alone", str(tmp_path / "alone.npz")],
                    [str(CLI), "launch", "--ps", "1", "--workers", "1", "--", sys.executable, str(script), "cluster",
                     str(tmp_path / "cluster.npz")]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
    a, b = np.load(tmp_path / "alone.npz"), np.load(tmp_path / "cluster.npz")
    for name in a.files:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6)
    r = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({"worker": ["localhost:1"]}),
                                                             task_type="worker", task_id=0)
    assert r.cluster_spec().as_dict() == {"worker": ["localhost:1"]}
    assert tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=r).name == "multiworker:1"
    two = tf.distribute.cluster_resolver.SimpleClusterResolver({"worker": ["a:1", "b:1"]}, task_type="worker",
                                                               task_id=1)
    with pytest.raises(tf.Error, match="a cluster of more than one task runs under `tandem launch`"):
        tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=two)
    with pytest.raises(tf.Error, match="task_id must be an index into the 'worker' job's 2 tasks, got 2"):
        tf.distribute.cluster_resolver.SimpleClusterResolver({"worker": ["a:1", "b:1"]}, task_type="worker", task_id=2)
    with pytest.raises(tf.Error, match="task_type 'evaluator' is not a job of the cluster"):
        tf.distribute.cluster_resolver.SimpleClusterResolver({"worker": ["a:1"]}, task_type="evaluator", task_id=0)


def test_a_model_made_outside_a_scope_takes_the_scope_its_layers_are_added_in(tf):
    """The R tutorial's order: keras_model_sequential(), then the layers inside with(scope)."""
    x, y = small_data()
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    model = tf.keras.Sequential()
    assert model.distribute_strategy is None
    with strategy.scope():
        model.add(tf.keras.layers.Dense(5, activation="softmax", input_shape=(20,)))
    assert model.distribute_strategy is strategy
    model.compile(optimizer="RMSprop", loss="sparse_categorical_crossentropy")  # Keras' names in any case
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    # A model with layers keeps its strategy: a later scope does not move it.
    with tf.distribute.MirroredStrategy(num_replicas=2).scope():
        model.add(tf.keras.layers.Dense(3))
    assert model.distribute_strategy is strategy


def test_tf_function_runs_the_function_as_written(tf):
    calls = []

    @tf.function
    def step(v):
        calls.append(v)
        return v * 2

    @tf.function(input_signature=None, reduce_retracing=True)
    def other(v):
        return v + 1

    assert step(3) == 6 and other(3) == 4 and calls == [3]
    with pytest.raises(tf.Error, match="jit_compile=True asks for XLA"):
        tf.function(lambda v: v, jit_compile=True)
    with pytest.raises(tf.Error, match="experimental_compile=True asks for XLA"):
        tf.function(lambda v: v, experimental_compile=True)
    with pytest.raises(tf.Error, match="input_signature is not supported"):
        tf.function(lambda v: v, input_signature=["a TensorSpec"])
