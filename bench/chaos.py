#!/usr/bin/python3
"""Chaos: faults injected from outside into running jobs on this machine (loopback, or network
namespaces this harness makes), on a schedule drawn from a seed, with invariants checked after
every fault.

Jobs (each `tandem launch`ed, the tasks found through /proc by the job's run directory):
  async        parameter servers, asynchronous (1 server, 2 workers, --restarts): a dead worker or
               server is started again and taken back; the chief's death ends the job, which the
               same command with --run-dir resumes.
  sync         parameter servers, synchronous rounds (1 server, 2 workers): a dead worker is
               dropped from its round and started again; a server's death ends the job by rule
               (resumed with --run-dir).
  multiworker  MultiWorkerMirroredStrategy, deterministic (2 ranks over Open MPI): any rank's
               death or stop ends the job, named; resumed with --run-dir until it finishes. Its
               final weights are compared with an uninterrupted run's, bit for bit.
  async-record asynchronous with --record, faults on the workers only: the steps the record shows
               handed out twice or never are those the log says.
  netns-async  asynchronous across 3 hosts as network namespaces (root: tests/distribute/netns.sh),
               a worker on each of hosts 2 and 3; not in the default list.
  slurm        the deterministic multi-worker job (3 ranks) submitted with `sbatch --requeue` to a
               Slurm cluster of 3 namespace hosts (root: tests/distribute/slurm_cluster.sh), started
               by `tandem launch` with srun; faults: a rank killed or stopped, and the job requeued
               (`scontrol requeue`, released at once), which resumes it from its backup; a fault
               that ends it is followed by the same sbatch, which resumes the run directory. Its
               ranks live in the hosts' namespaces: no strangers here. Not in the default list.
Faults: SIGKILL of a worker, a server, the chief or a rank; SIGSTOP past the timeout, then
SIGCONT; strangers on every port the tasks listen on (garbage, the control plane's hello and
failure unsealed, silence); on namespace hosts, a worker's link down past the timeout, then up.
Each is aimed at a phase drawn with it: a step (a drawn moment of training, backups every 20
steps among them), an epoch's end (the moment its progress line is out: validation and the
epoch's checkpoints follow), a restore (the moment a resumed job says it restored its backup,
or an asynchronous chief says it calls back the steps to restore a server), or a start-up (right
after a launch, the first or a resume after a fault that ended the job: as soon as the target
runs, before the log shows training has begun, "Epoch 1/200" or a resumed "Epoch 7/200"). Any
fault that lands before that sign is counted as a start-up's (a restore's, whose sign comes
first, stays a restore's). The log's own naming of the phase each task was in ("died during
checkpoint writing") is counted too.

Invariants, after every fault: the job ends or goes on (its log grows) within the timeout plus a
margin, never hangs; the fault is named in the log (a kill or a stop by the task and phase); the
newest checkpoints load (`tandem evaluate --weights`); an end is one the job's rules explain: the
log names a task hit since the launch whose loss ends the job (in an error, or, for a chief
killed as it starts, before any error can be said, in the launcher's "launch: task chief:0 (...)
ended with status 137"). Strangers are judged each connection on its own, by who took it (what
it said first): one Tandem's control plane took is named by a refusal line that gives the
address it came from, or, past the log's rate limit (the tenth refusal of a process, then every
thousandth), by a closing count of that process's refusals ("N control connections refused in
all"); one a ZeroMQ port took (a parameter server's, the chief's) is named by a refusal line with
its address, or, where ZeroMQ reset it before its address could be read, by a refusal "from an
address gone", or by the task's closing counts, judged together at the run's end
(zeromq_named); one Open MPI's ports took is named only if a line gives its address. At the end, the
model reaches the stated accuracy, and the deterministic job's weights equal the uninterrupted
run's.

Schedules: --faults N draws N faults per job (the short one CI runs); --minutes M draws faults
lazily from the same generators, the first n those of --faults n, until M minutes of the job
have passed. A job finishes its --epochs as it would (it is never cut short, so that every run's
accuracy, record and final weights are checked whole): one that finishes while minutes are left
is followed by a fresh run in a directory of its own, and the faults go on there; at M minutes
the run under way is let finish (resumed as often as it takes). Every run of the deterministic
job, the same command in a fresh directory, must end with the weights of one uninterrupted run.
Smaller --epochs make more runs (more start-ups, fewer long stretches of training).

Past 500 lines: one harness, whose jobs, faults and judgements read together (a fault's naming,
the rules of each job's ends and the phases it aims at are each a few lines that the others use).

Usage: /usr/bin/python3 bench/chaos.py [--seed N] [--jobs async,sync,multiworker,async-record]
         [--faults N | --minutes M] [--epochs E] [--synthetic] [--json FILE] [--cli build/tandem]
Run from the project root after scripts/build (real MNIST from scripts/setup, or --synthetic:
small files made here). The same seed draws the same schedule (printed first)."""
import argparse
import hashlib
import itertools
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 3.0  # the jobs' --timeout (s)
MARGIN = 8.0  # what a fault's consequence may take beyond it (s): start-up of a restarted task


def log(*words):
    print(*words, flush=True)


