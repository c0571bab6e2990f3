#!/usr/bin/env bash
# The GPU bench: Tandem (bench_gpu) and PyTorch (torch_peer.py) on the same GPU in one run, then
# the ratios (bench/gpu/report.py). BENCH_GPU names the bench_gpu binary (default:
# build-gpu/bench/bench_gpu), DATA_DIR the folder holding mnist/ (default: data). Each part has its
# own time limit, so that a slow one cannot take the lease. scripts/gpu-check run runs this.
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=${BENCH_GPU:-build-gpu/bench/bench_gpu}
data=${DATA_DIR:-data}
results=$(mktemp)
part() {  # seconds, then the command
  local limit=$1
  shift
  timeout "$limit" "$@" | tee -a "$results" || echo "bench: '$*' failed or passed its ${limit} s" >&2
}
python3 -c 'import torch; print("peer: PyTorch", torch.__version__, "on", torch.cuda.get_device_name(0))' || true
part 60 "$bench" floor
part 60 "$bench" mlp003 float32
part 60 "$bench" mlp003 mixed_bfloat16
for precision in float32 bf16; do
  for mode in eager compile; do part 120 python3 bench/gpu/torch_peer.py mlp003 "$precision" "$mode"; done
done
part 150 "$bench" cnn-mnist "$data"
part 150 python3 bench/gpu/torch_peer.py cnn-mnist "$data"
python3 bench/gpu/report.py "$results"
rm -f "$results"
