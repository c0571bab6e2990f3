#!/usr/bin/python3
"""Turns the strategy lines of bench/run into the speed-up table (same run, samples/s)."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def key(r):
    return (r["workload"], r.get("strategy", "default"), r["threads"])


ours = {key(r): r["samples_per_s"] for r in rows if "peer" not in r}
peer = {key(r): r["samples_per_s"] for r in rows if "peer" in r}
print(f"{'workload':<10} {'default 1t':>10} {'default 2t':>10} {'mirrored 2x1':>12} {'vs 1t':>6} {'vs 2t':>6} "
      f"{'determ. 2x1':>11} {'local_sgd 2x1':>13} {'torch 1t':>9} {'torch 2t':>9} {'ddp 2x1':>8} {'vs torch':>8}")
for w in dict.fromkeys(r["workload"] for r in rows):
    d1, d2 = ours[(w, "default", 1)], ours[(w, "default", 2)]
    m = ours[(w, "mirrored:2", 1)]
    det = ours.get((w, "mirrored:2:deterministic", 1), 0)
    local = ours.get((w, "local_sgd:2:4", 1), 0)
    t1, t2, ddp = peer[(w, "default", 1)], peer[(w, "default", 2)], peer[(w, "ddp:2", 1)]
    print(f"{w:<10} {d1:>10} {d2:>10} {m:>12} {m / d1:>5.2f}x {m / d2:>5.2f}x {det:>11} {local:>13} {t1:>9} {t2:>9} {ddp:>8} "
          f"{m / max(t1, t2, ddp):>7.1f}x")
print("samples/s at global batch 256; mirrored 2x1 = MirroredStrategy, 2 replicas of 1 thread;")
print("local_sgd 2x1 = LocalSgdStrategy, 2 replicas of 1 thread averaging their weights every 4 steps;")
print("vs torch = mirrored / the best of PyTorch 1 thread, 2 threads and DDP (gloo, 2 processes of 1 thread)")
