#!/usr/bin/env bash
# The checks that need a GPU, in one run (CI has none; they skip there): the native core's GPU pool test,
# the GPU tests of the store and the mount (real device), and the GPU benchmark. Run as root on a GPU
# machine after `npm run build` and `bash native/test/run.sh --no-asan`.
# Usage: bash scripts/gpu-check.sh [RESULTS_DIR] [--no-bench]   (default bench/results)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/results}"
bench=1
[ "${2:-}" = "--no-bench" ] && bench=0
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv,noheader || true
echo "== native core (GPU pool: round trips, ranges, IPC handle)"
native/build-test/cascade_native_test 2>&1 | grep -E 'gpu|native tests|FAIL' || status=1
echo "== mocha: GPU tier (store policy on the real device, binding, mount + CUDA IPC)"
node node_modules/mocha/bin/mocha.js --no-config --timeout 120000 --enable-source-maps --reporter spec \
  dist/test/store/gpu.test.js dist/test/mount/gpu.test.js 2>&1 | tee "$out/gpu-tests.log" | tail -60 || status=1
grep -q ' failing' "$out/gpu-tests.log" && status=1
[ $bench = 1 ] || exit $status
echo "== benchmark"
PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --size-mib 64 --trials 5 --out "$out/gpu-$(date -u +%F)-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -cs 'A-Za-z0-9' '-' | sed 's/-$//')" || status=1
exit $status
