"""Every parameter of TensorFlow's signature of each function and class Tandem mirrors either acts
(does what Keras / TensorFlow does), or is refused (a tandem.Error naming it), or is a hint that
changes no result and is listed as such in docs/python.md; no ``**kwargs`` swallows anything.

TABLE maps each public callable of the package (its dotted path under ``tandem``, as its module
and qualified name give it, so that an alias such as ``tandem.keras.Sequential`` or
``tandem.compat.v1.distribute.MirroredStrategy`` is the one entry) to the parameters of
TensorFlow's documented signature (tf.keras 2.15 and Keras 3, their union where they differ), each
classed as:

    ACTS                  it does what TensorFlow's does
    HINT                  accepted, changes no result here, listed in docs/python.md
    refused(sample)       that non-default value raises tandem.Error naming the parameter

What Tandem does not yet do as the rule asks is in KNOWN_GAPS, one line each: the tests below
take those pairs out of their own checks, and ``test_no_known_gaps`` fails while any is left.
Past 500 lines as one table: an entry per public callable, which a new one joins.
"""
import inspect
import re
import types

import numpy as np

from conftest import ROOT, small_data

ACTS = "acts"
HINT = "hint"


class refused:  # noqa: N801 - reads as a table entry
    def __init__(self, sample):
        self.sample = sample

    def __repr__(self):
        return f"refused({self.sample!r})"


# The base Keras layer's keyword arguments every layer takes (tf.keras 2.15's Layer(trainable, name,
# dtype, dynamic) and its input_shape; Keras 3's Layer(activity_regularizer, trainable, dtype,
# autocast, name)).
def _layer_base(**more):
    return {"trainable": ACTS, "name": ACTS, "dtype": ACTS, "dynamic": refused(True), "autocast": refused(False),
            "input_shape": ACTS, "activity_regularizer": ACTS, **more}


def _merge_base(**more):
    """A merge layer's: the base layer's but input_shape (its inputs are the tensors it is called on)."""
    return {k: v for k, v in _layer_base(**more).items() if k != "input_shape"}


def _optimizer(**own):
    """Keras 3's base optimizer's arguments (and tf.keras 2.15's jit_compile) after the optimizer's own."""
    return {**own, "weight_decay": ACTS, "clipnorm": ACTS, "clipvalue": ACTS, "global_clipnorm": ACTS,
            "use_ema": refused(True), "ema_momentum": refused(0.5), "ema_overwrite_frequency": refused(10),
            "loss_scale_factor": refused(128.0), "gradient_accumulation_steps": refused(2), "name": HINT,
            "jit_compile": HINT}


_TB_REFUSED = {"histogram_freq": refused(1), "write_images": refused(True), "write_steps_per_second": refused(True),
               "profile_batch": refused(2), "embeddings_freq": refused(1),
               "embeddings_metadata": refused({"dense": "meta.tsv"})}

