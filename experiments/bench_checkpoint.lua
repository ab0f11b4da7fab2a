-- bench_checkpoint.lua: activation checkpointing's trade per DP preset: peak memory and step time with checkpointing every block, every 2nd and every 4th block, as ratios to the same method without it (each point in its own process), and the recompute phase against the forward.
-- Change it: dpprof run experiments/bench_checkpoint.lua [configs=small|large,llama3_8b_lora] [methods=a,b] [settings=blocks,2,4] [seq_len=T] [iters=5] [warmup=1] [repeats=1] [device=cpu|cuda|plan] [timeout=900] [out=DIR]
--            [profile=ops] [threads=N]
--
-- configs: small (V=8192 d=256 L=4 H=4 T=256 B=4, f32, the CPU default); on a GPU large (V=32000
-- d=2048 L=20 H=16 T=16384 B=1, f32) and llama3_8b_lora (tests/fixtures/llama3_8b's shapes, random
-- weights, bf16, LoRA r=16 on all seven linears, T=8192 B=1). Step time is the best of the timed
-- iterations (timing.min_ms) and, with repeats=R, of R sweeps: the figure least disturbed by other
-- work on a shared machine. seq_len=T runs every config at T (T=32768 measures the planned target;
-- a point that does not fit is an OOM result, its ratios "-").
-- Targets: recompute adds at most one forward: with checkpointing every block, vanilla's and
-- flash_clip's step time at most 1.4x theirs without it (and the recompute phase at most the
-- forward's). And, planned: flash_clip with checkpointing every block fits T=32768 at B=1 for the
-- large config on an H100 80 GB (the plan device; `dpprof fit method=flash_clip` gives the
-- largest T).
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_checkpoint.lua", { "configs", "settings", "seq_len", "iters", "warmup", "repeats",
                                                   "timeout" })

local LARGE = { arch = "gpt", vocab = 32000, hidden = 2048, layers = 20, heads = 16, seq_len = 16384, batch = 1,
                dtype = "f32" }
