-- bench_plan.lua: how exact the plan backend's prediction is on a real GPU: predicted peak against measured peak allocated and reserved, every preset, f32 and bf16, two configs.
-- Change it: dpprof run experiments/bench_plan.lua [configs=large,batched] [methods=a,b] [dtypes=f32,bf16] [warmup=0] [iters=1] [batched_layers=16] [device_model=h100] [timeout=180] [budget_s=170] [dry=true] [device=cuda|cpu] [threads=N] [out=DIR]
--
-- Each point is measured once on `device` (cuda by default) in an isolated child and planned once on `plan` with the
-- device model in this process, both with the same schedule: by default one timed iteration and
-- no warm-up, which makes every allocation there is (the optimizer's states at its step
-- included); warmup=1 gives the steady-state peak and doubles the GPU time. Points run cheapest
-- first (by the plan's estimate); no new point starts once budget_s seconds have gone (the
-- points left are listed as skipped): the default 170 s keeps a call under 3 minutes; budget_s=540
-- gives all 24 default points room (dry=true prints the roofline's lower bound for them: 42 s of
-- iterations, before start-up and kernel efficiency), still under a 10-minute command. The plan
-- runs in this process (the plan never touches CUDA, so the parent stays fit to fork). The table compares
-- the peak allocated (tagged bytes, the modelled cuBLAS + kernels workspace included on both
-- sides: they must be equal to the byte) and the pool's reserved peak against the predicted one
-- (peak x (1 + reserve_overhead)). The child also reads nvidia-smi's memory.used while its pool
-- still holds its reservation: used - reserved is the CUDA context and libraries, the model's
-- context_bytes. Where a peak differs, the categories and modules that differ are listed: that is
-- the allocation to fix in the engine. dry=true plans every point and prints the roofline
-- estimate of the GPU time the measured runs need (a lower bound), without touching the GPU.
--
-- configs: large = gpt V=32000 d=2048 L=20 H=16 T=16384 B=1 (the large preset);
--          batched = gpt V=32000 d=2048 L=16 H=16 T=1024 B=16 (16 layers: every preset, f32
--          included, fits an 80 GB card with room to spare; `dpprof fit vary=layers seq_len=1024
--          batch=16 dtype=f32` puts the limit at 19 layers for flat, bk and flash_clip);
--          tiny = gpt V=256 d=32 L=2 H=2 T=16 B=2, with device=cpu workspace=false dtypes=f32
--          to try the script without a GPU.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local results = dp.results
local args = presets.args("bench_plan.lua", { "configs", "dtypes", "warmup", "iters", "batched_layers", "device_model",
                                             "workspace", "timeout", "budget_s", "dry" },
                          { profile = "it compares memory to the byte; what per-op timing costs is bench_profile.lua's" })

local MiB = 1024 * 1024
local CONFIGS = {
  large = { arch = "gpt", vocab = 32000, hidden = 2048, layers = 20, heads = 16, seq_len = 16384, batch = 1 },
  batched = { arch = "gpt", vocab = 32000, hidden = 2048, layers = args.batched_layers or 16, heads = 16, seq_len = 1024,
              batch = 16 },
  tiny = { arch = "gpt", vocab = 256, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 2 },
}

local configs = presets.list(args.configs) or { "large", "batched" }
local methods = presets.list(args.methods) or presets.ALL_METHODS
local dtypes = presets.list(args.dtypes) or { "bf16", "f32" }
local warmup, iters = args.warmup or 0, args.iters or 1
local budget_s = args.budget_s or 170
local device_model = dp.plan.device_model{ base = args.device_model or "h100", workspace = args.workspace }
local measure_device = args.device or "cuda" -- the plan's side is always the plan device
local dry = args.dry == true or args.dry == 1
local timeout = args.timeout or 180
for _, c in ipairs(configs) do
  if not CONFIGS[c] then error(string.format("bench_plan: unknown config '%s' (valid: large, batched, tiny)", tostring(c))) end
end
if not dry and measure_device == "cuda" and not dp.cuda_compiled then error("bench_plan: this dpprof has no CUDA backend (dry=true plans only)") end

local out = args.out or string.format("results/bench_plan_%s", os.date("%Y%m%d_%H%M%S"))
for _, sub in ipairs({ "", "/plan", "/measured" }) do
  local ok, err = dp.mkdir_p(out .. sub)
  if not ok then error(err) end
end

local function config_of(cname, dtype, method, device)
  local model = {}
  for k, v in pairs(CONFIGS[cname]) do model[k] = v end
  model.dtype = dtype
  return { name = string.format("%s_%s_%s", cname, dtype, method), model = model, method = method, device = device,
           device_model = device == "plan" and device_model or nil, iters = iters, warmup = warmup, snapshots = "none",
           threads = args.threads,
           dp = { max_physical_batch_size = model.batch } }
