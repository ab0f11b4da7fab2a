#!/bin/sh
# test_install.sh BUILD_DIR: `cmake --install` into a temporary prefix (issue 42), then the
# installed binary, from a directory outside the source tree, finds its own Lua modules and
# shipped device models (not the repository's), writes a result that validates, answers --help
# as the installed texts say; the installed headers compile on their own; a C program outside the
# tree runs a DP-SGD step through libdpprof.so, built with pkg-config and with find_package(dpprof);
# the library exports the public headers' functions only; and the Lua C module in a stock lua5.4
# gives the binary's result.
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
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
# libdpprof.so through pkg-config: a DP-SGD step from a program outside the tree
pcdir=$(dirname "$(find "$prefix" -name dpprof.pc | head -n 1)")
[ -f "$pcdir/dpprof.pc" ] || fail "no dpprof.pc installed"
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dpprof) || fail "pkg-config does not know dpprof"
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir dpprof)
${CC:-cc} -std=c11 -Wall -Werror -o dp_step "$src/dp_step.c" $flags -lm -Wl,-rpath,"$libdir" \
  || fail "dp_step.c does not build against the installed library"
step=$(./dp_step) || fail "one DP-SGD step through libdpprof.so failed: $step"
echo "$step" | grep -q "^loss " || fail "dp_step printed: $step"
objdump -p dp_step | grep -q "NEEDED *libdpprof.so.0" || fail "dp_step does not link libdpprof.so.0"
# only the public headers' functions are exported: an internal one is not
lib=$(readlink -f "$libdir/libdpprof.so")
nm -D --defined-only "$lib" | grep -q " dp_engine_init@" || fail "dp_engine_init is not exported"
# dpsgd_param_index (dpsgd_impl.h) and dp_cpu_blas_core_for (the CPU backend's cpu_blas.h) are
# in the library but no public header declares them
nm "$lib" | grep -q " dpsgd_param_index$" || fail "the library lacks dpsgd_param_index (the check below checks nothing)"
if nm -D --defined-only "$lib" | grep -q " dpsgd_param_index@\| dp_cpu_blas_core_for@"; then
  fail "an internal function is exported"
fi
# find_package(dpprof) gives dpprof::engine
mkdir cmake_user
cat > cmake_user/CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.25)
project(dp_user C)
find_package(dpprof 0.1 REQUIRED)
add_executable(dp_step_cmake dp_step.c)
target_link_libraries(dp_step_cmake PRIVATE dpprof::engine m)
CM
cp "$src/dp_step.c" cmake_user/
cmake -S cmake_user -B cmake_user/build -DCMAKE_PREFIX_PATH="$prefix" > cmake.log 2>&1 || { cat cmake.log; fail "find_package(dpprof)"; }
cmake --build cmake_user/build > build.log 2>&1 || { cat build.log; fail "building against dpprof::engine"; }
cmake_user/build/dp_step_cmake | grep -q "^loss " || fail "the CMake-built step failed"
# the Lua C module in a stock lua5.4 (scripts/install-deps.sh installs it): the same module, the
# installed Lua side found from the module's own place, the same result as the binary's
command -v lua5.4 > /dev/null || fail "no lua5.4 interpreter (Debian's lua5.4 package; scripts/install-deps.sh)"
module=$(find "$prefix" -name dpprof.so -path "*lua/5.4/*" | head -n 1)
[ -f "$module" ] || fail "the Lua module dpprof.so is not installed in LIBDIR/lua/5.4"
cat > same.lua <<'LUA'
local dp = require("dpprof")
local r = dp.experiment{ model = { vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 16, batch = 2 },
                         method = "ghost", device = "cpu", iters = 1, warmup = 1, snapshots = "none", seed = 3 }
print(r.status, r.memory.peak_bytes, string.format("%.17g", r.privacy.epsilon), r.config.method)
LUA
by_lua=$(env -u DPPROF_LUA_PATH LUA_CPATH="$(dirname "$module")/?.so;;" lua5.4 same.lua 2>/dev/null) \
  || fail "require('dpprof') in lua5.4 failed: $(env -u DPPROF_LUA_PATH LUA_CPATH="$(dirname "$module")/?.so;;" lua5.4 same.lua 2>&1)"
by_binary=$(env -u DPPROF_LUA_PATH "$exe" run same.lua 2>/dev/null)
[ "$by_lua" = "$by_binary" ] || fail "lua5.4 with the module printed '$by_lua', the binary '$by_binary'"
echo "$by_lua" | grep -q "^ok" || fail "the run was not ok: $by_lua"
where=$(env -u DPPROF_LUA_PATH LUA_CPATH="$(dirname "$module")/?.so;;" lua5.4 -e 'print(require("dpprof").lua_dir)' 2>/dev/null)
[ "$(readlink -f "$where")" = "$(readlink -f "$prefix/share/dpprof/lua")" ] || fail "the module loaded the Lua side from $where"
objdump -p "$module" | grep -q "NEEDED *liblua" && fail "the module links a Lua of its own (the host provides Lua)"
echo "test_install: ok ($prefix)"
