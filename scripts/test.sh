#!/bin/sh
# Builds dpprof and runs every test: first the normal build (the CUDA backend too when nvcc is
# installed; GPU tests print "skipped: no CUDA device" without a GPU) with warnings as errors,
# then, as root, the Debian package installed, tried and removed (scripts/check-deb.sh), then the
# CPU build again under AddressSanitizer and UndefinedBehaviorSanitizer.
#   usage: scripts/test.sh [--no-asan]
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDPPROF_WERROR=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
# ctest reports skipped tests without their reason: show what each one said
grep -h "^skipped:" build/Testing/Temporary/LastTest.log | sort | uniq -c || true
# as root (CI): the Debian package installed, the default experiment run from /tmp, removed
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then scripts/check-deb.sh build; fi
[ "${1:-}" = "--no-asan" ] && exit 0
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPPROF_CUDA=OFF -DDPPROF_SANITIZE=ON \
      -DDPPROF_WERROR=ON
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE asan_skip
