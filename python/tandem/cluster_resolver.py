"""tf.distribute.cluster_resolver: where a job's tasks are and which one this process is, as
TensorFlow's resolvers give it to the strategies (Tandem's read TF_CONFIG themselves, or take a
SimpleClusterResolver's cluster in its place)."""
from .errors import Error

__all__ = ["TFConfigClusterResolver", "SimpleClusterResolver", "SlurmClusterResolver"]


def _cluster_json(cluster_resolver, what):
    """The cluster and this task as TF_CONFIG's JSON for the engine: "" for a
    TFConfigClusterResolver (the engine reads TF_CONFIG itself) or none."""
    if cluster_resolver is None or isinstance(cluster_resolver, TFConfigClusterResolver):
        return ""
    if not isinstance(cluster_resolver, (SimpleClusterResolver, SlurmClusterResolver)):
        raise Error(f"{what}: cluster_resolver must be a TFConfigClusterResolver, a SimpleClusterResolver or a "
                    f"SlurmClusterResolver, got "
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


class SlurmClusterResolver:
    """The tasks of the Slurm job step this process is one of (`srun -n N python3 train.py` inside
    sbatch or salloc), each its role, as TensorFlow's SlurmClusterResolver gives them: ``jobs``
    (job name to task count, e.g. ``{"chief": 1, "ps": 1, "worker": 2}``; default every task a
    worker) take the tasks in rank order, the jobs in their names' order; each task listens on its
    node at ``port_base`` plus its place among the node's tasks. ``tasks_per_node`` (a count, or a
    dict of node name to count) stands in for Slurm's SLURM_STEP_TASKS_PER_NODE; ``gpus_per_node``
    (default: Slurm's GPUs of the step, else the node's NVIDIA devices) and ``gpus_per_task``
    (default: a node's GPUs over its most tasks) give each task its GPUs, which ``auto_set_gpu``
    puts in CUDA_VISIBLE_DEVICES. Unlike TensorFlow's, the nodes keep Slurm's order (its ranks'),
    a node without GPUs still runs tasks, and a rank Slurm placed elsewhere than that order says
    is an error naming both nodes (the engine's ``tandem/distribute/slurm.h`` does the work, as
    for ``tandem fit --cluster slurm:...``)."""

    def __init__(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None, tasks_per_node=None,
                 auto_set_gpu=True, rpc_layer="grpc"):
        import json
        import os

        from . import _tandem

        what = "SlurmClusterResolver"
        if jobs is not None and (not isinstance(jobs, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in jobs.items())):
            raise Error(f"{what}: jobs must be a dict of job name to number of tasks, got {jobs!r}")

        def count(value, name):
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise Error(f"{what}: {name} must be a whole number of at least 0, got {value!r}")
            return value

        by_name = []
        per_node = None
        if isinstance(tasks_per_node, dict):
            by_name = [(str(k), count(v, f"tasks_per_node[{k!r}]")) for k, v in tasks_per_node.items()]
        else:
            per_node = count(tasks_per_node, "tasks_per_node")
        if isinstance(port_base, bool) or not isinstance(port_base, int) or not 1 <= port_base <= 65535:
            raise Error(f"{what}: port_base must be a port from 1 to 65535, got {port_base!r}")
        config, self._rank, self._gpus = _tandem.slurm_cluster(
            list((jobs or {}).items()), port_base, count(gpus_per_node, "gpus_per_node"),
            count(gpus_per_task, "gpus_per_task"), per_node, by_name)
        self._config = json.loads(config)
        from .train import ClusterSpec

        self._cluster = ClusterSpec(self._config["cluster"])
        self.task_type = self._config["task"]["type"]
        self.task_id = self._config["task"]["index"]
        self.rpc_layer = rpc_layer
        self.environment = ""
        self._auto_set_gpu = bool(auto_set_gpu)
        if self._auto_set_gpu and self._gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = self._gpus

    def cluster_spec(self):
        return self._cluster

    def get_task_info(self):
        return self.task_type, self.task_id

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        address = self._cluster.task_address(task_type, task_id)
        layer = self.rpc_layer if rpc_layer is None else rpc_layer
        return f"{layer}://{address}" if layer else address

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        gpus = len(self._gpus.split(",")) if self._gpus else 0
        return {"GPU": gpus} if gpus else {}

    def _tf_config(self):
        import json

        return json.dumps(self._config)
