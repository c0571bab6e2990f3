"""The GPU bench's ratios from the JSON lines bench/gpu/run.sh gathered (one run, one card)."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by = {(r["who"], r["what"], r.get("precision", "")): r for r in rows}

    def rate(who, precision):
        r = by.get((who, "mlp003", precision))
        return r["samples_per_s"] if r else None

    print("\nmlp003 (batch 1000), samples/s:")
    for ours, theirs in (("float32", "float32"), ("mixed_bfloat16", "bf16")):
        t = rate("tandem", ours)
        for peer in ("pytorch-eager", "pytorch-compile"):
            p = rate(peer, theirs)
            if t and p:
                print(f"  {ours}: Tandem {t:.0f}, {peer} {p:.0f}: {t / p:.2f}x")
    t, floor = rate("tandem", "float32"), rate("cublas-floor", "float32")
    if t and floor:
        print(f"  float32: Tandem at {100 * t / floor:.0f}% of the cuBLAS-only floor ({floor:.0f})")
    ours = by.get(("tandem", "mlp003", "float32"))
    if ours:
        print(f"  cudaMalloc calls per steady step: {ours['cuda_malloc_per_step']}")
    for who in ("tandem", "pytorch-eager"):
        r = by.get((who, "cnn-mnist", ""))
        if r:
            print(f"cnn-mnist: {who} {r['test_accuracy']:.4f} after {r['epochs']} epochs, {r['wall_s']} s from the start")


if __name__ == "__main__":
    main(sys.argv[1])
