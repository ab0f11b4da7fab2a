-- dpprof.results: the results JSON of docs/results.md (schema_version 1): assembling a result from
-- what an experiment measured, validating every documented field, and reading and writing files
-- (atomically: a reader never sees half a file).
local dp = require("dpprof")
local json = dp.json

local results = {}

results.SCHEMA_VERSION = 1
results.MiB = 1024 * 1024
results.TIMELINE_POINTS = 4096
results.STATUSES = { "ok", "oom", "error", "crashed", "timeout" }
results.PHASES = { "forward", "backward", "clip", "noise", "optimizer" }
results.CATEGORIES = dp.memory.categories
-- Per-layer formulations of the norms pass (dpsgd_formulation_name in engine/dp/dpsgd.h).
results.NORMS_KINDS = { "direct", "materialize", "ghost", "gram_tile", "grad_tile", "batch1", "grouped",
                         "gram_strip", "grad_strip" }

-- The legacy breakdown: each field is the sum of these categories live at the peak.
results.LEGACY_BREAKDOWN = {
  model_parameters_mb = { "parameters" },
  optimizer_states_mb = { "optimizer_states" },
  gradients_mb = { "gradients" },
  activation_hooks_mb = { "activations", "output_grads" },
  norm_samples_mb = { "norm_samples", "per_sample_grads" },
  temp_matrices_mb = { "temp", "workspace" },
}

local function array(t) return json.array(t or {}) end
local function null_if_nil(v) if v == nil then return json.null end return v end
local function mb(bytes) return bytes / results.MiB end

---------------------------------------------------------------------------------------------
-- Assembling

local function category_map(v)
  local out = {}
  for _, c in ipairs(results.CATEGORIES) do out[c] = v and v[c] or 0 end
  return out
end

-- Converts dpprof.memory.snapshots() into the result's snapshot list.
function results.snapshots(snaps)
  local out = array()
  for i, s in ipairs(snaps) do
    out[i] = { name = s.name, allocated_mb = mb(s.allocated), reserved_mb = mb(s.reserved),
               timestamp = s.timestamp, categories = category_map(s.categories) }
  end
  return out
end

