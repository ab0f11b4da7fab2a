-- bench_dp.lua: per DP preset, step time and peak memory as ratios to vanilla measured in the same run (each point in its own process), with the extra memory by category.
-- Change it: dpprof run experiments/bench_dp.lua [configs=small|large,batched] [dtypes=f32,bf16] [methods=a,b] [iters=2] [warmup=1] [device=cpu|cuda|plan] [flash_impl=tiles|strips] [arch=gpt|llama] [timeout=900] [out=DIR]
--            [profile=ops] [threads=N]
--
-- configs: small (V=8192 d=256 L=4 H=4 T=256 B=4, the CPU default); on a GPU large (V=32000
-- d=2048 L=20 H=16 T=16384 B=1) and batched (the same model at T=1024 B=16). Targets (GPU):
-- large: flash_clip within 1.10x vanilla's step time and 1.05x its peak; batched: within 1.25x
-- the time, its extra peak being the output_grads it keeps plus O(B) per layer.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_dp.lua", { "configs", "dtypes", "iters", "warmup", "arch", "flash_impl", "timeout" })

local MODEL = { vocab = 32000, hidden = 2048, layers = 20, heads = 16 }
local CONFIGS = {
  small = { vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4 },
  large = { seq_len = 16384, batch = 1 },
  batched = { seq_len = 1024, batch = 16 },
}
local TARGETS = { large = { time = 1.10, memory = 1.05 }, batched = { time = 1.25 } }

local device = args.device or "cpu"
local on_gpu = device == "cuda"
local configs = presets.list(args.configs) or (on_gpu and { "large", "batched" } or { "small" })
local dtypes = presets.list(args.dtypes) or (on_gpu and { "f32", "bf16" } or { "f32" })
local methods = presets.methods{ methods = args.methods, all = true } -- a new list: vanilla goes first below
if methods[1] ~= "vanilla" then table.insert(methods, 1, "vanilla") end -- ratios need it, run first
local out = args.out or string.format("results/bench_dp_%s", os.date("%Y%m%d_%H%M%S"))

local rows, checks = {}, {}
for _, name in ipairs(configs) do
  local shape = CONFIGS[name]
  if not shape then error(string.format("unknown config '%s' (valid: small, large, batched)", tostring(name))) end
  for _, dtype in ipairs(dtypes) do
    local model = { arch = args.arch or "gpt", dtype = dtype }
    for k, v in pairs(name == "small" and {} or MODEL) do model[k] = v end
    for k, v in pairs(shape) do model[k] = v end
    local dir = string.format("%s/%s_%s", out, name, dtype)
    local swept = dp.sweep{
      base = { model = model, device = device, iters = args.iters or 2, warmup = args.warmup or 1,
               profile = args.profile, threads = args.threads,
               dp = { max_physical_batch_size = model.batch, flash_impl = args.flash_impl } }, -- C, sigma, q: defaults
      vary = { method = methods }, out = dir, timeout = args.timeout or 900,
    }
    local base
    for _, p in ipairs(swept.points) do
      if p.vary.method == "vanilla" and p.result.status == "ok" then base = p.result end
    end
    for _, p in ipairs(swept.points) do
      local r = p.result
      local row = { config = name, dtype = dtype, method = p.vary.method, status = r.status, message = r.message }
      if r.status == "ok" then
        presets.against(row, r, base) -- step, peak, and their ratios and extra bytes against vanilla's
        row.phases_ms = r.timing.phases_ms
        row.layers = {}
        for _, l in ipairs(r.layers or {}) do row.layers[l.norms] = (row.layers[l.norms] or 0) + 1 end
        local t = TARGETS[name]
        if t and row.method == "flash_clip" and row.time_ratio then
          checks[#checks + 1] = string.format("%s %s flash_clip: time %.3fx (target %.2fx) %s%s", name, dtype,
            row.time_ratio, t.time, device == "plan" and "(a roofline estimate: measure on the device)" or
                                    (row.time_ratio <= t.time and "met" or "MISSED"),
            t.memory and string.format("; peak %.3fx (target %.2fx) %s", row.memory_ratio, t.memory,
                                       row.memory_ratio <= t.memory and "met" or "MISSED") or "")
        end
      end
      rows[#rows + 1] = row
    end
  end
end

local f = assert(io.open(out .. "/bench_dp.json", "w"))
f:write(dp.json.encode({ benchmark = "bench_dp", device = device, flash_impl = args.flash_impl or "tiles", rows = rows,
                        targets = checks }, { indent = true }), "\n")
f:close()

local function mib(b) return b and string.format("%.0f", b / 2 ^ 20) or "-" end
local function extra(e)
  if not e then return "" end
  local parts, keys = {}, {}
  for k in pairs(e) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = string.format("%s%+.0f", k, e[k] / 2 ^ 20) end
  return table.concat(parts, " ")
end
print(string.format("\nflash_impl: %s%s", args.flash_impl or "tiles",
                    device == "plan" and " (plan: times are roofline estimates, kernels at peak)" or ""))
print(string.format("%-7s %-5s %-12s %10s %7s %10s %7s  %s", "config", "dtype", "method", "step ms", "x van",
                    "peak MiB", "x van", "extra MiB at peak by category"))
for _, r in ipairs(rows) do
  if r.status == "ok" then
    print(string.format("%-7s %-5s %-12s %10.1f %7s %10s %7s  %s", r.config, r.dtype, r.method, r.step_ms,
                        r.time_ratio and string.format("%.3f", r.time_ratio) or "-", mib(r.peak_bytes),
                        r.memory_ratio and string.format("%.3f", r.memory_ratio) or "-", extra(r.extra_bytes)))
  else
    print(string.format("%-7s %-5s %-12s %s: %s", r.config, r.dtype, r.method, tostring(r.status),
                        tostring(r.message):sub(1, 120)))
  end
end
for _, c in ipairs(checks) do print(c) end
print("results: " .. out .. "/bench_dp.json")
