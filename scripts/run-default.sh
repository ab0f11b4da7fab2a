#!/bin/sh
# Installs what is missing, builds dpprof and runs the default experiment suite
# (experiments/default.lua); results and charts land in results/run_<timestamp>/.
#   usage: scripts/run-default.sh [key=value ...]   e.g. all=1, or preset=large on a GPU
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
exec build/dpprof run experiments/default.lua "$@"
