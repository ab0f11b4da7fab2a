-- dpprof.calibrate_fit: the curves of a device model fitted from profiled runs (dpprof.calibrate's
-- header says how: bins a fifth of a decade of roofline work wide, each a knot of its mean work and
-- time less the outlier calls), and the fit error of each op when its runs are planned again.
local dp = require("dpprof")
local json = dp.json
local devmodel = require("dpprof.devmodel")

local cfit = {}

cfit.BIN_DECADES = 0.2
local median = dp.median

local function work(s, peak)
  return math.max(s.flops / peak.flops, s.bytes / peak.bandwidth)
end

-- One bin's knot: the mean work and the mean time of its samples (the plan adds times up, so the
-- mean is what it must reproduce), less the calls that took over OUTLIER times the bin's median
-- (a call preempted on a busy machine); nil when it has no time.
cfit.OUTLIER = 20
local function bin_knot(bin)
  local ts = {}
  for i, s in ipairs(bin) do ts[i] = s.t end
  local cut = cfit.OUTLIER * median(ts)
  local sw, st, sn = 0, 0, 0
  for _, s in ipairs(bin) do
    if s.t <= cut then sw, st, sn = sw + s.w * s.n, st + s.t * s.n, sn + s.n end
  end
  if not (sn > 0 and sw > 0 and st > 0) then return nil end
  return math.log(sw / sn, 10), math.log(st / sn, 10), sn
end

-- Knots of one op's samples {w, t, n}: bins of BIN_DECADES in log10(w), each its bin_knot, then
-- made non-decreasing in time (pooling adjacent knots that break it: more work never takes less
-- time).
local function knots(list)
  table.sort(list, function(a, b) return a.w < b.w end)
  local width = cfit.BIN_DECADES
  local xs, ys
  repeat
    local pts, bin, key = {}, {}, nil
    local function flush()
      if #bin > 0 then
        local x, y, n = bin_knot(bin)
        if x and (#pts == 0 or x > pts[#pts].x) then pts[#pts + 1] = { x = x, y = y, n = n } end
      end
      bin = {}
    end
    for _, s in ipairs(list) do
      local b = s.w > 0 and math.floor(math.log(s.w, 10) / width) or -math.huge
      if b ~= key then flush() key = b end
      bin[#bin + 1] = s
    end
    flush()
    -- pool adjacent violators on y (weights n); the pooled knots keep their own x
    local blocks = {}
    for i, p in ipairs(pts) do
      blocks[#blocks + 1] = { y = p.y, n = p.n, first = i, last = i }
      while #blocks > 1 and blocks[#blocks - 1].y > blocks[#blocks].y do
        local b, a = table.remove(blocks), blocks[#blocks]
        a.y, a.n, a.last = (a.y * a.n + b.y * b.n) / (a.n + b.n), a.n + b.n, b.last
      end
    end
    for _, b in ipairs(blocks) do
      for i = b.first, b.last do pts[i].y = b.y end
    end
    xs, ys = json.array(), json.array()
    for i, p in ipairs(pts) do xs[i], ys[i] = p.x, p.y end
    width = width * 2
  until #xs <= devmodel.MAX_KNOTS
  return xs, ys
end

-- Fits the runs (all of one device) on peaks {dtype = {flops, bandwidth}}.
function cfit.fit(runs, peaks)
  local by = {} -- dtype -> op -> samples
  local gaps = {}
  for _, run in ipairs(runs) do
    local pk = peaks[run.dtype]
    if pk then
      by[run.dtype] = by[run.dtype] or {}
      for _, s in ipairs(run.samples) do
        local l = by[run.dtype][s.op] or {}
        by[run.dtype][s.op] = l
        l[#l + 1] = { w = work(s, pk), t = s.t, n = s.n or 1 }
      end
      if run.gap_s then
        gaps[run.dtype] = gaps[run.dtype] or {}
        table.insert(gaps[run.dtype], run.gap_s)
      end
    end
  end
  local dtypes = {}
  for dtype, ops in pairs(by) do
    local d = { gap_s = (median(gaps[dtype] or {}) or 0) + 0.0, ops = {} }
    for op, list in pairs(ops) do
      local xs, ys = knots(list)
      if #xs > 0 then
        d.ops[op] = { log10_work_s = xs, log10_time_s = ys, samples = #list,
                      fit_error = { median = 0.0, worst = 0.0, runs = 0 } }
      end
    end
    dtypes[dtype] = d
  end
  -- the fit error: a run measured here is planned again with the fitted curves (the clock's own
  -- evaluation, per ledger add, as a plan run with the file does; no gap: the measured op times
  -- have none); a result's per-op means go through the clock's evaluation (dp.clock_op_ms)
  local model = cfit.model_of(dtypes, peaks)
  for _, d in pairs(model.calibration.dtypes) do d.gap_s = 0.0 end
  local errs = {} -- dtype -> op -> list
  for _, run in ipairs(runs) do
    local d = dtypes[run.dtype]
    if d then
      local pred, meas = {}, {}
      for _, s in ipairs(run.samples) do meas[s.op] = (meas[s.op] or 0) + s.t * (s.n or 1) end
      if run.cfg then
        local c = {}
        for k, v in pairs(run.cfg) do c[k] = v end
        c.device, c.device_model, c.profile, c.on, c.threads = "plan", model, nil, nil, nil
        if dp.experiment(c).status == "ok" then
          for _, e in ipairs(dp.ledger()) do
            local b = devmodel.base(e.op)
            pred[b] = (pred[b] or 0) + (e.model_ms or 0) * 1e-3
          end
        end
      else
        dp.clock_model(devmodel.clock_args(model, run.dtype))
        for _, s in ipairs(run.samples) do
          if d.ops[s.op] then
            pred[s.op] = (pred[s.op] or 0) + dp.clock_op_ms(s.op, s.flops, s.bytes) * 1e-3 * (s.n or 1)
          end
        end
        dp.clock_model(false)
      end
      errs[run.dtype] = errs[run.dtype] or {}
      for op, m in pairs(meas) do
        if d.ops[op] and m > 0 and pred[op] then
          errs[run.dtype][op] = errs[run.dtype][op] or {}
          table.insert(errs[run.dtype][op], math.abs(pred[op] / m - 1))
        end
      end
    end
  end
  for dtype, ops in pairs(errs) do
    for op, list in pairs(ops) do
      local worst = 0
      for _, e in ipairs(list) do worst = math.max(worst, e) end
      dtypes[dtype].ops[op].fit_error = { median = median(list) + 0.0, worst = worst + 0.0, runs = #list }
    end
  end
  return dtypes
end

-- A checked model of fitted dtypes on peaks {dtype = {flops, bandwidth}} (one bandwidth), for plan
-- runs before a file is written.
function cfit.model_of(dtypes, peaks)
  local m = { name = "fitting", description = "the curves being fitted", memory_bytes = 1 << 50, context_bytes = 0,
              workspace = false, reserve_overhead = 0.0, peak_flops = {},
              calibration = { device = "cpu", device_name = "fitting", commit = "", date = "", dtypes = {}, runs = 0 } }
  for dt, p in pairs(peaks) do m.peak_flops[dt], m.bandwidth = p.flops, p.bandwidth end
  for dt, d in pairs(dtypes) do m.calibration.dtypes[dt] = { gap_s = d.gap_s, ops = d.ops } end
  return devmodel.as_model(m)
end

return cfit
