#!/usr/bin/env bash
# gpu-check.sh: on a GPU machine, from the repository root, with the bundle scripts/gpu-bundle.sh
# made: the GPU checks and benchmarks, in one call. Verdicts and the key lines go to stdout;
# every log and result JSON into one tar, DIR/gpu-check.tar.gz.
#
#   usage: bash scripts/gpu-check.sh [--bundle FILE] [--out DIR] [--step-limit S] [tests] [flash] [dp] [large]
#          [gram3] [checkpoint] [lora] [profile] [dist] [clipping]
#          (defaults: dist/dpprof-gpu.tar.xz, /tmp/gpu-out, 300 s a program, tests flash dp)
#   tests  the four CUDA test programs (CUDA against the CPU, exact or to stated tolerances)
#   flash  the flash norm kernels against cuBLAS (DPPROF_DP_BENCH=1 test_cuda_dp): tiles, strips
#   dp     bench_dp.lua's batched config (T=1024 B=16), f32 and bf16, vanilla, flash_clip and bk,
#          once with flash_impl=tiles and once with strips (ratios to vanilla in each run), and
#          the plan backend's peaks for the same points against the measured ones
#   large  the same for the large config (T=16384 B=1)
#   gram3  bench_dp batched bf16, vanilla and flash_clip (tiles) with the one-accumulator Gram
#          kernel (DPPROF_FLASH_VARIANT=3): compare its flash_clip ratio with the dp step's
#   checkpoint  bench_checkpoint.lua on the large config and Llama-3 8B + LoRA (bf16, T=8192):
#          peak and step time with activation checkpointing every block as ratios to none, for
#          vanilla and flash_clip (the bench's targets); then flash_clip with
#          checkpointing at T=32768 B=1 (the target the plan device set) measured
#   lora   llama3_lora.lua on the GPU (Llama-3.1-8B shapes, random weights, bf16, LoRA r=16, T=4096
#          and 1024, B=4; the plan says T=4096 does not fit an H100) for vanilla, ghost, bk and
#          flash_clip, and the plan backend's peaks for the same points against the measured ones
#   profile  bench_profile.lua on the GPU (gpt2 config): profile="ops" with CUDA events, its cost
#          and coverage
#   clipping  bench_clipping.lua on the GPU: every method under the flat, per_layer and per_block
#          styles (issue 40), step and peak against vanilla's, and the plan backend's peaks for the
#          same points against the measured ones
#   dist   tests/lua/test_dist_nccl.lua: world size 1 through NCCL (ddp and zero2) equals the run
#          without it, and a missing NCCL is refused (NCCL: $DPPROF_NCCL, the nvidia-nccl-cu13
#          wheel, or the system's)
set -uo pipefail
repo=$PWD
bundle=$repo/dist/dpprof-gpu.tar.xz
dest=/tmp/gpu-out
limit=300
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=${2:?gpu-check: --bundle needs a file}; shift 2 ;;
    --out) dest=${2:?gpu-check: --out needs a folder}; shift 2 ;;
    --step-limit) limit=${2:?gpu-check: --step-limit needs seconds}; shift 2 ;;
    *) break ;;
  esac
done
out=/tmp/gpu-check
rm -rf "$out" && mkdir -p "$out/logs" "$dest"
dest=$(cd "$dest" && pwd)
x=/tmp/dpprof-x
rm -rf "$x"
mkdir -p "$x"
if ! tar xJf "$bundle" -C "$x"; then
  echo "gpu-check: cannot unpack $bundle (make it with scripts/gpu-bundle.sh where CUDA builds)"
  exit 1