TABLE = {
    # --- tf ---
    "GradientTape": {"persistent": ACTS, "watch_accessed_variables": refused(False)},
    "GradientTape.watch": {"tensor": ACTS},
    "GradientTape.gradient": {"target": ACTS, "sources": ACTS, "output_gradients": ACTS,
                              "unconnected_gradients": refused("none")},
    "function": {"func": ACTS, "input_signature": refused(["a TensorSpec"]), "autograph": HINT,
                 "jit_compile": refused(True), "reduce_retracing": HINT, "experimental_implements": refused("embed"),
                 "experimental_autograph_options": HINT, "experimental_attributes": refused({"a": 1}),
                 "experimental_relax_shapes": HINT, "experimental_compile": refused(True),
                 "experimental_follow_type_hints": HINT},
    "reduce_sum": {"input_tensor": ACTS, "axis": refused(0), "keepdims": refused(True), "name": HINT},
    "reduce_mean": {"input_tensor": ACTS, "axis": refused(0), "keepdims": refused(True), "name": HINT},
    "Tensor": {},  # tf.Tensor is made by ops, not by its constructor
    "Tensor.numpy": {},
    "config.device": {"device_name": ACTS},
    # --- tf.config ---
    "config.list_physical_devices": {"device_type": ACTS},
    "config.list_logical_devices": {"device_type": ACTS},
    "config.get_visible_devices": {"device_type": ACTS},
    "config.set_visible_devices": {"devices": ACTS, "device_type": ACTS},
    "config.set_logical_device_configuration": {"device": ACTS, "logical_devices": ACTS},
    "config.get_logical_device_configuration": {"device": ACTS},
    "config.LogicalDeviceConfiguration": {"memory_limit": ACTS, "experimental_priority": refused(1),
                                          "experimental_device_ordinal": refused(1)},
    "config.PhysicalDevice": {"name": ACTS, "device_type": ACTS},
    "config.LogicalDevice": {"name": ACTS, "device_type": ACTS},
    "config.experimental.enable_tensor_float_32_execution": {"enabled": ACTS},
    "config.experimental.tensor_float_32_execution_enabled": {},
    "config.experimental.set_memory_growth": {"device": ACTS, "enable": HINT},
    "config.threading.set_intra_op_parallelism_threads": {"num_threads": ACTS},
    "config.threading.get_intra_op_parallelism_threads": {},
    "config.threading.set_inter_op_parallelism_threads": {"num_threads": refused(2)},
    "config.threading.get_inter_op_parallelism_threads": {},
    # --- tf.data ---
    "data.Dataset": {},  # made by its sources (from_tensor_slices, ...), as tf.data.Dataset
    "data.Dataset.from_tensor_slices": {"tensors": ACTS, "name": HINT},
    "data.Dataset.from_tensors": {"tensors": ACTS, "name": HINT},
    "data.Dataset.range": {"output_type": ACTS, "name": HINT},  # (*args: start, stop, step)
    "data.Dataset.batch": {"batch_size": ACTS, "drop_remainder": ACTS, "num_parallel_calls": HINT,
                           "deterministic": HINT, "name": HINT},
    "data.Dataset.shuffle": {"buffer_size": ACTS, "seed": ACTS, "reshuffle_each_iteration": ACTS, "name": HINT},
    "data.Dataset.repeat": {"count": ACTS, "name": HINT},
    "data.Dataset.take": {"count": ACTS, "name": HINT},
    "data.Dataset.skip": {"count": ACTS, "name": HINT},
    "data.Dataset.cache": {"filename": ACTS, "name": HINT},
    "data.Dataset.prefetch": {"buffer_size": ACTS, "name": HINT},
    "data.Dataset.shard": {"num_shards": ACTS, "index": ACTS, "name": HINT},
    "data.Dataset.map": {"map_func": ACTS, "num_parallel_calls": ACTS, "deterministic": HINT, "name": HINT},
    "data.Dataset.filter": {"predicate": ACTS, "name": HINT},
    "data.Dataset.as_numpy_iterator": {},
    "data.Dataset.cardinality": {},
    # --- tf.distribute ---
    "distribute.Strategy": {},  # tf.distribute.Strategy(extended) is made by its subclasses
    "distribute.Strategy.scope": {},
    "distribute.Strategy.run": {"fn": ACTS, "args": ACTS, "kwargs": refused({"training": True}),
                                "options": refused(object())},
    "distribute.Strategy.experimental_distribute_dataset": {"dataset": ACTS, "options": refused(object())},
    "distribute.Strategy.distribute_datasets_from_function": {"dataset_fn": ACTS, "options": refused(object())},
    "distribute.Strategy.experimental_local_results": {"value": ACTS},
    "distribute.Strategy.reduce": {"reduce_op": ACTS, "value": ACTS, "axis": refused(0)},
    "distribute.MirroredStrategy": {"devices": ACTS, "cross_device_ops": HINT},
    "distribute.CentralStorageStrategy": {"compute_devices": ACTS, "parameter_device": ACTS},
    "distribute.OneDeviceStrategy": {"device": ACTS},
    "distribute.MultiWorkerMirroredStrategy": {"cluster_resolver": ACTS, "communication_options": ACTS},
    "distribute.ParameterServerStrategy": {"cluster_resolver": ACTS, "variable_partitioner": ACTS},
    "distribute.CommunicationOptions": {"bytes_per_pack": ACTS, "timeout_seconds": ACTS, "implementation": ACTS},
    "distribute.CommunicationImplementation": {},  # an enum
    "distribute.ReduceOp": {},  # an enum
    "distribute.CrossDeviceOps": {},
    "distribute.NcclAllReduce": {"num_packs": HINT},
    "distribute.HierarchicalCopyAllReduce": {"num_packs": HINT},
    "distribute.ReductionToOneDevice": {"reduce_to_device": ACTS, "accumulation_dtype": refused("float16")},
    "distribute.MinSizePartitioner": {"min_shard_bytes": ACTS, "max_shards": ACTS, "bytes_per_string": HINT},
    "distribute.MaxSizePartitioner": {"max_shard_bytes": ACTS, "max_shards": ACTS, "bytes_per_string": HINT},
    "distribute.FixedShardsPartitioner": {"num_shards": ACTS},
    "distribute.InputContext": {"num_input_pipelines": ACTS, "input_pipeline_id": ACTS, "num_replicas_in_sync": ACTS},
    "distribute.InputContext.get_per_replica_batch_size": {"global_batch_size": ACTS},
    "distribute.DistributedDataset": {},  # made by the strategy's experimental_distribute_dataset
    "distribute.PerReplica": {},  # made by strategy.run
    "distribute.get_strategy": {},
    "distribute.has_strategy": {},
    "cluster_resolver.TFConfigClusterResolver": {"task_type": ACTS, "task_id": ACTS, "rpc_layer": ACTS,
                                                 "environment": ACTS},
    "cluster_resolver.TFConfigClusterResolver.cluster_spec": {},
    "cluster_resolver.TFConfigClusterResolver.num_accelerators": {"task_type": ACTS, "task_id": ACTS,
                                                                  "config_proto": ACTS},
    "cluster_resolver.SimpleClusterResolver": {"cluster_spec": ACTS, "master": ACTS, "task_type": ACTS,
                                               "task_id": ACTS, "environment": ACTS,
                                               "num_accelerators": refused({"GPU": 1}), "rpc_layer": ACTS},
    "cluster_resolver.SimpleClusterResolver.cluster_spec": {},
    "cluster_resolver.SimpleClusterResolver.master": {"task_type": ACTS, "task_id": ACTS, "rpc_layer": ACTS},
    "cluster_resolver.SimpleClusterResolver.num_accelerators": {"task_type": ACTS, "task_id": ACTS,
                                                                "config_proto": ACTS},
    "cluster_resolver.SlurmClusterResolver": {"jobs": ACTS, "port_base": ACTS, "gpus_per_node": ACTS,
                                              "gpus_per_task": ACTS, "tasks_per_node": ACTS, "auto_set_gpu": ACTS,
                                              "rpc_layer": ACTS},
    "cluster_resolver.SlurmClusterResolver.cluster_spec": {},
    "cluster_resolver.SlurmClusterResolver.get_task_info": {},
    "cluster_resolver.SlurmClusterResolver.master": {"task_type": ACTS, "task_id": ACTS, "rpc_layer": ACTS},
    "cluster_resolver.SlurmClusterResolver.num_accelerators": {"task_type": ACTS, "task_id": ACTS,
                                                               "config_proto": ACTS},
    "train.ClusterSpec": {"cluster": ACTS},
    "train.ClusterSpec.as_dict": {},
    "train.ClusterSpec.job_tasks": {"job_name": ACTS},
    "train.ClusterSpec.num_tasks": {"job_name": ACTS},
    "train.ClusterSpec.task_address": {"job_name": ACTS, "task_index": ACTS},
    # --- tf.nn ---
    "nn.compute_average_loss": {"per_example_loss": ACTS, "sample_weight": ACTS, "global_batch_size": ACTS},
    "nn.scale_regularization_loss": {"regularization_loss": ACTS},
    # --- tf.keras: the model ---
    "keras.models.Model": {"inputs": ACTS, "outputs": ACTS, "name": ACTS, "trainable": ACTS},
    "keras.models.Sequential": {"layers": ACTS, "name": ACTS, "trainable": ACTS},
    "keras.models.Sequential.add": {"layer": ACTS, "rebuild": HINT},
    "keras.models.Model.build": {"input_shape": ACTS},
    "keras.models.Model.__call__": {"inputs": ACTS, "training": ACTS, "mask": refused("ones")},
    "keras.models.Model.compile": {
        "optimizer": ACTS, "loss": ACTS, "metrics": ACTS, "loss_weights": ACTS,
        "weighted_metrics": refused(["accuracy"]), "run_eagerly": HINT, "steps_per_execution": HINT,
        "jit_compile": refused(True), "auto_scale_loss": HINT, "pss_evaluation_shards": refused(2)},
    "keras.models.Model.fit": {
        "x": ACTS, "y": ACTS, "batch_size": ACTS, "epochs": ACTS, "verbose": ACTS, "callbacks": ACTS,
        "validation_split": ACTS, "validation_data": ACTS, "shuffle": ACTS, "class_weight": ACTS,
        "sample_weight": ACTS, "initial_epoch": ACTS, "steps_per_epoch": ACTS, "validation_steps": refused(2),
        "validation_batch_size": refused(8), "validation_freq": refused(2), "max_queue_size": HINT, "workers": HINT,
        "use_multiprocessing": HINT},
    "keras.models.Model.evaluate": {
        "x": ACTS, "y": ACTS, "batch_size": ACTS, "verbose": ACTS, "sample_weight": ACTS, "steps": ACTS,
        "callbacks": refused("TerminateOnNaN"), "max_queue_size": HINT, "workers": HINT, "use_multiprocessing": HINT,
        "return_dict": ACTS},
    "keras.models.Model.predict": {
        "x": ACTS, "batch_size": ACTS, "verbose": ACTS, "steps": ACTS, "callbacks": refused("TerminateOnNaN"),
        "max_queue_size": HINT, "workers": HINT, "use_multiprocessing": HINT},
    "keras.models.Model.count_params": {},
    "keras.models.Model.get_weights": {},
    "keras.models.Model.set_weights": {"weights": ACTS},
    "keras.models.Model.summary": {"line_length": refused(120), "positions": refused([0.5, 0.8, 1.0]),
                                        "print_fn": ACTS, "expand_nested": HINT, "show_trainable": refused(True),
                                        "layer_range": refused(["dense", "dense"])},
    "keras.models.Model.save_weights": {"filepath": ACTS, "overwrite": ACTS, "save_format": refused("h5"),
                                             "options": refused(object()), "max_shard_size": refused("1GB")},
    "keras.models.Model.load_weights": {"filepath": ACTS, "skip_mismatch": refused(True),
                                             "by_name": refused(True), "options": refused(object())},
    "keras.models.Model.save": {"filepath": ACTS, "overwrite": ACTS, "save_format": refused("h5"),
                                     "zipped": refused(False), "include_optimizer": refused(False),
                                     "signatures": refused(object()), "options": refused(object()),
                                     "save_traces": refused(False)},
    "keras.models.Model.to_json": {},  # (**kwargs: json.dumps')
    "keras.models.load_model": {"filepath": ACTS, "custom_objects": refused({"Mine": object}), "compile": ACTS,
                                "safe_mode": HINT},
    "keras.models.model_from_json": {"json_string": ACTS, "custom_objects": refused({"Mine": object})},
    # --- tf.keras.layers ---
    "keras.layers.Dense": _layer_base(
        units=ACTS, activation=ACTS, use_bias=ACTS, kernel_initializer=ACTS, bias_initializer=ACTS,
        kernel_regularizer=ACTS, bias_regularizer=ACTS, activity_regularizer=ACTS,
        kernel_constraint=refused("non_neg"), bias_constraint=refused("non_neg"), lora_rank=refused(4), input_dim=ACTS),
    "keras.layers.Conv2D": _layer_base(
        filters=ACTS, kernel_size=ACTS, strides=ACTS, padding=ACTS, data_format=refused("channels_first"),
        dilation_rate=refused(2), groups=refused(2), activation=ACTS, use_bias=ACTS, kernel_initializer=ACTS, bias_initializer=ACTS,
        kernel_regularizer=ACTS, bias_regularizer=ACTS, activity_regularizer=ACTS,
        kernel_constraint=refused("non_neg"), bias_constraint=refused("non_neg")),
    "keras.layers.Dropout": _layer_base(rate=ACTS, noise_shape=refused((None, 1)), seed=ACTS),
    "keras.layers.MaxPooling2D": _layer_base(pool_size=ACTS, strides=ACTS, padding=ACTS,
                                             data_format=refused("channels_first")),
    "keras.layers.AveragePooling2D": _layer_base(pool_size=ACTS, strides=ACTS, padding=ACTS,
                                                 data_format=refused("channels_first")),
    "keras.layers.Flatten": _layer_base(data_format=refused("channels_first")),
    "keras.layers.BatchNormalization": _layer_base(
        axis=refused(1), momentum=ACTS, epsilon=ACTS, center=refused(False), scale=refused(False),
        beta_initializer=refused("he_normal"), gamma_initializer=refused("zeros"), moving_mean_initializer=refused("he_normal"),
        moving_variance_initializer=refused("zeros"), beta_regularizer=refused("l2"), gamma_regularizer=refused("l2"),
        beta_constraint=refused("non_neg"), gamma_constraint=refused("non_neg"), synchronized=ACTS),
    "keras.layers.Activation": _layer_base(activation=ACTS),
    "keras.layers.ReLU": _layer_base(max_value=refused(6.0), negative_slope=refused(0.1), threshold=refused(0.5)),
    "keras.layers.GlobalAveragePooling2D": _layer_base(data_format=refused("channels_first"), keepdims=ACTS),
    "keras.layers.ZeroPadding2D": _layer_base(padding=ACTS, data_format=refused("channels_first")),
    "keras.layers.Add": _merge_base(),
    "keras.layers.Subtract": _merge_base(),
    "keras.layers.Multiply": _merge_base(),
    "keras.layers.Concatenate": _merge_base(axis=ACTS),
    "keras.layers.add": {"inputs": ACTS, "name": ACTS},
    "keras.layers.subtract": {"inputs": ACTS, "name": ACTS},
    "keras.layers.multiply": {"inputs": ACTS, "name": ACTS},
    "keras.layers.concatenate": {"inputs": ACTS, "axis": ACTS, "name": ACTS},
    "keras.layers.Input": {"shape": ACTS, "batch_size": HINT, "name": ACTS, "dtype": refused("int32"),
                           "sparse": refused(True), "tensor": refused(object()), "ragged": refused(True),
                           "type_spec": refused(object()), "batch_shape": ACTS, "optional": refused(True)},
    "keras.layers.InputLayer": {"input_shape": ACTS, "shape": ACTS, "batch_size": HINT, "dtype": refused("int32"),
                                "input_tensor": refused(object()), "sparse": refused(True), "name": ACTS,
                                "ragged": refused(True), "type_spec": refused(object()), "batch_shape": ACTS,
                                "optional": refused(True)},
    "keras.layers.Layer.get_weights": {},  # the engine's layer, which every layer function returns
    "keras.layers.Layer.count_params": {},
    "keras.layers.Layer.__call__": {"inputs": ACTS},  # Keras' functional API (a layer on KerasTensors)
    # --- tf.keras.optimizers ---
    "keras.optimizers.SGD": _optimizer(learning_rate=ACTS, momentum=ACTS, nesterov=ACTS),
    "keras.optimizers.Adam": _optimizer(learning_rate=ACTS, beta_1=ACTS, beta_2=ACTS, epsilon=ACTS,
                                        amsgrad=refused(True)),
    "keras.optimizers.AdamW": _optimizer(learning_rate=ACTS, beta_1=ACTS, beta_2=ACTS, epsilon=ACTS,
                                         amsgrad=refused(True)),
    "keras.optimizers.RMSprop": _optimizer(learning_rate=ACTS, rho=ACTS, momentum=ACTS, epsilon=ACTS,
                                           centered=refused(True)),
    "keras.optimizers.Adagrad": _optimizer(learning_rate=ACTS, initial_accumulator_value=ACTS, epsilon=ACTS),
    "keras.optimizers.get": {"identifier": ACTS},
    "keras.optimizers.Optimizer.apply_gradients": {"grads_and_vars": ACTS, "name": HINT,
                                                   "skip_gradients_aggregation": refused(True)},
    # --- tf.keras.losses ---
    "keras.losses.Loss": {"name": ACTS, "reduction": ACTS, "dtype": refused("float16")},
    "keras.losses.Loss.__call__": {"y_true": ACTS, "y_pred": ACTS, "sample_weight": ACTS},
    "keras.losses.Loss.call": {"y_true": ACTS, "y_pred": ACTS},
    "keras.losses.Reduction": {},  # an enum
    "keras.losses.SparseCategoricalCrossentropy": {"from_logits": ACTS, "ignore_class": refused(0),
                                                   "reduction": ACTS, "name": HINT, "dtype": refused("float16")},
    "keras.losses.CategoricalCrossentropy": {"from_logits": ACTS, "label_smoothing": ACTS, "axis": refused(0),
                                             "reduction": ACTS, "name": HINT, "dtype": refused("float16")},
    "keras.losses.BinaryCrossentropy": {"from_logits": ACTS, "label_smoothing": ACTS, "axis": refused(0),
                                        "reduction": ACTS, "name": HINT, "dtype": refused("float16")},
    "keras.losses.MeanSquaredError": {"reduction": ACTS, "name": HINT, "dtype": refused("float16")},
    # --- tf.keras.callbacks ---
    "keras.callbacks.Callback": {},
    "keras.callbacks.Callback.set_model": {"model": ACTS},
    "keras.callbacks.Callback.set_params": {"params": ACTS},
    **{f"keras.callbacks.Callback.{hook}": {"logs": ACTS} for hook in ("on_train_begin", "on_train_end")},
    **{f"keras.callbacks.Callback.{hook}": {"epoch": ACTS, "logs": ACTS} for hook in ("on_epoch_begin",
                                                                                     "on_epoch_end")},
    **{f"keras.callbacks.Callback.{hook}": {"batch": ACTS, "logs": ACTS}
       for hook in ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")},
    "keras.callbacks.History": {},
    "keras.callbacks.ModelCheckpoint": {"filepath": ACTS, "monitor": ACTS, "verbose": HINT, "save_best_only": ACTS,
                                        "save_weights_only": ACTS, "mode": ACTS, "save_freq": ACTS,
                                        "options": refused(object()),
                                        "initial_value_threshold": refused(0.5)},
    "keras.callbacks.BackupAndRestore": {"backup_dir": ACTS, "save_freq": ACTS, "delete_checkpoint": ACTS,
                                         "save_before_preemption": refused(True), "double_checkpoint": refused(True)},
    "keras.callbacks.TensorBoard": {"log_dir": ACTS, "write_graph": HINT, "update_freq": ACTS, **_TB_REFUSED},
    "keras.callbacks.EarlyStopping": {"monitor": ACTS, "min_delta": ACTS, "patience": ACTS, "verbose": HINT,
                                      "mode": ACTS, "baseline": refused(0.5), "restore_best_weights": ACTS,
                                      "start_from_epoch": refused(3)},
    "keras.callbacks.CSVLogger": {"filename": ACTS, "separator": ACTS, "append": ACTS},
    "keras.callbacks.TerminateOnNaN": {},
    # --- tf.keras.mixed_precision, regularizers, utils, datasets ---
    "keras.mixed_precision.Policy": {"name": ACTS},
    "keras.mixed_precision.set_global_policy": {"policy": ACTS},
    "keras.mixed_precision.global_policy": {},
    "keras.regularizers.Regularizer": {},
    "keras.regularizers.Regularizer.__call__": {"x": ACTS},
    "keras.regularizers.Regularizer.from_config": {"config": ACTS},
    "keras.regularizers.L1": {"l1": ACTS},
    "keras.regularizers.L2": {"l2": ACTS},
    "keras.regularizers.L1L2": {"l1": ACTS, "l2": ACTS},
    "keras.regularizers.L1.get_config": {},
    "keras.regularizers.L2.get_config": {},
    "keras.regularizers.L1L2.get_config": {},
    "keras.regularizers.l1": {"l1": ACTS},
    "keras.regularizers.l2": {"l2": ACTS},
    "keras.regularizers.l1_l2": {"l1": ACTS, "l2": ACTS},
    "keras.regularizers.get": {"identifier": ACTS},
    "keras.regularizers.serialize": {"regularizer": ACTS, "use_legacy_format": HINT},
    "keras.regularizers.deserialize": {"config": ACTS, "custom_objects": refused({"Mine": object}),
                                       "use_legacy_format": HINT},
    "keras.utils.to_categorical": {"x": ACTS, "num_classes": ACTS},
    "keras.utils.set_random_seed": {"seed": ACTS},
    "keras.datasets.mnist.load_data": {"path": HINT},
    "keras.datasets.fashion_mnist.load_data": {},
    "keras.datasets.cifar10.load_data": {},
}

# Public names of Tandem's own, mirroring nothing of TensorFlow's (the walk accepts them as they are).
TANDEM_ONLY = {
    "set_num_threads", "cpu_isa",
    "errors.Error", "errors.FileError", "errors.FileNotFoundError",
    "distribute.ModelParallelStrategy", "distribute.PipelineStrategy",
    "hvd.init", "hvd.is_initialized", "hvd.rank", "hvd.size", "hvd.local_rank", "hvd.local_size", "hvd.shutdown",
    "hvd.DistributedOptimizer", "hvd.Compression", "hvd.callbacks.BroadcastGlobalVariablesCallback",
    "hvd.callbacks.MetricAverageCallback",  # Horovod's API, not TensorFlow's
    "keras.layers.Layer.set_dtype_policy", "keras.layers.Layer.set_regularizers",  # what the layer functions call
}

# The functions whose **kwargs are forwarded to a checked signature (so swallow nothing).
KWARGS_FORWARDED = {
    "keras.models.Model.to_json": "forwards **kwargs to json.dumps (an unknown keyword is its TypeError), "
                                       "as Keras' to_json",
}

# (function, parameter) -> what Tandem does now, where that is not what the rule asks: none left.
KNOWN_GAPS = {}


# --- the walk ---

def _canonical(obj, path):
    """The dotted path under tandem where obj is defined (its module and qualified name), else the
    path it was found at (the engine's functions)."""
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None) or ""
    if module.startswith("tandem") and not module.startswith("tandem._tandem") and qualname \
            and "<" not in qualname and "PyCapsule" not in qualname:
        return qualname if module == "tandem" else module[len("tandem."):] + "." + qualname
    return path