local CONFIGS = {
  small = { arch = "gpt", vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4, dtype = "f32" },
  large = LARGE,
  llama3_8b_lora = { path = "tests/fixtures/llama3_8b", weights = "random", seq_len = 8192, batch = 1, dtype = "bf16",
                     lora = { rank = 16, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj" } } },
}
local TIME_TARGET = 1.4 -- checkpointing every block, vanilla and flash_clip

local device = args.device or "cpu"
local on_gpu = device == "cuda"
local configs = presets.list(args.configs) or (on_gpu and { "large", "llama3_8b_lora" } or { "small" })
local methods = presets.list(args.methods) or presets.ALL_METHODS
local settings = presets.list(args.settings) or { "blocks", 2, 4 }
local checkpoints = { false }
for _, s in ipairs(settings) do checkpoints[#checkpoints + 1] = s end
local repeats = args.repeats or 1
local out = args.out or string.format("results/bench_checkpoint_%s", os.date("%Y%m%d_%H%M%S"))

local function setting_name(ck)
  return ck == false and "off" or ck == "blocks" and "blocks" or "every " .. tostring(ck)
end

local function recompute_flops(r)
  local f = 0
  for _, e in ipairs(r.ledger or {}) do
    if e.op:find("^recompute:") then f = f + e.flops end
  end
  return f
end

local rows, checks = {}, {}
for _, name in ipairs(configs) do
  local model = dp.deep_copy(CONFIGS[name])
  if not model then error(string.format("unknown config '%s' (valid: small, large, llama3_8b_lora)", tostring(name))) end
  if model.path then model.path = presets.repo_path(model.path) end
  model.seq_len = args.seq_len or model.seq_len
  -- best of repeats: the fastest run of each point over the sweeps
  local best = {}
  for rep = 1, repeats do
    local dir = repeats == 1 and string.format("%s/%s", out, name) or string.format("%s/%s/rep%d", out, name, rep)
    local swept = dp.sweep{
      base = { model = model, device = device, iters = args.iters or 5, warmup = args.warmup or 1,
               profile = args.profile, threads = args.threads,
               dp = { max_grad_norm = 1.0, noise_multiplier = 1.0, sample_rate = 0.01,
                      max_physical_batch_size = model.batch } },
      vary = { method = methods, checkpoint = checkpoints }, order = { "method", "checkpoint" }, out = dir,
      timeout = args.timeout or 900,
    }
    for _, p in ipairs(swept.points) do
      local key = p.vary.method .. "|" .. tostring(p.vary.checkpoint)
      local r, b = p.result, best[key]
      if not b or (r.status == "ok" and (b.status ~= "ok" or r.timing.min_ms < b.timing.min_ms)) then best[key] = r end
    end
  end
  for _, method in ipairs(methods) do
    local base = best[method .. "|false"]
    for _, ck in ipairs(checkpoints) do
      local r = best[method .. "|" .. tostring(ck)]
      local row = { config = name, method = method, checkpoint = ck, status = r.status, message = r.message }
      if r.status == "ok" then
        row.step_ms, row.peak_bytes = r.timing.min_ms, r.memory.peak_bytes
        row.activations_bytes = r.memory.categories.activations.live_at_peak_bytes
        row.forward_ms, row.recompute_ms = r.timing.phases_ms.forward, r.timing.phases_ms.recompute or 0
        row.recompute_flops = recompute_flops(r)
        if base and base.status == "ok" then
          row.time_ratio = row.step_ms / base.timing.min_ms
          row.memory_ratio = row.peak_bytes / base.memory.peak_bytes
        end
        if ck == "blocks" and (method == "vanilla" or method == "flash_clip") and row.time_ratio then
          checks[#checks + 1] = string.format("%s %s, checkpoint every block: step %.3fx without (target <= %.1fx) %s; "
                                              .. "recompute %.1f ms against a forward of %.1f ms", name, method,
                                              row.time_ratio, TIME_TARGET,
                                              device == "plan" and "(a roofline estimate: measure on the device)" or
                                              (row.time_ratio <= TIME_TARGET and "met" or "MISSED"),
                                              row.recompute_ms, row.forward_ms)
        end
      end
      rows[#rows + 1] = row
    end
  end
end

-- The planned target: flash_clip, checkpointing every block, the large config at T = 32768, B = 1
-- on an H100 80 GB (plan runs take milliseconds, whatever the device of the sweep).
local planned = {}
for _, ck in ipairs({ false, "blocks" }) do
  local m = dp.deep_copy(LARGE)
  m.seq_len, m.checkpoint = 32768, ck
  local r = dp.experiment{ model = m, method = "flash_clip", device = "plan", device_model = "h100", iters = 1,
                           warmup = 1, snapshots = "none" }
  planned[#planned + 1] = { checkpoint = ck, status = r.status, fits = r.plan and r.plan.fits,
                            peak_bytes = r.memory and r.memory.peak_bytes,
                            reserved_bytes = r.plan and r.plan.predicted_reserved_bytes,
                            budget_bytes = r.plan and r.plan.budget_bytes, step_ms = r.timing and r.timing.avg_ms }
end
for _, p in ipairs(planned) do
  checks[#checks + 1] = string.format("planned: large flash_clip T=32768 B=1 on h100, checkpoint %s: %s (reserved %s "
                                      .. "of a %s budget)%s", setting_name(p.checkpoint),
                                      p.fits and "fits" or "does not fit", dp.format_bytes(p.reserved_bytes or 0),
                                      dp.format_bytes(p.budget_bytes or 0),
                                      p.checkpoint == "blocks" and (p.fits and ", target met" or ", target MISSED") or "")
end

-- through dpprof.write_file: never through a link planted at the path
require("dpprof.results").write(out .. "/bench_checkpoint.json", { benchmark = "bench_checkpoint", device = device,
                                                                   repeats = repeats, rows = rows, planned = planned,
                                                                   targets = checks })

local function mib(b) return b and string.format("%.1f", b / 2 ^ 20) or "-" end
print(string.format("\nstep: best of %d timed iteration(s) x %d sweep(s)%s", args.iters or 5, repeats,
                    device == "plan" and " (plan: roofline estimates)" or ""))
print(string.format("%-15s %-12s %-9s %10s %7s %10s %7s %10s %10s %10s", "config", "method", "checkpoint", "step ms",
                    "x off", "peak MiB", "x off", "act MiB", "fwd ms", "recomp ms"))
for _, r in ipairs(rows) do
  if r.status == "ok" then
    print(string.format("%-15s %-12s %-9s %10.1f %7s %10s %7s %10s %10.1f %10.1f", r.config, r.method,
                        setting_name(r.checkpoint), r.step_ms, r.time_ratio and string.format("%.3f", r.time_ratio) or "-",
                        mib(r.peak_bytes), r.memory_ratio and string.format("%.3f", r.memory_ratio) or "-",
                        mib(r.activations_bytes), r.forward_ms, r.recompute_ms))
  else
    print(string.format("%-15s %-12s %-9s %s: %s", r.config, r.method, setting_name(r.checkpoint), tostring(r.status),
                        tostring(r.message):sub(1, 100)))
  end
end
for _, c in ipairs(checks) do print(c) end
print("results: " .. out .. "/bench_checkpoint.json (charts: dpprof plot " .. out .. "/<config>)")
