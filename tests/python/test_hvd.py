"""The Horovod Keras recipe from Python (``import tandem.hvd as hvd``): alone, a group of one
that trains as the plain optimizer; under `tandem launch -np 2`, each process on its shard, the
workers' weights equal after training (broadcast at the start, gradients averaged)."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import CLI, small_data

RECIPE = textwrap.dedent("""
    import sys
    import numpy as np
    import tandem as tf
    import tandem.hvd as hvd
    hvd.init()
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, size=(512, 20)).astype(np.float32)
    y = (np.arange(512) % 5).astype(np.int32)
    shard = slice(hvd.rank() * 512 // hvd.size(), (hvd.rank() + 1) * 512 // hvd.size())
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(20,)),
                                 tf.keras.layers.Dense(5)], seed=hvd.rank())  # different starts: the broadcast evens them
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    history = model.fit(x[shard], y[shard], epochs=2, batch_size=32, verbose=0, callbacks=callbacks)
    np.savez(f"{sys.argv[1]}.{hvd.rank()}.npz", *model.get_weights(), loss=np.array(history.history["loss"]))
""")


def test_alone_a_group_of_one_trains_as_the_plain_optimizer():
    import tandem as tf
    import tandem.hvd as hvd

    hvd.init()
    assert (hvd.rank(), hvd.size(), hvd.local_rank()) == (0, 1, 0)
    x, y = small_data()

    def trained(optimizer):
        model = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(20,))], seed=1)
        model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, epochs=2, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        return model.get_weights()

    for a, b in zip(trained(tf.keras.optimizers.Adam()), trained(hvd.DistributedOptimizer("adam"))):
        assert np.array_equal(a, b)


def test_the_recipe_under_launch_keeps_the_workers_equal(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (Debian: openmpi-bin)")
    script = tmp_path / "recipe.py"
    script.write_text(RECIPE)
    run = subprocess.run([str(CLI), "launch", "-np", "2", "--", sys.executable, str(script), str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    a, b = np.load(tmp_path / "w.0.npz"), np.load(tmp_path / "w.1.npz")
    for name in a.files:
        assert np.array_equal(a[name], b[name]), f"{name} differs between the workers"
