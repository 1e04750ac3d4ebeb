#!/usr/bin/env bash
# `npm test`: build, then the three parts of the suite, each with its own output:
#   1. the native core's C++ tests under ASan and UBSan (npm run test:native),
#   2. mocha over every test file (.mocharc.json),
#   3. the mount suites again on the fuse-native engine (npm run test:fuse-native),
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

echo
node dist/test/summary.js native "$native_rc" "$tmp/native.log" mocha "$mocha_rc" "$tmp/mocha.json" fuse-native "$fuse_rc" "$tmp/fuse-native.json"
summary_rc=$?
# Non-zero if the summary says FAIL, or if it could not run at all while a part failed.
if [ "$summary_rc" -ne 0 ] || [ "$native_rc" -ne 0 ] || [ "$mocha_rc" -ne 0 ] || [ "$fuse_rc" -ne 0 ]; then
  exit 1
fi