def _methods(cls, key, found):
    for name in dir(cls):
        if name.startswith("_") and name != "__call__":
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if isinstance(raw, property) or inspect.isclass(raw) or not callable(raw):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not (owner.__module__ or "").startswith("tandem"):
            continue
        found.setdefault(f"{_canonical(owner, key) if owner is not cls else key}.{name}", raw)


def walk(tandem):
    """Every public callable of the package: {dotted path: object}. Public: a module's __all__ where
    it has one, else its names without a leading underscore; a class named in lower case without an
    __init__ (tf.config.experimental, hvd.callbacks) is a namespace, walked as a module."""
    found, seen = {}, set()

    def visit(namespace, prefix):
        if id(namespace) in seen:
            return
        seen.add(id(namespace))
        names = getattr(namespace, "__all__", None) if isinstance(namespace, types.ModuleType) else None
        for name in sorted(names if names is not None else vars(namespace)):
            if name.startswith("_"):
                continue
            obj = vars(namespace).get(name) if name in vars(namespace) else getattr(namespace, name)
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(obj, types.ModuleType):
                if obj.__name__.startswith("tandem") and not obj.__name__.startswith("tandem._tandem"):
                    visit(obj, obj.__name__[len("tandem."):])
                continue
            if not (getattr(obj, "__module__", None) or "").startswith("tandem") or not callable(obj):
                continue
            key = _canonical(obj, path)
            if any(part.startswith("_") and part != "__call__" for part in key.split(".")):
                continue
            if inspect.isclass(obj) and name[0].islower() and "__init__" not in vars(obj):
                visit(obj, key)
            elif inspect.isclass(obj):
                found.setdefault(key, obj)
                _methods(obj, key, found)
            else:
                found.setdefault(key, obj)

    visit(tandem, "")
    # The engine's classes every layer function and optimizer returns (not reachable by name).
    _methods(tandem._tandem.Layer, "keras.layers.Layer", found)
    _methods(tandem._tandem.Optimizer, "keras.optimizers.Optimizer", found)
    return found


