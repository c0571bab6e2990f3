"""tf.distribute.cluster_resolver: where a job's tasks are and which one this process is, as
TensorFlow's resolvers give it to the strategies (Tandem's read TF_CONFIG themselves, or take a
SimpleClusterResolver's cluster in its place)."""
from .errors import Error

__all__ = ["TFConfigClusterResolver", "SimpleClusterResolver"]


def _cluster_json(cluster_resolver, what):
    """The cluster and this task as TF_CONFIG's JSON for the engine: "" for a
    TFConfigClusterResolver (the engine reads TF_CONFIG itself) or none."""
    if cluster_resolver is None or isinstance(cluster_resolver, TFConfigClusterResolver):
        return ""
    if not isinstance(cluster_resolver, SimpleClusterResolver):
        raise Error(f"{what}: cluster_resolver must be a TFConfigClusterResolver or a SimpleClusterResolver, got "
                    f"{type(cluster_resolver).__name__}; put the cluster in TF_CONFIG (and start the tasks with "
                    "`tandem launch`)")
    return cluster_resolver._tf_config()


class TFConfigClusterResolver:
    """The cluster and this task as the TF_CONFIG environment variable gives them (as TensorFlow's):
    ``cluster_spec()``, ``task_type``, ``task_id``. Tandem's strategies read TF_CONFIG themselves,
    so passing one changes nothing; a task_type or task_id other than TF_CONFIG's is refused."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        import json
        import os

        text = os.environ.get("TF_CONFIG", "")
        try:
            config = json.loads(text) if text else {}
        except ValueError as e:
            raise Error(f"TFConfigClusterResolver: TF_CONFIG is not JSON ({e}): {text[:200]!r}") from None
        if not isinstance(config, dict):
            raise Error(f"TFConfigClusterResolver: TF_CONFIG must be a JSON object, got {text[:200]!r}")
        task = config.get("task", {}) or {}
        self._cluster = config.get("cluster", {}) or {}
        self.task_type = task.get("type") if task_type is None else task_type
        self.task_id = task.get("index", 0) if task_id is None else task_id
        self.rpc_layer = rpc_layer or config.get("rpc_layer", "grpc")
        self.environment = environment or config.get("environment", "")
        for name, given, read in (("task_type", task_type, task.get("type")), ("task_id", task_id, task.get("index"))):
            if given is not None and given != read:
                raise Error(f"TFConfigClusterResolver: {name} {given!r} is not TF_CONFIG's ({read!r}); Tandem's "
                            "tasks take theirs from TF_CONFIG")

    def cluster_spec(self):
        from .train import ClusterSpec

        return ClusterSpec(self._cluster)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}


class SimpleClusterResolver:
    """A cluster given in code (tf.distribute.cluster_resolver.SimpleClusterResolver): a
    ClusterSpec (or its dict) and this task's type and index, in TF_CONFIG's place."""

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="",
                 num_accelerators=None, rpc_layer=None):
        from .train import ClusterSpec

        self._cluster = ClusterSpec(cluster_spec)
        if num_accelerators:
            raise Error(f"SimpleClusterResolver: num_accelerators {num_accelerators!r}: Tandem has no accelerators")
        if task_type is not None and task_type not in self._cluster.jobs:
            raise Error(f"SimpleClusterResolver: task_type {task_type!r} is not a job of the cluster "
                        f"({', '.join(self._cluster.jobs)})")
        if task_type is not None:
            if isinstance(task_id, bool) or not isinstance(task_id, int) or \
                    not 0 <= task_id < self._cluster.num_tasks(task_type):
                raise Error(f"SimpleClusterResolver: task_id must be an index into the {task_type!r} job's "
                            f"{self._cluster.num_tasks(task_type)} tasks, got {task_id!r}")
        self.task_type = task_type
        self.task_id = task_id
        self.rpc_layer = rpc_layer or "grpc"
        self.environment = environment
        self._master = master

    def cluster_spec(self):
        return self._cluster

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        return self._master

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}

    def _tf_config(self):
        import json

        config = {"cluster": self._cluster.as_dict()}
        if self.task_type is not None:
            config["task"] = {"type": self.task_type, "index": int(self.task_id)}
        return json.dumps(config)
