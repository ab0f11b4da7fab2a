-- dpprof.results: the results JSON of docs/results.md (schema_version 1): assembling a result from
-- what an experiment measured, validating every documented field, and reading and writing files
-- (atomically: a reader never sees half a file).
local dp = require("dpprof")
local json = dp.json
-- an ok result's configuration is checked as a script's (dpprof.config, which needs nothing of this)
local config = require("dpprof.config")

local results = {}

-- The schema (common/results_schema.h, the one description the chart reader uses too): its
-- version, statuses and phases; the categories are the engine's.
results.SCHEMA_VERSION = dp.results_schema.version
results.MiB = 1024 * 1024
results.TIMELINE_POINTS = 4096
-- A run was taken on a loaded machine when other processes kept at least this share of the host's
-- CPUs busy while it ran (environment.host_load.others_share): its measured times are then not
-- what the machine gives one run.
results.LOADED_SHARE = 0.25

-- environment.host_load from two dpprof.host_load() readings, the run's start and end (nil when
-- the host gives neither /proc/stat nor the process's CPU time): the load averages at both, the
-- run's wall and CPU seconds, the share of the host's CPUs other processes kept busy meanwhile
-- (busy CPU time less the run's own, over wall time x cores; 0..1) and whether that is loaded.
function results.host_load(a, b)
  if not (a and b and a.busy_s and b.busy_s and a.cpu_s and b.cpu_s and a.wall_s and b.wall_s) then return nil end
  local wall, cpu = math.max(0, b.wall_s - a.wall_s), math.max(0, b.cpu_s - a.cpu_s)
  local cores = math.max(1, b.cores or 1)
  local others = wall > 0 and (b.busy_s - a.busy_s - cpu) / (wall * cores) or 0
  others = math.min(1, math.max(0, others))
  local h = { wall_s = wall, cpu_s = cpu, cores = cores, others_share = others, loaded = others >= results.LOADED_SHARE }
  if a.loadavg then h.loadavg_start = dp.json.array(a.loadavg) end
  if b.loadavg then h.loadavg_end = dp.json.array(b.loadavg) end
  return h
end

-- "NEW was taken on a loaded machine: other processes kept 63% of its 2 CPUs busy (load average
-- 1.90 -> 2.41)", or nil when the result does not say it was.
function results.load_note(r, who)
  local h = type(r.environment) == "table" and r.environment.host_load
  if type(h) ~= "table" or h.loaded ~= true then return nil end
  local la = ""
  if type(h.loadavg_start) == "table" and type(h.loadavg_end) == "table" and h.loadavg_start[1] and h.loadavg_end[1] then
    la = string.format(" (load average %.2f -> %.2f)", h.loadavg_start[1], h.loadavg_end[1])
  end
  return string.format("%s was taken on a loaded machine: other processes kept %.0f%% of its %d CPU%s busy while it "
                       .. "ran%s; its times are not what the machine gives one run", who, 100 * h.others_share,
                       h.cores, h.cores == 1 and "" or "s", la)
end
results.STATUSES = dp.results_schema.choices.statuses
results.PHASES = dp.results_schema.choices.phases
-- Phases a result may lack (absent: 0 ms), as a set: "recompute" (activation checkpointing, issue
-- 16) is absent from results written before it existed.
results.OPTIONAL_PHASES = {}
for _, p in ipairs(dp.results_schema.choices.optional_phases) do results.OPTIONAL_PHASES[p] = true end
-- The categories a per-op profile groups ops by, and since when a host peak RSS counts.
results.OP_CATEGORIES = dp.results_schema.choices.op_categories
results.HOST_RSS_SINCE = dp.results_schema.choices.rss_since
results.CATEGORIES = dp.memory.categories
-- Per-layer formulations of the norms pass: the engine's list (dpprof.dpsgd.FORMULATIONS).
results.NORMS_KINDS = dp.dpsgd.FORMULATIONS

