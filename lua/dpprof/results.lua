-- dpprof.results: the results JSON of docs/results.md (schema_version 1): assembling a result from
-- what an experiment measured, validating every documented field, and reading and writing files
-- (atomically: a reader never sees half a file). The checks are dpprof.results_validate's, the
-- constants dpprof.results_base's.
local dp = require("dpprof")
local json = dp.json
local base = require("dpprof.results_base")
local validate = require("dpprof.results_validate")

local results = {}

-- The schema's constants (dpprof.results_base), as results.* for every reader.
results.SCHEMA_VERSION = base.SCHEMA_VERSION
results.MiB = base.MiB
results.TIMELINE_POINTS = base.TIMELINE_POINTS
results.STATUSES = base.STATUSES
results.PHASES = base.PHASES
results.OPTIONAL_PHASES = base.OPTIONAL_PHASES
results.OP_CATEGORIES = base.OP_CATEGORIES
results.HOST_RSS_SINCE = base.HOST_RSS_SINCE
results.CATEGORIES = base.CATEGORIES
results.NORMS_KINDS = base.NORMS_KINDS
results.LEGACY_BREAKDOWN = base.LEGACY_BREAKDOWN
results.LEGACY_BREAKDOWN_KEYS = base.LEGACY_BREAKDOWN_KEYS
results.SCHEMA = base.SCHEMA
results.MARK_KEYS = base.MARK_KEYS
results.time_stats = base.time_stats

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
--    ledger, layers, clipping (priv:stats().clipping), environment, privacy, extra}
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
  if a.clipping then -- the clipping groups as the wrapper made them
    local c = a.clipping
    r.clipping = { style = c.style, clip_fn = c.clip_fn, gamma = c.gamma, noise_norm = c.noise_norm, groups = array() }
    for i, g in ipairs(c.groups) do
      r.clipping.groups[i] = { name = g.name, max_grad_norm = g.max_grad_norm, tensors = g.tensors }
    end
    if c.adaptive then -- the settings and every step's bound, in order
      local a = c.adaptive
      r.clipping.adaptive = { target_unclipped_quantile = a.target_unclipped_quantile,
                              clipbound_learning_rate = a.clipbound_learning_rate, max_clipbound = a.max_clipbound,
                              min_clipbound = a.min_clipbound, unclipped_num_std = a.unclipped_num_std,
                              noise_multiplier = a.noise_multiplier, steps = array() }
      for i, st in ipairs(a.steps) do
        r.clipping.adaptive.steps[i] = { bound = st.bound, samples = st.samples, unclipped = st.unclipped,
                                         fraction = st.fraction, next = st.next }
      end
    end
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

-- Checks every field of r the schema describes and the invariants between them: true, or false and
-- the list of problems (dpprof.results_validate; it never raises).
results.validate = validate.validate

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
