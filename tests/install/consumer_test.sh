#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then builds and runs a consumer project against
# it twice: with CMake (find_package(Tandem), Tandem::tandem) and with pkg-config (tandem.pc).
# Usage: consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$source/tests/install/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/consumer"
if ! command -v pkg-config > /dev/null; then
  echo "SKIPPED pkg-config half: pkg-config is not installed"
  exit 0
fi
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs tandem)
g++ -O1 "$source/tests/install/consumer/main.cpp" -o "$work/pc-consumer" $flags
"$work/pc-consumer"
