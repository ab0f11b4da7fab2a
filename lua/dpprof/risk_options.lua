-- dpprof.risk_options: dp.risk's options checked (each refused in one line naming the key and
-- what is valid) and worked into the state the answer is computed from: the data set's padded
-- lengths and their counts, the Binomial weights of the logical batch, the device model and the
-- budget; and the configuration of one plan run. dpprof.risk holds the model this serves.
local dp = require("dpprof")
local plan = require("dpprof.plan")
local data = require("dpprof.data")
local experiment = require("dpprof.experiment")

local options = {}

options.OPTION_KEYS = { "model", "method", "methods", "data", "sample_rate", "dataset_size", "steps",
                        "max_physical_batch_size", "budget_gb", "device_model", "target", "seed", "optimizer",
                        "cdf_points", "simulate", "quiet", "progress", "workers", "exhaustive", "clipping" }
options.DEFAULT_TARGET = 1e-3
options.DEFAULT_CDF_POINTS = 24
-- Logical batch sizes with a Binomial probability below this are left out (counted as exceeding).
options.NEGLIGIBLE = 1e-18
-- The largest data set held (lengths and log-factorials: ~100 bytes a sample), the longest sample
-- (a uint32 token count, as the engine's lengths are) and the largest reserve_overhead taken.
options.MAX_DATASET_SIZE = 10000000
options.MAX_LENGTH = 2147483647
options.MAX_RESERVE_OVERHEAD = 1

local function refuse(fmt, ...)
  dp.refuse("dpprof.risk: " .. string.format(fmt, ...))
end

local contains = dp.contains

local function int_at_least(v, key, lo)
  if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v) and math.abs(v) < 2 ^ 53) then
    refuse("%s must be an integer >= %d, got %s", key, lo, tostring(v))
  end
  if v < lo then refuse("%s must be an integer >= %d, got %s", key, lo, tostring(v)) end
  return math.tointeger(v)
end

-- log(1 + x) and exp(x) - 1 with their precision for small x (Lua has neither).
function options.log1p(x)
  if math.abs(x) < 1e-5 then return x - x * x / 2 + x * x * x / 3 end
  return math.log(1 + x)
end
function options.expm1(x)
  if math.abs(x) < 1e-5 then return x + x * x / 2 + x * x * x / 6 end
  return math.exp(x) - 1
end
local log1p = options.log1p

-- The methods to answer for: method or methods, each a preset or "norms+clip".
local function methods_of(opts)
  if opts.method ~= nil and opts.methods ~= nil then refuse("give method or methods, not both") end
  local methods = opts.methods or (opts.method and { opts.method }) or nil
  if methods == nil then refuse("method is required (valid: %s, or \"norms+clip\")", table.concat(dp.dpsgd.METHODS, ", ")) end
  if type(methods) ~= "table" or #methods == 0 then refuse("methods must be a non-empty list of method names") end
  for _, m in ipairs(methods) do
    if type(m) ~= "string" or not (contains(dp.dpsgd.METHODS, m) or m:find("^[%w_]+%+[%w_]+$")) then
      refuse("unknown method '%s' (valid: %s, or \"norms+clip\")", tostring(m), table.concat(dp.dpsgd.METHODS, ", "))
    end
  end
  return methods
end

-- The run's own numbers into o: the methods, the data's spec, sample_rate, steps and target.
local function run_of(o, opts)
  o.methods = methods_of(opts)
  if opts.data == nil then refuse("data is required: the samples' lengths (lengths=, lengths_file= or length_distribution=)") end
  local okd, spec = pcall(data.check, opts.data)
  if not okd then refuse("%s", dp.error_text(spec):gsub("^dpprof%.data: ", "data: ")) end
  o.spec = spec
  if type(opts.sample_rate) ~= "number" or not (opts.sample_rate > 0 and opts.sample_rate <= 1) then
    refuse("sample_rate must be a probability in (0, 1], got %s", tostring(opts.sample_rate))
  end
  o.q = opts.sample_rate
  if opts.steps == nil then refuse("steps is required (the run's number of steps)") end
  o.steps = int_at_least(opts.steps, "steps", 1)
  o.target = opts.target == nil and options.DEFAULT_TARGET or opts.target
  if type(o.target) ~= "number" or not (o.target > 0 and o.target < 1) then
    refuse("target must be a probability in (0, 1), got %s", tostring(opts.target))
  end
