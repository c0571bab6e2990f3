#!/usr/bin/env bash
# Instructions per training step, counted by callgrind: (count at 12 steps - count at 4 steps) / 8,
# for the mlp at batch 25 and the cnn at batch 64 (1 thread) and the 5-layer mlp at global batch 256
# under MirroredStrategy, 2 replicas × 1 thread (every thread's instructions). Independent of
# machine noise, so a change that must not cost speed is checked with it. The run is bound to one
# CPU: replicas that wait for each other then yield or sleep at once instead of spinning, which
# would count a varying number of instructions. Usage: bash bench/step_instructions.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v valgrind >/dev/null || { echo "step_instructions: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cmake --build "$build" --target step_instructions >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
command -v taskset >/dev/null || { echo "step_instructions: needs taskset (util-linux)" >&2; exit 1; }
for w in mlp25 cnn64 mlp5_256_mirrored2; do
  for s in 4 12; do
    taskset -c "$(cut -d, -f1 <<<"$(taskset -pc $$ | sed 's/.*: //')" | cut -d- -f1)" valgrind --tool=callgrind --callgrind-out-file="$out/$w-$s" "$build/bench/step_instructions" "$w" "$s" >/dev/null 2>&1
  done
  a=$(grep -m1 '^summary:' "$out/$w-4" | cut -d' ' -f2)
  b=$(grep -m1 '^summary:' "$out/$w-12" | cut -d' ' -f2)
  echo "$w: $(((b - a) / 8)) instructions per step"
done