fi
export LD_LIBRARY_PATH="$x/lib:/usr/local/cuda/lib64" DPPROF_LUA_PATH="$x/lua" DPPROF_FIXTURES="$repo/tests/fixtures"
[ -f "$x/fonts/fonts.conf" ] && export FONTCONFIG_FILE="$x/fonts/fonts.conf" # the charts' font
cd /tmp || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/logs/device.txt"
echo "bundle commit $(cat "$x/COMMIT")" | tee -a "$out/logs/device.txt"
steps=${*:-tests flash dp}
status=0
run() { # name, command...: logs to $out/logs/name.log, prints the verdict and the time (rc 124: over the limit)
  local name=$1; shift
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/logs/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name: rc=$rc ($((SECONDS - t0)) s): $(tail -n 1 "$out/logs/$name.log")"
}
for s in $steps; do
  case $s in
    tests)
      for t in test_cuda test_cuda_layers test_cuda_model test_cuda_dp; do run "$t" "$x/bin/$t"; done ;;
    flash)
      DPPROF_DP_BENCH=1 DPPROF_DP_OPS_ONLY=1 run flash_bench "$x/bin/test_cuda_dp"
      grep -E "gram_|grad_" "$out/logs/flash_bench.log" ;;
    dp|large)
      cfg=batched; [ "$s" = large ] && cfg=large
      for g in tiles strips; do
        run "bench_dp_${cfg}_$g" "$x/bin/dpprof" run "$repo/experiments/bench_dp.lua" device=cuda configs=$cfg \
            dtypes=f32,bf16 methods=vanilla,flash_clip,bk iters=2 warmup=1 flash_impl=$g out="$out/bench_dp_${cfg}_$g"
        grep -E "^$cfg |target" "$out/logs/bench_dp_${cfg}_$g.log"
        # the plan backend's prediction of the same points, peak against peak
        "$x/bin/dpprof" run "$repo/experiments/bench_dp.lua" device=plan configs=$cfg dtypes=f32,bf16 \
            methods=vanilla,flash_clip,bk iters=2 warmup=1 flash_impl=$g out="$out/plan_${cfg}_$g" > /dev/null 2>&1
        "$x/bin/dpprof" run "$repo/scripts/plan-vs-device.lua" device="$out/bench_dp_${cfg}_$g/bench_dp.json" \
            plan="$out/plan_${cfg}_$g/bench_dp.json" | tail -n 1
      done ;;
    gram3)
      DPPROF_FLASH_VARIANT=3 run bench_dp_batched_gram3 "$x/bin/dpprof" run "$repo/experiments/bench_dp.lua" \
          device=cuda configs=batched dtypes=bf16 methods=vanilla,flash_clip iters=2 warmup=1 flash_impl=tiles \
          out="$out/bench_dp_batched_gram3"
      grep -E "^batched |target|DPPROF_FLASH_VARIANT" "$out/logs/bench_dp_batched_gram3.log" | sort -u ;;
    checkpoint)
      run bench_checkpoint "$x/bin/dpprof" run "$repo/experiments/bench_checkpoint.lua" device=cuda \
          configs=large,llama3_8b_lora methods=vanilla,flash_clip settings=blocks iters=3 warmup=1 \
          out="$out/bench_checkpoint"
      grep -E "target|planned" "$out/logs/bench_checkpoint.log"
      run checkpoint_32k "$x/bin/dpprof" run "$repo/experiments/bench_checkpoint.lua" device=cuda configs=large \
          methods=flash_clip settings=blocks seq_len=32768 iters=2 warmup=1 out="$out/checkpoint_32k"
      grep -E "^large " "$out/logs/checkpoint_32k.log" ;;
    lora)
      all7=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
      run llama3_lora "$x/bin/dpprof" run "$repo/experiments/llama3_lora.lua" device=cuda seq_lens=1024,4096 batches=4 \
          physicals=4 iters=2 warmup=1 targets="$all7" out="$out/llama3_lora"
      grep -E "^ *(vanilla|ghost|bk|flash_clip) " "$out/logs/llama3_lora.log"
      "$x/bin/dpprof" run "$repo/experiments/llama3_lora.lua" device=plan seq_lens=1024,4096 batches=4 physicals=4 targets="$all7" \
          out="$out/llama3_lora_plan" > "$out/logs/llama3_lora_plan.log" 2>&1
      "$x/bin/dpprof" run "$repo/scripts/plan-vs-device.lua" device="$out/llama3_lora" plan="$out/llama3_lora_plan" ;;
    profile)
      run bench_profile "$x/bin/dpprof" run "$repo/experiments/bench_profile.lua" device=cuda runs=3 iters=3 warmup=1
      tail -n 12 "$out/logs/bench_profile.log" ;;
    clipping)
      run bench_clipping "$x/bin/dpprof" run "$repo/experiments/bench_clipping.lua" device=cuda rounds=2 iters=3 \
          warmup=1 out="$out/bench_clipping"
      grep -E "^(vanilla|flat|ghost|mixed_ghost|bk|flash_clip) |target|BLAS" "$out/logs/bench_clipping.log"
      "$x/bin/dpprof" run "$repo/experiments/bench_clipping.lua" device=plan iters=3 warmup=1 \
          out="$out/bench_clipping_plan" > "$out/logs/bench_clipping_plan.log" 2>&1
      "$x/bin/dpprof" run "$repo/scripts/plan-vs-device.lua" device="$out/bench_clipping/round1" \
          plan="$out/bench_clipping_plan" | tail -n 1 ;;
    dist)
      # NCCL: $DPPROF_NCCL, else PyPI's nvidia-nccl-cu13 wheel, else the system's libnccl.so.2
      if [ -z "${DPPROF_NCCL:-}" ]; then
        w=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib','libnccl.so.2'))" 2>/dev/null)
        [ -n "$w" ] && [ -f "$w" ] && export DPPROF_NCCL=$w
      fi
      run dist_nccl "$x/bin/dpprof" run "$repo/tests/lua/test_dist_nccl.lua"
      grep -E "through NCCL|refused|ok$" "$out/logs/dist_nccl.log" ;;
    *) echo "gpu-check: unknown step '$s' (valid: tests, flash, dp, large, gram3, checkpoint, lora, profile, dist, clipping)"; status=2 ;;
  esac
done
tar czf "$dest/gpu-check.tar.gz" -C "$out" .
echo "gpu-check: logs and results in $dest/gpu-check.tar.gz"

exit $status
