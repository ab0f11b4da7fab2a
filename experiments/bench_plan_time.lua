-- bench_plan_time.lua: how close the plan's step time is to the measured one with a calibrated device model.
-- Change it: dpprof run experiments/bench_plan_time.lua [device=cpu|cuda] [device_model=FILE.json|h100-calibrated] [out=DIR] [threads=N] [repeats=N] [iters=N] [warmup=N] [methods=a,b] [dtypes=f32,bf16] [archs=gpt,llama] [shapes=1,2] [checkpoints=off,blocks] [quick=true] [clock=wall|cpu]
--
-- Runs every point on the real device (in this process, no per-op profiling) and on the plan device with the
-- calibrated model (device_model=, from `dpprof calibrate --device DEVICE --out FILE.json`; default
-- dpprof_<device>_model.json), and prints planned/measured step time (timing.avg_ms) per point, then its median and
-- worst |planned/measured - 1| overall and per dtype, arch and checkpointing; the plan's roofline on the same peaks
-- (the file's, no curves) is shown beside it. Points: gpt and llama, f32 and bf16, every DP preset, with and without
-- activation checkpointing, at shapes that are NOT in the calibration set (lua/dpprof/calibrate.lua): on the CPU
-- d=96 H=4 T=96 B=3 V=768 and d=192 H=6 T=160 B=2 V=1536, three layers; on CUDA d=768 H=12 T=512 B=8 V=16000 and
-- d=1536 H=12 T=2048 B=2 V=32000, four layers. The measured step is the fastest over repeats (rounds over all the points; default 3 on the CPU,
-- 1 on CUDA) of each run's mean over its timed iterations (the calibration drops preempted calls: both estimate the time
-- an unloaded machine takes); a CPU measurement on a shared machine is noisy: use threads=1 and repeats. clock=cpu (the
-- default on the CPU, with threads=1): the measured step is the process's CPU time over each timed iteration (before its
-- forward to after its optimizer step), which other processes on the machine do not lengthen; clock=wall: timing.avg_ms. Writes DIR/bench_plan_time.json (rows and summary). quick=true: the first shape, f32,
-- three methods (a CPU smoke run). Use the calibration's thread count (the file's `threads`): the curves hold for it.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local devmodel = require("dpprof.devmodel")
local json = dp.json
local args = presets.args("bench_plan_time.lua", { "device_model", "repeats", "iters", "warmup", "dtypes", "archs",
                                                  "shapes", "checkpoints", "quick", "clock" },
                          { profile = "it measures step times, which per-op timing would change" })

local device = args.device or "cpu"
if device ~= "cpu" and device ~= "cuda" then
  dp.refuse(string.format("bench_plan_time.lua: device must be cpu or cuda, got '%s'", tostring(device)))
end
if device == "cuda" and not dp.cuda_compiled then dp.refuse("bench_plan_time.lua: this dpprof has no CUDA backend") end
local model_path = args.device_model or string.format("dpprof_%s_model.json", device)
model_path = devmodel.shipped_path(model_path) or model_path -- a shipped model by its name (h100-calibrated)
if not devmodel.is_path(model_path) then
  dp.refuse(string.format("bench_plan_time.lua: device_model must be a calibrated model file (FILE.json), got '%s' "
                          .. "(or a shipped one: %s)", tostring(model_path), table.concat(devmodel.shipped_names(), ", ")))
end
local ok, model = pcall(devmodel.load, model_path)
if not ok then
  dp.refuse(string.format("bench_plan_time.lua: %s (make one with: dpprof calibrate --device %s --out %s)",
                          tostring(model), device, model_path))
end
if model.calibration.device ~= device then
  dp.refuse(string.format("bench_plan_time.lua: %s was calibrated on %s, not %s", model_path, model.calibration.device,
                          device))
end
-- the roofline on the same peaks, for comparison
local roofline = dp.plan.device_model{ name = model.name .. "-roofline", memory_bytes = model.memory_bytes,
                                       context_bytes = model.context_bytes, workspace = model.workspace,
                                       reserve_overhead = model.reserve_overhead,
                                       peak_flops = { f32 = model.peak_flops.f32 or model.peak_flops.bf16,
                                                      bf16 = model.peak_flops.bf16 or model.peak_flops.f32 },
                                       bandwidth = model.bandwidth }

local SHAPES = {
  cpu = { { hidden = 96, heads = 4, seq_len = 96, batch = 3, vocab = 768, layers = 3 },
          { hidden = 192, heads = 6, seq_len = 160, batch = 2, vocab = 1536, layers = 3 } },
  cuda = { { hidden = 768, heads = 12, seq_len = 512, batch = 8, vocab = 16000, layers = 4 },
           { hidden = 1536, heads = 12, seq_len = 2048, batch = 2, vocab = 32000, layers = 4 } },
}
local quick = args.quick == true or args.quick == 1
local function pick(list, all)
  if not list then return all end
  return presets.list(list)
