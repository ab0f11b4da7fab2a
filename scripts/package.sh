#!/bin/sh
# Builds the Debian package dpprof_<version>_<arch>.deb (CPack, from what `cmake --install`
# installs, under /usr) in build-deb/, and prints its path. Its dependencies are read from the
# shared libraries it links (dpkg-shlibdeps). The CPU backend by default: CUDA=ON builds the CUDA
# backend in too (the package then needs the CUDA runtime, which no Debian package declares).
#   usage: scripts/package.sh            then: sudo apt-get install ./build-deb/dpprof_*.deb
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DDPPROF_CUDA="${CUDA:-OFF}" -DBUILD_TESTING=OFF
cmake --build build-deb -j "$(nproc)"
(cd build-deb && cpack -G DEB)
ls "$PWD"/build-deb/dpprof_*.deb
