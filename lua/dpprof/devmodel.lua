-- dpprof.devmodel: calibrated device model files (JSON), as `dpprof calibrate` writes them and
-- `device_model = "FILE.json"` reads them (docs/lua.md, "Calibrated device models").
--
--   devmodel.FORMAT                  the format tag a file carries ("dpprof-device-model/1")
--   devmodel.is_path(spec)           true when a device_model value names a file (ends in .json)
--   devmodel.check(doc, where)       a decoded file checked field by field -> the plan model
--                                    (plan.device_model's fields plus `calibration`); raises one line
--                                    naming the field and what it must be
--   devmodel.load(path)              reads and checks a file (the model's `calibration.file` is path)
--   devmodel.SHIPPED                 the calibrated models shipped as data: name -> file under
--                                    lua/dpprof/models/ (wherever dpprof finds its Lua modules)
--   devmodel.shipped_path(name)      a shipped model's file path, or nil for another name
--   devmodel.shipped_names()         the shipped models' names, sorted
--   devmodel.is_model(v), devmodel.as_model(m)  whether v is such a checked model; marks m as one
--   devmodel.encode(doc)             the file's text (JSON, indented)
--   devmodel.clock_args(model, dtype) -> peak_flops, bandwidth, curves, gap_s for dp.clock_model
--   devmodel.label(model, dtype)     "calibrated: FILE (name, device, commit, date)" or "roofline"
--   devmodel.fallbacks(model, dtype, ledger) the ledger's ops (base names, sorted) with no curve
--   devmodel.fit_errors(model, dtype) {op = {median=, worst=, runs=}} of the calibration
--   devmodel.op_seconds(model, dtype, op, flops, bytes) -> one call's seconds, calibrated (boolean)
--
-- The time model (engine/core/clock.h): an op call's roofline work is w = max(flops / peak_flops,
-- bytes / bandwidth) seconds on the file's measured peaks; its time is the op's curve at w,
-- piecewise linear in log10(w) -> log10(time) between the knots, the first segment's slope (held
-- in [0, 1]) below them and a constant rate above them; plus gap_s, the host time between calls the
-- calibration measured (per dtype). An op without a curve for the run's dtype costs w: the
-- roofline, and is listed as a fallback in the result.
local dp = require("dpprof")
local json = dp.json

local devmodel = {}

