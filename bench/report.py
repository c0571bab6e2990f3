#!/usr/bin/python3
"""Turns the JSON lines of bench/run into the comparison table."""
import json
import os
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ours = {(r["workload"], r["threads"]): r for r in rows if "peer" not in r}
peer = {(r["workload"], r["threads"]): r for r in rows if "peer" in r}
def speed_up(ours, peer):
    # Never against a peer on the reference BLAS (bench/peer_blas.py): that would flatter us.
    return "refused" if os.environ.get("TANDEM_PEER_BLAS") == "reference" else f"{ours / peer:.1f}x"


print(f"{'workload':<10} {'tandem 1t':>10} {'tandem 2t':>10} {'torch 1t':>10} {'torch 2t':>10} "
      f"{'speed-up':>9} {'floor':>9} {'of floor':>8} {'RSS-data MB':>11} {'torch RSS MB':>12}")
for w in dict.fromkeys(r["workload"] for r in rows):
    o1, o2 = ours[(w, 1)], ours[(w, 2)]
    p1, p2 = peer[(w, 1)], peer[(w, 2)]
    best_ours = max(o1["samples_per_s"], o2["samples_per_s"])
    best_peer = max(p1["samples_per_s"], p2["samples_per_s"])
    print(f"{w:<10} {o1['samples_per_s']:>10} {o2['samples_per_s']:>10} {p1['samples_per_s']:>10} "
          f"{p2['samples_per_s']:>10} {speed_up(best_ours, best_peer):>9} {o1['gemm_floor_samples_per_s']:>9} "
          f"{o1['samples_per_s'] / o1['gemm_floor_samples_per_s']:>7.0%} "
          f"{o1['peak_rss_mb'] - o1['data_mb']:>11.1f} {p1['peak_rss_mb']:>12.1f}")
print("samples/s (forward, backward, optimizer step); speed-up = best Tandem / best PyTorch;")
print("floor = GEMM-only samples/s (oneDNN sgemm, 1 thread); of floor = Tandem 1 thread / floor;")
print("RSS-data = Tandem peak RSS at 1 thread less its float32 training data")
