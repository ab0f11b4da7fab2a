#!/bin/sh
# check_deps.sh: the arrows between dpprof's parts (docs/architecture.md), checked.
#   usage: tests/deps/check_deps.sh REPO [PART=LIBRARY.a ...] [embed=BINARY]
#   (ctest passes every part's library and the C embedding test's binary; tests/CMakeLists.txt)
#
# From the sources (every #include of engine/, common/, kernels/, plots/, lua/bind/ and of
# tests/c/test_engine_api.c):
#   - each quoted include must name a file of a part the includer may depend on, found through
#     the include path (no "../"); system headers of Lua, CUDA, BLAS, OpenMP, cJSON and cairo
#     only where the table below allows them;
#   - no two folders hold the same base name (x.c in one, x.h or x.cu in another);
#   - no include cycle between files, and none between parts.
# From the parts' static libraries, when given (the link side):
#   - each library's undefined symbols resolve only in libraries of allowed parts, and Lua's
#     (lua_*, luaL_*) only in the Lua side's; the C embedding test's binary needs no liblua;
#   - no call cycle between files, of one part or of several.
# Prints one line per violation and exits 1 when there is any; 0 and a summary otherwise.
set -eu
export LC_ALL=C
repo=$(cd "${1:?usage: check_deps.sh REPO [PART=LIBRARY.a ...] [embed=BINARY]}" && pwd)
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- the parts and the arrows allowed between them ---------------------------------------
# part: folders (relative to the repository), then the parts it may include or link
cat > "$tmp/parts" <<'EOF'
common        common
core          engine/core
backend_cpu   engine/backends/cpu
backend_plan  engine/backends/plan
backend_cuda  engine/backends/cuda
model         engine/model
privacy       engine/privacy
comm          engine/comm
dp            engine/dp
io            engine/io
text          engine/text
engine        engine
kernels       kernels
plots         plots
bind          lua/bind
embed_test    tests/c/test_engine_api.c
EOF
cat > "$tmp/allowed" <<'EOF'
common
core          common
backend_cpu   core common
backend_plan  core
backend_cuda  core kernels
model         core common
privacy       core
comm          core
dp            privacy model comm core common
io            model core common
text          core common
engine        core model privacy comm dp io text backend_cpu backend_plan backend_cuda common
kernels       common
plots         common
bind          engine core model privacy comm dp io text backend_plan plots common
embed_test    engine core model privacy comm dp io text
EOF
# system headers (by prefix) and the parts that may include them; others are free
cat > "$tmp/system" <<'EOF'
lua.h        bind plots
lauxlib.h    bind plots
lualib.h     bind plots
cuda         backend_cuda kernels comm
cublas       backend_cuda kernels
nccl.h       comm
cblas.h      backend_cpu
omp.h        backend_cpu bind
cjson/       io text bind plots
pcre2.h      text
utf8proc.h   text
cairo        plots
fftw3        privacy
mpi.h        comm
EOF

# ---- files and their parts --------------------------------------------------------------
cd "$repo"
{
    find common engine kernels plots lua/bind -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null
    echo tests/c/test_engine_api.c
} | sort > "$tmp/files"
# file -> part: the longest folder prefix that matches
awk 'NR == FNR { dir[$1] = $2; next }
     { best = ""; part = "";
       for (p in dir) { d = dir[p];
         if (($0 == d || index($0, d "/") == 1) && length(d) > length(best)) { best = d; part = p } }
       print $0, part }' "$tmp/parts" "$tmp/files" > "$tmp/filepart"

