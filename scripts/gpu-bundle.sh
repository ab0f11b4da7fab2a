#!/usr/bin/env bash
# gpu-bundle.sh: dpprof and its CUDA test programs for a GPU machine, in one file. Builds a
# commit (a `git worktree` snapshot, so the build matches it) in Release for one CUDA
# architecture (default 90: H100 and H200; fat sm_80+sm_90 binaries are ~18 MB each), then packs
# it with scripts/bundle.sh: stripped programs, the shared libraries a GPU machine lacks (Lua,
# cJSON, cairo, OpenBLAS) and lua/, ~15 MB. On the GPU machine, from the repository root:
#   bash scripts/gpu-check.sh --bundle dist/dpprof-gpu.tar.xz
#
#   usage: scripts/gpu-bundle.sh [COMMIT [OUT]]   (default HEAD, dist/dpprof-gpu.tar.xz;
#                                                   DPPROF_GPU_ARCH=80;90 for both)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=${1:-HEAD}
bundle=${2:-$root/dist/dpprof-gpu.tar.xz}
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
tests="test_cuda test_cuda_dp test_cuda_layers test_cuda_model"
# shellcheck disable=SC2086
cmake --build "$work/build" -j"$(nproc)" --target dpprof $tests
stage="$work/stage"
rm -rf "$stage"
# shellcheck disable=SC2086
"$work/src/scripts/bundle.sh" "$work/build" "$stage" $tests >/dev/null
git -C "$root" rev-parse "$commit" > "$stage/COMMIT"
mkdir -p "$(dirname "$bundle")"
tar cJf "$bundle" -C "$stage" .
echo "gpu-bundle: $(du -h "$bundle" | cut -f1) in $bundle (commit $(cut -c1-10 "$stage/COMMIT"), sm_$arch)"