end

-- progress: true writes a line to stderr at most once a second once the answer takes longer than
-- a second (what the work has reached); a function is given those lines instead. Returns the
-- function the work tells what it reached, or nil.
local function progress_of(progress)
  if progress ~= nil and type(progress) ~= "boolean" and type(progress) ~= "function" then
    refuse("progress must be true, false or a function(line), got %s", tostring(progress))
  end
  if not progress then return nil end
  local write = type(progress) == "function" and progress
                or function(line) io.stderr:write("dpprof risk: ", line, "\n") end
  local t0, last = dp.clock(), nil
  return function(what)
    local now = dp.clock()
    if now - t0 >= 1 and (last == nil or now - last >= 1) then
      last = now
      write(string.format("%s (%.0f s)", what, now - t0))
    end
  end
end

-- How the work is done into o: workers (the children plan runs are shared among; default: the
-- threads OpenMP may use, the cores), exhaustive (plan every padded length of every row; false:
-- read rows from verified pieces), cdf_points and simulate.
local function work_of(o, opts)
  o.progress = progress_of(opts.progress)
  local env = dp.environment()
  o.workers = opts.workers and int_at_least(opts.workers, "workers", 1) or math.max(1, env.threads or env.cores or 1)
  if opts.exhaustive ~= nil and type(opts.exhaustive) ~= "boolean" then
    refuse("exhaustive must be true or false, got %s", tostring(opts.exhaustive))
  end
  o.exhaustive = opts.exhaustive == true
  o.cdf_points = opts.cdf_points and int_at_least(opts.cdf_points, "cdf_points", 2) or options.DEFAULT_CDF_POINTS
  o.simulate = opts.simulate and int_at_least(opts.simulate, "simulate", 1) or nil
end

-- The model into o: its sequence length is the cut (model.seq_len, else a checkpoint's positions).
local function model_of(o, opts)
  local okm, mcfg = pcall(experiment.model_options, opts.model, "plan")
  if not okm then refuse("model: %s", dp.error_text(mcfg):gsub("^dpprof%.experiment: ", "")) end
  o.model = dp.deep_copy(opts.model)
  o.seq_len = mcfg.seq_len or mcfg.max_positions
  if o.seq_len == nil then refuse("model.seq_len is required: samples longer than it are cut (or refused)") end
  o.positions = mcfg.max_positions or o.seq_len
  o.optimizer = opts.optimizer
  -- clipping: the plan runs' dp options of the clipping style (clipping, clip_fn, bounds, groups;
  -- docs/lua.md, Clipping styles), checked with the first plan configuration below
  if opts.clipping ~= nil and type(opts.clipping) ~= "table" then
    refuse("clipping must be a table of dp's clipping options {clipping =, clip_fn =, gamma =, bounds =, groups =}, "
           .. "got %s", tostring(opts.clipping))
  end
  for k in pairs(opts.clipping or {}) do
    if not contains({ "clipping", "clip_fn", "gamma", "bounds", "groups" }, k) then
      refuse("clipping: unknown key '%s' (valid: clipping, clip_fn, gamma, bounds, groups)", tostring(k))
    end
  end
  o.clipping = opts.clipping and dp.deep_copy(opts.clipping) or nil
end

-- dataset_size checked against the data's own count, where the data has one, and the bound.
local function check_dataset_size(spec, opts)
  if spec.length_distribution == nil and opts.dataset_size ~= nil and spec.lengths then
    local n = #spec.lengths
    if int_at_least(opts.dataset_size, "dataset_size", 1) ~= n then
      refuse("dataset_size (%s) differs from the %d samples of data.lengths (leave dataset_size out)",
             tostring(opts.dataset_size), n)
    end
  end
  if opts.dataset_size ~= nil then
    local n = int_at_least(opts.dataset_size, "dataset_size", 1)
    if n > options.MAX_DATASET_SIZE then
      refuse("dataset_size must be an integer in 1..%d (every sample's length and the log-factorials up to it are "
             .. "held: about 100 bytes a sample), got %s", options.MAX_DATASET_SIZE, tostring(opts.dataset_size))
    end
  end
  -- a lognormal's draws are whole tokens: a p99 that draws past 2^31 tokens is none (the engine's
  -- lengths are uint32), refused before drawing
  local ld = spec.length_distribution
  if ld and ld.kind == "lognormal" and ld.p99 > options.MAX_LENGTH then
    refuse("data: length_distribution.p99 must be at most %d tokens (a length is a uint32), got %s", options.MAX_LENGTH,
           tostring(ld.p99))
  end
