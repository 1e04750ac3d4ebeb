#!/usr/bin/env bash
# Builds the native core's plain C++ tests and runs them. By default with AddressSanitizer and UBSan
# (CASCADE_ASAN=ON): any leak, overflow, use-after-free or undefined behaviour fails the run.
# Usage: bash native/test/run.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
asan=ON
build=build-test-asan
if [ "${1:-}" = "--no-asan" ]; then asan=OFF; build=build-test; fi
cmake -S . -B "$build" -DCASCADE_NATIVE_TESTS=ON -DCASCADE_ASAN="$asan" -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" --target cascade_native_test -j "$(nproc)" >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build/cascade_native_test"
