"""Jobs under Slurm: SlurmClusterResolver read from environments written here as Slurm writes them,
then a real cluster (tests/distribute/slurm_cluster.sh: three hosts as network namespaces, munged,
slurmctld, a slurmd per host) that runs, by sbatch, a deterministic multi-worker job under
`tandem launch` (srun --mpi=pmix) to one process's bits, an asynchronous parameter-server job whose
roles come from SlurmClusterResolver to 97% on MNIST, a parameter-server job under `tandem launch`
whose worker's step is scancelled (named within the timeout, started again), and a job requeued
mid-run that resumes from its backup to the uninterrupted run's bits. The cluster is skipped, with
the reason, where it cannot start (no root, no namespaces, no Slurm); a watchdog ends it if this
process dies, and every job is waited on with a deadline."""
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import BUILD, CLI, ROOT, mnist_or_skip

SCRIPT = ROOT / "tests" / "distribute" / "slurm_cluster.sh"
TIMEOUT = 3  # the jobs' --timeout (s)
MARGIN = 8  # what naming a lost task may take beyond it


def step_environment(monkeypatch, rank, nodes="tsl-[1-3]", tasks="4", per_node="2,1(x2)"):
    for name in list(os.environ):
        if name.startswith("SLURM"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_PROCID", str(rank))
    monkeypatch.setenv("SLURM_STEP_NODELIST", nodes)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", tasks)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", per_node)


