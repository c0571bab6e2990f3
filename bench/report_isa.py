#!/usr/bin/python3
"""The table of bench/isa: each vector level's figures side by side (best of the rounds)."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
levels = list(dict.fromkeys(r["isa"] for r in rows if "isa" in r))
host = levels[0] if levels else "?"
def best(workload, isa, strategy="default", peer=False):
    got = [r for r in rows if r["workload"] == workload and ("peer" in r) == peer and r.get("threads") == 1
           and (peer or (r["isa"] == isa and r["strategy"] == strategy))]
    return max(got, key=lambda r: r["samples_per_s"]) if got else None

print(f"models, 1 thread, samples/s (best of rounds); levels: {', '.join(levels)}")
print(f"{'workload':<9} {'isa':<7} {'tandem':>8} {'torch':>8} {'gemm floor':>10} {'of it':>6} "
      f"{'step floor':>10} {'of it':>6} {'update GB/s':>11}")
fractions = {}
for w in dict.fromkeys(r["workload"] for r in rows if r.get("strategy") == "default"):
    peer = best(w, None, peer=True)
    for isa in levels:
        r = best(w, isa)
        if r is None or "gemm_floor_samples_per_s" not in r:
            continue
        g = r["samples_per_s"] / r["gemm_floor_samples_per_s"]
        s = r.get("fraction_of_step_floor", 0.0)
        fractions[(w, isa)] = (g, s)
        print(f"{w:<9} {isa:<7} {r['samples_per_s']:>8} {peer['samples_per_s'] if peer else '-':>8} "
              f"{r['gemm_floor_samples_per_s']:>10} {g:>6.0%} {r.get('step_floor_samples_per_s', 0):>10} {s:>6.0%} "
              f"{r.get('update_bandwidth_gb_s', 0):>11.1f}")
if len(levels) > 1:
    gaps = [(w, 100 * (fractions[(w, levels[0])][0] - fractions[(w, "avx2")][0]))
            for w, isa in fractions if isa == levels[0] and (w, "avx2") in fractions]
    print("fraction of the gemm floor, " + host + " minus avx2, points: " +
          ", ".join(f"{w} {gap:+.0f}" for w, gap in gaps))
print()
print("deterministic against plain MirroredStrategy, 2 replicas x 1 thread, global batch 256")
print(f"{'workload':<9} {'isa':<7} {'plain':>8} {'determ.':>8} {'ratio':>6}")
for w in ("mlp5_256", "cnn256"):
    for isa in levels:
        plain, det = best(w, isa, "mirrored:2"), best(w, isa, "mirrored:2:deterministic")
        if plain and det:
            print(f"{w:<9} {isa:<7} {plain['samples_per_s']:>8} {det['samples_per_s']:>8} "
                  f"{det['samples_per_s'] / plain['samples_per_s']:>5.2f}x")
