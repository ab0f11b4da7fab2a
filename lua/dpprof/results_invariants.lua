-- dpprof.results_invariants: what ties a result's fields together (a total equal to its parts, a
-- peak at least every phase's, phases within the step, ...), each run by dpprof.results_validate after
-- the top-level field it is named by. `after[key](v, r)` reports through v:fail; `methods` are the
-- validator's own checks the invariants share (the validator takes them as its methods).
local dp = require("dpprof")
local json = dp.json
-- an ok result's configuration is checked as a script's (dpprof.config, which needs nothing of this)
local config = require("dpprof.config")
local base = require("dpprof.results_base")

local type_name, is_array, int, num, tbl = base.type_name, base.is_array, base.int, base.num, base.tbl
local mb = base.mb

local methods = {}

-- Derived figures must agree with their source; a writer may round MiB and ms to 3 decimals.
function methods:near(got, want, path, what)
  if type(got) ~= "number" or type(want) ~= "number" then return end -- a wrong type is reported by check
  if math.abs(got - want) > math.max(1e-9 * math.abs(want), 0.00051) then
    self:fail(path, "%.9g differs from %s (%.9g)", got, what, want)
  end
end

-- The invariants, run after the top-level field they are named by.
local INVARIANTS = {}

function INVARIANTS.schema_version(self, r)
  local sv = int(r.schema_version)
  if sv and sv ~= base.SCHEMA_VERSION then self:fail("schema_version", "%d, this dpprof reads %d", sv, base.SCHEMA_VERSION) end
end

-- A thread count (config.threads, environment.threads, sweep.placement.threads) is at least 1.
local function thread_count(self, n, path)
  if int(n) and n < 1 then self:fail(path, "%d, a thread count is at least 1", n) end
end

