#!/usr/bin/env bash
# Builds native/bench/fi_read_bench.cc (plain cmake, libfabric through pkg-config) into
# native/bench/build/ and prints the binary's path on stdout (cmake's own output goes to stderr).
# Needs cmake, g++, pkg-config and libfabric-dev (Debian).
# Usage: bash bench/build-fi-read-bench.sh
set -euo pipefail
dir="$(cd "$(dirname "$0")/../native/bench" && pwd)"
cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$dir/build" --target fi_read_bench -j "$(nproc)" >&2
echo "$dir/build/fi_read_bench"