end
local shapes = {}
for _, i in ipairs(pick(args.shapes, quick and { 1 } or { 1, 2 })) do
  local s = SHAPES[device][tonumber(i)]
  if not s then dp.refuse(string.format("bench_plan_time.lua: shapes: no shape %s (valid: 1, 2)", tostring(i))) end
  shapes[#shapes + 1] = s
end
local methods = pick(args.methods, quick and { "vanilla", "ghost", "flash_clip" } or presets.ALL_METHODS)
local dtypes = pick(args.dtypes, quick and { "f32" } or { "f32", "bf16" })
local archs = pick(args.archs, quick and { "gpt" } or { "gpt", "llama" })
local checkpoints = pick(args.checkpoints, quick and { "off" } or { "off", "blocks" })
for _, dt in ipairs(dtypes) do
  if not model.peak_flops[dt] then
    dp.refuse(string.format("bench_plan_time.lua: %s has no %s (calibrate it with both dtypes)", model_path, dt))
  end
end
local repeats = args.repeats or (device == "cpu" and 3 or 1)
local iters, warmup = args.iters or (device == "cpu" and 2 or 3), args.warmup or 1
local threads = args.threads or (device == "cpu" and model.calibration.threads) or nil
if device == "cpu" and threads and model.calibration.threads and threads ~= model.calibration.threads then
  io.stderr:write(string.format("bench_plan_time.lua: threads=%d, but %s was calibrated with %d threads\n", threads,
                                model_path, model.calibration.threads))
end
-- what "measured" is: the wall clock (timing.avg_ms), or on the CPU with one thread the process's CPU time over
-- each timed iteration (from before its forward to after its optimizer step): on a shared machine the wall clock
-- also counts the time other processes had the cores
local clock = args.clock or (device == "cpu" and (threads or 1) == 1 and "cpu" or "wall")
if clock ~= "wall" and clock ~= "cpu" then
  dp.refuse(string.format("bench_plan_time.lua: clock must be wall or cpu, got '%s'", tostring(clock)))
end
if clock == "cpu" and (device ~= "cpu" or (threads or 1) ~= 1) then
  dp.refuse("bench_plan_time.lua: clock=cpu measures one CPU thread: it needs device=cpu and threads=1")
end
if clock == "cpu" then threads = 1 end
local out = args.out or string.format("results/bench_plan_time_%s", os.date("%Y%m%d_%H%M%S"))
local mok, merr = dp.mkdir_p(out)
if not mok then error(merr) end

local function config(s, arch, dtype, method, ck, dev, dm)
  local m = { arch = arch, dtype = dtype }
  for k, v in pairs(s) do m[k] = v end
  if ck ~= "off" then m.checkpoint = ck end
  return { name = string.format("%s_%s_d%d_T%d_%s%s", dtype, arch, s.hidden, s.seq_len, method,
                                ck ~= "off" and "_ckpt" or ""),
           model = m, method = method, device = dev, device_model = dm, iters = iters, warmup = warmup,
           snapshots = "none", threads = dev ~= "plan" and threads or nil, dp = { max_physical_batch_size = s.batch } }
end

local median = dp.median

local rows, t0 = {}, dp.clock()
print(string.format("bench_plan_time: %s, model %s (%s), %d repeat(s) of %d iteration(s) after %d warm-up, threads %s, "
                    .. "measured by the %s clock", device, model_path, devmodel.label(model, dtypes[1]), repeats, iters,
                    warmup, tostring(threads or "-"), clock == "cpu" and "process CPU time" or "wall"))
print(string.format("%-44s %12s %12s %9s %10s", "point", "measured ms", "planned ms", "plan/meas", "roofline"))
local points = {}
for _, s in ipairs(shapes) do
  for _, dtype in ipairs(dtypes) do
    for _, arch in ipairs(archs) do
      for _, ck in ipairs(checkpoints) do
        for _, method in ipairs(methods) do
          points[#points + 1] = { s = s, dtype = dtype, arch = arch, ck = ck, method = method, times = {}, status = "ok" }
        end
      end
    end
  end
end
-- The repeats go round the points, so that a burst of load on a shared machine spoils one round of
-- a point, not all of its repeats.
for round = 1, repeats do
  for _, pt in ipairs(points) do
    if pt.status == "ok" then
      local cfg = config(pt.s, pt.arch, pt.dtype, pt.method, pt.ck, device, nil)
      local t0, cpu_ms = 0, {}
      if clock == "cpu" then
        cfg.on = { before_forward = function(_, _, k) if k == 1 then t0 = os.clock() end end,
                   after_step = function() cpu_ms[#cpu_ms + 1] = (os.clock() - t0) * 1000 end }
      end
      local r = dp.experiment(cfg)
      if r.status ~= "ok" then
        pt.status = r.status .. ": " .. tostring(r.message):gsub("\n.*", "")
      else
        local t = r.timing.avg_ms
        if clock == "cpu" then
          t = 0
          for _, v in ipairs(cpu_ms) do t = t + v / #cpu_ms end
        end
        pt.times[#pt.times + 1] = t
      end
    end
  end
  if repeats > 1 then io.stderr:write(string.format("bench_plan_time: round %d of %d measured\n", round, repeats)) end
end
for _, pt in ipairs(points) do
  local s, dtype, arch, ck, method, times = pt.s, pt.dtype, pt.arch, pt.ck, pt.method, pt.times
  local name = config(s, arch, dtype, method, ck, device, nil).name
  local row = { name = name, dtype = dtype, arch = arch, method = method, checkpoint = ck,
                hidden = s.hidden, seq_len = s.seq_len, batch = s.batch, layers = s.layers }
  if pt.status == "ok" then
    local p = dp.experiment(config(s, arch, dtype, method, ck, "plan", model))
    local q = dp.experiment(config(s, arch, dtype, method, ck, "plan", roofline))
    row.measured_ms, row.measured_runs_ms = math.min(table.unpack(times)), json.array(times)
    row.planned_ms, row.roofline_ms = p.timing.avg_ms, q.timing.avg_ms
    row.ratio, row.roofline_ratio = row.planned_ms / row.measured_ms, row.roofline_ms / row.measured_ms
    row.fallback_ops = json.array(devmodel.fallbacks(model, dtype, p.ledger))
    print(string.format("%-44s %12.3f %12.3f %9.3f %10.3f%s", name, row.measured_ms, row.planned_ms, row.ratio,
                        row.roofline_ratio, #row.fallback_ops > 0 and
                        ("  roofline for: " .. table.concat(row.fallback_ops, ",")) or ""))
  else
    row.status = pt.status
    print(string.format("%-44s %s", name, pt.status))
  end
  io.stdout:flush()
  rows[#rows + 1] = row
end

-- median and worst |ratio - 1| of the rows that pass keep
local function summary(keep)
  local errs, rerrs = {}, {}
  for _, r in ipairs(rows) do
    if r.ratio and keep(r) then
      errs[#errs + 1] = math.abs(r.ratio - 1)
      rerrs[#rerrs + 1] = math.abs(r.roofline_ratio - 1)
    end
  end
  if #errs == 0 then return nil end
  local worst, rworst = 0, 0
  for i = 1, #errs do worst, rworst = math.max(worst, errs[i]), math.max(rworst, rerrs[i]) end
  return { points = #errs, median = median(errs), worst = worst, roofline_median = median(rerrs),
           roofline_worst = rworst }
end
local groups = { { "all", function() return true end } }
for _, dt in ipairs(dtypes) do groups[#groups + 1] = { dt, function(r) return r.dtype == dt end } end
for _, a in ipairs(archs) do groups[#groups + 1] = { a, function(r) return r.arch == a end } end
for _, m in ipairs(methods) do groups[#groups + 1] = { m, function(r) return r.method == m end } end
for _, ck in ipairs(checkpoints) do
  groups[#groups + 1] = { "checkpoint " .. ck, function(r) return r.checkpoint == ck end }
end
print("")
print(string.format("%-22s %7s %10s %10s %16s %14s", "|planned/measured-1|", "points", "median", "worst",
                    "roofline median", "roofline worst"))
local summ = {}
for _, g in ipairs(groups) do
  local s = summary(g[2])
  if s then
    summ[g[1]] = s
    print(string.format("%-22s %7d %9.1f%% %9.1f%% %15.1f%% %13.1f%%", g[1], s.points, 100 * s.median, 100 * s.worst,
                        100 * s.roofline_median, 100 * s.roofline_worst))
  end
end
local path = out .. "/bench_plan_time.json"
local f = assert(io.open(path, "w"))
f:write(json.encode({ device = device, device_model = model_path, model_name = model.name,
                      model_commit = model.calibration.commit, model_date = model.calibration.date,
                      threads = threads or json.null, clock = clock, repeats = repeats, iters = iters, warmup = warmup,
                      commit = dp.environment().git_commit or json.null, seconds = dp.clock() - t0,
                      rows = json.array(rows), summary = summ }, { indent = true }), "\n")
f:close()
print(string.format("\n%.0f s; %s", dp.clock() - t0, path))