end

-- Runs in the child: the measured experiment, then what nvidia-smi says the process holds while
-- the pool keeps its reservation (backend_cuda.c sets the release threshold to UINT64_MAX).
local function measure(cfg)
  local r = dp.experiment(cfg)
  local extra = r.extra or {}
  local ok, st = pcall(dp.memory.stats, cfg.device)
  local p = io.popen("nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0 2>/dev/null")
  local line = p and p:read("l")
  if p then p:close() end
  local used, total = (line or ""):match("^%s*(%d+)%s*,%s*(%d+)")
  if ok and used and cfg.device == "cuda" then
    extra.nvidia_smi_used_bytes = tonumber(used) * MiB
    extra.nvidia_smi_total_bytes = tonumber(total) * MiB
    extra.pool_reserved_bytes = st.reserved
    extra.context_bytes = tonumber(used) * MiB - st.reserved
  end
  r.extra = extra
  return r
end

local function peak_of(r)
  return math.max(r.memory.peak_bytes, r.memory.warmup_peak_bytes)
end

local function rel(pred, meas)
  if not pred or not meas or meas == 0 then return nil end
  return (pred - meas) / meas
end

-- What differs between the plan and the measurement: categories, then modules, live at the peak.
local function differences(p, m)
  local out = {}
  for _, c in ipairs(results.CATEGORIES) do
    local a, b = p.memory.categories[c].live_at_peak_bytes, m.memory.categories[c].live_at_peak_bytes
    if a ~= b then out[#out + 1] = string.format("%s %+d B", c, a - b) end
  end
  local mods = {}
  for _, e in ipairs(m.memory.modules) do mods[e.module] = e.live_at_peak_bytes end
  local n = 0
  for _, e in ipairs(p.memory.modules) do
    local d = e.live_at_peak_bytes - (mods[e.module] or 0)
    mods[e.module] = nil
    if d ~= 0 and n < 4 then out[#out + 1], n = string.format("%s %+d B", e.module, d), n + 1 end
  end
  for mod, b in pairs(mods) do
    if b ~= 0 and n < 4 then out[#out + 1], n = string.format("%s %+d B (not in the plan)", mod, -b), n + 1 end
  end
  return out
end

-- Plan every point first: instant, and it says how much GPU time the measurements need.
local points, est_total = {}, 0
for _, cname in ipairs(configs) do
  for _, dtype in ipairs(dtypes) do
    for _, method in ipairs(methods) do
      local pc = config_of(cname, dtype, method, "plan")
      local pr = dp.experiment(pc)
      if pr.status ~= "ok" then error("bench_plan: plan run " .. pc.name .. " failed: " .. tostring(pr.message)) end
      results.write(out .. "/plan/" .. pc.name .. ".json", pr)
      local per_iter = pr.avg_time_ms or 0
      est_total = est_total + per_iter * (warmup + iters)
      points[#points + 1] = { config = cname, dtype = dtype, method = method, name = pc.name, plan = pr }
    end
  end
end
print(string.format("bench_plan: %d points (configs %s; dtypes %s; %d methods), warm-up %d + %d timed iteration(s)",
                    #points, table.concat(configs, ","), table.concat(dtypes, ","), #methods, warmup, iters))
print(string.format("  device model: %s", dp.plan.describe(device_model)))
print(string.format("  roofline estimate of the measured iterations: %.1f s of GPU time (a lower bound: real kernels "
                    .. "reach 10-90%% of it; add ~3 s a point for CUDA start-up and model init)", est_total / 1000))
io.stdout:flush()

-- Measure, cheapest first.
local order = {}
for i = 1, #points do order[i] = i end
table.sort(order, function(a, b)
  local ta, tb = points[a].plan.avg_time_ms or 0, points[b].plan.avg_time_ms or 0
  if ta ~= tb then return ta < tb end
  return a < b
end)
local started = dp.clock()
for n, i in ipairs(order) do
  local pt = points[i]
  if not dry then
    if dp.clock() - started > budget_s then
      pt.measured = results.failure{ name = pt.name, status = "error",
                                     message = string.format("skipped: budget_s=%d s spent before it started", budget_s) }
      print(string.format("[%d/%d] %s: skipped (budget_s=%d s spent)", n, #points, pt.name, budget_s))
    else
      local t0 = dp.clock()
      local mr = dp.isolate(measure, config_of(pt.config, pt.dtype, pt.method, measure_device), { timeout = timeout })
      if mr.schema_version == nil then
        mr = results.failure{ name = pt.name, status = mr.status, message = mr.message, traceback = mr.traceback,
                              oom = mr.oom }
      end
      results.write(out .. "/measured/" .. pt.name .. ".json", mr)
      pt.measured = mr
      local note = mr.status
      if mr.status == "ok" then
        local pp, mp = pt.plan.plan.peak_bytes, math.max(mr.memory.peak_bytes, mr.memory.warmup_peak_bytes)
        note = string.format("ok, peak predicted %s, measured %s (%+.3f%%), reserved %s", dp.format_bytes(pp),
                             dp.format_bytes(mp), (pp - mp) / mp * 100, dp.format_bytes(mr.memory.reserved_peak_bytes))
      end
      print(string.format("[%d/%d] %s: %s (%.1f s)", n, #points, pt.name, note, dp.clock() - t0))
    end
    io.stdout:flush()
  end
end

local rows, doc_rows = {}, {}
local contexts, overheads = {}, {}
for _, pt in ipairs(points) do
  local pr, mr = pt.plan, pt.measured
  local b = pr.plan
  local row = { config = pt.config, dtype = pt.dtype, method = pt.method, predicted_peak_bytes = b.peak_bytes,
                predicted_reserved_bytes = b.predicted_reserved_bytes, predicted_fits = b.fits,
                estimated_ms = pr.avg_time_ms, status = mr and mr.status or "planned" }
  if mr and mr.status == "ok" then
    row.measured_peak_bytes = peak_of(mr)
    row.measured_reserved_peak_bytes = mr.memory.reserved_peak_bytes
    row.measured_ms = mr.avg_time_ms
    row.peak_error = rel(row.predicted_peak_bytes, row.measured_peak_bytes)
    row.reserved_error = rel(row.predicted_reserved_bytes, row.measured_reserved_peak_bytes)
    row.measured_overhead = row.measured_reserved_peak_bytes / row.measured_peak_bytes - 1
    overheads[#overheads + 1] = row.measured_overhead
    row.differences = differences(pr, mr)
    if mr.extra and mr.extra.context_bytes then
      row.context_bytes = mr.extra.context_bytes
      contexts[#contexts + 1] = mr.extra.context_bytes
    end
  elseif mr then
    row.message = mr.message
    row.differences = nil
  end
  doc_rows[#doc_rows + 1] = row
  local function pct(v) return v and string.format("%+.3f%%", v * 100) or "-" end
  local function gib(v) return v and string.format("%.3f", v / 2 ^ 30) or "-" end
  rows[#rows + 1] = { pt.config, pt.dtype, pt.method, row.status, gib(row.predicted_peak_bytes), gib(row.measured_peak_bytes),
                      pct(row.peak_error), gib(row.predicted_reserved_bytes), gib(row.measured_reserved_peak_bytes),
                      pct(row.reserved_error), b.fits and "yes" or "no",
                      string.format("%.0f", row.estimated_ms or 0), row.measured_ms and string.format("%.0f", row.measured_ms) or "-",
                      row.differences and (#row.differences == 0 and "exact" or table.concat(row.differences, "; "))
                      or (row.message and row.message:gsub("%s+", " "):sub(1, 60)) or "" }
end

table.sort(contexts)
local max_overhead = 0
for _, v in ipairs(overheads) do max_overhead = math.max(max_overhead, v) end
results.write(out .. "/bench_plan.json", {
  device_model = device_model, warmup = warmup, iters = iters, configs = configs, dtypes = dtypes, methods = methods,
  rows = dp.json.array(doc_rows),
  measured_context_bytes = #contexts > 0 and contexts[(#contexts + 1) // 2] or dp.json.null,
  measured_max_reserve_overhead = #overheads > 0 and max_overhead or dp.json.null,
})

print(string.format("\nplan vs measured (GiB; error = (predicted - measured) / measured; reserved predicted = "
                    .. "peak x %.3g; est = roofline ms/iter on %s)", 1 + device_model.reserve_overhead, device_model.name))
local header = { "config", "dtype", "method", "status", "pred peak", "meas peak", "err", "pred resv", "meas resv", "err",
                 "fits", "est ms", "meas ms", "differences" }
table.insert(rows, 1, header)
dp.print_table(rows, { false, false, false, false, true, true, true, true, true, true, true, true, true, false })
if #contexts > 0 then
  print(string.format("\nmeasured CUDA context + libraries (nvidia-smi used - pool reserved): median %d bytes (%s); "
                      .. "the model's context_bytes is %d", contexts[(#contexts + 1) // 2],
                      dp.format_bytes(contexts[(#contexts + 1) // 2]), device_model.context_bytes))
end
if #overheads > 0 then
  print(string.format("measured reserve overhead (reserved peak / allocated peak - 1): at most %.4f; the model's "
                      .. "reserve_overhead is %.4f", max_overhead, device_model.reserve_overhead))
end
print("results: " .. out .. "/ (plan/ and measured/ results, bench_plan.json)")
