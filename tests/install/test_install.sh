#!/bin/sh
# test_install.sh BUILD_DIR: `cmake --install` into a temporary prefix (issue 42), then the
# installed binary, from a directory outside the source tree, finds its own Lua modules and
# shipped device models (not the repository's), writes a result that validates, answers --help
# as the installed texts say, and the installed headers compile on their own.
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
fail() { echo "test_install: $*" >&2; exit 1; }
exe=$prefix/bin/dpprof
[ -x "$exe" ] || fail "no $exe"
for f in share/dpprof/lua/dpprof/core.lua share/dpprof/lua/dpprof/models/h100-calibrated.json \
         share/dpprof/experiments/default.lua share/doc/dpprof/README.md share/doc/dpprof/results.md \
         share/doc/dpprof/help/dpprof.txt share/doc/dpprof/help/fit.txt include/dpprof/dpprof_engine.h; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done
mkdir "$tmp/work"
cd "$tmp/work"
cat > probe.lua <<'LUA'
local dp = require("dpprof")
print("lua_dir " .. dp.lua_dir)
local r = dp.experiment{ model = { vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 16, batch = 2 },
                         method = "ghost", device = "plan", device_model = "h100-calibrated", iters = 1, warmup = 1,
                         snapshots = "none" }
assert(r.status == "ok", r.message)
assert(dp.results.validate(r))
print("status " .. r.status .. " " .. r.environment.device_name)
LUA
out=$(env -u DPPROF_LUA_PATH "$exe" run probe.lua 2>&1) || fail "the installed binary failed: $out"
dir=$(echo "$out" | sed -n 's/^lua_dir //p')
[ "$(readlink -f "$dir")" = "$(readlink -f "$prefix/share/dpprof/lua")" ] || fail "it did not load the installed modules: $out"
echo "$out" | grep -q "^status ok plan: h100-calibrated" || fail "no result from the shipped device model: $out"
# the installed --help text is the binary's
"$exe" fit --help > fit.txt
cmp -s fit.txt "$prefix/share/doc/dpprof/help/fit.txt" || fail "help/fit.txt is not what 'dpprof fit --help' prints"
# the headers stand alone: only the installed include directory
printf '#include <dpprof/dpprof_engine.h>\nint main(void) { return dp_engine_init() == DP_OK ? 0 : 1; }\n' > use.c
${CC:-cc} -std=c11 -fsyntax-only -Wall -Werror -I"$prefix/include" use.c || fail "the installed headers do not compile alone"
echo "test_install: ok ($prefix)"