def make_synthetic(directory, train=3000, test=500):
    """MNIST's files, small and learnable: each class a bright band of rows over noise."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(17)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 64, size=(n, 28, 28), dtype=np.uint8)
        for i, label in enumerate(labels):
            images[i].reshape(-1)[label * 78:(label + 1) * 78] += 160
        with open(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        with open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + labels.tobytes())


class Job:
    """One `tandem launch` of a job, in a process group of its own, its output in `log_path`."""

    def __init__(self, argv, log_path):
        self.log_path = log_path
        self.out = open(log_path, "ab")
        self.process = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT, cwd=ROOT,
                                        start_new_session=True)

    def said(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def ended(self):
        return self.process.poll() is not None

    def code(self):
        return self.process.returncode

    def end(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.out.close()


def tasks(run_dir):
    """The job's task processes (`tandem fit` with this run directory): {name: pid}, names as the
    job's logs give them ("chief:0", "ps:0", "worker:1", "rank 1")."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            environ = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if b"fit" not in argv or run_dir.encode() not in argv:
            continue
        env = dict(e.split("=", 1) for e in environ if "=" in e)
        if "TF_CONFIG" in env:
            task = json.loads(env["TF_CONFIG"]).get("task", {})
            found[f"{task.get('type')}:{task.get('index')}"] = int(pid)
        elif "OMPI_COMM_WORLD_RANK" in env:
            found[f"rank {env['OMPI_COMM_WORLD_RANK']}"] = int(pid)
        elif "SLURM_PROCID" in env and argv[1:2] == [b"fit"]:  # a rank srun started (not the batch script's launch)
            found[f"rank {env['SLURM_PROCID']}"] = int(pid)
    return found