def _parameters(obj):
    """(named parameters, has **kwargs) of a function or class; the engine's functions from the
    first line of their docstring, as pybind11 writes it."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
        m = re.match(r"[\w.]*\((.*)\)", doc)
        if not m:
            return [], False
        args = [a.split(":")[0].split("=")[0].strip() for a in m.group(1).split(",") if a.strip()]
        return [a for a in args if a not in ("self", "cls") and not a.startswith("*")], "**kwargs" in args
    names = [p.name for p in sig.parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "cls")]
    return names, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def _not_known(failures):
    return sorted(f for f in failures if f not in KNOWN_GAPS)


def _listing(pairs):
    return "\n".join(f"  {key}({param}): {why}" for (key, param), why in pairs)


# --- the tests ---

def test_table_is_well_formed():
    for key, params in TABLE.items():
        for param, kind in params.items():
            assert kind in (ACTS, HINT) or isinstance(kind, refused), (key, param, kind)
    stale = sorted(k for k in KNOWN_GAPS if k[0] not in TABLE or (k[1] != "**kwargs" and k[1] not in TABLE[k[0]]))
    assert not stale, f"KNOWN_GAPS entries for what TABLE does not hold: {stale}"
    assert not (set(TABLE) & TANDEM_ONLY), set(TABLE) & TANDEM_ONLY


def test_a_every_public_callable_is_in_the_table(tf):
    found = walk(tf)
    missing = sorted(set(found) - set(TABLE) - TANDEM_ONLY)
    assert not missing, "public callables of tandem neither in TABLE nor in TANDEM_ONLY:\n  " + "\n  ".join(missing)
    gone = sorted((set(TABLE) | TANDEM_ONLY) - set(found))
    assert not gone, "TABLE / TANDEM_ONLY entries the walk does not find (renamed or removed?):\n  " + "\n  ".join(gone)


def test_b_every_tf_parameter_is_a_named_parameter(tf):
    found = walk(tf)
    failures = {}
    for key, params in TABLE.items():
        if key not in found:
            continue  # test_a names it
        names, var_keyword = _parameters(found[key])
        if var_keyword and key not in KWARGS_FORWARDED:
            failures[(key, "**kwargs")] = "has **kwargs"
        for param in params:
            if param not in names:
                failures[(key, param)] = f"not in the signature ({', '.join(names)})"
    bad = _not_known(failures)
    assert not bad, "TensorFlow's parameters missing from tandem's signatures:\n" + _listing(
        (k, failures[k]) for k in bad)


def _sample(tf, value):
    if value == "TerminateOnNaN":
        return [tf.keras.callbacks.TerminateOnNaN()]
    if value == "ones":
        return np.ones(4, np.float32)
    return value


def _model(tf):
    m = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(20,))], seed=1)
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _call(tf, key, tmp_path, kw):
    """key called with otherwise valid, minimal arguments and kw."""
    x, y = small_data(32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    if key.startswith("keras.models.Model."):
        model, method = _model(tf), key.rsplit(".", 1)[1]
        if method == "compile":
            return model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", **kw)
        if method in ("fit", "evaluate"):
            return getattr(model, method)(x, y, verbose=0, **kw)
        if method == "predict":
            return model.predict(x, verbose=0, **kw)
        if method == "save_weights":
            return model.save_weights(tmp_path / "w.weights.h5", **kw)
        if method == "load_weights":
            model.save_weights(tmp_path / "w.weights.h5")
            return model.load_weights(tmp_path / "w.weights.h5", **kw)
        if method == "save":
            return model.save(tmp_path / "m.keras", **kw)
        if method == "summary":
            return model.summary(print_fn=lambda *_: None, **kw)
        if method == "__call__":
            return model(x, **kw)
    if key.startswith("distribute.Strategy."):
        strategy, method = tf.distribute.OneDeviceStrategy(), key.rsplit(".", 1)[1]
        first = {"run": lambda: 0, "experimental_distribute_dataset": ds,
                 "distribute_datasets_from_function": lambda context: ds}.get(method)
        if method == "reduce":
            return strategy.reduce("SUM", 1.0, **kw)
        return getattr(strategy, method)(first, **kw)
    if key == "keras.losses.Loss.__call__":
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return loss(np.array([0, 1, 2, 0], np.int32), np.zeros((4, 3), np.float32), **kw)
    if key == "GradientTape.gradient":
        with tf.GradientTape() as tape:
            target = tf.reduce_sum(np.ones(3, np.float32))
        return tape.gradient(target, [], **kw)
    if key == "keras.optimizers.Optimizer.apply_gradients":
        return tf.keras.optimizers.SGD().apply_gradients([], **kw)
    if key == "keras.models.model_from_json":
        return tf.keras.models.model_from_json(_model(tf).to_json(), **kw)
    first = {"function": (lambda: 0,), "reduce_sum": (np.ones(3, np.float32),),
             "reduce_mean": (np.ones(3, np.float32),),
             "cluster_resolver.SimpleClusterResolver": ({"worker": ["localhost:2222"]},),
             "keras.models.load_model": (tmp_path / "absent.keras",),
             "keras.layers.Dense": (2,), "keras.layers.Conv2D": (2, 3), "keras.layers.Dropout": (0.5,),
             "keras.layers.Activation": ("relu",),
             "keras.callbacks.ModelCheckpoint": (tmp_path / "ckpt",), "keras.callbacks.TensorBoard": (tmp_path,),
             "keras.callbacks.BackupAndRestore": (tmp_path / "backup",),
             "keras.regularizers.deserialize": ({"class_name": "L2", "config": {"l2": 0.1}},)}
    target = tf
    for part in key.split("."):
        target = getattr(target, part)
    return target(*first.get(key, ()), **kw)


def _refused_pairs():
    return [(key, param, kind.sample) for key, params in TABLE.items() for param, kind in params.items()
            if isinstance(kind, refused)]


def test_c_refused_parameters_raise_an_error_naming_them(tf, tmp_path):
    failures = {}
    for key, param, sample in _refused_pairs():
        try:
            _call(tf, key, tmp_path, {param: _sample(tf, sample)})
        except tf.Error as e:
            if param not in str(e):
                failures[(key, param)] = f"the message does not name it: {e}"
        except Exception as e:  # noqa: BLE001 - any other exception is the finding
            failures[(key, param)] = f"{type(e).__name__}, not tandem.Error: {e}"
        else:
            failures[(key, param)] = f"{param}={sample!r} was accepted"
    bad = _not_known(failures)
    assert not bad, "refused parameters that do not raise tandem.Error naming them:\n" + _listing(
        (k, failures[k]) for k in bad)


def test_d_hints_are_listed_in_the_docs():
    spans = re.findall(r"`([^`]+)`", (ROOT / "docs" / "python.md").read_text())  # its code spans
    failures = {}
    for key, params in TABLE.items():
        for param, kind in params.items():
            if kind == HINT and not any(re.search(rf"\b{re.escape(param)}\b", span) for span in spans):
                failures[(key, param)] = "a hint docs/python.md does not list"
    bad = _not_known(failures)
    assert not bad, "hints not listed in docs/python.md:\n" + _listing((k, failures[k]) for k in bad)


def test_the_table_covers_what_it_says():
    """The counts the report gives, and each function with at least its table entry."""
    assert len(TABLE) >= 150
    assert sum(len(p) for p in TABLE.values()) >= 400


def test_no_known_gaps():
    """Fails while any TensorFlow parameter is missing, swallowed, ignored or refused without its name."""
    assert not KNOWN_GAPS, f"{len(KNOWN_GAPS)} parameters do not yet act, hint or refuse by name:\n" + _listing(
        sorted(KNOWN_GAPS.items()))
