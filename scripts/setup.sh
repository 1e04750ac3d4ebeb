#!/usr/bin/env bash
# Sets up everything Cascade needs on a Debian machine (run as root): system packages, npm packages,
# and the TypeScript build. Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# g++/make/python3: node-gyp builds better-sqlite3 from source when no prebuilt binary can be fetched.
# util-linux: mount/umount for the huge-page DRAM arena. coreutils: dd drops page caches in benchmarks.
# libfuse2: fuse-native's prebuilt binary links libfuse.so.2. fuse: fusermount (mount/unmount).
# Not fuse3: it replaces the fuse package and breaks fusermount for libfuse2. attr: setfattr/getfattr.
# cmake + libssl-dev: the native addon (native/, built by cmake-js; SHA-256 from OpenSSL's libcrypto).
# redis-server (with redis-cli): the metadata engine for many nodes; its tests start their own servers.
# libfabric-dev + pkg-config: the remote DRAM tier's data plane (native/src/core/fabric.cc, found by
# pkg-config); iproute2: the cluster tests' network namespaces (ip netns, veth).
APT_PACKAGES=(g++ make cmake pkg-config python3 util-linux coreutils ca-certificates libfuse2 fuse attr libssl-dev redis-server libfabric-dev iproute2)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Debian package may start a redis-server service on port 6379; Cascade and its tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
node_minor=$(node -p 'process.versions.node.split(".")[1]')
if [ "$node_major" -lt 20 ] || { [ "$node_major" -eq 20 ] && [ "$node_minor" -lt 15 ]; }; then
  echo "setup: Node.js >= 20.15 is required (found $(node --version))" >&2
  exit 1
fi

echo "setup: installing npm packages"
npm ci --no-audit --no-fund --loglevel=error
echo "setup: building"
npm run --silent build
echo "setup: done (node $(node --version))"
