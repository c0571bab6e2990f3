#!/usr/bin/env bash
# The layer order is enforced: copies of the project's sources with one include against it are
# refused by cmake/check_layers.cmake and by the configure step, naming the file, the include and
# what its layer may use; the unchanged copy passes. Usage: upward_include_test.sh SOURCE_DIR
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fresh_copy() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  cp -r "$src/src" "$src/include" "$src/cmake" "$src/examples" "$src/CMakeLists.txt" "$work/tree/"
}
# expect_refusal NAME EXPECTED_TEXT: the check must fail and print EXPECTED_TEXT.
expect_refusal() {
  local out
  if out=$(cmake -DROOT="$work/tree" -P "$work/tree/cmake/check_layers.cmake" 2>&1); then
    echo "FAIL ($1): the check accepted it"; failures=$((failures + 1))
  elif ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL ($1): expected \"$2\" in:"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok ($1): refused: $2"
  fi
}

fresh_copy
if ! out=$(cmake -DROOT="$work/tree" -P "$work/tree/cmake/check_layers.cmake" 2>&1); then
  echo "FAIL (unchanged copy): refused:"; echo "$out"; failures=$((failures + 1))
fi

# nn reaching up to the model (what src/nn/sequential.cpp did).
printf '#include "tandem/model.h"\n' >>"$work/tree/src/nn/dense.cpp"
expect_refusal upward "src/nn/dense.cpp (layer nn) includes tandem/model.h (layer fit); nn may use core, autograd, collectives, ops"
# The configure step refuses it too, so that it never builds.
if out=$(cmake -S "$work/tree" -B "$work/build" -G Ninja -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF 2>&1); then
  echo "FAIL (configure): accepted an upward include"; failures=$((failures + 1))
elif ! grep -qF "src/nn/dense.cpp (layer nn) includes tandem/model.h" <<<"$out"; then
  echo "FAIL (configure): refused without naming the include:"; echo "$out"; failures=$((failures + 1))
else
  echo "ok (configure): refused"
fi

# A public header reaching up (a user's include of layers.h must not drag in the strategies).
fresh_copy
printf '#include "tandem/distribute/strategy.h"\n' >>"$work/tree/include/tandem/layers.h"
expect_refusal "upward header" "include/tandem/layers.h (layer nn) includes tandem/distribute/strategy.h (layer distribute)"

# Skipping a layer: nn may use ops, not the kernels under them.
fresh_copy
printf '#include "kernels/cpu/kernels.h"\n' >>"$work/tree/src/nn/pooling.cpp"
expect_refusal skip "src/nn/pooling.cpp (layer nn) includes kernels/cpu/kernels.h (layer kernels)"

# The same in angle brackets, and by a path relative to the file.
fresh_copy
printf '#include <tandem/model.h>\n' >>"$work/tree/src/nn/dense.cpp"
printf '#include "../fit/progress.h"\n' >>"$work/tree/src/nn/layer.cpp"
expect_refusal "angle brackets" "src/nn/dense.cpp (layer nn) includes tandem/model.h (layer fit)"
expect_refusal "relative path" "src/nn/layer.cpp (layer nn) includes ../fit/progress.h (layer fit)"

# A folder no layer owns, and an include of a file that does not exist.
fresh_copy
mkdir -p "$work/tree/src/elsewhere"
printf 'int x;\n' >"$work/tree/src/elsewhere/thing.cpp"
printf '#include "tandem/no_such_header.h"\n' >>"$work/tree/src/ops/binary.cpp"
expect_refusal "no layer" "src/elsewhere/thing.cpp is in no layer"
expect_refusal "missing file" "src/ops/binary.cpp includes \"tandem/no_such_header.h\", which is no file of include/ or src/"

[ "$failures" -eq 0 ] && echo "upward_include_test: all refused as expected" || exit 1