# includes: file kind(q|s) name
while read -r f; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\(["<]\)\([^">]*\)[">].*/\1 \2/p' "$f" |
        awk -v f="$f" '{ print f, ($1 == "\"" ? "q" : "s"), $2 }'
done < "$tmp/files" > "$tmp/includes"

awk -v tmp="$tmp" '
    FILENAME == tmp "/filepart" { part[$1] = $2; n = split($1, seg, "/"); base = seg[n];
        if (base in where && where[base] != $1) dupfile[base] = where[base] " and " $1;
        where[base] = $1;
        stem = base; sub(/\.[^.]*$/, "", stem); dir = $1; sub(/\/[^\/]*$/, "", dir);
        if (stem in stemdir && stemdir[stem] != dir) dupstem[stem] = stemdir[stem] "/ and " dir "/";
        stemdir[stem] = dir; next }
    FILENAME == tmp "/allowed" { ok[$1, $1] = 1; for (i = 2; i <= NF; i++) ok[$1, $i] = 1; next }
    FILENAME == tmp "/system" { nsys++; sysname[nsys] = $1; for (i = 2; i <= NF; i++) sysok[$1, $i] = 1; next }
    {   f = $1; kind = $2; name = $3; p = part[f]
        if (kind == "s") {
            for (k = 1; k <= nsys; k++) if (index(name, sysname[k]) == 1 && !((sysname[k], p) in sysok))
                printf "forbidden: %s (%s) includes <%s>, which %s may not use\n", f, p, name, p
            next }
        if (index(name, "../") || index(name, "/")) {
            printf "forbidden: %s includes \"%s\": parts are found through the include path, not by relative path\n", f, name
            next }
        if (!(name in where)) {
            if (p != "embed_test") printf "forbidden: %s (%s) includes \"%s\", which is no file of a part\n", f, p, name
            next }
        t = where[name]; q = part[t]
        if (!((p, q) in ok)) printf "forbidden: %s (%s) includes %s (%s): %s -> %s is not an allowed arrow\n", f, p, t, q, p, q
        print f, t > (tmp "/fedges")
        if (p != q) print p, q > (tmp "/pedges") }
    END { for (b in dupfile) printf "duplicate: %s exists as %s\n", b, dupfile[b]
          for (s in dupstem) printf "duplicate: base name %s is used in %s\n", s, dupstem[s] }
' "$tmp/filepart" "$tmp/allowed" "$tmp/system" "$tmp/includes" > "$tmp/violations"
touch "$tmp/fedges" "$tmp/pedges"

# cycles: prints the strongly connected groups (2+ nodes) of the edge list "a b" on stdin
cycles() {
    awk '{ if (!($1 in id)) { id[$1] = ++n; name[n] = $1 }
           if (!($2 in id)) { id[$2] = ++n; name[n] = $2 }
           r[id[$1], id[$2]] = 1 }
         END { for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if ((i, k) in r)
                   for (j = 1; j <= n; j++) if ((k, j) in r) r[i, j] = 1
               for (i = 1; i <= n; i++) { if (done[i]) continue; g = name[i]; m = 1
                   for (j = i + 1; j <= n; j++) if ((i, j) in r && (j, i) in r) { g = g " " name[j]; done[j] = 1; m++ }
                   if (m > 1) print g } }'
}
sort -u "$tmp/fedges" | cycles | sed 's/^/include cycle between files: /' >> "$tmp/violations"
sort -u "$tmp/pedges" | cycles | sed 's/^/include cycle between parts: /' >> "$tmp/violations"
checked="$(wc -l < "$tmp/includes" | tr -d ' ') includes of $(wc -l < "$tmp/files" | tr -d ' ') files"

# ---- the link side ----------------------------------------------------------------------
if [ $# -gt 0 ]; then
    embed=''
    : > "$tmp/defs"
    : > "$tmp/uses"
    nlibs=0
    for arg in "$@"; do
        lpart=${arg%%=*}
        path=${arg#*=}
        [ -f "$path" ] || { echo "deps: $path ($lpart) does not exist" >&2; exit 2; }
        if [ "$lpart" = embed ]; then
            embed=$path
            continue
        fi
        nlibs=$((nlibs + 1))
        nm -A --defined-only -g "$path" 2>/dev/null |
            awk -v p="$lpart" '{ split($1, m, ":"); print $NF, m[2], p }' >> "$tmp/defs"
        nm -A -u "$path" 2>/dev/null |
            awk -v p="$lpart" '{ split($1, m, ":"); print $NF, m[2], p }' >> "$tmp/uses"
    done
    sort -u -k1,1 "$tmp/defs" > "$tmp/defs.s"
    sort -u "$tmp/uses" > "$tmp/uses.s"
    # symbol usedobj usedpart defobj defpart
    join "$tmp/uses.s" "$tmp/defs.s" > "$tmp/links"
    { cat "$tmp/allowed"; echo "plots_lua plots"; echo "bind plots_lua"; } > "$tmp/allowed_link"
    awk -v tmp="$tmp" '
        FILENAME == tmp "/allowed_link" { ok[$1, $1] = 1; for (i = 2; i <= NF; i++) ok[$1, $i] = 1; next }
        FILENAME == tmp "/uses.s" { if ($1 ~ /^luaL?_/ && $3 != "bind" && $3 != "plots_lua")
                                        printf "forbidden: %s (%s) links Lua (%s)\n", $2, $3, $1; next }
        { if ($3 != $5 && !(($3, $5) in ok))
              printf "forbidden: %s (%s) calls %s in %s (%s): %s -> %s is not an allowed arrow\n", $2, $3, $1, $4, $5, $3, $5 }
    ' "$tmp/allowed_link" "$tmp/uses.s" "$tmp/links" | sort -u >> "$tmp/violations"
    # call cycles between files, within a part or across parts: none anywhere
    awk '$2 != $4 { print $2 "@" $3, $4 "@" $5 }' "$tmp/links" | sort -u | cycles |
        awk '{ gsub(/@[a-z_]+/, ""); print "call cycle between files: " $0 }' >> "$tmp/violations"
    if [ -n "$embed" ]; then
        if readelf -d "$embed" 2>/dev/null | grep -q 'NEEDED.*liblua'; then
            echo "forbidden: $embed (the C embedding test) needs liblua" >> "$tmp/violations"
        fi
        if nm "$embed" 2>/dev/null | grep -qE ' [TUu] luaL?_'; then
            echo "forbidden: $embed (the C embedding test) contains Lua symbols" >> "$tmp/violations"
        fi
    fi
    checked="$checked, $(wc -l < "$tmp/links" | tr -d ' ') cross-object symbol uses of $nlibs libraries"
fi

if [ -s "$tmp/violations" ]; then
    sort -u "$tmp/violations"
    echo "deps: $(sort -u "$tmp/violations" | wc -l | tr -d ' ') violation(s) of the allowed arrows (docs/architecture.md)"
    exit 1
fi
echo "deps: ok ($checked)"
