#!/usr/bin/env bash
# The GPU bench: Tandem (bench_gpu) and PyTorch (torch_peer.py) on the same GPU in one run, then
# the ratios (bench/gpu/report.py). BENCH_GPU names the bench_gpu binary (default:
# build-gpu/bench/bench_gpu), DATA_DIR the folder holding mnist/ (default: data). The parts run in
# the order of their importance, each within its own limit and all within BENCH_GPU_BUDGET seconds
# (default 200, so that scripts/gpu-check run fits a lease with time for a rerun); a part the
# budget cannot hold is skipped and named. scripts/gpu-check run runs this.
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=${BENCH_GPU:-build-gpu/bench/bench_gpu}
data=${DATA_DIR:-data}
budget=${BENCH_GPU_BUDGET:-200}
results=$(mktemp)
start=$SECONDS
part() {  # its limit in seconds, then the command
  local left=$((budget - (SECONDS - start))) limit=$1
  shift
  if [ "$left" -lt 10 ]; then
    echo "bench: skipped '$*': the ${budget} s budget is spent" >&2
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" | tee -a "$results" || echo "bench: '$*' failed or passed its ${limit} s" >&2
}
python3 -c 'import torch; print("peer: PyTorch", torch.__version__, "on", torch.cuda.get_device_name(0))' || true
part 30 "$bench" floor float32
part 45 "$bench" mlp003 float32
part 45 python3 bench/gpu/torch_peer.py mlp003 float32 eager
part 45 "$bench" mlp003 mixed_bfloat16
part 45 python3 bench/gpu/torch_peer.py mlp003 bf16 eager
part 60 "$bench" mlp25 "$data"
part 60 python3 bench/gpu/torch_peer.py mlp25 "$data"
part 90 "$bench" cnn-mnist "$data"
part 90 python3 bench/gpu/torch_peer.py cnn-mnist "$data"
part 30 "$bench" floor tf32
part 45 "$bench" mlp003 tf32
part 45 python3 bench/gpu/torch_peer.py mlp003 tf32 eager
part 90 python3 bench/gpu/torch_peer.py mlp003 float32 compile
part 90 python3 bench/gpu/torch_peer.py mlp003 bf16 compile
python3 bench/gpu/report.py "$results"
rm -f "$results"