-- The legacy breakdown: each field is the sum of these categories live at the peak, in the
-- engine's order (common/memory_categories.h, through dpprof.memory.CATEGORIES: each category's
-- legacy field, nil for none).
results.LEGACY_BREAKDOWN = {}
for _, c in ipairs(dp.memory.CATEGORIES) do
  if c.legacy then
    local list = results.LEGACY_BREAKDOWN[c.legacy] or {}
    list[#list + 1] = c.name
    results.LEGACY_BREAKDOWN[c.legacy] = list
  end
end
results.LEGACY_BREAKDOWN_KEYS = {} -- its keys, sorted
for k in pairs(results.LEGACY_BREAKDOWN) do results.LEGACY_BREAKDOWN_KEYS[#results.LEGACY_BREAKDOWN_KEYS + 1] = k end
table.sort(results.LEGACY_BREAKDOWN_KEYS)

-- What dpprof says next to epsilon when an experiment took fixed (shuffled) batches: the accountants
-- assume Poisson sampling, and for shuffled batches that understates epsilon (Chua et al., ICML 2024).
results.FIXED_BATCH_CAVEAT = "fixed (shuffled) batches accounted as Poisson sampling: epsilon understates "
                             .. "the privacy loss (Chua et al., ICML 2024)"

-- One line on a result's privacy for the CLI: "epsilon 1.838 at delta 1e-05 (prv)", with
-- "; fixed batches: understated" after the accountant when the batches were fixed; nil without
-- privacy. Results from before accountants were named carry no accountant: RDP.
function results.epsilon_text(p)
  if type(p) ~= "table" or json.is_null(p) then return nil end
  local eps = type(p.epsilon) == "number" and string.format("%.4g", p.epsilon)
              or (p.epsilon_error and "unknown" or "infinite")
  return string.format("epsilon %s at delta %g (%s%s)", eps, tonumber(p.delta) or 0, tostring(p.accountant or "rdp"),
                       p.sampling == "fixed" and "; fixed batches: understated" or "")
end

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
               timestamp = s.timestamp, categories = category_map(s.categories), custom = s.custom or nil }
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

-- memory.phases (each phase's peak and end in the timed iterations, by category) and the host's
-- peak resident memory.
local function memory_phase_fields(out, m)
  if m.phases and next(m.phases) then
    local phases = {}
    for name, p in pairs(m.phases) do
      phases[name] = { peak_bytes = p.peak_bytes, live_at_peak = category_map(p.live_at_peak),
                       end_bytes = p.end_bytes, live_at_end = category_map(p.live_at_end) }
    end
    out.phases = phases
  end
  if math.type(m.host_peak_rss_bytes) then
    out.host_peak_rss_bytes = m.host_peak_rss_bytes
    out.host_peak_rss_since = m.host_peak_rss_since
  end
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
  if math.type(m.held_before_bytes) then r.memory.held_before_bytes = m.held_before_bytes end
  memory_phase_fields(r.memory, m)
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
--    profile (profile="ops": dpprof.ops.finish's object),
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
  r.profile = a.profile
  if a.ledger then
    r.ledger = array()
    for i, e in ipairs(a.ledger) do r.ledger[i] = { op = e.op, calls = e.calls, flops = e.flops, bytes = e.bytes } end
  end
  if a.layers then
    r.layers = array()
    for i, l in ipairs(a.layers) do r.layers[i] = { module = l.module, kind = l.kind, norms = l.norms } end
  end
  if a.method then r.privacy = null_if_nil(a.privacy) end
  if a.steps then -- each timed step: its logical batch, physical batches and peak
    r.steps = array()
    for i, st in ipairs(a.steps) do r.steps[i] = st end
  end
  r.data = a.data
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
-- Validation: the schema's fields (common/results_schema.h, as dpprof.results_schema), walked in
-- its order, each present one checked for its type, sign and choices and each required one for
-- its presence; then, after each top-level field, the invariants that tie fields together.

-- The schema as a tree: node = {field=, key=, order={children in order}, children={[key]=node}}.
local function schema_tree(fields)
  local root, by_path = { order = {}, children = {} }, {}
  by_path[""] = root
  for _, f in ipairs(fields) do
    local parent, key = f.path:match("^(.*)(%[%])$")
    if not parent then
      parent, key = f.path:match("^(.*)%.([^.]+)$")
      if not parent then parent, key = "", f.path end
    end
    local p = by_path[parent]
    if not p then error("results schema: " .. f.path .. " comes before its parent " .. parent) end
    local node = { field = f, key = key, order = {}, children = {} }
    p.order[#p.order + 1], p.children[key], by_path[f.path] = node, node, node
  end
  return root, by_path
end

results.SCHEMA = { tree = nil, by_path = nil }
results.SCHEMA.tree, results.SCHEMA.by_path = schema_tree(dp.results_schema.fields)

-- The value lists a field's `choices` names: the schema's own and the engine's.
local CHOICES = {
  statuses = results.STATUSES, phases = results.PHASES, samplings = dp.results_schema.choices.samplings,
  bounds = dp.results_schema.choices.bounds, profiles = dp.results_schema.choices.profiles,
  op_categories = dp.results_schema.choices.op_categories, rss_since = dp.results_schema.choices.rss_since,
  formulations = dp.dpsgd.FORMULATIONS, accountants = dp.privacy.accountants,
  flash_impls = dp.dpsgd.FLASH_IMPLS,
}
-- The key sets of the placeholders: {category} and {phase} (every one required but the optional
-- phases).
local KEYS = { ["{category}"] = results.CATEGORIES, ["{phase}"] = results.PHASES }
local OPTIONAL_KEYS = { ["{phase}"] = results.OPTIONAL_PHASES }

-- The top-level keys whose presence marks a JSON document as meant to be a result.
results.MARK_KEYS = {}
for _, f in ipairs(dp.results_schema.fields) do
  if f.marks then results.MARK_KEYS[#results.MARK_KEYS + 1] = f.path end
end

local V = {}
V.__index = V

-- A task that Slurm stopped for its memory (OUT_OF_MEMORY) has no allocation to describe: its
-- result is an oom without the `oom` record.
local function slurm_oom(r)
  local sw = type(r) == "table" and r.sweep
  local pl = type(sw) == "table" and sw.placement
  local sl = type(pl) == "table" and pl.slurm
  return type(sl) == "table" and sl.state == "OUT_OF_MEMORY"
end

local function new_validator(r)
  local status = type(r) == "table" and r.status or nil
  return setmetatable({ problems = {}, said = {}, ok = status == "ok", oom = status == "oom" and not slurm_oom(r),
                        predicted = type(r) == "table" and r.predicted == true }, V)
end

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

local function is_array(v) return type(v) == "table" and (next(v) == nil or #v > 0) end
local function int(v) return math.type(v) == "integer" and v or nil end
local function num(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge and v or nil end
local function tbl(v) return type(v) == "table" and v or nil end
local function member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local KIND = { scalar = "number, string or boolean" }
local function kind_text(f)
  local k = KIND[f.type] or f.type
  return f.nullable and k .. " or null" or k
end

local TYPE_OK = {
  string = function(v) return type(v) == "string" end,
  integer = function(v) return math.type(v) == "integer" end,
  number = function(v) return type(v) == "number" end,
  boolean = function(v) return type(v) == "boolean" end,
  object = function(v) return type(v) == "table" and not json.is_null(v) end,
  array = function(v) return type(v) == "table" and not json.is_null(v) end,
  scalar = function(v) local t = type(v) return t == "number" or t == "string" or t == "boolean" end,
  any = function() return true end,
}

function V:required(f)
  local w = f.when
  if w == "always" or w == "parent" then return true end
  if w == "ok" then return self.ok end
  if w == "failed" then return not self.ok end
  if w == "oom" then return self.oom end
  if w == "predicted" then return self.ok and self.predicted end
  return false
end

local function join(path, key) return path == "" and key or path .. "." .. key end

-- The keys of t as strings, sorted (so problems come in the same order every time).
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- Checks value v of node at path; returns false when v has the wrong type or value.
function V:check(node, v, path)
  local f = node.field
  if v == nil then
    if self:required(f) then self:fail(path, "missing (%s expected)", kind_text(f)) end
    return true
  end
  if f.nullable and json.is_null(v) then return true end
  if not TYPE_OK[f.type](v) then
    self:fail(path, "%s expected, got %s", kind_text(f), type_name(v))
    return false
  end
  if type(v) == "number" then
    if not dp.is_finite(v) then
      self:fail(path, "not a finite number")
      return false
    end
    if f.nonneg and v < 0 then
      self:fail(path, "negative (%s)", tostring(v))
      return false
    end
  end
  if f.choices and not member(CHOICES[f.choices], v) then
    self:fail(path, "'%s' (valid: %s)", tostring(v), table.concat(CHOICES[f.choices], ", "))
    return false
  end
  if f.type == "array" then
    if not is_array(v) then
      self:fail(path, "array expected, got an object")
      return false
    end
    local item = node.children["[]"]
    for i, x in ipairs(item and v or {}) do
      -- of an array of numbers, only the first wrong one is reported
      if not self:check(item, x, path .. "[" .. i .. "]") and item.field.type ~= "object" then break end
    end
  elseif f.type == "object" then
    self:children(node, v, path)
  end
  return true
end

-- Checks the described children of object t (node's) at path.
function V:children(node, t, path)
  for _, child in ipairs(node.order) do
    local key = child.key
    local names = KEYS[key]
    if names then
      local optional = OPTIONAL_KEYS[key] or {}
      for _, k in ipairs(names) do
        if not (optional[k] and t[k] == nil) then self:check(child, t[k], join(path, k)) end
      end
      for _, k in ipairs(sorted_keys(t)) do
        if not member(names, k) then
          self:fail(join(path, k), "unknown %s (valid: %s)", key:sub(2, -2), table.concat(names, ", "))
        end
      end
    elseif key == "*" then
      for _, k in ipairs(sorted_keys(t)) do self:check(child, t[k], join(path, k)) end
    else
      self:check(child, t[key], join(path, key))
    end
  end
end

-- Derived figures must agree with their source; a writer may round MiB and ms to 3 decimals.
function V:near(got, want, path, what)
  if type(got) ~= "number" or type(want) ~= "number" then return end -- a wrong type is reported by check
  if math.abs(got - want) > math.max(1e-9 * math.abs(want), 0.00051) then
    self:fail(path, "%.9g differs from %s (%.9g)", got, what, want)
  end
end

-- The invariants, run after the top-level field they are named by.
local INVARIANTS = {}

function INVARIANTS.schema_version(self, r)
  local sv = int(r.schema_version)
  if sv and sv ~= results.SCHEMA_VERSION then self:fail("schema_version", "%d, this dpprof reads %d", sv, results.SCHEMA_VERSION) end
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
      for _, c in ipairs(results.CATEGORIES) do sum = sum + (int(cats[c]) or 0) end
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
function V:largest_first(list, key, path, what)
  list = is_array(list) and list or {}
  for i = 2, #list do
    local a, b = tbl(list[i - 1]), tbl(list[i])
    if a and b and num(a[key]) and num(b[key]) and b[key] > a[key] then
      self:fail(path .. "[" .. i .. "]", "%s are not sorted by %s, largest first", what, key)
    end
  end
end

-- Each phase's live bytes add up to its peak and its end, which lie within the run's peak.
function V:phase_memory(m, peak)
  local phases = tbl(m.phases) or {}
  for _, name in ipairs(results.PHASES) do
    local p, path = tbl(phases[name]), "memory.phases." .. name
    if p then
      for _, at in ipairs({ { "live_at_peak", "peak_bytes" }, { "live_at_end", "end_bytes" } }) do
        local cats, total = tbl(p[at[1]]), int(p[at[2]])
        if cats and total then
          local sum = 0
          for _, c in ipairs(results.CATEGORIES) do sum = sum + (int(cats[c]) or 0) end
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
    for _, c in ipairs(results.CATEGORIES) do
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
      if #a > results.TIMELINE_POINTS then
        self:fail("memory.timeline." .. k, "has %d points (at most %d)", #a, results.TIMELINE_POINTS)
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
    for _, key in ipairs(results.LEGACY_BREAKDOWN_KEYS) do
      local sum = 0
      for _, c in ipairs(results.LEGACY_BREAKDOWN[key]) do
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
    local want = numbers and results.time_stats(iters) or nil
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
function V:phases_within_step(t, iters, spans)
  local ph = tbl(t.phases_ms)
  if ph and num(t.avg_ms) then
    local sum, all = 0, true -- with every phase there (older results lack recompute)
    for _, name in ipairs(results.PHASES) do
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

-- A plan run's estimate and budget view (docs/results.md, "Predicted results").
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

-- The per-op profile (docs/results.md, "Per-op profile"): a mode that profiled, positive peaks
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
  for _, name in ipairs(results.PHASES) do
    local ph = tbl(p.phases) and tbl(p.phases[name])
    -- a device-timed call (events) may end after the host's phase clock saw it end, by a rounding
    if ph and num(ph.ms) and num(ph.ops_ms) and ph.ops_ms > ph.ms * 1.001 + 1e-3 then
      self:fail("profile.phases." .. name .. ".ops_ms", "above the phase's time (%.6g > %.6g ms)", ph.ops_ms, ph.ms)
    end
  end
  self:largest_first(p.ops, "ms", "profile.ops", "ops")
end

-- Repeated runs (docs/results.md, "Repeats"): as many runs as n, and the spread over the ok ones.
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
  local want = results.time_stats(times)
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

-- Checks every field of r the schema describes (docs/results.md) and the invariants between
-- them. An ok result must have them all; a failed one must have status, message (and oom for
-- status "oom"), and whatever else it carries must be right. Returns true, or false and the list
-- of problems (one line each, naming the field). It never raises, whatever the document holds.
function results.validate(r)
  if type(r) ~= "table" then return false, { "(top): object expected, got " .. type_name(r) } end
  local v = new_validator(r)
  for _, node in ipairs(results.SCHEMA.tree.order) do
    v:check(node, r[node.key], node.key)
    local after = INVARIANTS[node.key]
    if after then after(v, r) end
  end
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

-- Reads and validates one result file (compare, calibrate): the result, or nil and the reason,
-- one line naming the file and the field. In a directory (listed = true), a JSON document that is not meant as a
-- result (no key of the schema's at its top) is skipped: returns false and the reason.
function results.load(path, listed)
  local ok, r = pcall(results.read, path)
  if not ok then return nil, dp.error_text(r) end
  if type(r) ~= "table" or getmetatable(r) == getmetatable(dp.json.array()) then
    local what = type(r) == "table" and "an array" or dp.json.is_null(r) and "null" or "a " .. type(r)
    return nil, string.format("%s: not a result: the document is %s, not an object", path, what)
  end
  if r.traceEvents ~= nil then
    if listed then return false, "a trace file" end
    return nil, path .. ": a trace file, not a result"
  end
  if listed then
    local any = false
    for _, k in ipairs(results.MARK_KEYS) do
      any = any or r[k] ~= nil
    end
    if not any then return false, "no key of a result at its top" end
  end
  local valid, problems = results.validate(r)
  if not valid then
    return nil, string.format("%s: not a valid result: %s%s", path, problems[1],
                              #problems > 1 and string.format(" (and %d more problems)", #problems - 1) or "")
  end
  return r
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

-- The per-rank chart of a distributed run's combined result (rank 0's, with distributed.ranks):
-- each rank's peak, stacked by what was live at it (the breakdown charts' components), the largest
-- rank named in the subtitle; written to out (PNG). Raises when r has no ranks.
function results.rank_chart(r, out)
  local d = type(r) == "table" and r.distributed
  if type(d) ~= "table" or type(d.ranks) ~= "table" or #d.ranks == 0 then
    error("dpprof.results.rank_chart: the result has no distributed.ranks (rank 0's result of a launched world)", 2)
  end
  -- stacked by the breakdown charts' components, in their order and colours: what was live at
  -- each rank's peak (the stack is the rank's peak)
  local groups, series, of = {}, {}, {}
  for i, one in ipairs(d.ranks) do groups[i] = "rank " .. one.rank end
  for _, c in ipairs(dp.memory.CATEGORIES) do
    local color, label = dp.plot.component_style(c.component)
    if not of[c.component] then
      of[c.component] = { name = label or c.component, color = color, values = {} }
      series[#series + 1] = of[c.component]
    end
    local s = of[c.component]
    for i, one in ipairs(d.ranks) do s.values[i] = (s.values[i] or 0) + (one.live_at_peak[c.name] or 0) end
  end
  local kept = {}
  for _, s in ipairs(series) do
    local any = false
    for _, v in ipairs(s.values) do any = any or v > 0 end
    if any then kept[#kept + 1] = s end
  end
  series = kept
  local largest = d.largest and d.largest.rank
  dp.plot.bars{ out = out, stacked = true, y_unit = "bytes", groups = groups, series = series,
                title = string.format("Peak memory per rank (%s, %d ranks)", tostring(d.strategy), #d.ranks),
                subtitle = largest and string.format("largest: rank %d, %s", largest,
                                                     dp.plot.format(d.largest.peak_bytes, "bytes")) or nil,
                y_label = "peak bytes" }
  return out
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
