#!/bin/sh
# Installs the Debian packages dpprof needs that are not installed yet (idempotent).
# Runs apt-get as root, or through sudo when not root. The CUDA toolkit is optional and
# never installed here: CMake enables the CUDA backend when it finds nvcc.
set -eu
# slurm-wlm and munge: the test that starts a one-node Slurm cluster (tests/slurm)
pkgs="build-essential cmake pkg-config dpkg-dev libopenmpi-dev openmpi-bin liblua5.4-dev lua5.4 libcjson-dev libpcre2-dev libutf8proc-dev libcairo2-dev libopenblas-dev libfftw3-dev fonts-dejavu-core
      slurm-wlm munge"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing$missing"
if [ "$(id -u)" -eq 0 ]; then as_root=""; elif command -v sudo >/dev/null 2>&1; then as_root="sudo"; else
  echo "install-deps: need root or sudo to install:$missing" >&2; exit 1
fi
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
