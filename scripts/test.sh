#!/usr/bin/env bash
# `npm test`: build, then the three parts of the suite, each with its own output:
#   1. the native core's C++ tests under ASan and UBSan (npm run test:native),
#   2. mocha over every test file (.mocharc.json),
#   3. the mount suites again on the fuse-native engine (npm run test:fuse-native),
#   4. the native engine's mount suites again over FUSE io_uring (npm run test:uring), where the kernel
#      has it (the fuse module parameter enable_uring, which the run sets and then puts back),
# and one closing line over all of them (test/summary.ts), e.g.
#   cascade tests: native ok (N checks), mocha 700 passing / 0 failing / 11 pending, fuse-native ... — PASS
# A failing part does not stop the others (the line then says what each did); the exit status is
# non-zero when any part failed. Arguments go to the main mocha run (e.g. --grep PATTERN).
set -uo pipefail
cd "$(dirname "$0")/.."

if ! npm run --silent build; then
  echo "cascade tests: build failed — FAIL"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cascade-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The C++ tests print to stderr; keep a copy to read their closing line.
npm run --silent test:native 2>&1 | tee "$tmp/native.log"
native_rc=${PIPESTATUS[0]}

# The reporter (test/reporter.ts) writes each run's counts to $CASCADE_TEST_SUMMARY.
CASCADE_TEST_SUMMARY="$tmp/mocha.json" npx --no-install mocha "$@"
mocha_rc=$?

CASCADE_TEST_SUMMARY="$tmp/fuse-native.json" npm run --silent test:fuse-native
fuse_rc=$?

uring_param=/sys/module/fuse/parameters/enable_uring
uring_rc=0
parts=(native "$native_rc" "$tmp/native.log" mocha "$mocha_rc" "$tmp/mocha.json" fuse-native "$fuse_rc" "$tmp/fuse-native.json")
if [ "$(id -u)" -eq 0 ] && [ -w "$uring_param" ] && node -e "process.exit(require('./dist/native').nativeBinding()?.features.uring ? 0 : 1)"; then
  uring_saved=$(cat "$uring_param")
  CASCADE_TEST_SUMMARY="$tmp/uring.json" npm run --silent test:uring
  uring_rc=$?
  echo "$uring_saved" > "$uring_param"
  parts+=(io_uring "$uring_rc" "$tmp/uring.json")
else
  echo "io_uring part skipped: needs root, $uring_param (Linux 6.14+) and an addon built with liburing"
fi

echo
node dist/test/summary.js "${parts[@]}"
summary_rc=$?
# Non-zero if the summary says FAIL, or if it could not run at all while a part failed.
if [ "$summary_rc" -ne 0 ] || [ "$native_rc" -ne 0 ] || [ "$mocha_rc" -ne 0 ] || [ "$fuse_rc" -ne 0 ] || [ "$uring_rc" -ne 0 ]; then
  exit 1
fi
