#!/usr/bin/env bash
# Installs the third-party systems the benchmarks compare against (Debian, as root), if missing:
#   bindfs         a C FUSE filesystem on the same libfuse2 (never fuse3: it replaces the fuse package)
#   redis-server   Redis (npm run bench starts its own redis-server on a loopback port)
#   python3-h5py   HDF5 through h5py, driven by Debian's /usr/bin/python3 (with python3-numpy)
#   util-linux     fincore (cold-read checks); coreutils dd (posix_fadvise DONTNEED)
#   iperf3         TCP throughput on the path the remote DRAM tier uses (npm run bench:cluster)
#   libfabric-dev  the fi_read loop (bench/build-fi-read-bench.sh): the transport's own limit
set -euo pipefail
missing=()
for pkg in bindfs redis-server python3-h5py python3-numpy util-linux coreutils iperf3 libfabric-dev pkg-config cmake g++; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bench: installing peers: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The Debian package starts a redis-server service on port 6379; the benchmark runs its own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
