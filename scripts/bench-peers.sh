#!/usr/bin/env bash
# Installs the third-party systems the benchmarks compare against (Debian, as root), if missing.
# bindfs: a C FUSE filesystem on the same libfuse2 (never fuse3: it replaces the fuse package).
set -euo pipefail
missing=()
for pkg in bindfs; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bench: installing peers: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
