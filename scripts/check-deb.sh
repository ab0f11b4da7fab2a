#!/bin/sh
# check-deb.sh BUILD_DIR (root): the Debian package of a build installed on this machine with
# apt-get, the default experiment run with the installed dpprof from /tmp and stock lua5.4's
# require("dpprof") checked, then the package removed (issue 42; scripts/test.sh runs it as root).
set -eu
build=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/dpprof-deb.XXXXXX)
trap 'apt-get remove -y dpprof > /dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
(cd "$build" && cpack -G DEB -B "$tmp" > "$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; exit 1; }
apt-get install -y "$(ls "$tmp"/dpprof_*.deb)" > "$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; exit 1; }
cd "$tmp"
/usr/bin/dpprof run /usr/share/dpprof/experiments/default.lua out="$tmp/results" > "$tmp/run.log" 2>&1 \
  || { cat "$tmp/run.log"; echo "check-deb: the installed dpprof could not run the default experiment" >&2; exit 1; }
ls "$tmp/results"/*.json > /dev/null
lua5.4 -e 'local dp = require("dpprof"); assert(dp.lua_dir:find("/share/dpprof/lua", 1, true), dp.lua_dir)' \
  || { echo "check-deb: stock lua5.4 cannot require the installed dpprof" >&2; exit 1; }
echo "check-deb: ok (installed, ran experiments/default.lua from $tmp, removed)"
