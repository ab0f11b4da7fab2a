-- dpprof.fit: the largest seq_len, batch or layer count that fits a memory budget, per DP method,
-- found by searching over plan runs (exact allocator accounting, no memory touched, no arithmetic:
-- a run of the large model takes milliseconds).
--
--   dp.fit{ base={...experiment config...}, method="ghost" | methods={...}, vary="seq_len"|"batch"|"layers",
--           budget_gb=80 | device_model="h100"|"h200"|"h100-calibrated"|"FILE.json"|{...}, lo=, hi=, granularity=, quiet=true,
--           checkpoint=false|"blocks"|N | {settings...} }
--   -> { vary=, budget_bytes=, device_model={...}, lo=, hi=, granularity=, checkpoints={...},
--        methods = { {method=, checkpoint=, largest=, peak_bytes=, predicted_reserved_bytes=,
--                     dominant={category=, bytes=}, step_ms=, first_unfit=, first_unfit_peak_bytes=, hi_reached=,
--                     runs=}, ... },
--        by_method = { [method] = its best entry } }
--
-- checkpoint: the activation checkpointing settings to search with (model.checkpoint: false off,
-- "blocks" every block, N every N-th block), one search each; default base.model.checkpoint
-- (off when not given). `methods` holds one entry per method and setting, in that order, each
-- saying its setting; by_method the one with the largest value (on a tie, the one whose run at
-- that value has the lower estimated step time: recomputation costs time). step_ms is the plan's
-- roofline estimate of a step at `largest`.
--
-- A value fits when the plan run's predicted reserved peak (plan.budget: the allocated peak over
-- warm-up and timed iterations, the modelled CUDA workspace included, times 1 + reserve_overhead)
-- is at most the budget: the device model's memory less its context. budget_gb sets the card's
-- memory in GiB (2^30 bytes, as *_mb fields are MiB) on top of device_model (default h100), so
-- budget_gb=80 asks "on an 80 GiB card".
--
-- The search: values are multiples of granularity from lo to hi. lo first; then doubling until a
-- value does not fit (or hi is passed, clamped to hi); then bisection between the last value that
-- fitted and the first that did not, down to granularity. `largest` fits and `largest +
-- granularity` does not (that is `first_unfit`), provided memory grows with the value (it does
-- for seq_len, batch and layers). largest is nil when lo does not fit; first_unfit is nil when hi
-- fits (hi_reached = true).
--
-- base.model may be a checkpoint ({path="DIR", ...}: dp.experiment's); the plan runs read its
-- config.json alone, and seq_len is searched up to its max_position_embeddings unless hi says.
--
-- vary: seq_len sets model.seq_len; batch sets model.batch and dp.max_physical_batch_size (the
-- batch that goes through the model at once); layers sets model.layers. Runs are in-process on
-- the plan device (one warm-up and one timed iteration unless base says otherwise; snapshots off);
-- between runs the experiment resets the plan device's peaks, events, snapshots and ledger, and
-- fit checks that every run gave back all it allocated.
local dp = require("dpprof")
local plan = require("dpprof.plan")
local experiment = require("dpprof.experiment")

local fit = {}

fit.OPTION_KEYS = { "base", "method", "methods", "vary", "budget_gb", "device_model", "lo", "hi", "granularity",
                    "quiet", "checkpoint" }
fit.VARY = { "seq_len", "batch", "layers" }
fit.METHODS = dp.dpsgd.METHODS -- the engine's presets
-- Per vary: {lo, hi, granularity} when not given.
fit.DEFAULTS = {
  seq_len = { granularity = 64, hi = 1 << 20 },
  batch = { granularity = 1, hi = 1 << 16 },
  layers = { granularity = 1, hi = 1024 },
}

local GiB = 1024 * 1024 * 1024

local function fail(fmt, ...)
  error("dpprof.fit: " .. string.format(fmt, ...), 3)
end

local copy = dp.deep_copy

local contains = dp.contains

local function positive_int(v, key)
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then fail("%s must be an integer >= 1, got %s", key, tostring(v)) end
end

-- A checkpoint setting as results and the table show it: "off", "blocks" or "every N" (the
-- engine's display of the setting, dpprof.model.checkpoint_name).
fit.checkpoint_name = dp.model.checkpoint_name

-- The checkpointing settings a comma-separated list of words names, as `dpprof fit checkpoint=`
-- takes them: off (checkpoint_name(false)) or false, blocks, N; any other word is kept, for dp.fit
-- to refuse by the engine's grammar.
function fit.checkpoint_words(text)
  local out, off = {}, dp.model.checkpoint_name(false)
  for v in tostring(text):gmatch("[^,]+") do
    local setting = math.tointeger(tonumber(v)) or v
    if v == off or v == "false" then setting = false end
    out[#out + 1] = setting
  end
  return out
end

-- The configuration of one plan run at value (checkpoint: the setting, nil to keep base's).
local function point_config(base, method, vary, value, model_spec, checkpoint)
  local c = copy(base)
  c.model = c.model or {}
  if checkpoint ~= nil then c.model.checkpoint = checkpoint end
  c.dp = c.dp or {}
  if method:find("+", 1, true) then
    c.method = nil
    c.norms, c.clip = method:match("^(.-)%+(.*)$")
  else
    c.method, c.norms, c.clip = method, nil, nil
  end
  if vary == "batch" then
    c.model.batch = value
    c.dp.max_physical_batch_size = value
  else
    c.model[vary] = value
  end
  -- every N-th block with N past the layers searched is block 0 alone, as N = layers says it
  -- (dp.model refuses N > layers)
  local ck = c.model.checkpoint
  if vary == "layers" and math.type(ck) == "integer" and ck > value then c.model.checkpoint = value end
  c.device, c.device_model = "plan", model_spec
  c.snapshots = "none"
  c.trace = nil
  c.iters = base.iters or 1
  c.warmup = base.warmup or 1
  c.name = string.format("%s,%s=%d%s", method, vary, value,
                         checkpoint and string.format(",checkpoint=%s", tostring(checkpoint)) or "")
  return c
end

-- The category with the most bytes live at the peak.
local function dominant(r)
  local best, bytes = nil, -1
  for _, c in ipairs(dp.results.CATEGORIES) do
    local e = r.memory.categories[c]
    if e.live_at_peak_bytes > bytes then best, bytes = c, e.live_at_peak_bytes end
  end
  return { category = best, bytes = bytes }
end

-- Runs one plan point; returns the result. Raises when the run failed or left memory behind.
local function run_point(cfg)
  local before = dp.memory.stats("plan")
  local r = experiment.run(cfg)
  local after = dp.memory.stats("plan")
  if after.allocated ~= before.allocated or after.n_live ~= before.n_live then
    fail("the plan run %s left %d bytes in %d allocation(s) behind (a leak between runs)", cfg.name,
         after.allocated - before.allocated, after.n_live - before.n_live)
  end
  if r.status ~= "ok" then
    fail("the plan run %s failed (%s): %s", cfg.name, r.status, (tostring(r.message):gsub("^[^\n]-%.lua:%d+: ", "")))
  end
  return r
end
-- One plan run of cfg in this process, checked as fit's search checks it (dpprof.risk's runs).
fit.run_point = run_point

-- The search for one method and checkpoint setting; see the header.
local function search(o, method, checkpoint)
  local g, runs, cache = o.granularity, 0, {}
  local function probe(v)
    if cache[v] == nil then
      local r = run_point(point_config(o.base, method, o.vary, v, o.model_spec, checkpoint))
      runs = runs + 1
      local b = r.plan
      cache[v] = { fits = b.fits, peak = b.peak_bytes, reserved = b.predicted_reserved_bytes, dominant = dominant(r),
                   step_ms = r.timing.avg_ms }
      if not o.quiet then
        print(string.format("  %s (checkpoint %s) %s=%d: %s, peak %s, reserved %s", method,
                            fit.checkpoint_name(checkpoint), o.vary, v, b.fits and "fits" or "does not fit",
                            dp.format_bytes(b.peak_bytes), dp.format_bytes(b.predicted_reserved_bytes)))
      end
    end
    return cache[v]
  end
  local good, bad
  if probe(o.lo).fits then
    good = o.lo
    while true do
      local v = math.min(good * 2, o.hi)
      if v == good then break end
      if probe(v).fits then good = v else bad = v break end
    end
    while bad and bad - good > g do
      local mid = good + ((bad - good) // g // 2) * g
      if probe(mid).fits then good = mid else bad = mid end
    end
  else
    bad = o.lo
  end
  local entry = { method = method, checkpoint = checkpoint or false, largest = good, first_unfit = bad,
                  hi_reached = bad == nil, runs = runs }
  if good then
    local p = cache[good]
    entry.peak_bytes, entry.predicted_reserved_bytes, entry.dominant = p.peak, p.reserved, p.dominant
    entry.step_ms = p.step_ms
  end
  if bad then
    entry.first_unfit_peak_bytes = cache[bad].peak
    entry.first_unfit_reserved_bytes = cache[bad].reserved
  end
  return entry
end

-- The methods a fit searches: opts.method(s), else the base's own method (or norms+clip), else
-- every method; each a known name or "norms+clip".
local function fit_methods(opts, base)
  if opts.method ~= nil and opts.methods ~= nil then fail("give method or methods, not both") end
  local methods = opts.methods or (opts.method and { opts.method })
  if not methods then
    if base.norms or base.clip then
      methods = { tostring(base.norms) .. "+" .. tostring(base.clip) }
    elseif base.method then
      methods = { base.method }
    else
      methods = fit.METHODS
    end
  end
  if type(methods) ~= "table" or #methods == 0 then fail("methods must be a non-empty list of method names") end
  for _, m in ipairs(methods) do
    if type(m) ~= "string" or not (contains(fit.METHODS, m) or m:find("^[%w_]+%+[%w_]+$")) then
      fail("unknown method '%s' (valid: %s, or \"norms+clip\")", tostring(m), table.concat(fit.METHODS, ", "))
    end
  end
  return methods
end

-- The checkpoint settings a fit tries: opts.checkpoint (one or a list), else the base model's; each
-- one of the engine's grammar.
local function fit_checkpoints(opts, base)
  local ck = opts.checkpoint
  if ck == nil then ck = base.model and base.model.checkpoint or false end
  if type(ck) ~= "table" then ck = { ck } end
  if #ck == 0 then fail("checkpoint must be a setting or a non-empty list of them (false, \"blocks\", N)") end
  for _, v in ipairs(ck) do -- each a setting of the engine's grammar (false, "blocks", N), its refusal
    local ok, why = dp.model.checkpoint_parse(v)
    if not ok then fail("%s", why) end
  end
  return ck
end

-- The device model a fit plans on (opts.device_model, the base's, or the default), its memory
-- replaced by budget_gb when given: the spec and the loaded model.
local function fit_device_model(opts, base)
  local model_spec = opts.device_model or base.device_model or plan.DEFAULT_MODEL
  if opts.budget_gb ~= nil then
    if type(opts.budget_gb) ~= "number" or opts.budget_gb <= 0 then
      fail("budget_gb must be a positive number of GiB, got %s", tostring(opts.budget_gb))
    end
    if type(model_spec) == "string" then
      model_spec = { base = model_spec }
    else
      model_spec = copy(model_spec)
      model_spec.memory_bytes = nil
    end
    model_spec.memory_gb = opts.budget_gb
    model_spec.name = string.format("%s@%gGiB", model_spec.name or model_spec.base or "custom", opts.budget_gb)
  end
  local ok, model = pcall(plan.device_model, model_spec)
  if not ok then fail("%s", tostring(model)) end
  return model_spec, model
end

-- The search's range: granularity, lo and hi (the defaults of what is varied, hi bounded by a
-- checkpoint's context), into o.
local function fit_range(opts, o)
  local d = fit.DEFAULTS[o.vary]
  positive_int(opts.granularity, "granularity")
  positive_int(opts.lo, "lo")
  positive_int(opts.hi, "hi")
  o.granularity = opts.granularity or d.granularity
  o.lo = opts.lo or o.granularity
  o.hi = opts.hi or d.hi
  local positions -- a checkpoint's context, when it bounds the search
  if opts.hi == nil and o.vary == "seq_len" and o.base.model and o.base.model.path then
    -- a checkpoint's context bounds the search (config.json's max_position_embeddings)
    local okm, mcfg = pcall(experiment.model_options, o.base.model, "plan")
    if not okm then fail("base: %s", dp.error_text(mcfg)) end
    if mcfg.max_positions and mcfg.max_positions < o.hi then o.hi, positions = mcfg.max_positions, mcfg.max_positions end
  end
  if o.lo % o.granularity ~= 0 then fail("lo (%d) must be a multiple of granularity (%d)", o.lo, o.granularity) end
  o.hi = o.hi - o.hi % o.granularity
  if o.hi < o.lo and positions then
    fail("the checkpoint %s has %d positions (config.json's max_position_embeddings), fewer than the search's first "
         .. "seq_len (lo, %d): give a granularity= of at most %d (lo starts there), e.g. granularity=1",
         tostring(o.base.model.path), positions, o.lo, positions)
  end
  if o.hi < o.lo then fail("hi (%d) is below lo (%d) at granularity %d", opts.hi or o.hi, o.lo, o.granularity) end
end

-- The base configuration as dp.experiment checks it at the search's first point (and with its own
-- value of what is varied, though the search replaces it: seq_len=0 is as wrong here as there).
local function check_base(o)
  local methods = o.methods
  local own = o.base.model and o.base.model[o.vary]
  if own ~= nil then
    local c = point_config(o.base, methods[1], o.vary, o.lo, o.model_spec, o.checkpoints[1])
    c.model[o.vary] = own
    local ok_own, err_own = pcall(experiment.config, c)
    if not ok_own then fail("base: %s", dp.error_text(err_own)) end
  end
  local ok_cfg, err = pcall(experiment.config, point_config(o.base, methods[1], o.vary, o.lo, o.model_spec,
                                                           o.checkpoints[1]))
  if not ok_cfg then fail("base: %s", dp.error_text(err)) end
end

-- Checks the options and fills in defaults; see the header.
function fit.options(opts)
  if type(opts) ~= "table" then fail("expects a table of options") end
  for k in pairs(opts) do
    if not contains(fit.OPTION_KEYS, k) then
      fail("unknown key '%s' (valid: %s)", tostring(k), table.concat(fit.OPTION_KEYS, ", "))
    end
  end
  local o = { base = opts.base or {}, quiet = opts.quiet ~= false }
  if type(o.base) ~= "table" then fail("base must be an experiment configuration (a table)") end
  if o.base.device ~= nil and o.base.device ~= "plan" then
    fail("base.device is '%s': fit runs on the plan device (leave device out)", tostring(o.base.device))
  end
  o.vary = opts.vary or "seq_len"
  if not contains(fit.VARY, o.vary) then
    fail("unknown vary '%s' (valid: %s)", tostring(o.vary), table.concat(fit.VARY, ", "))
  end
  o.methods = fit_methods(opts, o.base)
  o.checkpoints = fit_checkpoints(opts, o.base)
  o.model_spec, o.device_model = fit_device_model(opts, o.base)
  fit_range(opts, o)
  check_base(o)
  return o
end

function fit.run(opts)
  local o = fit.options(opts)
  plan.prepare(o.device_model) -- the workspace the runs will hold, taken before the leak checks
  local out = { vary = o.vary, budget_bytes = o.device_model.memory_bytes - o.device_model.context_bytes,
                device_model = o.device_model, lo = o.lo, hi = o.hi, granularity = o.granularity,
                checkpoints = o.checkpoints, methods = {}, by_method = {} }
  for _, m in ipairs(o.methods) do
    for _, ck in ipairs(o.checkpoints) do
      local e = search(o, m, ck)
      out.methods[#out.methods + 1] = e
      local best = out.by_method[m]
      if not best or (e.largest or -1) > (best.largest or -1)
         or (e.largest and e.largest == best.largest and e.step_ms < best.step_ms) then
        out.by_method[m] = e
      end
    end
  end
  return out
end

-- The checkpointing settings in order of the share of blocks recomputed: off, every 4th block,
-- every 2nd, every block.
fit.CHECKPOINT_ORDER = { false, 4, 2, "blocks" }

local function recomputed_share(ck)
  local n = dp.model.checkpoint_parse(ck) -- 0 off, N every N-th block ("blocks": 1)
  return n == 0 and 0 or 1 / n
end

-- What activation checkpointing would do for r, the plan run of configuration cfg (a sweep point's
-- advice: plan.checkpoint_advice, docs/results.md). nil when r fits without checkpointing; else
-- {checkpoint=, fits=, step_ms=, predicted_reserved_bytes=, reference_step_ms=}: the setting of
-- fit.CHECKPOINT_ORDER with the least recomputation that fits (every block, fits = false, when
-- none does), the estimated step time and reserved peak with it, and the estimated step time
-- without checkpointing (the cost is step_ms over it). A run that fits only thanks to its own
-- checkpointing is advised the least setting that fits, which may be its own. The runs are plan
-- runs in this process, as fit's search makes them (run_point: a leak between runs raises).
function fit.checkpoint_advice(cfg, r)
  if not (r.status == "ok" and r.predicted and type(r.plan) == "table") then return nil end
  local own = cfg.model and cfg.model.checkpoint or false
  if r.plan.fits and recomputed_share(own) == 0 then return nil end
  local function run_with(ck)
    if ck == own then return r end
    local c = copy(cfg)
    c.model = c.model or {}
    c.model.checkpoint = ck
    c.trace, c.on, c.snapshots = nil, nil, "none"
    c.name = string.format("%s,checkpoint=%s", tostring(cfg.name or "point"), tostring(ck))
    return run_point(c)
  end
  local reference = run_with(false)
  if r.plan.fits and reference.plan.fits then return nil end -- its checkpointing is not what makes it fit
  -- a setting past the model's layers is none it can take (every 4th block of 2: dp.model refuses
  -- it, and the advice would raise): left out, by the engine's bound
  local rm = type(r.config) == "table" and type(r.config.model) == "table" and r.config.model or {}
  local layers = math.type(rm.layers) == "integer" and rm.layers or nil
  for _, ck in ipairs(fit.CHECKPOINT_ORDER) do
    if recomputed_share(ck) > 0 and dp.model.checkpoint_parse(ck, layers) then
      local with = run_with(ck)
      if with.plan.fits or ck == "blocks" then
        return { checkpoint = ck, fits = with.plan.fits, step_ms = with.timing.avg_ms,
                 predicted_reserved_bytes = with.plan.predicted_reserved_bytes,
                 reference_step_ms = reference.timing.avg_ms }
      end
    end
  end
end

-- The advice in words: "fits with checkpoint=every 2 (every 2nd block recomputed) at +23% step
-- time (estimated 102.0 -> 125.5 ms)", or that even every block does not fit.
function fit.advice_text(a)
  local cost = a.reference_step_ms > 0 and (a.step_ms / a.reference_step_ms - 1) * 100 or 0
  if not a.fits then
    return string.format("does not fit even with checkpoint=blocks (every block recomputed: reserved %s)",
                         dp.format_bytes(a.predicted_reserved_bytes))
  end
  return string.format("fits with checkpoint=%s at %+.0f%% step time (estimated %.1f -> %.1f ms)",
                       tostring(a.checkpoint), cost, a.reference_step_ms, a.step_ms)
end

return fit
