#!/usr/bin/python3
"""Turns bench/threads' JSON lines into its tables: the default thread choice against 1 and 2
threads (best of the rounds, and the spread: worst to best), quiet and beside a busy process,
with PyTorch under the same conditions; then two trainings side by side against one alone."""
import json
import os
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
refuse = os.environ.get("TANDEM_PEER_BLAS") == "reference"


def runs(cond, w, t, peer=False):
    return [r["samples_per_s"] for r in rows
            if r.get("cond") == cond and r.get("workload") == w and r.get("threads") == t and ("peer" in r) == peer]


def cell(values):
    return f"{max(values):,} [{min(values):,}-{max(values):,}]" if values else "-"


for cond, title in (("quiet", "quiet machine"), ("loaded", "one core taken by a busy process")):
    print(f"\nThreads, {title}: training samples/s, best of the rounds [spread]")
    print(f"{'workload':<9} {'default':>24} {'1 thread':>24} {'2 threads':>24} {'torch 1t':>9} {'torch 2t':>9}  check")
    workloads = list(dict.fromkeys(r["workload"] for r in rows if r.get("cond") == cond and "peer" not in r))
    for w in workloads:
        d, one, two = runs(cond, w, 0), runs(cond, w, 1), runs(cond, w, 2)
        p1, p2 = runs(cond, w, 1, True), runs(cond, w, 2, True)
        if cond == "quiet":
            better = one if max(one) >= max(two) else two
            ok = max(d) >= min(better)
            check = f"default {'within' if ok else 'BELOW'} the better one's spread"
        else:
            ratio = max(d) / max(one)
            check = f"default / 1 thread = {ratio:.2f} ({'ok' if ratio >= 0.9 else 'MISSED'}: >= 0.9)"
        peer = max(p1 + p2) if p1 + p2 else 0
        if peer:
            check += "; vs best torch: " + ("refused (reference BLAS)" if refuse else f"{max(d) / peer:.1f}x")
        print(f"{w:<9} {cell(d):>24} {cell(one):>24} {cell(two):>24} {max(p1) if p1 else '-':>9} "
              f"{max(p2) if p2 else '-':>9}  {check}")

print("\nTwo trainings side by side (default threads), against one alone")
for r in rows:
    if r.get("side_by_side", "").startswith("tandem"):
        worst = max(r["pair_s"])
        print(f"round {r['round']}: {r['side_by_side']}: alone {r['alone_s']:.2f} s, side by side "
              f"{r['pair_s'][0]:.2f} s and {r['pair_s'][1]:.2f} s: {worst / r['alone_s']:.2f}x "
              f"({'ok' if worst <= 2.5 * r['alone_s'] else 'MISSED'}: <= 2.5x)")
    elif r.get("side_by_side"):
        a, pair = r["alone"]["samples_per_s"], [p["samples_per_s"] for p in r["pair"]]
        print(f"round {r['round']}: {r['side_by_side']}: alone {a:,}, side by side {pair[0]:,} and {pair[1]:,}: "
              f"{a / min(pair):.2f}x slower")