def test_the_resolver_gives_each_task_of_the_step_its_role(tf, monkeypatch):
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for rank, role in enumerate([("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]):
        step_environment(monkeypatch, rank)
        r = resolver(jobs={"worker": 2, "ps": 1, "chief": 1}, gpus_per_node=0)
        assert r.get_task_info() == role and (r.task_type, r.task_id) == role
        assert r.cluster_spec().as_dict() == {"chief": ["tsl-1:8888"], "ps": ["tsl-1:8889"],
                                              "worker": ["tsl-2:8888", "tsl-3:8888"]}
        assert r.master() == "grpc://" + r.cluster_spec().task_address(*role)
        assert r.num_accelerators() == {}
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    # GPUs: two on each node, two tasks on the first: one each, put where CUDA looks.
    step_environment(monkeypatch, 1)
    r = resolver(gpus_per_node=2, port_base=9000, rpc_layer="")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and r.num_accelerators() == {"GPU": 1}
    assert r.master("worker", 3) == "tsl-3:9000"
    step_environment(monkeypatch, 0)
    resolver(gpus_per_node=2, auto_set_gpu=False)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # left as it was
    # tasks_per_node by name, in place of Slurm's counts.
    r = resolver(tasks_per_node={"tsl-1": 1, "tsl-2": 1, "tsl-3": 2}, gpus_per_node=0)
    assert r.cluster_spec().job_tasks("worker") == ["tsl-1:8888", "tsl-2:8888", "tsl-3:8888", "tsl-3:8889"]
    # Every mistake named with its values.
    with pytest.raises(tf.Error, match=r"jobs \(ps=1, worker=2\) add up to 3 tasks, but the step has 4"):
        resolver(jobs={"worker": 2, "ps": 1}, gpus_per_node=0)
    with pytest.raises(tf.Error, match="jobs must be a dict of job name to number of tasks"):
        resolver(jobs=["worker"])
    with pytest.raises(tf.Error, match="port_base must be a port from 1 to 65535, got 0"):
        resolver(port_base=0)
    monkeypatch.setenv("SLURMD_NODENAME", "tsl-2")
    with pytest.raises(tf.Error, match="Slurm placed rank 0 on node tsl-2, but the nodes' order"):
        resolver(gpus_per_node=0)
    monkeypatch.delenv("SLURM_PROCID")
    with pytest.raises(tf.Error, match="SLURM_PROCID is not set: this process is not a task of a Slurm job step"):
        resolver()
    # The strategies take it: a parameter-server cluster's roles; all workers for MultiWorkerMirrored.
    step_environment(monkeypatch, 0, nodes="tsl-1", tasks="2", per_node="2")
    with pytest.raises(tf.Error, match="a SlurmClusterResolver's tasks are all workers here"):
        tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver(jobs={"chief": 1, "worker": 1}))


def test_outside_slurm_the_command_line_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    said = subprocess.run([str(CLI), "launch", "--launcher", "srun", "--", "true"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert said.returncode != 0 and "SLURM_JOB_ID is not set" in said.stderr, said.stderr
    said = subprocess.run([str(CLI), "fit", "--strategy", "ps-async", "--cluster", "slurm:ps=1,worker=1,chief=1",
                           "--epochs", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert said.returncode != 0 and "SLURM_PROCID is not set" in said.stderr, said.stderr
    said = subprocess.run([str(CLI), "fit", "--cluster", "slurm:workers=2"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert said.returncode != 0 and "unknown setting \"workers\"" in said.stderr, said.stderr


def test_inside_an_allocation_launch_starts_ranks_and_tasks_with_srun(monkeypatch):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "OMPI_MCA", "PMIX_MCA"))}
    env.update(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n[9-10],m1", SLURM_TASKS_PER_NODE="2,1(x2)", SLURM_NTASKS="4",
               SLURM_PROCID="0", SLURM_STEP_NODELIST="n9", SLURM_STEP_NUM_TASKS="1", SLURMD_NODENAME="n9")
    ranks = subprocess.run([str(CLI), "launch", "--dry-run", "-np", "3", "--network", "10.0.0.0/24", "--", "true"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert ranks.returncode == 0, ranks.stderr
    assert ranks.stdout.strip() == (
        "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_oob_tcp_if_include="
        "10.0.0.0/24 OMPI_MCA_btl_tcp_if_include=10.0.0.0/24 OMPI_MCA_btl=self,vader,tcp PMIX_MCA_gds=hash srun --mpi=pmix "
        "--export=ALL --kill-on-bad-exit=1 --ntasks 3 true"), ranks.stdout
    mpirun = subprocess.run([str(CLI), "launch", "--dry-run", "--launcher", "mpirun", "-np", "2", "--", "true"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert mpirun.returncode == 0 and mpirun.stdout.startswith("mpirun -np 2"), mpirun.stdout + mpirun.stderr
    # A parameter-server cluster over the allocation's 4 tasks: a step for each on its node.
    tasks = subprocess.run([str(CLI), "launch", "--ps", "1", "--workers", "2", "--dry-run", "--", "true"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert tasks.returncode == 0, tasks.stderr
    lines = tasks.stdout.strip().split("\n")
    assert len(lines) == 4 and all(line.startswith("srun --nodes=1 --ntasks=1 --overlap --export=ALL --quiet "
                                                   "--nodelist ") for line in lines), lines
    assert [line.split()[7] for line in lines] == ["n9", "n10", "m1", "n9"], lines  # chief, workers, ps
    assert '"chief":["n9:8888"]' in lines[0] and '"ps":["n9:8889"]' in lines[0], lines[0]
    assert '"worker":["n10:8888","m1:8888"]' in lines[0] and '"task":{"index":1,"type":"worker"}' in lines[2]
    env["SLURM_NTASKS"] = "3"
    short = subprocess.run([str(CLI), "launch", "--ps", "1", "--workers", "2", "--dry-run", "--", "true"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert short.returncode != 0 and "4 tasks on its nodes, but the step has 3 (SLURM_NTASKS)" in short.stderr, \
        short.stderr


class Cluster:
    """The three-host cluster, its jobs submitted and waited on with deadlines."""

    def __init__(self, work):
        self.work = work
        self.prefix = f"tsl{os.getpid() % 10000}"
        up = subprocess.run(["bash", str(SCRIPT), "up", self.prefix, str(work)], capture_output=True, text=True,
                            timeout=120)
        self.why = None if up.returncode == 0 else (up.stdout + up.stderr).strip()
        if self.why is None:  # the watchdog: the cluster ends with this process, however it ends
            self.watchdog = subprocess.Popen(
                ["sh", "-c", f'while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; '
                             f'bash "{SCRIPT}" down {self.prefix} "{work}"'], start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def run(self, *args, timeout=60):
        return subprocess.run(["bash", str(SCRIPT), "run", self.prefix, str(self.work)] + list(args),
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, name, body, *options):
        script = self.work / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + textwrap.dedent(body))
        out = self.work / f"{name}.out"
        got = self.run("sbatch", "--parsable", "-o", str(out), "--open-mode=append", *options, str(script))
        assert got.returncode == 0, got.stdout + got.stderr
        return got.stdout.strip().split(";")[0], out

    def state(self, job):
        return self.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()

    def wait(self, job, out, seconds):
        """Until the job has left the queue; past the deadline it is cancelled and the test fails."""
        deadline = time.time() + seconds
        while self.state(job):
            if time.time() > deadline:
                self.run("scancel", job)
                pytest.fail(f"Slurm job {job} ran past {seconds} s:\n" + said(out))
            time.sleep(0.5)
        return said(out)

    def wait_for(self, out, pattern, seconds, job):
        deadline = time.time() + seconds
        while not re.search(pattern, said(out)):
            if time.time() > deadline:
                self.run("scancel", job)
                pytest.fail(f"job {job}: no {pattern!r} within {seconds} s:\n" + said(out))
            time.sleep(0.1)

    def down(self):
        subprocess.run(["bash", str(SCRIPT), "down", self.prefix, str(self.work)], capture_output=True, timeout=120)
        if self.why is None:
            self.watchdog.kill()


def said(path):
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        if c.why is not None:
            pytest.skip(f"the Slurm test cluster cannot start here: {c.why}")
        yield c
    finally:
        c.down()


def fit_line(run_dir, strategy, data, *extra):
    return " ".join([str(CLI), "fit", "--model", "mlp", "--strategy", strategy, "--epochs", "2", "--batch-size", "60",
                     "--threads", "1", "--verbose", "2", "--data-dir", str(data), "--run-dir", str(run_dir),
                     "--backup-every", "100", "--timeout", str(TIMEOUT)] + list(extra))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process's run, deterministic: the bits the Slurm jobs must end at."""
    mnist_or_skip()
    work = tmp_path_factory.mktemp("one")
    one = subprocess.run(fit_line(work / "run", "mirrored:1:deterministic", ROOT / "data").split(),
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stdout + one.stderr
    return work / "run" / "checkpoints" / "final.safetensors"


def same_file(a, b):
    assert a.read_bytes() == b.read_bytes(), f"{a} and {b} differ"


def launched(cluster, run_dir):
    subnet = (cluster.work / "subnet").read_text().strip()
    return (f"{CLI} launch --network {subnet} -- "
            + fit_line(run_dir, "multiworker:deterministic", ROOT / "data", "--insecure"))


def test_a_multi_worker_job_on_three_hosts_ends_at_one_process_bits(cluster, reference):
    run_dir = cluster.work / "multiworker"
    job, out = cluster.submit("multiworker", f"""\
        echo "srun offers: $(srun --mpi=list 2>&1 | tr '\\n' ' ')"
        {launched(cluster, run_dir)}
        """, "-N", "3", "--ntasks-per-node=1")
    text = cluster.wait(job, out, 300)
    assert "pmix" in text and "multiworker:3:deterministic" in text, text
    assert re.search(r"test accuracy: [0-9.]+%", text), text
    same_file(reference, run_dir / "checkpoints" / "final.safetensors")


def test_a_requeued_job_resumes_from_its_backup_to_the_uninterrupted_bits(cluster, reference):
    run_dir = cluster.work / "requeued"
    job, out = cluster.submit("requeued", f"""\
        echo "run $SLURM_RESTART_COUNT of job $SLURM_JOB_ID"
        {launched(cluster, run_dir)}
        """, "-N", "3", "--ntasks-per-node=1", "--requeue")
    cluster.wait_for(out, r"Epoch 2/2", 240, job)  # the first epoch's backup written
    time.sleep(2)
    got = cluster.run("scontrol", "requeue", job)
    assert got.returncode == 0, got.stdout + got.stderr
    # Slurm holds a requeued job a while (its begin time); the test lets it start now.
    deadline = time.time() + 60
    while cluster.state(job) != "PENDING" and time.time() < deadline:
        time.sleep(0.2)
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    text = cluster.wait(job, out, 300)
    assert "DUE TO JOB REQUEUE" in text and f"run 1 of job {job}" in text, text
    assert re.search(r"Restored the backup in .*: resuming at epoch 2, batch [0-9]+", text), text
    same_file(reference, run_dir / "checkpoints" / "final.safetensors")


PS_SCRIPT = """\
import sys

import numpy as np
import tandem as tf

resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs={"chief": 1, "ps": 1, "worker": 2})
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, insecure=True)
(x, y), (xt, yt) = tf.keras.datasets.mnist.load_data()
x, xt = x.reshape(-1, 784).astype(np.float32) / 255, xt.reshape(-1, 784).astype(np.float32) / 255
with strategy.scope():
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(160, "elu", kernel_initializer="he_normal", input_shape=(784,))]
        + [tf.keras.layers.Dense(160, "elu", kernel_initializer="he_normal") for _ in range(4)]
        + [tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, epochs=5, batch_size=50, verbose=2)
print(f"task {resolver.task_type}:{resolver.task_id} of {resolver.cluster_spec().as_dict()}", flush=True)
if strategy.is_chief:
    loss, accuracy = model.evaluate(xt, yt, verbose=0)
    print(f"chief: test accuracy {accuracy * 100:.2f}%")
"""


def test_an_asynchronous_cluster_from_the_resolver_reaches_97_percent_on_mnist(cluster):
    mnist_or_skip()
    script = cluster.work / "ps.py"
    script.write_text(PS_SCRIPT)
    job, out = cluster.submit("ps", f"""\
        cd {ROOT}
        export PYTHONPATH={BUILD / "python"}
        srun --kill-on-bad-exit=1 {sys.executable} {script}
        """, "-N", "3", "-n", "4")
    text = cluster.wait(job, out, 400)
    prefix = cluster.prefix
    assert f"task chief:0 of {{'chief': ['{prefix}-1:8888'], 'ps': ['{prefix}-1:8889'], " \
           f"'worker': ['{prefix}-2:8888', '{prefix}-3:8888']}}" in text, text
    assert "task worker:1" in text and "task ps:0" in text, text
    found = re.search(r"chief: test accuracy ([0-9.]+)%", text)
    assert found and float(found.group(1)) >= 97.0, text
    print(f"SlurmClusterResolver's asynchronous job: test accuracy {found.group(1)}%")


def test_a_scancelled_task_is_named_within_the_timeout_and_started_again(cluster):
    run_dir = cluster.work / "cancelled"
    # Epochs enough (about a second each here) that the worker started again (a new srun step,
    # seconds) joins while the job still trains: with 4, a fresh-clone CI run ended first.
    fit = fit_line(run_dir, "ps-async", ROOT / "data", "--insecure").replace("--epochs 2", "--epochs 15")
    job, out = cluster.submit("cancelled", f"{CLI} launch --ps 1 --workers 2 -- {fit}\n", "-N", "3", "-n", "4")
    cluster.wait_for(out, r"Epoch 2/15", 240, job)
    # worker:1's step, on the third node (the chief and the server share the first).
    steps = cluster.run("squeue", "-h", "-s", "-j", job, "-o", "%i %N").stdout.split("\n")
    step = [s.split()[0] for s in steps if s.strip().endswith(f"{cluster.prefix}-3")]
    assert len(step) == 1, steps
    cancelled = time.time()
    got = cluster.run("scancel", step[0])
    assert got.returncode == 0, got.stdout + got.stderr
    cluster.wait_for(out, r"chief: worker:1 \(" + cluster.prefix + r"-3:8888\) died", TIMEOUT + MARGIN, job)
    named_after = time.time() - cancelled
    text = cluster.wait(job, out, 300)
    assert "launch: starting task worker:1 again (restart 1 of 3)" in text, text
    assert re.search(r"worker:1 \([^)]*\) joined the running job", text), text
    assert re.search(r"test accuracy: [0-9.]+%", text), text
    print(f"worker:1's step {step[0]} scancelled: named after {named_after:.1f} s")
