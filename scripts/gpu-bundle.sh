#!/usr/bin/env bash
# gpu-bundle.sh: what the lent GPU machine needs to run dpprof, in one file under the device
# tool's 64 MiB carry limit. Builds the committed tree (a `git worktree` snapshot, so the build
# matches a commit) in Release for one CUDA architecture (default 90: the H100 and H200; fat
# sm_80+sm_90 binaries are ~18 MB each), strips the binaries and packs them with the shared
# libraries that machine lacks (../shared/device/bundle-libs.sh: Lua, cJSON, cairo, OpenBLAS)
# and lua/ into .devcarry/bundle.tar.xz (~15 MB). Then, in one device call with
# carry [".devcarry"]:  bash scripts/gpu-check.sh
#
#   usage: scripts/gpu-bundle.sh [COMMIT]   (default HEAD; DPPROF_GPU_ARCH=80;90 for both)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=${1:-HEAD}
arch=${DPPROF_GPU_ARCH:-90}
work=${DPPROF_GPU_WORK:-/tmp/dpprof-gpu}
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu-bundle: nvcc not found (the CUDA toolkit is needed to build)" >&2; exit 1; }
mkdir -p "$work"
rm -rf "$work/src"
git -C "$root" worktree prune
git -C "$root" worktree add --detach -f "$work/src" "$commit" >/dev/null
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true' EXIT
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DDPPROF_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
targets="dpprof test_cuda test_cuda_dp test_cuda_layers test_cuda_model"
# shellcheck disable=SC2086
cmake --build "$work/build" -j"$(nproc)" --target $targets
stage="$work/stage"
rm -rf "$stage"
mkdir -p "$stage/bin"
for t in $targets; do
  if [ "$t" = dpprof ]; then cp "$work/build/dpprof" "$stage/bin/"; else cp "$work/build/tests/$t" "$stage/bin/"; fi
done
strip "$stage"/bin/*
"$root/../shared/device/bundle-libs.sh" "$work/build/dpprof" "$stage/lib" >/dev/null
cp -r "$work/src/lua" "$stage/lua"
git -C "$root" rev-parse "$commit" > "$stage/COMMIT"
mkdir -p "$root/.devcarry"
tar cJf "$root/.devcarry/bundle.tar.xz" -C "$stage" .
grep -qx '/.devcarry/' "$root/.git/info/exclude" 2>/dev/null || echo '/.devcarry/' >> "$root/.git/info/exclude"
echo "gpu-bundle: $(du -h "$root/.devcarry/bundle.tar.xz" | cut -f1) in .devcarry/bundle.tar.xz (commit $(cut -c1-10 "$stage/COMMIT"), sm_$arch)"
