"""The GPU bench's ratios from the JSON lines bench/gpu/run.sh gathered (one run, one card)."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by = {(r["who"], r["what"], r.get("precision", "")): r for r in rows}
    cards = sorted({f"{r['gpu']} (driver {r.get('driver')})" for r in rows if "gpu" in r})
    print("\ncard: " + (", ".join(cards) or "not named"))

    def rate(who, what="mlp003", precision=""):
        r = by.get((who, what, precision))
        return r["samples_per_s"] if r else None

    print("mlp003 (batch 1000), samples/s:")
    for ours, theirs in (("float32", "float32"), ("tf32", "tf32"), ("mixed_bfloat16", "bf16")):
        t = rate("tandem", precision=ours)
        for peer in ("pytorch-eager", "pytorch-compile"):
            p = rate(peer, precision=theirs)
            if t and p:
                print(f"  {ours}: Tandem {t:.0f}, {peer} {p:.0f}: {t / p:.2f}x")
        floor = rate("cublas-floor", precision=ours)
        if t and floor:
            print(f"  {ours}: Tandem at {100 * t / floor:.0f}% of the cuBLAS-only floor ({floor:.0f})")
    for precision in ("float32", "tf32"):
        floor = by.get(("cublas-floor", "mlp003", precision))
        if floor and "product_ms" in floor:
            print(f"  the floor's products ({precision}), ms: " +
                  ", ".join(f"{k} {v:.3f}" for k, v in floor["product_ms"].items()))
            print(f"  the same through Tandem's backend, ms: " +
                  ", ".join(f"{k} {v:.3f}" for k, v in floor.get("through_backend_ms", {}).items()))
    ours, theirs = by.get(("tandem", "mlp003", "float32")), by.get(("pytorch-eager", "mlp003", "float32"))
    if ours:
        print(f"  per steady step: {ours['cuda_malloc_per_step']} cudaMalloc calls (the allocator's), "
              f"{ours.get('driver_bytes_lost_per_step')} bytes of the driver's free memory lost")
        if theirs and "peak_bytes" in theirs:
            print(f"  peak GPU bytes of the step: Tandem {ours['peak_bytes']}, PyTorch eager {theirs['peak_bytes']} "
                  f"({ours['peak_bytes'] / theirs['peak_bytes']:.2f}x)")
    t, p = rate("tandem", "mlp25"), rate("pytorch-eager", "mlp25")
    if t and p:
        print(f"mlp25 (batch 25), samples/s: Tandem {t:.0f}, pytorch-eager {p:.0f}: {t / p:.2f}x")
    for who in ("tandem", "pytorch-eager"):
        r = by.get((who, "cnn-mnist", ""))
        if r:
            print(f"cnn-mnist: {who} {r['test_accuracy']:.4f} after {r['epochs']} epochs, {r['wall_s']} s from the start")


if __name__ == "__main__":
    main(sys.argv[1])
