#!/usr/bin/python3
"""The peer for MirroredStrategy: PyTorch DistributedDataParallel (gloo), 2 processes of
1 thread each on this machine's 2 cores, the same models and global batch as bench_models.

Usage: /usr/bin/python3 bench/torch_ddp.py WORKLOAD [SECONDS] [PROCESSES] [zero]
Each process trains on global_batch / PROCESSES rows per step; gradients are all-reduced by
DDP. With "zero", the optimizer is torch's ZeroRedundancyOptimizer (ZeRO stage 1) around it.
Prints one JSON line: global samples/s, best of three timed passes, and rank 0's peak resident
memory beyond what it held before training (its training's own, in MB).
"""
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import make_model, make_optimizer  # noqa: E402

WORKLOADS = {"mlp25": ("mlp", 25), "mlp256": ("mlp", 256), "mlp5_50": ("mlp5", 50),
             "mlp5_256": ("mlp5", 256), "cnn64": ("cnn", 64), "cnn256": ("cnn", 256),
             "cifar_mlp_adam256": ("cifar-mlp", 256)}


def rss_mb(peak):
    """The process's resident memory now (peak: the most since it started), in MB."""
    import resource
    if peak:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def worker(rank, world, port, name, seconds, result, zero):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    kind, batch = WORKLOADS[name]
    local = batch // world
    torch.manual_seed(0)
    n = 60000
    x = torch.rand(n, 1, 28, 28) if kind == "cnn" else torch.rand(n, 3, 32, 32) if kind == "cifar-mlp" else \
        torch.rand(n, 784)
    y = torch.randint(0, 10, (n,))
    model = nn.parallel.DistributedDataParallel(make_model(kind))
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.001, eps=1e-7)
    else:
        opt = make_optimizer(kind, model)
    before = rss_mb(False)
    loss_fn = nn.CrossEntropyLoss()

    def run(rows):
        perm = torch.randperm(rows, generator=torch.Generator().manual_seed(rows))  # same on every rank
        dist.barrier()
        start = time.perf_counter()
        for begin in range(0, rows - batch + 1, batch):
            idx = perm[begin + rank * local:begin + (rank + 1) * local]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        dist.barrier()
        return rows / (time.perf_counter() - start)

    rows = min(n, batch * 40)
    run(rows)
    one = rows / run(rows)
    rows = min(n, max(batch, int(rows * (seconds / 3) / one)))
    rows -= rows % batch
    best = max(run(rows) for _ in range(3))
    if rank == 0:
        result.put((best, rss_mb(True) - before))
    dist.destroy_process_group()


def main():
    name = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    zero = len(sys.argv) > 4 and sys.argv[4] == "zero"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, name, seconds, result, zero)) for r in range(world)]
    for p in procs:
        p.start()
    best = None
    while best is None:
        try:
            best = result.get(timeout=1)
        except Exception:  # queue.Empty: give up if a worker died
            if any(p.exitcode not in (None, 0) for p in procs):
                sys.exit("torch_ddp: a worker process failed")
    for p in procs:
        p.join(timeout=60)
    best, memory = best
    print(json.dumps({"workload": name, "strategy": f"ddp:{world}" + (":zero" if zero else ""), "threads": 1,
                      "samples_per_s": round(best), "peak_training_mb": round(memory, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
