-- llama3_lora.lua: Llama-3 + LoRA under DP-SGD, peak memory and step time per method over seq_len x batch x max_physical_batch_size x LoRA rank; default Llama-3.1-8B's shapes (tests/fixtures/llama3_8b/config.json), bf16 with the frozen base in bf16 only, on the plan device (no GPU, no weights).
-- Change it: dpprof run experiments/llama3_lora.lua [device=plan|cuda] [path=DIR] [seq_lens=1024,4096] [batches=1,4]
--   [physicals=1,4] [ranks=16] [targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] [methods=a,b | all=1]
--   (targets: default q_proj,k_proj,v_proj, dpprof's one LoRA default, as in dpprof fit and dpprof risk)
--   [dtype=bf16] [weights=random|file] [layers=N] [device_model=h100|h200|h100-calibrated] [iters=] [warmup=] [timeout=] [seed=] [out=DIR]
--   [profile=ops] [threads=N] (cpu runs); the default path is found from this script's location or dpprof's own
--   (a copy of this script run from anywhere still finds tests/fixtures/llama3_8b).
--   Defaults: the methods of the issue's benchmark (vanilla, ghost, bk, flash_clip; all=1 for every preset);
--   on cuda the weights are random unless weights=file (memory and time do not depend on values; path= must then
--   hold the checkpoint's safetensors). A physical batch above the batch runs as the batch. Exit status 1 when a
--   point errored, crashed or timed out (an out-of-memory point is a result).
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("llama3_lora.lua",
                          { "path", "seq_lens", "batches", "physicals", "ranks", "targets", "all", "dtype", "weights",
                            "layers", "device_model", "iters", "warmup", "timeout", "seed" })

local device = args.device or "plan"
if device ~= "plan" and device ~= "cuda" and device ~= "cpu" then
  error("llama3_lora.lua: unknown device '" .. tostring(device) .. "' (valid: plan, cuda, cpu)", 0)
end
local methods = args.methods and presets.list(args.methods)
                or ((args.all == 1 or args.all == true) and presets.ALL_METHODS)
                or { "vanilla", "ghost", "bk", "flash_clip" }
-- LoRA's targets: dpprof's one default (q_proj, k_proj, v_proj: dpprof.model's lora.targets, as in
-- dpprof fit and dpprof risk) unless targets= names others
local targets = presets.list(args.targets)
local model = { path = args.path or presets.repo_path("tests/fixtures/llama3_8b"), dtype = args.dtype or "bf16",
                seq_len = 1024, batch = 1, layers = args.layers,
                lora = { rank = 16, targets = targets } }
if device ~= "plan" then model.weights = args.weights or "random" end

local base = { model = model, device = device, seed = args.seed or 0, profile = args.profile, threads = args.threads,
               iters = args.iters or (device == "plan" and 1 or 3), warmup = args.warmup or (device == "plan" and 1 or 2),
               dp = { max_grad_norm = 1.0, noise_multiplier = 1.0, sample_rate = 0.01 } }
if device == "plan" then base.device_model = args.device_model or "h100" end
local out = args.out or ("results/llama3_lora_" .. device .. "_" .. os.date("%Y%m%d_%H%M%S"))
local swept = dp.sweep{
  base = base, out = out, timeout = args.timeout or (device == "plan" and 120 or 600),
  order = { "method", "lora_rank", "batch", "max_physical_batch_size", "seq_len" },
  vary = { method = methods, seq_len = presets.list(args.seq_lens) or { 1024, 4096 },
           batch = presets.list(args.batches) or { 1, 4 },
           max_physical_batch_size = presets.list(args.physicals) or { 1, 4 },
           lora_rank = presets.list(args.ranks) or { 16 } },
}
presets.finish(out, swept)