-- {avg_ms, median_ms, min_ms, max_ms} over a list of times (nil for an empty list).
function results.time_stats(list)
  if #list == 0 then return nil end
  local sorted, sum = {}, 0
  for i, v in ipairs(list) do sorted[i], sum = v, sum + v end
  table.sort(sorted)
  local n = #sorted
  local median = n % 2 == 1 and sorted[(n + 1) // 2] or (sorted[n // 2] + sorted[n // 2 + 1]) / 2
  return { avg_ms = sum / n, median_ms = median, min_ms = sorted[1], max_ms = sorted[n] }
end

-- The memory object and the legacy breakdown from dpprof.memory.stats() taken after the timed
-- iterations (peaks reset after warm-up), the warm-up peak, modules and timeline.
local function memory_fields(r, m)
  local s = m.stats
  local cats = {}
  for _, c in ipairs(results.CATEGORIES) do
    cats[c] = { current_bytes = s.current[c], peak_bytes = s.peaks[c], live_at_peak_bytes = s.live_at_peak[c] }
  end
  local modules = array()
  for i, mod in ipairs(m.modules or {}) do
    modules[i] = { module = mod.module, peak_bytes = mod.peak, live_at_peak_bytes = mod.live_at_peak }
  end
  local tl = m.timeline or {}
  r.memory = {
    peak_bytes = s.peak,
    warmup_peak_bytes = m.warmup_peak_bytes or s.peak,
    reserved_peak_bytes = s.reserved_peak,
    end_bytes = s.allocated,
    categories = cats,
    modules = modules,
    timeline = { t_ms = array(tl.t_ms), allocated_bytes = array(tl.allocated_bytes),
                 reserved_bytes = array(tl.reserved_bytes) },
  }
  r.peak_memory_mb = mb(s.peak)
  local bd = { total_allocated_mb = mb(s.allocated), peak_allocated_mb = mb(s.peak) }
  for key, list in pairs(results.LEGACY_BREAKDOWN) do
    local sum = 0
    for _, c in ipairs(list) do sum = sum + s.live_at_peak[c] end
    bd[key] = mb(sum)
  end
  r.breakdown = bd
end

-- The timing object from per-iteration times, per-iteration phase times and spans.
local function timing_fields(r, t)
  local stats = results.time_stats(t.iter_ms)
  local phases = {}
  for _, p in ipairs(results.PHASES) do
    local sum = 0
    for _, per_iter in ipairs(t.phase_ms) do sum = sum + (per_iter[p] or 0) end
    phases[p] = #t.phase_ms > 0 and sum / #t.phase_ms or 0
  end
  r.timing = { iter_ms = array(t.iter_ms), phases_ms = phases, spans = array(t.spans) }
  if stats then
    for k, v in pairs(stats) do r.timing[k] = v end
    r.avg_time_ms = stats.avg_ms
  end
end

-- Builds a result table from an experiment's measurements:
--   {name, status, message, traceback, oom, config, method, norms, clip, predicted,
--    memory = {stats, warmup_peak_bytes, modules, timeline}, snapshots (dpprof.memory.snapshots()),
--    timing = {iter_ms, phase_ms = {{forward=, ...} per timed iteration}, spans},
--    estimate (plan runs: timing.estimate), plan (plan runs: the budget view),
--    ledger, layers, environment, privacy, extra}
-- Fields an experiment that failed early does not have are left out.
function results.assemble(a)
  local r = {
    schema_version = results.SCHEMA_VERSION,
    experiment = a.name,
    status = a.status or "ok",
    message = a.message,
    traceback = a.traceback,
    oom = a.oom,
    config = a.config,
    method = a.method,
    norms = a.method and null_if_nil(a.norms) or nil,
    clip = a.method and null_if_nil(a.clip) or nil,
    predicted = a.predicted,
    snapshots = a.snapshots and results.snapshots(a.snapshots) or nil,
    environment = a.environment,
    extra = a.extra and next(a.extra) and a.extra or nil,
  }
  if a.memory and a.memory.stats then memory_fields(r, a.memory) end
  if a.timing then timing_fields(r, a.timing) end
  if r.timing and a.estimate then r.timing.estimate = a.estimate end
  r.plan = a.plan
  if a.ledger then
    r.ledger = array()
    for i, e in ipairs(a.ledger) do r.ledger[i] = { op = e.op, calls = e.calls, flops = e.flops, bytes = e.bytes } end
  end
  if a.layers then
    r.layers = array()
    for i, l in ipairs(a.layers) do r.layers[i] = { module = l.module, kind = l.kind, norms = l.norms } end
  end
  if a.method then r.privacy = null_if_nil(a.privacy) end
  return r
end

-- A result for an experiment that left none (its child crashed, timed out or failed before the
-- experiment could report): status, message and whatever is known.
function results.failure(f)
  return {
    schema_version = results.SCHEMA_VERSION,
    experiment = f.name,
    status = f.status,
    message = f.message or ("no message (status " .. tostring(f.status) .. ")"),
    traceback = f.traceback,
    oom = f.oom,
    config = f.config,
  }
end

---------------------------------------------------------------------------------------------
-- Validation: every documented field, its type, and the invariants that tie fields together.

local V = {}
V.__index = V

local function new_validator() return setmetatable({ problems = {}, said = {} }, V) end

function V:fail(path, fmt, ...)
  local line = path .. ": " .. string.format(fmt, ...)
  if self.said[line] then return end -- one line per problem, however many keys of it were asked for
  self.said[line] = true
  self.problems[#self.problems + 1] = line
end

local function type_name(v)
  if json.is_null(v) then return "null" end
  if math.type(v) then return math.type(v) end
  return type(v)
end

-- Returns the value at t[key] when its type is kind ("string", "number", "integer", "boolean",
-- "table"); reports a problem when it is missing (unless optional) or of another type.
-- t itself must be an object (a table): anything else is reported once, at path. A validator
-- never raises, whatever the document holds.
function V:get(t, key, path, kind, optional)
  if type(t) ~= "table" then
    self:fail(path == "" and "(top)" or path, "object expected, got %s", type_name(t))
    return nil
  end
  local v = t[key]
  local p = path == "" and key or (path .. "." .. key)
  if v == nil then
    if not optional then self:fail(p, "missing (%s expected)", kind) end
    return nil
  end
  local ok
  if kind == "integer" then ok = math.type(v) == "integer"
  elseif kind == "number" then ok = type(v) == "number"
  else ok = type(v) == kind and not json.is_null(v) end
  if not ok then
    self:fail(p, "%s expected, got %s", kind, type_name(v))
    return nil
  end
  if kind == "number" and (v ~= v or v == math.huge or v == -math.huge) then
    self:fail(p, "not a finite number")
    return nil
  end
  return v
end

function V:nonneg(v, path)
  if v and v < 0 then self:fail(path, "negative (%s)", tostring(v)) end
  return v
end

function V:array(t, key, path, optional)
  local v = self:get(t, key, path, "table", optional)
  if v and next(v) ~= nil and #v == 0 then
    self:fail(path .. "." .. key, "array expected, got an object")
    return nil
  end
  return v
end

function V:one_of(v, list, path)
  if v == nil then return end
  for _, x in ipairs(list) do if v == x then return end end
  self:fail(path, "'%s' is not one of %s", tostring(v), table.concat(list, ", "))
end

-- Derived figures must agree with their source; a writer may round MiB and ms to 3 decimals.
function V:near(got, want, path, what)
  if type(got) ~= "number" or type(want) ~= "number" then return end -- a wrong type is reported by get
  if math.abs(got - want) > math.max(1e-9 * math.abs(want), 0.00051) then
    self:fail(path, "%.9g differs from %s (%.9g)", got, what, want)
  end
end

function V:category_bytes(t, path)
  if not t then return end
  for _, c in ipairs(results.CATEGORIES) do self:nonneg(self:get(t, c, path, "integer"), path .. "." .. c) end
  for k in pairs(t) do
    local known = false
    for _, c in ipairs(results.CATEGORIES) do known = known or c == k end
    if not known then self:fail(path .. "." .. k, "unknown category (valid: %s)", table.concat(results.CATEGORIES, ", ")) end
  end
end

function V:config(c)
  if not c then return end
  local m = self:get(c, "model", "config", "table")
  if m then
    for _, k in ipairs({ "layers", "hidden", "heads", "seq_len", "batch", "vocab" }) do
      self:nonneg(self:get(m, k, "config.model", "integer"), "config.model." .. k)
    end
    self:get(m, "arch", "config.model", "string")
    self:get(m, "dtype", "config.model", "string")
  end
  self:get(c, "method", "config", "string")
  local o = self:get(c, "optimizer", "config", "table")
  if o then self:get(o, "name", "config.optimizer", "string"); self:get(o, "lr", "config.optimizer", "number") end
  local d = not (c.method == "vanilla" and json.is_null(c.dp)) and self:get(c, "dp", "config", "table")
  if d then
    for _, k in ipairs({ "max_grad_norm", "noise_multiplier", "sample_rate", "delta" }) do
      self:get(d, k, "config.dp", "number")
    end
    self:get(d, "max_physical_batch_size", "config.dp", "integer")
  end
  self:nonneg(self:get(c, "iters", "config", "integer"), "config.iters")
  self:nonneg(self:get(c, "warmup", "config", "integer"), "config.warmup")
  self:get(c, "device", "config", "string")
  self:get(c, "seed", "config", "integer")
  local n = self:get(c, "threads", "config", "integer", true)
  if n and n < 1 then self:fail("config.threads", "%d, a thread count is at least 1", n) end
end

function V:snapshots(list)
  if not list then return end
  for i, s in ipairs(list) do
    local p = "snapshots[" .. i .. "]"
    self:get(s, "name", p, "string")
    self:nonneg(self:get(s, "allocated_mb", p, "number"), p .. ".allocated_mb")
    self:nonneg(self:get(s, "reserved_mb", p, "number"), p .. ".reserved_mb")
    self:nonneg(self:get(s, "timestamp", p, "number"), p .. ".timestamp")
    local cats = self:get(s, "categories", p, "table")
    self:category_bytes(cats, p .. ".categories")
    if cats and type(s.allocated_mb) == "number" then
      local sum = 0
      for _, c in ipairs(results.CATEGORIES) do sum = sum + (math.type(cats[c]) and cats[c] or 0) end
      self:near(s.allocated_mb, mb(sum), p .. ".allocated_mb", "the sum of its categories")
    end
    local prev = list[i - 1]
    if i > 1 and type(s) == "table" and type(prev) == "table" and type(s.timestamp) == "number"
       and type(prev.timestamp) == "number" and s.timestamp < prev.timestamp then
      self:fail(p .. ".timestamp", "earlier than the snapshot before it")
    end
  end
end

function V:memory(r, ok)
  local m = self:get(r, "memory", "", "table", not ok)
  if not m then return end
  local peak = self:nonneg(self:get(m, "peak_bytes", "memory", "integer"), "memory.peak_bytes")
  self:nonneg(self:get(m, "warmup_peak_bytes", "memory", "integer"), "memory.warmup_peak_bytes")
  local rpeak = self:nonneg(self:get(m, "reserved_peak_bytes", "memory", "integer"), "memory.reserved_peak_bytes")
  local end_bytes = self:nonneg(self:get(m, "end_bytes", "memory", "integer"), "memory.end_bytes")
  if peak and rpeak and rpeak < peak then self:fail("memory.reserved_peak_bytes", "below peak_bytes") end
  if peak and end_bytes and end_bytes > peak then self:fail("memory.end_bytes", "above peak_bytes") end
  local cats = self:get(m, "categories", "memory", "table")
  if cats then
    local live_sum = 0
    for _, c in ipairs(results.CATEGORIES) do
      local p = "memory.categories." .. c
      local e = self:get(cats, c, "memory.categories", "table")
      if e then
        local cur = self:nonneg(self:get(e, "current_bytes", p, "integer"), p .. ".current_bytes")
        local pk = self:nonneg(self:get(e, "peak_bytes", p, "integer"), p .. ".peak_bytes")
        local lap = self:nonneg(self:get(e, "live_at_peak_bytes", p, "integer"), p .. ".live_at_peak_bytes")
        if pk and lap and lap > pk then self:fail(p .. ".live_at_peak_bytes", "above the category's peak") end
        if pk and cur and cur > pk then self:fail(p .. ".current_bytes", "above the category's peak") end
        live_sum = live_sum + (lap or 0)
      end
    end
    if peak and live_sum ~= peak then
      self:fail("memory.categories", "live_at_peak_bytes sum to %d, not peak_bytes %d", live_sum, peak)
    end
  end
  local mods = self:array(m, "modules", "memory")
  if mods then
    for i, e in ipairs(mods) do
      local p = "memory.modules[" .. i .. "]"
      self:get(e, "module", p, "string")
      self:nonneg(self:get(e, "peak_bytes", p, "integer"), p .. ".peak_bytes")
      local lap = self:nonneg(self:get(e, "live_at_peak_bytes", p, "integer"), p .. ".live_at_peak_bytes")
      local prev = mods[i - 1]
      if i > 1 and lap and type(prev) == "table" and math.type(prev.live_at_peak_bytes)
         and lap > prev.live_at_peak_bytes then
        self:fail(p, "modules are not sorted by live_at_peak_bytes, largest first")
      end
    end
  end
  local tl = self:get(m, "timeline", "memory", "table")
  if tl then
    local n
    for _, k in ipairs({ "t_ms", "allocated_bytes", "reserved_bytes" }) do
      local a = self:array(tl, k, "memory.timeline")
      if a then
        if n and #a ~= n then self:fail("memory.timeline." .. k, "has %d points, t_ms has %d", #a, n) end
        n = n or #a
        if #a > results.TIMELINE_POINTS then
          self:fail("memory.timeline." .. k, "has %d points (at most %d)", #a, results.TIMELINE_POINTS)
        end
        for i, v in ipairs(a) do
          local ok_type = k == "t_ms" and type(v) == "number" or math.type(v) == "integer"
          if not ok_type then
            self:fail(string.format("memory.timeline.%s[%d]", k, i), "%s expected, got %s",
                      k == "t_ms" and "number" or "integer", type_name(v))
            break
          end
        end
      end
    end
  end
  if peak then
    self:near(self:get(r, "peak_memory_mb", "", "number", not ok), mb(peak), "peak_memory_mb", "memory.peak_bytes in MiB")
  end
end

function V:breakdown(r, ok)
  local b = self:get(r, "breakdown", "", "table", not ok)
  if not b then return end
  local keys = { "total_allocated_mb", "peak_allocated_mb" }
  for k in pairs(results.LEGACY_BREAKDOWN) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do self:nonneg(self:get(b, k, "breakdown", "number"), "breakdown." .. k) end
  self:near(b.peak_allocated_mb, r.peak_memory_mb, "breakdown.peak_allocated_mb", "peak_memory_mb")
  local m = type(r.memory) == "table" and r.memory or nil
  if m and type(m.categories) == "table" then
    for key, list in pairs(results.LEGACY_BREAKDOWN) do
      local sum = 0
      for _, c in ipairs(list) do
        local e = m.categories[c]
        sum = sum + (type(e) == "table" and type(e.live_at_peak_bytes) == "number" and e.live_at_peak_bytes or 0)
      end
      self:near(b[key], mb(sum), "breakdown." .. key, "memory.categories live at the peak")
    end
    if math.type(m.end_bytes) then self:near(b.total_allocated_mb, mb(m.end_bytes), "breakdown.total_allocated_mb", "memory.end_bytes") end
  end
end

function V:timing(r, ok)
  local t = self:get(r, "timing", "", "table", not ok)
  if not t then return end
  local iters = self:array(t, "iter_ms", "timing")
  if iters then
    local numbers = true
    for i, v in ipairs(iters) do
      if type(v) ~= "number" or v < 0 or v ~= v then
        self:fail("timing.iter_ms[" .. i .. "]", "non-negative number expected, got %s", type_name(v))
        numbers = false
      end
    end
    local want = numbers and results.time_stats(iters) or nil
    if ok and numbers and not want then self:fail("timing.iter_ms", "empty in an ok result") end
    if want then
      for k, v in pairs(want) do self:near(self:get(t, k, "timing", "number"), v, "timing." .. k, "the value over iter_ms") end
      self:near(self:get(r, "avg_time_ms", "", "number"), want.avg_ms, "avg_time_ms", "timing.avg_ms")
    end
    if type(r.config) == "table" and math.type(r.config.iters) == "integer" and ok and #iters ~= r.config.iters then
      self:fail("timing.iter_ms", "has %d entries, config.iters is %d", #iters, r.config.iters)
    end
  end
  local ph = self:get(t, "phases_ms", "timing", "table")
  if ph then
    for _, p in ipairs(results.PHASES) do self:nonneg(self:get(ph, p, "timing.phases_ms", "number"), "timing.phases_ms." .. p) end
  end
  local spans = self:array(t, "spans", "timing")
  if spans then
    for i, s in ipairs(spans) do
      local p = "timing.spans[" .. i .. "]"
      self:one_of(self:get(s, "phase", p, "string"), results.PHASES, p .. ".phase")
      self:nonneg(self:get(s, "iter", p, "integer"), p .. ".iter")
      local a, b = self:get(s, "start_ms", p, "number"), self:get(s, "end_ms", p, "number")
      if a and b and b < a then self:fail(p, "ends before it starts") end
    end
  end
end

-- A plan run's estimate and budget view (docs/results.md, "Predicted results").
function V:predicted(r, ok)
  if r.predicted ~= true then
    if r.plan ~= nil then self:fail("plan", "present in a result that is not predicted") end
    return
  end
  local t = type(r.timing) == "table" and r.timing or nil
  local e = t and self:get(t, "estimate", "timing", "table", not ok)
  if e then
    self:get(e, "device_model", "timing.estimate", "string")
    local m = self:get(e, "method", "timing.estimate", "string")
    if m and not m:find("^roofline") then self:fail("timing.estimate.method", "'%s' is not a roofline", m) end
    self:get(e, "dtype", "timing.estimate", "string")
    for _, k in ipairs({ "peak_flops", "bandwidth" }) do
      local v = self:get(e, k, "timing.estimate", "number")
      if v and v <= 0 then self:fail("timing.estimate." .. k, "not positive") end
    end
    self:nonneg(self:get(e, "ledger_ms", "timing.estimate", "number"), "timing.estimate.ledger_ms")
    self:get(e, "label", "timing.estimate", "string")
    local ops = self:array(e, "ops", "timing.estimate")
    for i, o in ipairs(ops or {}) do
      local p = "timing.estimate.ops[" .. i .. "]"
      self:get(o, "op", p, "string")
      self:nonneg(self:get(o, "ms", p, "number"), p .. ".ms")
      self:one_of(self:get(o, "bound", p, "string"), { "compute", "memory" }, p .. ".bound")
    end
  end
  local b = self:get(r, "plan", "", "table", not ok)
  if not b then return end
  self:get(b, "device_model", "plan", "string")
  local ints = {}
  for _, k in ipairs({ "memory_bytes", "context_bytes", "peak_bytes", "budget_bytes", "predicted_reserved_bytes" }) do
    ints[k] = self:nonneg(self:get(b, k, "plan", "integer"), "plan." .. k)
  end
  local head = self:get(b, "headroom_bytes", "plan", "integer")
  local fits = self:get(b, "fits", "plan", "boolean")
  self:nonneg(self:get(b, "reserve_overhead", "plan", "number"), "plan.reserve_overhead")
  self:get(b, "workspace", "plan", "boolean")
  if ints.memory_bytes and ints.context_bytes and ints.budget_bytes
     and ints.budget_bytes ~= ints.memory_bytes - ints.context_bytes then
    self:fail("plan.budget_bytes", "is not memory_bytes - context_bytes")
  end
  if ints.budget_bytes and ints.predicted_reserved_bytes and head then
    if head ~= ints.budget_bytes - ints.predicted_reserved_bytes then
      self:fail("plan.headroom_bytes", "is not budget_bytes - predicted_reserved_bytes")
    end
    if fits ~= nil and fits ~= (head >= 0) then self:fail("plan.fits", "disagrees with headroom_bytes") end
  end
  if ints.peak_bytes and ints.predicted_reserved_bytes and ints.predicted_reserved_bytes < ints.peak_bytes then
    self:fail("plan.predicted_reserved_bytes", "below plan.peak_bytes")
  end
  local m = type(r.memory) == "table" and r.memory or nil
  if m and ints.peak_bytes and math.type(m.peak_bytes) and math.type(m.warmup_peak_bytes)
     and ints.peak_bytes ~= math.max(m.peak_bytes, m.warmup_peak_bytes) then
    self:fail("plan.peak_bytes", "is not the larger of memory.peak_bytes and memory.warmup_peak_bytes")
  end
end

function V:ledger(r, ok)
  local l = self:array(r, "ledger", "", not ok)
  if not l then return end
  for i, e in ipairs(l) do
    local p = "ledger[" .. i .. "]"
    self:get(e, "op", p, "string")
    self:nonneg(self:get(e, "calls", p, "integer"), p .. ".calls")
    self:nonneg(self:get(e, "flops", p, "number"), p .. ".flops")
    self:nonneg(self:get(e, "bytes", p, "number"), p .. ".bytes")
  end
end

function V:layers(r, ok)
  local l = self:array(r, "layers", "", not ok)
  if not l then return end
  for i, e in ipairs(l) do
    local p = "layers[" .. i .. "]"
    self:get(e, "module", p, "string")
    self:get(e, "kind", p, "string")
    self:one_of(self:get(e, "norms", p, "string"), results.NORMS_KINDS, p .. ".norms")
  end
end

function V:environment(r, ok)
  local e = self:get(r, "environment", "", "table", not ok)
  if not e then return end
  for _, k in ipairs({ "device", "device_name", "cpu", "git_commit", "dpprof_version", "hostname" }) do
    self:get(e, k, "environment", "string")
  end
  self:nonneg(self:get(e, "cores", "environment", "integer"), "environment.cores")
  -- optional: results written before the thread count was recorded lack it
  local n = self:get(e, "threads", "environment", "integer", true)
  if n and n < 1 then self:fail("environment.threads", "%d, a thread count is at least 1", n) end
  for _, k in ipairs({ "driver_version", "cuda_version" }) do
    if not json.is_null(e[k]) then self:get(e, k, "environment", "string") end
  end
end

function V:privacy(r, ok)
  local p = r.privacy
  if p == nil then
    if ok then self:fail("privacy", "missing (object or null expected)") end
    return
  end
  if json.is_null(p) then
    if ok and r.method and r.method ~= "vanilla" then self:fail("privacy", "null for the DP method '%s'", r.method) end
    return
  end
  if not self:get(r, "privacy", "", "table") then return end
  for _, k in ipairs({ "noise_multiplier", "sample_rate", "delta" }) do
    self:nonneg(self:get(p, k, "privacy", "number"), "privacy." .. k)
  end
  if not json.is_null(p.epsilon) then self:nonneg(self:get(p, "epsilon", "privacy", "number"), "privacy.epsilon") end
  self:nonneg(self:get(p, "steps", "privacy", "integer"), "privacy.steps")
end

function V:oom(r)
  local o = self:get(r, "oom", "", "table", r.status ~= "oom")
  if not o then return end
  self:nonneg(self:get(o, "requested_bytes", "oom", "integer"), "oom.requested_bytes")
  self:get(o, "category", "oom", "string")
  self:get(o, "module", "oom", "string")
  self:category_bytes(self:get(o, "live_bytes", "oom", "table"), "oom.live_bytes")
end

function V:sweep(r)
  local s = self:get(r, "sweep", "", "table", true)
  if not s then return end
  self:get(s, "name", "sweep", "string")
  self:get(s, "config", "sweep", "table", true)
  local h = self:get(s, "config_hash", "sweep", "string", true)
  if h and not h:match("^fnv1a64:%x+$") then self:fail("sweep.config_hash", "'%s' is not fnv1a64:<hex>", h) end
  local vary = self:get(s, "vary", "sweep", "table")
  for k, v in pairs(vary or {}) do
    local t = type(v)
    if t ~= "number" and t ~= "string" and t ~= "boolean" then
      self:fail("sweep.vary." .. tostring(k), "number, string or boolean expected, got %s", type_name(v))
    end
  end
end

-- Checks every documented field of r (docs/results.md). An ok result must have them all; a
-- failed one must have status, message (and oom for status "oom"), and whatever else it carries
-- must be right. Returns true, or false and the list of problems (one line each, naming the field).
function results.validate(r)
  local v = new_validator()
  if type(r) ~= "table" then return false, { "(top): table expected, got " .. type_name(r) } end
  local sv = v:get(r, "schema_version", "", "integer")
  if sv and sv ~= results.SCHEMA_VERSION then v:fail("schema_version", "%d, this dpprof reads %d", sv, results.SCHEMA_VERSION) end
  local status = v:get(r, "status", "", "string")
  v:one_of(status, results.STATUSES, "status")
  local ok = status == "ok"
  v:get(r, "experiment", "", "string")
  v:get(r, "message", "", "string", ok)
  v:config(v:get(r, "config", "", "table", not ok))
  v:get(r, "method", "", "string", not ok)
  for _, k in ipairs({ "norms", "clip" }) do
    if r[k] ~= nil and not json.is_null(r[k]) then v:get(r, k, "", "string") end
    if ok and r[k] == nil then v:fail(k, "missing (string or null expected)") end
  end
  v:get(r, "predicted", "", "boolean", not ok)
  v:snapshots(v:array(r, "snapshots", "", not ok))
  v:memory(r, ok)
  v:breakdown(r, ok)
  v:timing(r, ok)
  v:predicted(r, ok)
  v:ledger(r, ok)
  v:layers(r, ok)
  v:environment(r, ok)
  v:privacy(r, ok)
  v:oom(r)
  v:sweep(r)
  if #v.problems > 0 then return false, v.problems end
  return true
end

---------------------------------------------------------------------------------------------
-- Files

-- Reads and decodes a JSON file; raises an error naming the file. Only a regular file of at most
-- 256 MiB is read (dpprof.read_file: a FIFO or device planted under a .json name is refused).
function results.read(path)
  local text, err = dp.read_file(path)
  if not text then error(err, 2) end
  local ok, value = pcall(json.decode, text, path)
  if not ok then error(dp.error_text(value), 2) end -- the file and the place in it, not our line
  return value
end

-- The JSON text of a result: indented, keys sorted, and numbers JSON cannot hold (NaN and the
-- infinities a script put in ctx.extra, a vary value or its configuration) written as the strings
-- "NaN", "Infinity" and "-Infinity", so the record is never lost (docs/results.md).
function results.encode(value)
  return json.encode(value, { indent = true, nonfinite = "string" })
end

-- The hash a sweep records of a point's resolved configuration (sweep.config_hash), to resume only
-- what was run with the same one: "fnv1a64:" and 16 hex digits of the FNV-1a 64-bit hash of the
-- canonical JSON text of config (compact, keys sorted, non-finite numbers as strings).
function results.config_hash(config)
  local text = json.encode(config, { nonfinite = "string" })
  local h = 0xcbf29ce484222325 -- FNV-1a offset basis; Lua integers wrap like uint64
  for i = 1, #text do h = (h ~ text:byte(i)) * 0x100000001b3 end
  return string.format("fnv1a64:%016x", h)
end

-- Writes value as JSON (results.encode) to path through a unique temporary file and a rename, so
-- the file is either absent or complete; never through a link planted at path, never over a
-- device, FIFO or directory (dpprof.write_file). Raises an error naming the file.
function results.write(path, value)
  local ok, err = dp.write_file(path, results.encode(value))
  if not ok then error(err, 2) end
  return path
end

return results