local ARRAY_MT = getmetatable(json.array())
-- a JSON array (decoded, or json.array()) or a plain Lua list
local function is_array(v)
  return type(v) == "table" and (getmetatable(v) == ARRAY_MT or (getmetatable(v) == nil and #v > 0))
end

devmodel.FORMAT = "dpprof-device-model/1"
devmodel.MAX_KNOTS = 64 -- engine/core/clock.h's DP_CLOCK_MAX_KNOTS
devmodel.DTYPES = { "f32", "bf16" }
devmodel.DEVICES = { "cpu", "cuda" }

function devmodel.is_path(spec)
  return type(spec) == "string" and spec:match("%.json$") ~= nil
end

-- Raises the one-line refusal (control bytes of a key or value shown as \xNN, so it stays one line).
local function fail(where, field, fmt, ...)
  local msg = string.format("dpprof: device model %s: field '%s' %s", where, field, string.format(fmt, ...))
  msg = msg:gsub("\\\n", "\\n"):gsub("%c", function(c) return string.format("\\x%02x", c:byte()) end)
  error(msg, 0)
end

local function is_null(v) return v == nil or json.is_null(v) end

local function want(doc, key, kind, where, path, opt)
  local v = doc[key]
  local field = path and (path .. "." .. key) or key
  if is_null(v) then
    if opt then return nil end
    fail(where, field, "is missing (%s expected)", kind)
  end
  local ok
  if kind == "a string" then ok = type(v) == "string" and v ~= ""
  elseif kind == "a printable string" then -- printed in tables and charts: no control bytes
    ok = type(v) == "string" and v ~= "" and not v:find("[%z\1-\31\127]")
  elseif kind == "a positive number" then ok = type(v) == "number" and v > 0 and v < math.huge
  elseif kind == "a rate in [1e3, 1e18]" then ok = type(v) == "number" and v >= 1e3 and v <= 1e18
  elseif kind == "a number >= 0" then ok = type(v) == "number" and v >= 0 and v < math.huge
  elseif kind == "an integer >= 0" then ok = math.type(v) == "integer" and v >= 0
  elseif kind == "an integer > 0" then ok = math.type(v) == "integer" and v > 0
  elseif kind == "true or false" then ok = type(v) == "boolean"
  elseif kind == "an object" then ok = type(v) == "table" and not is_array(v)
  else error("devmodel: unknown kind " .. kind) end
  if not ok then
    fail(where, field, "must be %s, got %s", kind, type(v) == "string" and '"' .. dp.escape_controls(v) .. '"' or
         (type(v) == "table" and (is_array(v) and "an array" or "an object") or tostring(v)))
  end
  return v
end

devmodel.MAX_LOG10_TIME_S = 9 -- a calibrated call's time: at most 10^9 s

local function knots(v, where, field, lo, hi)
  if type(v) ~= "table" or not is_array(v) or #v < 1 or #v > devmodel.MAX_KNOTS then
    fail(where, field, "must be an array of 1 to %d numbers", devmodel.MAX_KNOTS)
  end
  local n, keys = #v, 0
  for _ in pairs(v) do keys = keys + 1 end
  if keys ~= n then fail(where, field, "must be an array of 1 to %d numbers", devmodel.MAX_KNOTS) end
  for i = 1, n do
    local x = v[i]
    if type(x) ~= "number" or x ~= x or x == math.huge or x == -math.huge then
      fail(where, field, "must hold finite numbers (item %d is %s)", i, tostring(x))
    end
    if x < lo or x > hi then fail(where, field, "must hold numbers in [%g, %g] (item %d is %s)", lo, hi, i, tostring(x)) end
  end
  return v
end

local function check_curve(c, where, path)
  local x = knots(c.log10_work_s, where, path .. ".log10_work_s", -30, 10)
  -- at most 10^9 s a call: what the modelled clock holds (int64 ns, about 126 years) with room
  local y = knots(c.log10_time_s, where, path .. ".log10_time_s", -15, devmodel.MAX_LOG10_TIME_S)
  if #x ~= #y then fail(where, path .. ".log10_time_s", "must have as many items as log10_work_s (%d), got %d", #x, #y) end
  for i = 2, #x do
    if not (x[i] > x[i - 1]) then fail(where, path .. ".log10_work_s", "must be strictly increasing (item %d)", i) end
  end
  want(c, "samples", "an integer >= 0", where, path)
  local fe = want(c, "fit_error", "an object", where, path)
  want(fe, "median", "a number >= 0", where, path .. ".fit_error")
  want(fe, "worst", "a number >= 0", where, path .. ".fit_error")
  want(fe, "runs", "an integer >= 0", where, path .. ".fit_error")
  return c
end

local function one_of(v, list, where, field)
  for _, x in ipairs(list) do if v == x then return v end end
  fail(where, field, "must be one of %s, got %q", table.concat(list, ", "), tostring(v))
end

-- Refuses a field of doc that no device model has, naming the valid ones.
local function check_known_fields(doc, where)
  local known = { format = true, name = true, description = true, device = true, device_name = true, commit = true,
                  date = true, threads = true, memory_bytes = true, context_bytes = true, workspace = true,
                  reserve_overhead = true, peak_flops = true, bandwidth = true, peak_how = true, time_model = true,
                  dtypes = true, calibration = true, provenance = true }
  for k in pairs(doc) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      fail(where, tostring(k), "is not a device model field (valid: %s)", table.concat(names, ", "))
    end
  end
end

-- peak_flops and dtypes (each calibrated dtype's launch gap and op curves) into m.peak_flops and
-- cal.dtypes; at least one dtype, each with its peak.
local function check_dtypes(doc, m, cal, where)
  local peaks = want(doc, "peak_flops", "an object", where)
  for dt, f in pairs(peaks) do
    one_of(dt, devmodel.DTYPES, where, "peak_flops." .. tostring(dt))
    m.peak_flops[dt] = want(peaks, dt, "a rate in [1e3, 1e18]", where, "peak_flops") + 0.0
  end
  local dtypes = want(doc, "dtypes", "an object", where)
  local any = false
  for dt, d in pairs(dtypes) do
    one_of(dt, devmodel.DTYPES, where, "dtypes." .. tostring(dt))
    local path = "dtypes." .. dt
    want(dtypes, dt, "an object", where, "dtypes")
    if not m.peak_flops[dt] then fail(where, "peak_flops." .. dt, "is missing (dtypes has %s)", dt) end
    local ops = want(d, "ops", "an object", where, path)
    local e = { gap_s = want(d, "gap_s", "a number >= 0", where, path) + 0.0, ops = {} }
    if e.gap_s >= 1 then fail(where, path .. ".gap_s", "must be under 1 second, got %s", tostring(e.gap_s)) end
    for op, c in pairs(ops) do
      if type(op) ~= "string" or not op:match("^[%w_]+$") then
        fail(where, path .. ".ops." .. tostring(op), "is not an op name (letters, digits, _)")
      end
      want(ops, op, "an object", where, path .. ".ops")
      e.ops[op] = check_curve(c, where, path .. ".ops." .. op)
    end
    cal.dtypes[dt] = e
    any = true
  end
  if not any then fail(where, "dtypes", "must calibrate at least one dtype (%s)", table.concat(devmodel.DTYPES, ", ")) end
end

-- provenance: where the file came from, strings or arrays of strings (the commands); a copy.
local function check_provenance(prov, where)
  local out = {}
  for k, v in pairs(prov) do
    local field = "provenance." .. tostring(k)
    if type(k) ~= "string" then fail(where, field, "is not a field name") end
    if is_array(v) then
      for i, x in ipairs(v) do
        if type(x) ~= "string" then fail(where, field, "must hold strings (item %d is %s)", i, type(x)) end
      end
    elseif type(v) ~= "string" or v == "" then
      fail(where, field, "must be a string or an array of strings, got %s", type(v))
    end
    out[k] = v
  end
  return out
end

-- The checked model of a decoded file (see the header); where names the file in errors.
function devmodel.check(doc, where)
  where = where or "(file)"
  if type(doc) ~= "table" or is_array(doc) then error(string.format("dpprof: device model %s: must be a JSON object", where), 0) end
  local fmt = want(doc, "format", "a string", where)
  if fmt ~= devmodel.FORMAT then fail(where, "format", "must be %q, got %q", devmodel.FORMAT, fmt) end
  check_known_fields(doc, where)
  local m = {
    name = want(doc, "name", "a printable string", where),
    description = want(doc, "description", "a printable string", where, nil, true),
    memory_bytes = want(doc, "memory_bytes", "an integer > 0", where),
    context_bytes = want(doc, "context_bytes", "an integer >= 0", where),
    workspace = want(doc, "workspace", "true or false", where),
    reserve_overhead = want(doc, "reserve_overhead", "a number >= 0", where) + 0.0,
    bandwidth = want(doc, "bandwidth", "a rate in [1e3, 1e18]", where) + 0.0,
    peak_flops = {},
  }
  m.description = m.description or m.name
  if m.context_bytes >= m.memory_bytes then
    fail(where, "context_bytes", "(%d) must be less than memory_bytes (%d)", m.context_bytes, m.memory_bytes)
  end
  local device = one_of(want(doc, "device", "a string", where), devmodel.DEVICES, where, "device")
  local cal = {
    device = device,
    device_name = want(doc, "device_name", "a string", where),
    commit = want(doc, "commit", "a string", where),
    date = want(doc, "date", "a string", where),
    threads = want(doc, "threads", "an integer >= 0", where, nil, true),
    dtypes = {},
  }
  check_dtypes(doc, m, cal, where)
  local c = want(doc, "calibration", "an object", where, nil, true)
  cal.runs = c and want(c, "runs", "an integer >= 0", where, "calibration") or 0
  cal.set = c and want(c, "set", "a string", where, "calibration", true) or nil
  cal.clock = c and want(c, "clock", "a string", where, "calibration", true) or nil
  local prov = want(doc, "provenance", "an object", where, nil, true)
  if prov then cal.provenance = check_provenance(prov, where) end
  m.calibration = cal
  return m
end

-- The calibrated models shipped in the repository (lua/dpprof/models/NAME.json, with their
-- provenance); the roofline h100 and h200 stay the defaults.
devmodel.SHIPPED = { ["h100-calibrated"] = "h100-calibrated.json" }

function devmodel.shipped_path(name)
  local file = type(name) == "string" and devmodel.SHIPPED[name]
  if not file then return nil end
  return string.format("%s/dpprof/models/%s", dp.lua_dir or "lua", file)
end

function devmodel.shipped_names()
  local out = {}
  for k in pairs(devmodel.SHIPPED) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- A model devmodel.load returned (plan.device_model takes it as it is).
local MODEL_MT = { __name = "dpprof.devmodel" }
function devmodel.is_model(v) return type(v) == "table" and getmetatable(v) == MODEL_MT end
-- Marks a checked model (plan.device_model's copy of one with overrides) as such.
function devmodel.as_model(m) return setmetatable(m, MODEL_MT) end

-- The last file read, by path and text: a search (dp.fit) plans many runs with one file.
local last = { path = nil, text = nil, model = nil }

function devmodel.load(path)
  local text = dp.read_file(path)
  if not text then error(string.format("dpprof: device model %s: cannot be read (no such file?)", path), 0) end
  if last.path == path and last.text == text then -- a copy: the caller may change its own fields
    local m = {}
    for k, v in pairs(last.model) do m[k] = v end
    m.peak_flops = {}
    for k, v in pairs(last.model.peak_flops) do m.peak_flops[k] = v end
    return setmetatable(m, MODEL_MT)
  end
  local ok, doc = pcall(json.decode, text)
  if not ok then
    error(string.format("dpprof: device model %s: not valid JSON: %s", path, dp.error_text(doc):gsub("\n.*", "")), 0)
  end
  local m = devmodel.check(doc, path)
  m.calibration.file = path
  last.path, last.text, last.model = path, text, m
  return devmodel.load(path)
end

function devmodel.encode(doc)
  return json.encode(doc, { indent = true })
end

-- The arguments of dp.clock_model for a run of dtype on model (a calibrated one's curves; the
-- roofline's peaks alone otherwise).
function devmodel.clock_args(model, dtype)
  local peak = model.peak_flops[dtype] or model.peak_flops.f32
  local cal = model.calibration and model.calibration.dtypes[dtype]
  if not cal then return peak, model.bandwidth, nil, 0 end
  local curves = {}
  for op, c in pairs(cal.ops) do curves[op] = { x = c.log10_work_s, y = c.log10_time_s } end
  return peak, model.bandwidth, curves, cal.gap_s
end

function devmodel.calibrated(model, dtype)
  return model.calibration ~= nil and model.calibration.dtypes[dtype] ~= nil
end

function devmodel.label(model, dtype)
  local cal = model.calibration
  if not cal or not cal.dtypes[dtype] then return "roofline" end
  local driver = cal.provenance and type(cal.provenance.driver) == "string" and (", driver " .. cal.provenance.driver) or ""
  return string.format("calibrated: %s (%s, %s%s, commit %s, %s)", cal.file or model.name, model.name, cal.device_name,
                       driver, cal.commit, cal.date)
end

-- The base op name of a ledger op ("recompute:gemm" -> "gemm").
function devmodel.base(op)
  return op:match("^[%w_]+:([%w_]+)$") or op
end

function devmodel.fallbacks(model, dtype, ledger)
  local cal = model.calibration and model.calibration.dtypes[dtype]
  local seen, out = {}, {}
  for _, e in ipairs(ledger) do
    local b = devmodel.base(e.op)
    if not seen[b] and not (cal and cal.ops[b]) then
      seen[b] = true
      out[#out + 1] = b
    end
  end
  table.sort(out)
  return out
end

function devmodel.fit_errors(model, dtype)
  local cal = model.calibration and model.calibration.dtypes[dtype]
  local out = {}
  if not cal then return out end
  for op, c in pairs(cal.ops) do
    out[op] = { median = c.fit_error.median, worst = c.fit_error.worst, runs = c.fit_error.runs }
  end
  return out
end

-- One call of op on model at dtype, seconds, as engine/core/clock.c evaluates it: the curve (plus
-- the gap) where the calibration has one, else the roofline work; and whether a curve gave it.
function devmodel.op_seconds(model, dtype, op, flops, bytes)
  local peak = model.peak_flops[dtype] or model.peak_flops.f32
  local w = math.max(flops / peak, bytes / model.bandwidth)
  local cal = model.calibration and model.calibration.dtypes[dtype]
  local c = cal and cal.ops[devmodel.base(op)]
  if not c then return w + (cal and cal.gap_s or 0), false end
  local x, y, n = c.log10_work_s, c.log10_time_s, #c.log10_work_s
  local t
  if not (w > 0) then
    t = 10 ^ y[1]
  elseif n == 1 then
    t = 10 ^ (y[1] + math.log(w, 10) - x[1])
  else
    local lw = math.log(w, 10)
    if lw <= x[1] then
      local s = math.min(1, math.max(0, (y[2] - y[1]) / (x[2] - x[1])))
      t = 10 ^ (y[1] + (lw - x[1]) * s)
    elseif lw >= x[n] then
      t = 10 ^ (y[n] + lw - x[n])
    else
      local i = 2
      while x[i] < lw do i = i + 1 end
      local f = (lw - x[i - 1]) / (x[i] - x[i - 1])
      t = 10 ^ (y[i - 1] + f * (y[i] - y[i - 1]))
    end
  end
  return t + cal.gap_s, true
end

return devmodel