function INVARIANTS.config(self, r)
  local c = tbl(r.config)
  if c and json.is_null(c.dp) and c.method ~= "vanilla" then self:fail("config.dp", "object expected, got null") end
  local ck = c and tbl(c.model) and c.model.checkpoint
  local ck_ok, ck_why = dp.model.checkpoint_parse(ck) -- the engine's grammar of the setting
  if not ck_ok then self:fail("config.model.checkpoint", "%s", ck_why) end
  thread_count(self, c and c.threads, "config.threads")
  -- what a run would have refused (method "x", layers 0, ...) is no result to compare: the
  -- configuration of an ok result is checked as dp.experiment checks its own (once its fields
  -- have the schema's types: one line per problem)
  local typed = true
  for _, p in ipairs(self.problems) do typed = typed and not p:find("^config[.:]") end
  if c and self.ok and typed then
    local ok, err = pcall(config.check_recorded, c)
    if not ok then
      self:fail("config", "%s", (dp.error_text(err):gsub("^dpprof%.experiment: ", "")))
    end
  end
end

function INVARIANTS.environment(self, r)
  thread_count(self, tbl(r.environment) and r.environment.threads, "environment.threads")
end

-- The most the pool held over the run: the timed iterations' reserved peak, or the timeline's
-- highest point (it spans the warm-up too, before the peaks' reset); nil when neither is there.
local function run_reserved_peak(r)
  local m = tbl(r.memory)
  if not m then return nil end
  local top = int(m.reserved_peak_bytes)
  local tl = tbl(m.timeline) and is_array(m.timeline.reserved_bytes) and m.timeline.reserved_bytes or {}
  for _, v in ipairs(tl) do
    if int(v) and (top == nil or v > top) then top = v end
  end
  return top
end

-- Each snapshot's allocated_mb is the sum of its categories; its reserved_mb (MiB, like
-- allocated_mb) is at least allocated_mb and at most the run's reserved peak.
function INVARIANTS.snapshots(self, r)
  local list = is_array(r.snapshots) and r.snapshots or {}
  local rpeak = run_reserved_peak(r)
  for i, s in ipairs(list) do
    local p = "snapshots[" .. i .. "]"
    local cats = tbl(s) and tbl(s.categories)
    if cats and type(s.allocated_mb) == "number" then
      local sum = 0
      for _, c in ipairs(base.CATEGORIES) do sum = sum + (int(cats[c]) or 0) end
      self:near(s.allocated_mb, mb(sum), p .. ".allocated_mb", "the sum of its categories")
    end
    local alloc, res = tbl(s) and num(s.allocated_mb), tbl(s) and num(s.reserved_mb)
    if alloc and res and res < alloc - 0.00051 then
      self:fail(p .. ".reserved_mb", "%.9g below allocated_mb %.9g", res, alloc)
    end
    if res and rpeak and res > mb(rpeak) + 0.00051 then
      self:fail(p .. ".reserved_mb", "%.9g above the run's reserved peak (%.9g MiB): reserved_mb is in MiB", res,
        mb(rpeak))
    end
    local prev = list[i - 1]
    if i > 1 and tbl(s) and tbl(prev) and num(s.timestamp) and num(prev.timestamp) and s.timestamp < prev.timestamp then
      self:fail(p .. ".timestamp", "earlier than the snapshot before it")
    end
  end
end

-- The objects of list (at path) come largest key first.
function methods:largest_first(list, key, path, what)
  list = is_array(list) and list or {}
  for i = 2, #list do
    local a, b = tbl(list[i - 1]), tbl(list[i])
    if a and b and num(a[key]) and num(b[key]) and b[key] > a[key] then
      self:fail(path .. "[" .. i .. "]", "%s are not sorted by %s, largest first", what, key)
    end
  end
end

-- Each phase's live bytes add up to its peak and its end, which lie within the run's peak.
function methods:phase_memory(m, peak)
  local phases = tbl(m.phases) or {}
  for _, name in ipairs(base.PHASES) do
    local p, path = tbl(phases[name]), "memory.phases." .. name
    if p then
      for _, at in ipairs({ { "live_at_peak", "peak_bytes" }, { "live_at_end", "end_bytes" } }) do
        local cats, total = tbl(p[at[1]]), int(p[at[2]])
        if cats and total then
          local sum = 0
          for _, c in ipairs(base.CATEGORIES) do sum = sum + (int(cats[c]) or 0) end
          if sum ~= total then self:fail(path .. "." .. at[1], "sums to %d, not %s %d", sum, at[2], total) end
        end
      end
      local pk, last = int(p.peak_bytes), int(p.end_bytes)
      if pk and last and last > pk then self:fail(path .. ".end_bytes", "above the phase's peak_bytes") end
      if pk and peak and pk > peak then self:fail(path .. ".peak_bytes", "above memory.peak_bytes") end
    end
  end
end

function INVARIANTS.memory(self, r)
  local m = tbl(r.memory)
  if not m then return end
  local peak, rpeak, end_bytes = int(m.peak_bytes), int(m.reserved_peak_bytes), int(m.end_bytes)
  if peak and rpeak and rpeak < peak then self:fail("memory.reserved_peak_bytes", "below peak_bytes") end
  if peak and end_bytes and end_bytes > peak then self:fail("memory.end_bytes", "above peak_bytes") end
  local cats = tbl(m.categories)
  if cats then
    local live_sum = 0
    for _, c in ipairs(base.CATEGORIES) do
      local p, e = "memory.categories." .. c, tbl(cats[c]) or {}
      local cur, pk, lap = int(e.current_bytes), int(e.peak_bytes), int(e.live_at_peak_bytes)
      if pk and lap and lap > pk then self:fail(p .. ".live_at_peak_bytes", "above the category's peak") end
      if pk and cur and cur > pk then self:fail(p .. ".current_bytes", "above the category's peak") end
      if pk and peak and pk > peak then self:fail(p .. ".peak_bytes", "above memory.peak_bytes") end
      live_sum = live_sum + (lap or 0)
    end
    if peak and live_sum ~= peak then
      self:fail("memory.categories", "live_at_peak_bytes sum to %d, not peak_bytes %d", live_sum, peak)
    end
  end
  self:phase_memory(m, peak)
  if m.host_peak_rss_bytes ~= nil and m.host_peak_rss_since == nil then
    self:fail("memory.host_peak_rss_since", "missing (string expected with host_peak_rss_bytes)")
  end
  self:largest_first(m.modules, "live_at_peak_bytes", "memory.modules", "modules")
  local tl, n = tbl(m.timeline) or {}, nil
  for _, k in ipairs({ "t_ms", "allocated_bytes", "reserved_bytes" }) do
    local a = is_array(tl[k]) and tl[k]
    if a then
      if n and #a ~= n then self:fail("memory.timeline." .. k, "has %d points, t_ms has %d", #a, n) end
      n = n or #a
      if #a > base.TIMELINE_POINTS then
        self:fail("memory.timeline." .. k, "has %d points (at most %d)", #a, base.TIMELINE_POINTS)
      end
    end
  end
  local ta, tr = is_array(tl.allocated_bytes) and tl.allocated_bytes, is_array(tl.reserved_bytes) and tl.reserved_bytes
  for i = 1, (ta and tr) and math.min(#ta, #tr) or 0 do
    if int(ta[i]) and int(tr[i]) and tr[i] < ta[i] then
      self:fail("memory.timeline.reserved_bytes[" .. i .. "]", "%d below allocated_bytes %d", tr[i], ta[i])
      break
    end
  end
end

function INVARIANTS.peak_memory_mb(self, r)
  local peak = tbl(r.memory) and int(r.memory.peak_bytes)
  if peak then self:near(r.peak_memory_mb, mb(peak), "peak_memory_mb", "memory.peak_bytes in MiB") end
end

function INVARIANTS.breakdown(self, r)
  local b = tbl(r.breakdown)
  if not b then return end
  self:near(b.peak_allocated_mb, r.peak_memory_mb, "breakdown.peak_allocated_mb", "peak_memory_mb")
  local m = tbl(r.memory)
  if m and tbl(m.categories) then
    for _, key in ipairs(base.LEGACY_BREAKDOWN_KEYS) do
      local sum = 0
      for _, c in ipairs(base.LEGACY_BREAKDOWN[key]) do
        local e = m.categories[c]
        sum = sum + (type(e) == "table" and type(e.live_at_peak_bytes) == "number" and e.live_at_peak_bytes or 0)
      end
      self:near(b[key], mb(sum), "breakdown." .. key, "memory.categories live at the peak")
    end
    if int(m.end_bytes) then self:near(b.total_allocated_mb, mb(m.end_bytes), "breakdown.total_allocated_mb", "memory.end_bytes") end
  end
end

-- The statistics over iter_ms and avg_time_ms: required and agreeing whenever iterations ran.
function INVARIANTS.timing(self, r)
  local t = tbl(r.timing)
  if not t then return end
  local iters = is_array(t.iter_ms) and t.iter_ms
  if iters then
    local numbers = true
    for _, v in ipairs(iters) do numbers = numbers and num(v) ~= nil and v >= 0 end
    local want = numbers and base.time_stats(iters) or nil
    if self.ok and numbers and not want then self:fail("timing.iter_ms", "empty in an ok result") end
    if want then
      for _, k in ipairs({ "avg_ms", "median_ms", "min_ms", "max_ms" }) do
        if t[k] == nil then self:fail("timing." .. k, "missing (number expected)") end
        self:near(t[k], want[k], "timing." .. k, "the value over iter_ms")
      end
      if r.avg_time_ms == nil then self:fail("avg_time_ms", "missing (number expected)") end
      self:near(r.avg_time_ms, want.avg_ms, "avg_time_ms", "timing.avg_ms")
    end
    if tbl(r.config) and int(r.config.iters) and self.ok and #iters ~= r.config.iters then
      self:fail("timing.iter_ms", "has %d entries, config.iters is %d", #iters, r.config.iters)
    end
  end
  local spans = is_array(t.spans) and t.spans or {}
  for i, s in ipairs(spans) do
    if tbl(s) and num(s.start_ms) and num(s.end_ms) and s.end_ms < s.start_ms then
      self:fail("timing.spans[" .. i .. "]", "ends before it starts")
    end
  end
  self:phases_within_step(t, iters, spans)
end

-- The phases make up the step: timing.phases_ms (all of them) adds up to avg_ms; each timed iteration's phase
-- spans (recompute's aside: they lie inside the backward or clip span of their iteration, whose
-- time they are taken out of) add up to its iter_ms.
function methods:phases_within_step(t, iters, spans)
  local ph = tbl(t.phases_ms)
  if ph and num(t.avg_ms) then
    local sum, all = 0, true -- with every phase there (older results lack recompute)
    for _, name in ipairs(base.PHASES) do
      all = all and num(ph[name]) ~= nil
      sum = sum + (num(ph[name]) or 0)
    end
    if all then self:near(sum, t.avg_ms, "timing.phases_ms", "timing.avg_ms (their sum)") end
  end
  if not iters then return end
  local per_iter, count, outer = {}, {}, {}
  for _, s in ipairs(spans) do
    local it = tbl(s) and int(s.iter)
    if it and it >= 1 and it <= #iters and num(s.start_ms) and num(s.end_ms) and s.phase ~= "recompute" then
      per_iter[it], count[it] = (per_iter[it] or 0) + (s.end_ms - s.start_ms), (count[it] or 0) + 1
      if s.phase == "backward" or s.phase == "clip" then -- by iteration: a recompute looks in its own
        outer[it] = outer[it] or {}
        table.insert(outer[it], s)
      end
    end
  end
  for it, ms in pairs(per_iter) do -- files written with 3 decimals round each end: 0.0005 ms apiece
    local want = num(iters[it])
    if want and math.abs(ms - want) > math.max(1e-9 * want, 0.00051 * (2 * count[it] + 1)) then
      self:fail("timing.spans", "iteration %d's phase spans sum to %.9g ms, not its iter_ms %.9g", it, ms, want)
    end
  end
  for i, s in ipairs(spans) do
    local it = tbl(s) and s.phase == "recompute" and int(s.iter)
    if it and it >= 1 and it <= #iters and num(s.start_ms) and num(s.end_ms) then
      local inside = false
      for _, o in ipairs(outer[it] or {}) do
        inside = inside or (s.start_ms >= o.start_ms - 1e-6 and s.end_ms <= o.end_ms + 1e-6)
      end
      if not inside then self:fail("timing.spans[" .. i .. "]", "a recompute span outside its iteration's backward and clip") end
    end
  end
end

-- A plan run's estimate and budget view (docs/base.md, "Predicted results").
function INVARIANTS.plan(self, r)
  if not self.predicted then
    if r.plan ~= nil then self:fail("plan", "present in a result that is not predicted") end
    return
  end
  local e = tbl(r.timing) and tbl(r.timing.estimate)
  if e then
    if type(e.method) == "string" and not e.method:find("^roofline") and not e.method:find("^calibrated") then
      self:fail("timing.estimate.method", "'%s' is neither a roofline nor a calibrated estimate", e.method)
    end
    for _, k in ipairs({ "peak_flops", "bandwidth" }) do
      if num(e[k]) and e[k] <= 0 then self:fail("timing.estimate." .. k, "not positive") end
    end
  end
  local b = tbl(r.plan)
  if not b then return end
  local mem, ctx, pk, budget, reserved, head = int(b.memory_bytes), int(b.context_bytes), int(b.peak_bytes),
    int(b.budget_bytes), int(b.predicted_reserved_bytes), int(b.headroom_bytes)
  if mem and ctx and budget and budget ~= mem - ctx then self:fail("plan.budget_bytes", "is not memory_bytes - context_bytes") end
  if budget and reserved and head then
    if head ~= budget - reserved then self:fail("plan.headroom_bytes", "is not budget_bytes - predicted_reserved_bytes") end
    if type(b.fits) == "boolean" and b.fits ~= (head >= 0) then self:fail("plan.fits", "disagrees with headroom_bytes") end
  end
  if pk and reserved and reserved < pk then self:fail("plan.predicted_reserved_bytes", "below plan.peak_bytes") end
  local m = tbl(r.memory)
  if m and pk and int(m.peak_bytes) and int(m.warmup_peak_bytes) and pk ~= math.max(m.peak_bytes, m.warmup_peak_bytes) then
    self:fail("plan.peak_bytes", "is not the larger of memory.peak_bytes and memory.warmup_peak_bytes")
  end
end

-- Null only for vanilla; the accountant's parameters with the accountant; the caveat with fixed
-- batches and only then.
function INVARIANTS.privacy(self, r)
  local p = r.privacy
  if json.is_null(p) then
    if self.ok and r.method and r.method ~= "vanilla" then self:fail("privacy", "null for the DP method '%s'", r.method) end
    return
  end
  if not tbl(p) then return end
  if type(p.accountant) == "string" and p.accountant_params == nil then
    self:fail("privacy.accountant_params", "missing (object expected)")
  end
  if p.sampling == "fixed" and p.caveat == nil then self:fail("privacy.caveat", "missing (string expected)") end
  if type(p.caveat) == "string" and p.sampling ~= "fixed" then
    self:fail("privacy.caveat", "only for fixed batches (sampling is %s)", tostring(p.sampling))
  end
end

function INVARIANTS.sweep(self, r)
  local h = tbl(r.sweep) and r.sweep.config_hash
  if type(h) == "string" and not h:match("^fnv1a64:%x+$") then
    self:fail("sweep.config_hash", "'%s' is not fnv1a64:<hex>", h)
  end
  local pl = tbl(r.sweep) and tbl(r.sweep.placement)
  for _, k in ipairs({ "slot", "slots" }) do
    local n = pl and int(pl[k])
    if n and n < 1 then self:fail("sweep.placement." .. k, "%d, >= 1 expected", n) end
  end
  thread_count(self, pl and pl.threads, "sweep.placement.threads")
end

-- The per-op profile (docs/base.md, "Per-op profile"): a mode that profiled, positive peaks
-- (or why there are none), op time within its phase's, ops largest time first.
function INVARIANTS.profile(self, r)
  local p = tbl(r.profile)
  if not p then return end
  if p.mode == "none" then self:fail("profile.mode", "'none' in a result that carries a profile") end
  if int(p.iters) and p.iters < 1 then self:fail("profile.iters", "%d, >= 1 expected", p.iters) end
  local pk = tbl(p.peak)
  if pk and not json.is_null(pk) then
    for _, k in ipairs({ "flops", "bandwidth" }) do
      if num(pk[k]) and pk[k] <= 0 then self:fail("profile.peak." .. k, "not positive") end
    end
  elseif json.is_null(p.peak) and p.peak_error == nil then
    self:fail("profile.peak_error", "missing (string expected: why profile.peak is null)")
  end
  for _, name in ipairs(base.PHASES) do
    local ph = tbl(p.phases) and tbl(p.phases[name])
    -- a device-timed call (events) may end after the host's phase clock saw it end, by a rounding
    if ph and num(ph.ms) and num(ph.ops_ms) and ph.ops_ms > ph.ms * 1.001 + 1e-3 then
      self:fail("profile.phases." .. name .. ".ops_ms", "above the phase's time (%.6g > %.6g ms)", ph.ops_ms, ph.ms)
    end
  end
  self:largest_first(p.ops, "ms", "profile.ops", "ops")
end

-- Repeated runs (docs/base.md, "Repeats"): as many runs as n, and the spread over the ok ones.
function INVARIANTS.repeats(self, r)
  local rep = tbl(r.repeats)
  if not rep then return end
  local n, runs = int(rep.n), is_array(rep.runs) and rep.runs or nil
  if n and n < 1 then self:fail("repeats.n", "%d, >= 1 expected", n) end
  if n and runs and #runs ~= n then self:fail("repeats.runs", "has %d runs, repeats.n is %d", #runs, n) end
  local times = {}
  for _, run in ipairs(runs or {}) do
    if tbl(run) and run.status == "ok" and num(run.avg_ms) then times[#times + 1] = run.avg_ms end
  end
  local want = base.time_stats(times)
  local a = tbl(rep.avg_ms)
  if want and rep.avg_ms == nil then self:fail("repeats.avg_ms", "missing (object expected: the ok runs' spread)") end
  if want and a then
    self:near(a.median, want.median_ms, "repeats.avg_ms.median", "the runs' median")
    self:near(a.min, want.min_ms, "repeats.avg_ms.min", "the runs' minimum")
    self:near(a.max, want.max_ms, "repeats.avg_ms.max", "the runs' maximum")
  end
  local pk = tbl(rep.peak_bytes)
  if pk and int(pk.min) and int(pk.max) and pk.min > pk.max then self:fail("repeats.peak_bytes.min", "above max") end
end

return { after = INVARIANTS, methods = methods }
