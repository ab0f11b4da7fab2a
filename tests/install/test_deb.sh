#!/bin/sh
# test_deb.sh BUILD_DIR: the Debian package of this build (cpack -G DEB, issue 42): its control
# fields declare the shared libraries it links as Debian packages (dpkg-shlibdeps) and the charts'
# font, and it holds the binary, the Lua side, the experiments, libdpprof.so, the Lua module, the
# headers and pkg-config file under /usr. Installing it is scripts/check-deb.sh's (root, CI).
set -eu
build=$(cd "$1" && pwd)
for t in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$t" > /dev/null || { echo "test_deb: no $t (Debian's dpkg-dev; scripts/install-deps.sh)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_deb: $*" >&2; exit 1; }
(cd "$build" && cpack -G DEB -B "$tmp" > "$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/dpprof_*.deb 2>/dev/null | head -n 1)
[ -f "$deb" ] || fail "no dpprof_*.deb made"
info=$(dpkg-deb -I "$deb")
depends=$(echo "$info" | sed -n 's/^ Depends: //p')
for pkg in liblua5.4-0 libcjson1 libpcre2-8-0 libutf8proc2 libcairo2 libopenblas0 libfftw3-double3 libgomp1 fonts-dejavu-core; do
  echo "$depends" | grep -q "\(^\|, \)$pkg\( \|,\|$\)" || fail "Depends lacks $pkg: $depends"
done
echo "$info" | grep -q "^ Package: dpprof$" || fail "not package dpprof: $info"
files=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/dpprof ./usr/share/dpprof/lua/dpprof/core.lua ./usr/share/dpprof/lua/dpprof/models/h100-calibrated.json \
         ./usr/share/dpprof/experiments/default.lua ./usr/share/doc/dpprof/README.md ./usr/share/doc/dpprof/help/risk.txt \
         ./usr/include/dpprof/dpprof_engine.h ./usr/lib/libdpprof.so.0 ./usr/lib/pkgconfig/dpprof.pc \
         ./usr/lib/lua/5.4/dpprof.so ./usr/lib/cmake/dpprof/dpprofConfig.cmake; do
  echo "$files" | grep -qx "$f" || fail "the package lacks $f"
done
echo "$files" | grep -q "^./usr/local/" && fail "the package installs under /usr/local"
echo "test_deb: ok ($(basename "$deb"): Depends: $depends)"
