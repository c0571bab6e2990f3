"""tf.config and tf.device over the engine's logical CPU devices: the CPU shared out, layers placed
by `with tf.device(...)`, and a placed model training to the bits of an unplaced one."""
import numpy as np
import pytest

from conftest import small_data


def test_devices_are_listed_shared_out_and_placed(tf):
    cpu = tf.config.list_physical_devices("CPU")[0]
    gpus = tf.config.list_physical_devices("GPU")  # none without a GPU and a build with CUDA
    assert tf.config.list_physical_devices() == [cpu] + gpus and cpu.device_type == "CPU"
    assert [g.name for g in gpus] == [f"/physical_device:GPU:{i}" for i in range(len(gpus))]
    assert [d.name for d in tf.config.list_logical_devices("CPU")] == ["/device:CPU:0"]
    assert tf.config.get_logical_device_configuration(cpu) is None
    tf.config.set_visible_devices([], "GPU")  # the usual line hiding GPUs: nothing to hide
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration(memory_limit=64)])
    assert [d.name for d in tf.config.list_logical_devices()] == ["/device:CPU:0", "/device:CPU:1"]
    assert tf.config.get_logical_device_configuration(cpu)[1] == tf.config.LogicalDeviceConfiguration(memory_limit=64)

    x, y = small_data(128)

    def trained(placed):
        model = tf.keras.Sequential(seed=5)
        model.add(tf.keras.layers.Dense(16, activation="relu", input_shape=(20,)))
        with tf.device("/job:localhost/replica:0/task:0/device:CPU:1") if placed else _nothing():
            model.add(tf.keras.layers.Dense(5, activation="softmax"))
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        return model

    placed, alone = trained(True), trained(False)
    assert [layer.device for layer in placed.layers] == [None, "cpu:1"]
    assert [layer.device for layer in alone.layers] == [None, None]
    for a, b in zip(alone.get_weights(), placed.get_weights()):
        assert a.tobytes() == b.tobytes()  # a move changes where a tensor lives, not its values
    with tf.device("/cpu:0"):
        assert tf.keras.layers.Dense(2).device == "cpu"
    assert tf.keras.layers.Dense(2).device is None  # the block closed


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_device_mistakes_are_named(tf):
    if not tf.config.list_physical_devices("GPU"):
        with pytest.raises(tf.Error, match=r"there is no device /gpu:0 \((no GPU can be used|this build has no CUDA)"):
            tf.device("/gpu:0")
    with pytest.raises(tf.Error, match="there is no device /gpu:9"):
        tf.device("/gpu:9")
    with pytest.raises(tf.Error, match="'/tpu:0' is not a CPU or GPU device"):
        tf.device("/tpu:0")
    with pytest.raises(tf.Error, match="there is no device cpu:7"):
        tf.device("/cpu:7")
    gpus = tf.config.list_physical_devices("GPU")
    missing = tf.config.PhysicalDevice(f"/physical_device:GPU:{len(gpus)}", "GPU")  # one past the last
    with pytest.raises(tf.Error, match=f"there is no physical GPU {len(gpus)}|this build has no CUDA device"):
        tf.config.set_logical_device_configuration(missing, [tf.config.LogicalDeviceConfiguration(memory_limit=64)] * 2)
    assert tf.config.get_logical_device_configuration(missing) is None
    assert len(tf.config.list_logical_devices("GPU")) == len(gpus)
    with pytest.raises(tf.Error, match="is not a physical device of this machine"):
        tf.config.set_logical_device_configuration(
            tf.config.PhysicalDevice("/physical_device:GPU:x", "GPU"), [tf.config.LogicalDeviceConfiguration()])
    if gpus:  # threads are a CPU device's setting
        with pytest.raises(tf.Error, match="threads=2 is a CPU device's setting"):
            tf.config.set_logical_device_configuration(gpus[0], [tf.config.LogicalDeviceConfiguration(threads=2)])
    with pytest.raises(tf.Error, match="memory_limit must be a positive number of MiB"):
        tf.config.LogicalDeviceConfiguration(memory_limit=-1)
    with pytest.raises(tf.Error, match="cannot hide it"):
        tf.config.set_visible_devices([], "CPU")
    with pytest.raises(tf.Error, match="is not a GPU"):
        tf.config.experimental.set_memory_growth(tf.config.list_physical_devices("CPU")[0], True)
    with pytest.raises(tf.Error, match="set_intra_op_parallelism_threads"):
        tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    assert tf.config.threading.get_intra_op_parallelism_threads() == 1


def test_tensor_float_32_is_off_until_enabled_and_refuses_a_non_boolean(tf):
    assert tf.config.experimental.tensor_float_32_execution_enabled() is False
    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        assert tf.config.experimental.tensor_float_32_execution_enabled() is True
        # The CPU's products are float32 either way: a model trains to the same weights.
        x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
        y = np.arange(8, dtype=np.int32) % 2
        weights = []
        for enabled in (True, False):
            tf.config.experimental.enable_tensor_float_32_execution(enabled)
            model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,), kernel_initializer="ones")])
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
            model.fit(x, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
            weights.append(model.get_weights()[0])
        np.testing.assert_array_equal(weights[0], weights[1])
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    with pytest.raises(tf.Error, match="enabled must be True or False"):
        tf.config.experimental.enable_tensor_float_32_execution("yes")
