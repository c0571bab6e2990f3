#!/usr/bin/env bash
# Instructions per training step (1 thread) of the mlp at batch 25 and the cnn at batch 64, counted by
# callgrind: (count at 12 steps - count at 4 steps) / 8. Independent of machine noise, so a change
# that must not cost speed is checked with it. Usage: bash bench/step_instructions.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v valgrind >/dev/null || { echo "step_instructions: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cmake --build "$build" --target step_instructions >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for w in mlp25 cnn64; do
  for s in 4 12; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$w-$s" "$build/bench/step_instructions" "$w" "$s" >/dev/null 2>&1
  done
  a=$(grep -m1 '^summary:' "$out/$w-4" | cut -d' ' -f2)
  b=$(grep -m1 '^summary:' "$out/$w-12" | cut -d' ' -f2)
  echo "$w: $(((b - a) / 8)) instructions per step"
done