end

-- The data set's lengths into o (lengths, info, N), checked against dataset_size and the bounds.
local function lengths_of(o, opts)
  local spec = o.spec
  check_dataset_size(spec, opts)
  -- a data set of text: tokenized by data.tokenizer, else the model's checkpoint's (path=)
  local tok = type(opts.model) == "table" and type(opts.model.path) == "string" and opts.model.path or nil
  local okl, lengths, info = pcall(data.lengths, spec, { seq_len = o.seq_len, dataset_size = opts.dataset_size,
                                                         seed = o.seed, tokenizer = tok, progress = true })
  if not okl then refuse("%s", dp.error_text(lengths):gsub("^dpprof%.data: ", "data: ")) end
  if opts.dataset_size ~= nil and spec.dataset and math.tointeger(opts.dataset_size) ~= #lengths then
    refuse("dataset_size (%s) differs from the %d samples of data.dataset '%s' (leave dataset_size out)",
           tostring(opts.dataset_size), #lengths, spec.dataset)
  end
  if opts.dataset_size ~= nil and spec.lengths_file and math.tointeger(opts.dataset_size) ~= #lengths then
    refuse("dataset_size (%s) differs from the %d samples of data.lengths_file '%s' (leave dataset_size out)",
           tostring(opts.dataset_size), #lengths, spec.lengths_file)
  end
  if #lengths > options.MAX_DATASET_SIZE then
    refuse("data: %d samples, more than dp.risk holds (at most %d)", #lengths, options.MAX_DATASET_SIZE)
  end
  if math.type(info.longest) ~= "integer" or info.longest > options.MAX_LENGTH then
    refuse("data: the longest sample has %s tokens, past %d (a length is a uint32 count of tokens: lower the "
           .. "distribution's median or p99)", string.format("%.4g", info.longest), options.MAX_LENGTH)
  end
  o.lengths, o.info, o.N = lengths, info, #lengths
  -- an empty run: every step's batch empty (in expectation, fewer than one non-empty step)
  -- (refused when more likely than not every step of the run is empty: P(empty)^steps >= 1/2)
  local p_empty = math.exp(o.N * log1p(-o.q))
  local p_all_empty = math.exp(o.steps * o.N * log1p(-o.q))
  if o.q < 1 and p_all_empty >= 0.5 then
    refuse("sample_rate %g over %d samples leaves the run's batches empty (P(empty batch) = %.4g: P(every one of "
           .. "the %d steps empty) = %.4g, at least 1/2); raise sample_rate or dataset_size", o.q, o.N, p_empty,
           o.steps, p_all_empty)
  end
end

-- The device model and the budget into o (model_spec, device_model, budget), as dp.fit reads them.
local function device_of(o, opts)
  local model_spec = opts.device_model or plan.DEFAULT_MODEL
  if opts.budget_gb ~= nil then
    if type(opts.budget_gb) ~= "number" or not (opts.budget_gb > 0) or opts.budget_gb == math.huge then
      refuse("budget_gb must be a positive number of GiB, got %s", tostring(opts.budget_gb))
    end
    if type(model_spec) == "string" then model_spec = { base = model_spec }
    else model_spec = dp.deep_copy(model_spec); model_spec.memory_bytes = nil end
    model_spec.memory_gb = opts.budget_gb
    model_spec.name = string.format("%s@%gGiB", model_spec.name or model_spec.base or "custom", opts.budget_gb)
  end
  local okp, dm = pcall(plan.device_model, model_spec)
  if not okp then refuse("%s", dp.error_text(dm)) end
  if dm.reserve_overhead > options.MAX_RESERVE_OVERHEAD then
    refuse("device_model: reserve_overhead must be a fraction in 0..%g (the pool's reserved-but-unused bytes over "
           .. "the allocated peak; measured 0.0024 to 0.036), got %s", options.MAX_RESERVE_OVERHEAD,
           tostring(dm.reserve_overhead))
  end
  o.model_spec, o.device_model = model_spec, dm
  o.budget = dm.memory_bytes - dm.context_bytes
end

-- The distinct padded lengths P[1] < ... < P[D] into o, with cnt[d] the samples at P[d] and C[d]
-- those within it (C[0] = 0).
local function padded_of(o)
  local counts = {}
  for _, l in ipairs(o.lengths) do
    local p = data.pad(l, o.spec.pad_to)
    counts[p] = (counts[p] or 0) + 1
  end
  local P = {}
  for p in pairs(counts) do P[#P + 1] = p end
  table.sort(P)
  local C, cnt, acc = {}, {}, 0
  for d, p in ipairs(P) do acc = acc + counts[p]; C[d], cnt[d] = acc, counts[p] end
  C[0] = 0
  o.P, o.C, o.cnt, o.D = P, C, cnt, #P
end

-- The Binomial(N, q) weights of B into o (pmf over Blo..Bhi, tail the mass left out), and the
-- log-factorials lf the hypergeometric terms need.
local function binomial_of(o)
  local lf = { [0] = 0.0 }
  for i = 1, o.N do lf[i] = lf[i - 1] + math.log(i) end
  o.lf = lf
  local lq, l1q = math.log(o.q), o.q < 1 and log1p(-o.q) or -math.huge
  local pmf, lo, hi, left = {}, nil, nil, 0
  for b = 0, o.N do
    local lp
    if o.q == 1 then lp = (b == o.N) and 0 or -math.huge
    else lp = lf[o.N] - lf[b] - lf[o.N - b] + b * lq + (o.N - b) * l1q end
    local p = math.exp(lp)
    if p >= options.NEGLIGIBLE then
      pmf[b] = p
      lo = lo or b
      hi = b
    else
      left = left + p
      if hi and b > o.N * o.q then -- past the mode the terms fall at least geometrically: the rest, bounded
        left = left + p * (o.N - b)
        break
      end
    end
  end
  -- the weights normalised (the log-factorials' rounding leaves their sum ~1e-12 from 1); the
  -- terms left out are counted as exceeding
  local mass = 0
  for b = lo, hi do mass = mass + (pmf[b] or 0) end
  for b = lo, hi do if pmf[b] then pmf[b] = pmf[b] / mass * (1 - left) end end
  o.pmf, o.Blo, o.Bhi, o.tail = pmf, lo, hi, left
end

-- Checks the options; returns the working state (see dpprof.risk's header for the keys).
function options.options(opts)
  if type(opts) ~= "table" then refuse("expects a table of options") end
  for k in pairs(opts) do
    if not contains(options.OPTION_KEYS, k) then
      refuse("unknown key '%s' (valid: %s)", tostring(k), table.concat(options.OPTION_KEYS, ", "))
    end
  end
  local o = { quiet = opts.quiet ~= false, seed = opts.seed and int_at_least(opts.seed, "seed", 0) or 0 }
  if type(opts.model) ~= "table" then refuse("model must be a model configuration (a table, as dp.experiment's model)") end
  run_of(o, opts)
  work_of(o, opts)
  model_of(o, opts)
  lengths_of(o, opts)
  device_of(o, opts)
  padded_of(o)
  binomial_of(o)
  o.m = opts.max_physical_batch_size and int_at_least(opts.max_physical_batch_size, "max_physical_batch_size", 1) or nil
  -- check the first plan configuration as dp.experiment does (a bad model key is the user's)
  local okc, errc = pcall(experiment.config, options.point_config(o, o.methods[1], 1, o.P[1]))
  if not okc then refuse("model: %s", dp.error_text(errc):gsub("^dpprof%.experiment: ", "")) end
  return o
end

-- The configuration of the plan run of b samples padded to L with method.
function options.point_config(o, method, b, L)
  local c = { model = dp.deep_copy(o.model), dp = { max_physical_batch_size = b } }
  for k, v in pairs(o.clipping or {}) do c.dp[k] = dp.deep_copy(v) end
  c.model.seq_len, c.model.batch = L, b
  if c.model.path == nil then c.model.max_positions = o.positions end
  if method:find("+", 1, true) then c.norms, c.clip = method:match("^(.-)%+(.*)$") else c.method = method end
  c.optimizer = o.optimizer
  c.device, c.device_model, c.snapshots = "plan", o.model_spec, "none"
  c.iters, c.warmup = 1, 1
  c.name = string.format("%s,b=%d,L=%d", method, b, L)
  return c
end

return options
