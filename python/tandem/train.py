"""tf.train's ClusterSpec: the jobs of a cluster and their tasks' addresses."""
from .errors import Error

__all__ = ["ClusterSpec"]


class ClusterSpec:
    """``ClusterSpec({"worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]})``, as TensorFlow's:
    ``jobs``, ``num_tasks(job)``, ``task_address(job, i)``, ``job_tasks(job)``, ``as_dict()``."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise Error(f"ClusterSpec: expected a dict of job name to task addresses, got {type(cluster).__name__}")
        self._jobs = {}
        for job, tasks in cluster.items():
            if isinstance(tasks, dict):
                tasks = [tasks[i] for i in sorted(tasks)]
            if isinstance(tasks, str) or not all(isinstance(t, str) for t in tasks):
                raise Error(f"ClusterSpec: job {job!r} needs a list of 'host:port' addresses, got {tasks!r}")
            self._jobs[str(job)] = list(tasks)

    @property
    def jobs(self):
        return list(self._jobs)

    def num_tasks(self, job_name):
        return len(self.job_tasks(job_name))

    def job_tasks(self, job_name):
        if job_name not in self._jobs:
            raise ValueError(f"No such job in cluster: {job_name!r}")
        return list(self._jobs[job_name])

    def task_address(self, job_name, task_index):
        tasks = self.job_tasks(job_name)
        if not 0 <= task_index < len(tasks):
            raise ValueError(f"No task with index {task_index!r} in job {job_name!r}")
        return tasks[task_index]

    def as_dict(self):
        return {job: list(tasks) for job, tasks in self._jobs.items()}

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self.as_dict() == other.as_dict()