def end_everything(path):
    """Every process whose command line names `path` (a job's run directory), killed."""
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and path.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def listening_ports(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    ports = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:
            ports.append(int(fields[1].split(":")[1], 16))
    return ports


def strangers(ports):
    """Garbage, the control plane's own hello and a failure (unsealed), and silence, on each port
    ((task, pid, port)): the connections made, each with where it came from (the port a refusal
    line names), held open."""
    made = []
    hello = struct.pack("<III", 1, 4, 9)
    failure = struct.pack("<II", 4, 4 + 21) + struct.pack("<i", 9) + b"a stranger says: fail"
    for task, pid, port in ports:
        for sent, payload in (("garbage", b"GET / HTTP/1.0\r\n\r\n" + b"z" * 2048),
                              ("hello and failure", hello + failure), ("silence", b"")):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                made.append({"socket": s, "task": task, "pid": pid, "port": port, "from": s.getsockname()[1],
                             "sent": sent, "owner": None})
                if payload:
                    s.sendall(payload)
            except OSError:
                if not made or made[-1]["socket"] is not s:
                    s.close()
    return made


def owner(connection):
    """Who listens where a stranger connected, by what it said first (peeked, left in the buffer;
    kept once seen, as a reset connection loses it): Tandem's control plane sends a challenge of 24
    random bytes at once, ZeroMQ (the parameter servers' sockets) its greeting (0xff, 8 bytes,
    0x7f), Open MPI's own ports nothing."""
    if connection["owner"] is None and "socket" in connection:
        try:
            first = connection["socket"].recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            first = b""
        if len(first) >= 10 and first[0] == 0xff and first[9] == 0x7f:
            connection["owner"] = "ZeroMQ"
        elif first:
            connection["owner"] = "control plane"
    return connection["owner"]


def stranger_named(connection, text, counts):
    """Whether the job's log names one stranger connection: a refusal line with the address it came
    from, or, past the log's rate limit (named up to the tenth of a process, then every
    thousandth), a closing count of that process's refusals that takes in every connection the
    harness made to it (`counts`: control-plane connections made, by pid). A ZeroMQ port's
    connections are judged at their run's end, together (zeromq_named). Open MPI's ports name
    nothing: those are named only if a line gives the connection's own address."""
    address = r"127\.0\.0\.1:%d\b" % connection["from"]
    if re.search(r"(refused a control connection|refused a ZeroMQ connection|dropped a message) from " + address, text):
        return True
    if connection["owner"] != "control plane" or counts.get(connection["pid"], 0) <= 10:
        return False
    closing = re.findall(re.escape(connection["task"]) + r" [^\n]*?: ([0-9]+) control connections refused in all", text)
    return any(int(n) >= counts[connection["pid"]] for n in closing)


def zeromq_named(connections, text):
    """How many of a run's stranger connections to one task's ZeroMQ port its log names: each
    refusal line with a connection's own address names that one; a refusal whose address was gone
    before it could be read (ZeroMQ resets a stranger whose first bytes are not its greeting within
    microseconds, and its events do not carry the peer) names one connection, no matter which; and
    the task's closing counts ("N connections refused on its ZeroMQ port, in all", one per process
    of the task) count them all where they add up to as many."""
    task = re.escape(connections[0]["task"])
    by_address = sum(1 for c in connections if stranger_named(c, text, {}))
    gone = len(re.findall(r"^%s \([^)]*\): refused a ZeroMQ connection from an address gone" % task, text, re.M))
    closing = sum(int(n) for n in re.findall(
        r"^%s \([^)]*\): [^\n]*?([0-9]+) connections? refused on its ZeroMQ port, in all$" % task, text, re.M))
    return min(len(connections), max(by_address + gone, closing))


def checkpoints_load(cli, model, data_dir, run_dir, newest=2):
    """The `newest` weights files in the run's checkpoints (those a fault may have caught being
    written) load and evaluate: the unreadable ones."""
    bad = []
    directory = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(directory):
        return bad
    names = [n for n in os.listdir(directory) if n.endswith(".safetensors")]
    names.sort(key=lambda n: os.path.getmtime(os.path.join(directory, n)))
    for name in names[-newest:]:
        path = os.path.join(directory, name)
        run = subprocess.run([cli, "evaluate", "--model", model, "--weights", path, "--data-dir", data_dir,
                              "--threads", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
        if run.returncode != 0:
            bad.append(f"{name}: {(run.stdout + run.stderr).strip()[-300:]}")
    return bad


def tensors_hash(path):
    """A safetensors file's tensors (names, dtypes, shapes, bytes), hashed in name order."""
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(length))
        data = f.read()
    digest = hashlib.sha256()
    for name in sorted(k for k in header if k != "__metadata__"):
        entry = header[name]
        begin, end = entry["data_offsets"]
        digest.update(f"{name} {entry['dtype']} {entry['shape']}".encode())
        digest.update(data[begin:end])
    return digest.hexdigest()


def not_joined(text, target):
    """Whether `target` was started again (the launcher's line) and had not joined the job since."""
    started = text.rfind(f"launch: starting task {target} ")
    return started >= 0 and not re.search(re.escape(target) + r" \([^)]*\) joined the running job", text[started:])


def accuracy(text):
    found = re.findall(r"test accuracy: ([0-9.]+)%", text)
    return float(found[-1]) if found else None


def start_named(target):
    """A rank that MPI's start waited for in vain, as the others name it ("... waited 3 s in MPI's
    start (MPI_Init) during start-up: one of ranks 0, 2 has not come to it"): it is among those."""
    if not target.startswith("rank "):
        return ""
    n = target.split()[1]
    return r"|one of ranks (?:[0-9]+, )*%s(?:, [0-9]+)* has not come to it" % n


def srun_named(target):
    """Under Slurm, srun's own naming of a rank that was killed ("srun: error: NODE: task 2:
    Killed"): a rank killed as the job starts, before the others can name it, is named only there
    (srun then ends the others), as a task killed as it starts is by `tandem launch`'s line."""
    return r"|^srun: error: \S+: task %s: Killed$" % target.split()[1] if target.startswith("rank ") else ""


# What naming a fault looks like in the job's log: the task, then how it went.
def named(kind, target):
    who = re.escape(target)
    if kind == "kill":  # by the job, or by the launcher (a task killed as it starts, not yet in the job)
        return who + r" [^\n]*(died|ended with status)" + srun_named(target) + start_named(target)
    if kind in ("stop", "link"):  # silent past the timeout (or, at the job's end, past the launcher's grace;
        # at start-up, a worker the job starts without: "did not join during start-up", or a chief
        # stopped as the others greet it: "heard nothing from the chief, chief:0 (...)"),
        # or, where a collective's wait ran out before the beats' (a rank stopped as the others
        # enter one), the rank they waited for: "rank 1 (...) waited 3 s in all_gather ...: rank 0
        # (host vm) has not entered it"
        return who + r" ([^\n]*(stopped answering|was stopped for|died|did not answer|had not ended|did not join)" \
            r"|\([^)\n]*\) has not entered it)|heard nothing from the chief, " + who + start_named(target)
    if kind == "requeue":  # Slurm's own words, as it ends the job's steps
        return r"DUE TO JOB REQUEUE"
    # Strangers: each connection on its own (stranger_named), not here.
    return r"(?!)"


JOBS = {
    # name: (launch prefix, strategy, targets, faults that end the job by rule, faults that may:
    # a server lost past the timeout, not back within it, ends an asynchronous job)
    "async": (["launch", "--ps", "1", "--workers", "2", "--restarts", "1000"], "ps-async",
              ["worker:0", "worker:1", "ps:0", "chief:0"], {"chief:0"}, {"ps:0"}),
    "sync": (["launch", "--ps", "1", "--workers", "2", "--restarts", "1000"], "ps-sync",
             ["worker:0", "worker:1", "ps:0"], {"ps:0", "chief:0"}, set()),
    "multiworker": (["launch", "-np", "2"], "multiworker:deterministic", ["rank 0", "rank 1"], {"rank 0", "rank 1"},
                    set()),
    # Asynchronous with --record, faults on the workers only (one launch: the record is the run's):
    # the steps the record shows handed out twice or never are those the log says.
    "async-record": (["launch", "--ps", "1", "--workers", "2", "--restarts", "1000"], "ps-async",
                     ["worker:0", "worker:1"], set(), set()),
    # Asynchronous across 3 hosts as network namespaces (root only; tests/distribute/netns.sh): the
    # chief and the server on host 1, a worker on each of hosts 2 and 3, whose links are taken down
    # (for the timeout plus 1.5 s) and up, or whose workers are killed.
    "netns-async": (None, "ps-async", ["worker:0", "worker:1"], set(), set()),
    # The deterministic multi-worker job under Slurm (root only; tests/distribute/slurm_cluster.sh):
    # 3 ranks, one a host; "the job" is what a requeue hits.
    "slurm": (None, "multiworker:deterministic", ["rank 0", "rank 1", "rank 2", "the job"],
              {"rank 0", "rank 1", "rank 2"}, set()),
}
NETNS = os.path.join(ROOT, "tests", "distribute", "netns.sh")
NETNS_PREFIX = "tchaos"
SLURM = os.path.join(ROOT, "tests", "distribute", "slurm_cluster.sh")
SLURM_PREFIX = "tchslm"


class SlurmJob(Job):
    """A batch job (`sbatch --wait`, which ends with the job; a requeued job runs again under the
    same wait), its output appended to `log_path`. Ended, it is cancelled."""

    def __init__(self, cluster, script, log_path):
        self.cluster = cluster
        self.final, self.asked = None, 0.0  # the job's exit status once Slurm says it ended; when last asked
        self.since = 0  # where this job's lines begin (in characters, as said() reads them)
        if os.path.exists(log_path):
            with open(log_path, errors="replace") as f:
                self.since = len(f.read())
        # (stdbuf: its "Submitted batch job N" written at once, not when the job ends)
        super().__init__(["bash", SLURM, "run", SLURM_PREFIX, cluster, "stdbuf", "-oL", "sbatch", "--wait", "--requeue", "--nodes",
                          "3", "--ntasks-per-node", "1", "--open-mode", "append", "-o", log_path, script], log_path)

    def slurm(self, *args):
        return subprocess.run(["bash", SLURM, "run", SLURM_PREFIX, self.cluster] + list(args), capture_output=True,
                              text=True, timeout=60)

    def id(self):
        found = re.search(r"Submitted batch job ([0-9]+)", self.said()[self.since:])
        return found.group(1) if found else None

    def requeue(self):
        """`scontrol requeue`, then the job released at once (Slurm holds a requeued job a while)."""
        job = self.id()
        if job is None:
            raise RuntimeError(f"no batch job number in {self.log_path}")
        self.slurm("scontrol", "requeue", job)
        until = time.time() + 30
        while time.time() < until and self.slurm("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "PENDING":
            time.sleep(0.1)
        self.slurm("scontrol", "update", f"JobId={job}", "StartTime=now")

    def ended(self):
        """Ended when Slurm says the job is (sbatch --wait polls for that at growing intervals, which
        could pass the harness's bound on its own)."""
        if self.process.poll() is not None or self.final is not None:
            return True
        if time.time() - self.asked < 0.5 or self.id() is None:
            return False
        self.asked = time.time()
        shown = self.slurm("scontrol", "-o", "show", "job", self.id()).stdout
        state = re.search(r"\bJobState=(\S+)", shown)
        if state and state.group(1) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                                        "BOOT_FAIL", "DEADLINE", "PREEMPTED"):
            status = re.search(r"\bExitCode=([0-9]+):([0-9]+)", shown)
            self.final = 0 if state.group(1) == "COMPLETED" else (int(status.group(1)) or 1) if status else 1
            return True
        return False

    def code(self):
        return self.final if self.final is not None else self.process.returncode

    def end(self):
        if self.id():
            self.slurm("scancel", self.id())
        super().end()


def slurm_cluster(work):
    """The Slurm cluster's folder, or None and why where it cannot start."""
    cluster = os.path.join(work, "slurm")
    subprocess.run(["bash", SLURM, "down", SLURM_PREFIX, cluster], capture_output=True)
    up = subprocess.run(["bash", SLURM, "up", SLURM_PREFIX, cluster], capture_output=True, text=True, timeout=120)
    return (cluster, None) if up.returncode == 0 else (None, (up.stdout + up.stderr).strip())


def netns_launch(cli, work):
    """`tandem launch` of a TF_CONFIG cluster on 3 namespace hosts, as a prefix for the fit command;
    None (and why) where namespaces cannot be made."""
    subprocess.run(["bash", NETNS, "down", NETNS_PREFIX], capture_output=True)
    up = subprocess.run(["bash", NETNS, "up", NETNS_PREFIX, "3", work], capture_output=True, text=True)
    if up.returncode != 0:
        return None, (up.stdout + up.stderr).strip()
    ips = [h.split(":")[0] for h in open(os.path.join(work, "hosts")).read().strip().split(",")]
    config = {"cluster": {"chief": [f"{ips[0]}:2222"], "ps": [f"{ips[0]}:2223"],
                          "worker": [f"{ips[1]}:2222", f"{ips[2]}:2222"]}, "task": {"type": "chief", "index": 0}}
    return ["bash", NETNS, "hub", NETNS_PREFIX, cli, "launch", "--tf-config", json.dumps(config), "--rsh-agent",
            os.path.join(work, "agent"), "--restarts", "1000"], None


def record_against_log(record_path, text):
    """What the record says of each epoch's steps (handed out again, never handed out) against the
    chief's lines ("this epoch's N steps all trained, K of them again after their worker died")."""
    with open(record_path) as f:
        record = json.load(f)
    handed = {}
    for _, epoch, step in record["steps"]:
        handed[(epoch, step)] = handed.get((epoch, step), 0) + 1
    again = sum(n - 1 for n in handed.values())
    epochs = sorted({e for e, _ in handed})
    per_epoch = {e: max(s for (x, s) in handed if x == e) + 1 for e in epochs}
    never = sum(per_epoch[e] - sum(1 for (x, _) in handed if x == e) for e in epochs)
    said_again = sum(int(k) for k in re.findall(r"steps all trained, ([0-9]+) of them again", text))
    said_lost = len(re.findall(r"not \(their worker died\)|lost on its shards", text))
    pushes = sum(1 for server in record["servers_applied"] for event in server if event[0] == 1)
    # A step handed again may have been applied twice (its worker died after its push reached the
    # servers): the servers' own count at the end says how many pushes were applied.
    said_pushes = sum(int(n) for n in re.findall(r"\): ([0-9]+) pushes applied", text))
    return {"steps_handed_again": again, "log_says_again": said_again, "steps_never_handed": never,
            "log_says_lost": said_lost, "pushes_applied": pushes, "log_says_pushes": said_pushes,
            "steps": len(handed), "applied_twice": pushes - len(handed),
            "agrees": again == said_again and never == 0 and said_lost == 0 and pushes == said_pushes
            and 0 <= pushes - len(handed) <= again}


# The log's sign that a launch has begun training (the first epoch's line, "Epoch 1/200", or a
# resumed run's, "Epoch 7/200"): a fault that lands before it lands in the job's start-up.
TRAINING = re.compile(r"^Epoch [0-9]+/[0-9]+$", re.M)

# Where a fault is aimed: the log's sign that the job is there (None: the drawn moment itself;
# for a start-up, the sign that it is over: the fault lands right after a launch, before it).
PHASES = {
    "step": None,
    "epoch-end": re.compile(r"^[0-9]+/[0-9]+ - ", re.M),
    "restore": re.compile(r"Restored the backup|every step in flight is called back"),
    "start-up": TRAINING,
}
AIM_WAIT = 20.0  # seconds a fault waits for its phase's sign before it lands where the job is


def draws(seed, job):
    """The faults of one job, drawn from the seed without end: (seconds after the previous one,
    kind, target, phase aimed at). The phases come from a generator of their own, so that adding
    them left each seed's delays, kinds and targets as they were. Drawn lazily (a schedule of so
    many minutes takes as many as land in them), the first n are always schedule(seed, job, n)."""
    rng, aim = random.Random(f"{seed}:{job}"), random.Random(f"{seed}:{job}:phase")
    targets = JOBS[job][2]
    while True:
        kind = (rng.choices(["kill", "link"], weights=[1, 2]) if job == "netns-async" else
                rng.choices(["kill", "stop", "requeue"], weights=[5, 3, 2]) if job == "slurm" else
                rng.choices(["kill", "stop", "strangers"], weights=[5, 3, 2]))[0]
        delay = round(rng.uniform(1.0, 4.0), 2)  # drawn before the target, as it always was
        target = ("every port" if kind == "strangers" else "the job" if kind == "requeue" else
                  rng.choice([t for t in targets if t != "the job"]))
        yield (delay, kind, target, aim.choices(list(PHASES), weights=[2, 1, 1, 1])[0])


def schedule(seed, job, faults):
    """The first `faults` faults of one job (draws)."""
    return list(itertools.islice(draws(seed, job), faults))


def phase_named(text, target):
    """The phase the log names a task in as it names its fault ("worker:1 (...) died during
    checkpoint writing: ..."), or None."""
    found = re.search(re.escape(target) + r" [^\n]*? during ([a-z][a-z -]*[a-z])", text)
    return found.group(1) if found else None


def run_job(name, plan, args, data_dir, work):
    cli = args.cli
    prefix, strategy, _, ending, may_end = JOBS[name]

    def fit_argv(run_dir, record_path):
        fit = [cli, "fit", "--model", "mlp", "--strategy", strategy, "--epochs", str(args.epochs), "--batch-size",
               "32", "--threads", "1", "--verbose", "2", "--timeout", str(TIMEOUT), "--data-dir", data_dir,
               "--run-dir", run_dir, "--backup-every", "20"]
        if name == "async-record":
            fit += ["--record", record_path]
        if name in ("netns-async", "slurm"):
            fit += ["--insecure"]  # the namespaces' network is this harness's own
        return fit

    if name == "netns-async":
        prefix, why = netns_launch(cli, work)
        if prefix is None:
            log(f"  {name}: skipped: network namespaces cannot be made here: {why}")
            return {"job": name, "skipped": why, "faults": 0, "survived": 0, "ended_by_rule": 0, "hangs": 0,
                    "unnamed": [], "ended_against_rule": [], "not_yet_in_the_job": 0, "unreadable_checkpoints": [],
                    "launches": 0, "accuracy": None, "strangers": {}, "runs": 0}
    elif name == "slurm":
        cluster, why = slurm_cluster(work)
        if cluster is None:
            log(f"  {name}: skipped: the Slurm cluster cannot start here: {why}")
            return {"job": name, "skipped": why, "faults": 0, "survived": 0, "ended_by_rule": 0, "hangs": 0,
                    "unnamed": [], "ended_against_rule": [], "not_yet_in_the_job": 0, "unreadable_checkpoints": [],
                    "launches": 0, "accuracy": None, "strangers": {}, "runs": 0}
        prefix = [cli, "launch", "--network", open(os.path.join(cluster, "subnet")).read().strip()]
    else:
        prefix = [cli] + prefix
    result = {"job": name, "faults": 0, "survived": 0, "ended_by_rule": 0, "hangs": 0, "unnamed": [],
              "ended_against_rule": [], "not_yet_in_the_job": 0, "unreadable_checkpoints": [], "launches": 0,
              "accuracy": None, "aimed": {}, "phases_named": {}, "strangers": {}, "drawn": []}
    job, launches = None, 0
    # A run: one run directory, resumed after each fault that ends it, until it finishes. With
    # --minutes, a run that finishes while minutes are left is followed by a fresh one (its own
    # directory, log and record), so that the faults go on; each run is checked at its end.
    runs = []  # each: {"run_dir", "log", "record"}, then what its end showed

    launch_at, hit, judged = 0, set(), False  # where this launch's log begins; the targets hit since
    late = []  # stranger connections not named yet: (the connection, where the log stood at its fault)
    made = {}  # control-plane connections made, by the pid that took them (its refusals' count)

    def start():
        nonlocal job, launches, launch_at, hit, judged
        launches += 1
        argv = prefix + ["--"] + fit_argv(runs[-1]["run_dir"], runs[-1]["record"])
        if name == "slurm":  # the same command as the batch script's (sbatch again resumes the run directory)
            script = os.path.join(work, f"slurm-job-{launches}.sh")
            with open(script, "w") as f:
                f.write("#!/bin/bash\n" + " ".join(shlex.quote(a) for a in argv) + "\n")
            job = SlurmJob(cluster, script, runs[-1]["log"])
        else:
            job = Job(argv, runs[-1]["log"])
        launch_at, hit, judged = len(job.said()), set(), False

    def new_run():
        n = len(runs)
        suffix = "" if n == 0 else f"-{n + 1}"
        runs.append({"run_dir": os.path.join(work, f"{name}-run{suffix}"),
                     "log": os.path.join(work, f"{name}{suffix}.log"),
                     "record": os.path.join(work, f"run{suffix}.record")})
        start()

    def finished():
        """The run wrote its final weights (resuming it again would be refused: a finished run)."""
        return os.path.exists(os.path.join(runs[-1]["run_dir"], "checkpoints", "final.safetensors"))

    def end_of_run():
        """What a finished (or, at the end, abandoned) run shows: its accuracy, final weights, record."""
        run = runs[-1]
        job.end()
        text = job.said()
        for connection, at in [x for x in late if x[0]["log"] == run["log"]]:  # named by the run's end?
            if connection["owner"] == "ZeroMQ":
                continue
            if stranger_named(connection, text[at:], made):
                result["strangers"]["control plane"]["named"] += 1
            elif connection.get("after_result"):
                result["strangers"]["after the job's result"] = result["strangers"].get("after the job's result", 0) + 1
            else:
                result["unnamed"].append(f"strangers: {connection['sent']} to {connection['task']}'s "
                                         f"{connection['owner']} port {connection['port']}")
        zeromq = {}  # the run's connections to each task's ZeroMQ port
        for connection, _ in late:
            if connection["log"] == run["log"] and connection["owner"] == "ZeroMQ":
                zeromq.setdefault(connection["task"], []).append(connection)
        for task, connections in zeromq.items():
            n = zeromq_named(connections, text)
            result["strangers"]["ZeroMQ"]["named"] += n
            late_ones = min(len(connections) - n, sum(1 for c in connections if c.get("after_result")))
            if late_ones:
                result["strangers"]["after the job's result"] = result["strangers"].get("after the job's result",
                                                                                        0) + late_ones
            result["unnamed"] += [f"strangers: {len(connections) - n - late_ones} of {len(connections)} connections "
                                  f"to {task}'s ZeroMQ port"] if n + late_ones < len(connections) else []
        run["accuracy"] = accuracy(text)
        final = os.path.join(run["run_dir"], "checkpoints", "final.safetensors")
        if os.path.exists(final):
            run["final_hash"] = tensors_hash(final)
        if name == "async-record" and os.path.exists(run["record"]):
            run["record_against_log"] = record_against_log(run["record"], text)

    def settle(before):
        """After a fault: the job goes on (its log grows) or ends, within the timeout and the margin."""
        deadline = time.time() + TIMEOUT + MARGIN
        while time.time() < deadline:
            if job.ended() or len(job.said()) > before + 200:
                return True
            time.sleep(0.1)
        return False

    def judge_end(counted_survived):
        """The job ended with an error: by rule if the log names a task hit since the launch whose
        loss may end the job (a fault an instant earlier can be the cause), else against it."""
        nonlocal judged
        if judged:
            return
        judged = True
        lines = job.said()[launch_at:].splitlines()
        errors = [l for l in lines if l.startswith("error: ")]
        # Named as a task ("rank 0 (host) died ..."), or as the rank a start-up waited on: a fault
        # can land while the job starts, and the launcher ends the others naming it ("... ended by
        # the launcher during start-up: rank 0 failed to start"), or rank 0 does ("... waited 3 s in
        # MPI's start (MPI_Init) during start-up: rank 1 has not come to it"). A chief killed as
        # its job starts, before its control plane is up, is named by the launcher alone ("launch:
        # task chief:0 (...) ended with status 137", the others then ended, no error printed):
        # that names it too, for a task whose loss always ends the job (a server's death, which
        # may, must be named by an error that says the job ended of it).
        rule = [t for t in hit & (ending | may_end)
                if any(t + " (" in l or t + " failed to start" in l or t + " has not come to it" in l
                       for l in errors)
                or (t in ending and any(l.startswith(f"launch: task {t} (") and " ended with status " in l
                                        for l in lines))
                or (srun_named(t) and any(re.match(srun_named(t)[1:], l) for l in lines))
                or (start_named(t) and any(re.search(start_named(t)[1:], l) for l in errors))]
        if counted_survived:
            result["survived"] -= 1
        if rule:
            result["ended_by_rule"] += 1
        else:
            result["ended_against_rule"].append(errors[0][:200] if errors else "no error printed")

    new_run()
    deadline_overall = time.time() + args.limit
    counted = False  # the last fault was counted as survived
    last = None  # the previous fault (kind, target)
    for delay, kind, target, phase in plan:
        result["drawn"].append([delay, kind, target, phase])
        # A start-up is aimed at right after a launch: one under way (no fault yet since it, and
        # no training yet), or the relaunch of a job a fault ended, at once.
        if phase != "start-up" or not (job.ended() or not TRAINING.search(job.said()[launch_at:])):
            time.sleep(delay)
        relaunched = False
        if job.ended():
            if job.code() != 0 and finished():  # a fault that ended it after its final weights: judged, and done
                judge_end(counted)
            if job.code() == 0 or finished():
                if not args.minutes:
                    break
                end_of_run()
                new_run()  # minutes are left: a fresh run
            else:
                judge_end(counted)
                start()  # resume after a fault that ended it
            counted = False
            relaunched = True
            if phase not in ("restore", "start-up"):
                time.sleep(1.0)
        if phase == "restore" and not (relaunched or last == ("kill", "ps:0")):
            phase = "step (no restore under way)"  # a restore follows a resume or a server's death only
        if phase == "start-up":  # the target (any task, for strangers) up, then at once
            if TRAINING.search(job.said()[launch_at:]):
                phase = "step (no start-up under way)"
            until = time.time() + AIM_WAIT
            while time.time() < until and not job.ended() and not TRAINING.search(job.said()[launch_at:]):
                pids = tasks(runs[-1]["run_dir"])
                if target in pids or (kind in ("strangers", "requeue") and pids):
                    break
                time.sleep(0.01)
        elif PHASES.get(phase) is not None:  # wait for the phase's sign, then land at once
            mark, until = (launch_at if relaunched else len(job.said())), time.time() + AIM_WAIT
            while not PHASES[phase].search(job.said()[mark:]) and time.time() < until and not job.ended():
                time.sleep(0.02)
            if not PHASES[phase].search(job.said()[mark:]):
                phase = "step (its phase did not come)"
        pids = tasks(runs[-1]["run_dir"])
        if target not in pids and not (kind in ("strangers", "requeue") and pids):
            continue  # not started (yet again): nothing to hit
        text_before = job.said()
        # Landing before the launch has begun training is landing in its start-up, whatever the
        # aim (a restore's sign comes before it: that aim is kept).
        if not TRAINING.search(text_before[launch_at:]) and phase != "restore":
            phase = "start-up"
        elif phase == "start-up":
            phase = "step (start-up was over)"
        last = (kind, target)
        result["faults"] += 1
        # Where it landed, in the job's own log, for whoever reads it after (no task's name followed
        # by a space: no pattern that judges the log matches this line).
        with open(runs[-1]["log"], "a") as f:
            f.write(f"chaos: fault {result['faults']} lands: {kind} on {target}, aimed at {phase}, "
                    f"{time.strftime('%H:%M:%S')}\n")
        result["aimed"][phase] = result["aimed"].get(phase, 0) + 1
        counted = False
        if kind != "strangers":
            hit.add(target)
        held = []
        if kind == "kill":
            os.kill(pids[target], signal.SIGKILL)
        elif kind == "link":  # the target worker's host (2 or 3) cut off from the others, then back
            port = f"p{int(target.split(':')[1]) + 2}"
            subprocess.run(["ip", "-n", f"{NETNS_PREFIX}-hub", "link", "set", port, "down"], check=True)
            time.sleep(TIMEOUT + 1.5)
            subprocess.run(["ip", "-n", f"{NETNS_PREFIX}-hub", "link", "set", port, "up"], check=True)
        elif kind == "requeue":
            job.requeue()
        elif kind == "stop":
            os.kill(pids[target], signal.SIGSTOP)
            time.sleep(TIMEOUT + 1.5)
            try:
                os.kill(pids[target], signal.SIGCONT)
            except ProcessLookupError:
                pass
        else:
            held = strangers([(task, pid, port) for task, pid in pids.items() for port in listening_ports(pid)])
            # Made once the job has said its result, as its tasks exit: they may never be taken.
            for c in held:
                c["after_result"] = accuracy(text_before[launch_at:]) is not None
        ok = settle(len(text_before))
        # The fault's naming may come a moment after the log grows: wait for it within the bound.
        # Strangers are named (each connection) when rank 0's control thread takes them, which
        # during a slow start-up can be later: their sockets are held a while (past the 2 s a hello
        # may take), then who took each is known by what it said first (owner), and those not
        # named yet are judged again at their run's end (`late`).
        pattern = re.compile(named(kind, target), re.M)
        until = time.time() + (3.0 if kind == "strangers" else TIMEOUT + MARGIN)
        while time.time() < until:
            if kind != "strangers" and pattern.search(job.said()[len(text_before):]):
                break
            if kind == "strangers" and time.time() > until - 2.0 and all(
                    stranger_named(c, job.said()[len(text_before):], made)
                    for c in held if owner(c) == "control plane"):
                break
            time.sleep(0.1)
        for c in held:  # a port's connections share its owner (one reset before its first word is seen)
            c["log"] = runs[-1]["log"]
            c["owner"] = owner(c) or next((owner(d) for d in held if (d["pid"], d["port"]) == (c["pid"], c["port"])
                                           and owner(d)), None)
        if kind == "strangers" and not held:
            result["strangers"]["no port listening yet"] = result["strangers"].get("no port listening yet", 0) + 1
        for c in held:
            if c["owner"] == "control plane":
                made[c["pid"]] = made.get(c["pid"], 0) + 1
        for c in held:
            c["socket"].close()
            del c["socket"]
            tally = result["strangers"].setdefault(c["owner"] or "no first word (Open MPI's, or unknown)",
                                                   {"connections": 0, "named": 0})
            tally["connections"] += 1
            if c["owner"] == "ZeroMQ":  # judged with the run's others at its end (zeromq_named)
                late.append((c, len(text_before)))
            elif stranger_named(c, job.said()[len(text_before):], made):
                tally["named"] += 1
            elif c["owner"] == "control plane":
                late.append((c, len(text_before)))
        if kind != "strangers":
            said = phase_named(job.said()[len(text_before):], target) or "none named"
            result["phases_named"][said] = result["phases_named"].get(said, 0) + 1
        # The rule: the job ends within the bound; but a stop at start-up may be survived (the others
        # give up on the stopped task and are started again, and it goes on with them), named all
        # the same.
        if ok and kind != "strangers" and target in ending and not (kind == "stop" and phase == "start-up"):
            until = time.time() + TIMEOUT + MARGIN
            while not job.ended() and time.time() < until:
                time.sleep(0.1)
            ok = job.ended()
        if not ok:
            result["hangs"] += 1
            log(f"  {name}: HANG after {kind} {target}")
            break
        if kind != "strangers" and not pattern.search(job.said()[len(text_before):]):
            if kind in ("stop", "link") and not_joined(text_before, target):
                result["not_yet_in_the_job"] += 1  # started again and not joined: nothing to name
            elif job.ended() and job.code() == 0 and accuracy(text_before[launch_at:]) is not None:
                # Landed once the job had said its result, as its tasks exit: nothing left to hurt.
                result["after_the_end"] = result.get("after_the_end", 0) + 1
            else:
                result["unnamed"].append(f"{kind} {target}")
        if job.ended() and job.code() != 0:
            judge_end(False)
        else:
            result["survived"] += 1
            counted = True
        bad = checkpoints_load(cli, "mlp", data_dir, runs[-1]["run_dir"])
        result["unreadable_checkpoints"] += [b for b in bad if b not in result["unreadable_checkpoints"]]
        if time.time() > deadline_overall:
            break
    # To the end: resumed as often as it takes (a fault's end), never past the limit.
    while time.time() < deadline_overall + 300:
        if job.ended():
            if job.code() != 0 and finished():
                judge_end(counted)
            if job.code() == 0 or finished():
                break
            judge_end(counted)
            counted = False
            start()
        time.sleep(0.2)
    if not job.ended():
        result["hangs"] += 1
    end_of_run()
    result["launches"] = launches
    result["runs"] = len(runs)
    result["log"] = runs[-1]["log"]
    # Each run's accuracy is checked: the lowest is the job's.
    found = [r["accuracy"] for r in runs]
    result["accuracy"] = None if None in found else min(found)
    if "final_hash" in runs[-1]:
        result["final_hash"] = runs[-1]["final_hash"]
    records = [r["record_against_log"] for r in runs if "record_against_log" in r]
    if records:  # every run's, summed; agreeing if each run's does
        result["record"] = {k: sum(r[k] for r in records) for k in records[0] if k != "agrees"}
        result["record"]["agrees"] = all(r["agrees"] for r in records)
    if name in ("multiworker", "slurm"):
        # Deterministic: every run (the same command in a fresh directory) ends with the weights of
        # one uninterrupted run (under Slurm: one process's, which 3 ranks give bit for bit).
        quiet_dir = os.path.join(work, f"{name}-quiet")
        quiet = prefix + ["--"] + fit_argv(quiet_dir, None)
        if name == "slurm":
            quiet = [a if a != "multiworker:deterministic" else "mirrored:1:deterministic"
                     for a in fit_argv(quiet_dir, None) if a != "--insecure"]
        run = subprocess.run(quiet, capture_output=True, text=True, timeout=600, cwd=ROOT)
        quiet_final = os.path.join(quiet_dir, "checkpoints", "final.safetensors")
        result["uninterrupted_hash"] = tensors_hash(quiet_final) if run.returncode == 0 else None
        result["hash_equal"] = all(r.get("final_hash") == result["uninterrupted_hash"] for r in runs)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", default="async,sync,multiworker,async-record")
    parser.add_argument("--faults", type=int, default=8, help="faults drawn per job")
    parser.add_argument("--minutes", type=float, help="faults drawn until this many minutes of each job have "
                        "passed (instead of --faults; the limit then)")
    parser.add_argument("--epochs", type=int, default=200, help="each job's epochs")
    parser.add_argument("--limit", type=float, default=600, help="seconds of faults per job at most")
    parser.add_argument("--synthetic", action="store_true", help="small MNIST files made here, not ./data")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--cli", default=os.path.join(ROOT, "build", "tandem"), help="the tandem command")
    parser.add_argument("--end-with-parent", action="store_true",
                        help="end (and end every job) when the process that started this one dies (a test's watchdog)")
    args = parser.parse_args()
    if args.minutes:
        args.limit = args.minutes * 60
    # Ended by a signal, the harness still ends its jobs (the finally below): they run in sessions
    # of their own, out of reach of a signal to this process's group.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.end_with_parent:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before that took effect
            sys.exit(128 + signal.SIGTERM)
    work = tempfile.mkdtemp(prefix="tandem-chaos-")
    data_dir = os.path.join(ROOT, "data")
    if args.synthetic:
        data_dir = os.path.join(work, "data")
        make_synthetic(os.path.join(data_dir, "mnist"))
    results = []
    for name in args.jobs.split(","):
        if args.minutes:
            plan = draws(args.seed, name)
            log(f"{name}, seed {args.seed}: faults drawn until {args.minutes:g} minutes have passed (the first n "
                f"those of --faults n)")
        else:
            plan = schedule(args.seed, name, args.faults)
            log(f"{name}, seed {args.seed}: " + ", ".join(f"+{d}s {k} {t} at {p}" for d, k, t, p in plan))
        started = time.time()
        try:
            r = run_job(name, plan, args, data_dir, work)
        finally:  # whatever went wrong, no process of the job (its uninterrupted run's too) nor a namespace
            end_everything(work)  # outlives the harness
            if name == "netns-async":
                subprocess.run(["bash", NETNS, "down", NETNS_PREFIX], capture_output=True)
            if name == "slurm":
                subprocess.run(["bash", SLURM, "down", SLURM_PREFIX, os.path.join(work, "slurm")], capture_output=True)
        r["seconds"] = round(time.time() - started, 1)
        r["seed"] = args.seed
        results.append(r)
        log(f"  {name}: {r['faults']} faults, {r['survived']} survived, {r['ended_by_rule']} ended the job by rule "
            f"(named), {r['hangs']} hangs, {len(r['unreadable_checkpoints'])} unreadable checkpoints, unnamed "
            f"{r['unnamed']}, ended against the rule {r['ended_against_rule']}, {r['not_yet_in_the_job']} stopped "
            f"before they had joined, {r.get('after_the_end', 0)} landed after the job's result, "
            f"{r['launches']} launches, {r['runs']} runs, accuracy {r['accuracy']}%, "
            f"{r['seconds']} s"
            + f", aimed at {r.get('aimed')}, phases the log named {r.get('phases_named')}"
            + f", stranger connections named of those made, by who took them: {r['strangers']}"
            + (f", hash equal to the uninterrupted run's: {r['hash_equal']}" if "hash_equal" in r else "")
            + (f", record against log: {r['record']}" if "record" in r else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    clean = all(r["hangs"] == 0 and not r["unnamed"] and not r["ended_against_rule"]
                and r.get("record", {"agrees": True})["agrees"] for r in results)
    if clean and not os.environ.get("CHAOS_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"logs kept in {work}")


if __name__ == "__main__":
    main()
