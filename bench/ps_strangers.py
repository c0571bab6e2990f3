#!/usr/bin/python3
"""Strangers on a parameter-server job's ports: an asynchronous cluster (1 server, 2 workers, mlp5
at batch 256, 1 thread per task, `tandem launch`) trained quietly, then again while this script
opens 1,000 idle TCP connections over 10 s to the chief's listening ports (its control port and its
data port, found through /proc) and holds them open; each training's samples/s from its report,
and whether the job failed (a beat held up past the timeout ends it, naming the silent task).

Usage: /usr/bin/python3 bench/ps_strangers.py [epochs] [connections]   (defaults 3 and 1000)
Run from the project root after scripts/build, with the data (scripts/setup)."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
CONNECTIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000


def chief_pid(launcher):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = open(f"/proc/{pid}/status").read()
            environ = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError:
            continue
        parent = re.search(r"PPid:\s+(\d+)", status)
        if parent and int(parent.group(1)) == launcher and '"type":"chief"' in environ.replace(" ", ""):
            return int(pid)
    return None


def listening_ports(pid):
    """The TCP ports a process listens on (its sockets' inodes matched in /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
            ports.append(int(fields[1].split(":")[1], 16))
    return ports


def train(flood, workdir):
    report = os.path.join(workdir, f"report-{flood}.json")
    command = ["./build/tandem", "launch", "--ps", "1", "--workers", "2", "--", "./build/tandem", "fit", "--model",
               "mlp5", "--strategy", "ps-async", "--batch-size", "256", "--epochs", str(EPOCHS), "--threads", "1",
               "--verbose", "2", "--checkpoint-dir", "", "--log-dir", "", "--report", report]
    log = open(os.path.join(workdir, f"log-{flood}.txt"), "w")
    job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    held, opened, refused = [], [0], [0]
    if flood:
        deadline = time.time() + 60
        pid = None
        while pid is None and time.time() < deadline and job.poll() is None:
            pid = chief_pid(job.pid)
            time.sleep(0.05)
        ports = []
        while not ports and time.time() < deadline and job.poll() is None:
            time.sleep(0.2)
            ports = listening_ports(pid) if pid else []

        def strangers():
            for i in range(CONNECTIONS):
                s = socket.socket()
                s.settimeout(0.5)
                try:
                    s.connect(("127.0.0.1", ports[i % len(ports)]))
                    held.append(s)
                    opened[0] += 1
                except OSError:
                    refused[0] += 1
                    s.close()
                time.sleep(10.0 / CONNECTIONS)

        if ports:
            threading.Thread(target=strangers, daemon=True).start()
    code = job.wait(timeout=600)
    for s in held:
        s.close()
    log.close()
    text = open(os.path.join(workdir, f"log-{flood}.txt")).read()
    rate = json.load(open(report))["training_samples_per_second"] if code == 0 and os.path.exists(report) else None
    return code, rate, opened[0], refused[0], text


with tempfile.TemporaryDirectory() as workdir:
    quiet = train(False, workdir)
    flooded = train(True, workdir)
print(f"mlp5, batch 256, ps-async 1 server x 2 workers, {EPOCHS} epochs, launched on this machine")
print(f"  quiet:   exit {quiet[0]}, {quiet[1] and round(quiet[1])} samples/s")
print(f"  flooded: exit {flooded[0]}, {flooded[1] and round(flooded[1])} samples/s, {flooded[2]} stranger "
      f"connections held open ({flooded[3]} not taken by the kernel) over 10 s")
if quiet[1] and flooded[1]:
    print(f"  flooded / quiet: {flooded[1] / quiet[1]:.3f}")
for name, run in (("quiet", quiet), ("flooded", flooded)):
    if run[0] != 0:
        print(f"--- {name} run's log (it failed) ---\n{run[4][-3000:]}")
