#!/usr/bin/env bash
# Sets up everything Cascade needs on a Debian machine (run as root): system packages, npm packages,
# and the build. Safe to run again, also next to a running `cascade`: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_MIN=20.15

# g++/make/python3: node-gyp builds better-sqlite3 from source when no prebuilt binary can be fetched.
# util-linux: mount/umount for the huge-page DRAM arena. coreutils: dd drops page caches in benchmarks.
# libfuse2: fuse-native's prebuilt binary links libfuse.so.2. fuse: fusermount (mount/unmount).
# Not fuse3: it replaces the fuse package and breaks fusermount for libfuse2. attr: setfattr/getfattr.
# cmake + libssl-dev: the native addon (native/, built by cmake-js; SHA-256 from OpenSSL's libcrypto).
# redis-server (with redis-cli): the metadata engine for many nodes; its tests start their own servers.
# libfabric-dev + pkg-config: the remote DRAM tier's data plane (native/src/core/fabric.cc, found by
# pkg-config); iproute2: the cluster tests' network namespaces (ip netns, veth). liburing-dev: FUSE
# over io_uring in the native engine (found by pkg-config; without it the engine uses /dev/fuse alone).
APT_PACKAGES=(g++ make cmake pkg-config python3 util-linux coreutils ca-certificates libfuse2 fuse attr libssl-dev redis-server libfabric-dev liburing-dev iproute2)

apt_updated=false
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = false ]; then apt-get update -qq; apt_updated=true; fi
  apt-get install -y -qq --no-install-recommends "$@"
}

# How to get a Node.js that is new enough, for this system. Debian 12 (bookworm) ships 18.x and has
# none in bookworm-backports; Debian 13 (trixie) ships 20.19.
node_help() {
  local os="unknown system"
  if [ -r /etc/os-release ]; then os=$(. /etc/os-release && echo "${PRETTY_NAME:-$ID}"); fi
  cat >&2 <<EOF
setup: Cascade needs Node.js >= $NODE_MIN; $1 ($os).
  Debian 13 (trixie) or newer: apt-get install nodejs npm   (Debian's nodejs 20.19 is new enough)
  Debian 12 (bookworm) and older: Debian has no nodejs >= $NODE_MIN there (not in backports either);
  install Node.js 20 (or 22) from NodeSource, whose package brings npm with it:
    apt-get remove -y npm        # only if Debian's npm package is installed: it conflicts
    apt-get install -y curl ca-certificates
    curl -fsSL https://deb.nodesource.com/setup_20.x -o /tmp/nodesource_setup.sh
    bash /tmp/nodesource_setup.sh && apt-get install -y nodejs
  or unpack the official build (https://nodejs.org/en/download, linux-x64 .tar.xz) and put its bin/
  first in PATH. Then run this script again.
EOF
}

node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e "const [a, b] = process.versions.node.split('.').map(Number); const [x, y] = '$NODE_MIN'.split('.').map(Number); process.exit(a > x || (a === x && b >= y) ? 0 : 1)"
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# npm alone missing next to Debian's nodejs (NodeSource's nodejs brings npm, so this never asks for
# Debian's npm next to it, which would conflict).
if command -v node >/dev/null 2>&1 && ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  apt_install "${missing[@]}"
fi

# No Node.js at all: take Debian's only where it is new enough (an older one would be installed just
# to be refused below, and would stand in the way of NodeSource's package).
if ! command -v node >/dev/null 2>&1; then
  if [ "$apt_updated" = false ]; then apt-get update -qq; apt_updated=true; fi
  candidate=$(apt-cache policy nodejs 2>/dev/null | awk '/Candidate:/ { print $2 }')
  if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && dpkg --compare-versions "$candidate" ge "$NODE_MIN"; then
    echo "setup: installing Debian packages: nodejs"
    apt_install nodejs
    # Debian's nodejs comes without npm; a nodejs from NodeSource brings it (and conflicts with it).
    if ! command -v npm >/dev/null 2>&1; then apt_install npm; fi
  else
    node_help "Node.js is not installed and Debian's nodejs here is ${candidate:-not available}"
    exit 1
  fi
fi

if ! node_ok; then
  node_help "found $(node --version) at $(command -v node)"
  exit 1
fi

# The Debian package may start a redis-server service on port 6379; Cascade and its tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi

# npm ci deletes node_modules and installs every package again (minutes, and a running `cascade`
# loses the modules it has yet to load), so it runs only when node_modules does not match the lock
# file: a stamp of package-lock.json's SHA-256, written after a successful install, plus Node's module
# ABI (better-sqlite3 is built for one).
stamp=node_modules/.cascade-lock-sha256
want="$(sha256sum package-lock.json | cut -d ' ' -f 1) node-abi-$(node -p process.versions.modules)"
if [ -d node_modules ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: npm packages up to date (package-lock.json unchanged since they were installed)"
else
  echo "setup: installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

# Always built: both steps are incremental (cmake-js compiles only what changed and leaves the addon
# alone when nothing did; tsc takes ~10 s). Comparing file times instead would miss a deleted source,
# a changed tsconfig or compiler flag, or a checkout that set old times.
echo "setup: building"
npm run --silent build

# `cascade` on the PATH: a link to this checkout's CLI in /usr/local/bin (as `npm link` would make).
# Never over another program's file: only a missing name or an earlier link to a Cascade CLI.
cli="$PWD/dist/mount/cli.js"
chmod +x "$cli"
link=/usr/local/bin/cascade
if { [ -L "$link" ] && [[ "$(readlink "$link")" == */dist/mount/cli.js ]]; } || { [ ! -e "$link" ] && [ ! -L "$link" ]; }; then
  if ln -sfn "$cli" "$link" 2>/dev/null; then
    echo "setup: cascade -> $cli"
  else
    echo "setup: cannot write $link; to have \`cascade\` on your PATH: ln -s $cli ~/.local/bin/cascade" >&2
  fi
else
  echo "setup: $link exists and is not a link to a Cascade checkout; left alone (run $cli directly)" >&2
fi
echo "setup: done (node $(node --version))"
