#!/bin/sh
# bundle.sh: a portable dpprof for a machine that has a GPU driver and the CUDA libraries but
# not the rest of what dpprof links (Lua, cJSON, cairo, OpenBLAS and what they pull in).
#
#   usage: scripts/bundle.sh BUILD_DIR DEST [PROGRAM...]
#     BUILD_DIR  a built tree (cmake -S . -B BUILD_DIR && cmake --build BUILD_DIR)
#     DEST       a folder to create, or a file ending in .tar.xz or .tar.gz to pack it into
#     PROGRAM    more programs of the build to carry beside dpprof (test_cuda, test_cuda_dp, ...)
#
# DEST holds bin/ (the stripped programs), lib/ (their shared libraries except the C runtime and
# CUDA's, which the target machine provides), lua/ (the Lua modules, found by bin/dpprof as
# ../lua), experiments/, tests/fixtures/llama3_8b/config.json (Llama-3.1-8B's sizes, which
# llama3_lora.lua and bench_checkpoint.lua find beside the Lua modules), fonts/ (DejaVu Sans, the charts' one font, and a fonts.conf naming it:
# a GPU machine often has no fonts and no fontconfig file, and cairo then draws with whatever
# it finds, boxes for the glyphs it lacks) and ./dpprof, a launcher that sets LD_LIBRARY_PATH and
# FONTCONFIG_FILE. On the GPU machine:
#   mkdir dpprof && tar xJf dpprof.tar.xz -C dpprof
#   dpprof/dpprof run dpprof/experiments/default.lua device=cuda
set -eu
build=${1:?usage: scripts/bundle.sh BUILD_DIR DEST [PROGRAM...]}
dest=${2:?usage: scripts/bundle.sh BUILD_DIR DEST [PROGRAM...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$build/dpprof" ] || { echo "bundle: no $build/dpprof (build first: cmake --build $build)" >&2; exit 1; }

case $dest in
    *.tar.xz | *.tar.gz) stage=$(mktemp -d); archive=$dest ;;
    *) stage=$dest; archive= ;;
esac
rm -rf "${stage:?}/bin" "${stage:?}/lib" "${stage:?}/lua" "${stage:?}/experiments" "${stage:?}/tests" "${stage:?}/fonts"
mkdir -p "$stage/bin" "$stage/lib"

# the programs: dpprof and any asked for (found at the top of the build or under tests/)
cp "$build/dpprof" "$stage/bin/"
for p in "$@"; do
    if [ -x "$build/$p" ]; then cp "$build/$p" "$stage/bin/"
    elif [ -x "$build/tests/$p" ]; then cp "$build/tests/$p" "$stage/bin/"
    else echo "bundle: no program '$p' in $build or $build/tests" >&2; exit 1
    fi
done
strip "$stage"/bin/*

# their shared libraries, except the C runtime and CUDA's (the target machine's own must be used)
system='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libcublasLt|libnvrtc|libnvJitLink)'
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name path; do
        echo "$name" | grep -Eq "$system" && continue
        cp -L "$path" "$stage/lib/$name"
    done

cp -r "$root/lua" "$stage/lua"
rm -rf "$stage/lua/bind" # the C sources of the bindings, compiled into bin/dpprof
cp -r "$root/experiments" "$stage/experiments"
mkdir -p "$stage/tests/fixtures/llama3_8b"
cp "$root/tests/fixtures/llama3_8b/config.json" "$stage/tests/fixtures/llama3_8b/"
# the charts' font (fonts-dejavu-core, which scripts/install-deps.sh installs) and a fontconfig
# file that finds it beside itself
fontdir=/usr/share/fonts/truetype/dejavu
mkdir -p "$stage/fonts"
for f in DejaVuSans.ttf DejaVuSans-Bold.ttf; do
    [ -f "$fontdir/$f" ] || { echo "bundle: no $fontdir/$f (install fonts-dejavu-core)" >&2; exit 1; }
    cp "$fontdir/$f" "$stage/fonts/"
done
cat > "$stage/fonts/fonts.conf" <<'EOF'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<!-- the bundle's fonts only (dpprof's charts use DejaVu Sans) -->
<fontconfig>
  <dir prefix="relative">.</dir>
</fontconfig>
EOF
cat > "$stage/dpprof" <<'EOF'
#!/bin/sh
# Runs the bundled dpprof with its libraries (and CUDA's from the usual places) and its font.
here=$(cd "$(dirname "$0")" && pwd)
FONTCONFIG_FILE="$here/fonts/fonts.conf" \
LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64" exec "$here/bin/dpprof" "$@"
EOF
chmod +x "$stage/dpprof"
git -C "$root" rev-parse HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"

if [ -n "$archive" ]; then
    mkdir -p "$(dirname "$archive")"
    case $archive in
        *.tar.xz) tar cJf "$archive" -C "$stage" . ;;
        *) tar czf "$archive" -C "$stage" . ;;
    esac
    rm -rf "$stage"
    echo "bundle: $(du -h "$archive" | cut -f1) in $archive"
else
    echo "bundle: $(du -sh "$stage" | cut -f1) in $stage"
fi
