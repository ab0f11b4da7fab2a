-- dpprof.risk: the chance that some step of a DP-SGD run with Poisson sampling and samples of
-- their own lengths runs out of memory, from plan runs (issue 31).
--
--   dp.risk{ model = {...}, method = "flash_clip" | methods = {...}, data = {...dpprof.data spec...},
--            sample_rate = q, dataset_size = N, steps = S, max_physical_batch_size = m,
--            budget_gb = G | device_model = "h100"|"h200"|"h100-calibrated"|"FILE.json"|{...}, target = 1e-3, seed = 0,
--            optimizer = {...}, cdf_points = 24, simulate = STEPS, quiet = true, progress = false,
--            workers = cores, exhaustive = false }
--   -> { probability =, per_step =, cdf = {{bytes=, p=}...}, budget_bytes =, device_model =, steps =,
--        sample_rate =, dataset_size =, target =, seed =, seq_len =, max_physical_batch_size =,
--        whole_logical_batch =, data = {samples=, cut=, longest=, source=, pad_to=, group_by_length=,
--        padded_lengths=}, logical_batch = {mean=, low=, high=, tail=, empty=},
--        methods = { {method=, probability=, per_step=, cdf=, safe = {max_physical_batch_size=,
--                     per_step=, probability=, step_ms=, whole_logical_batch=}, length_cap = {length=,
--                     per_step=, probability=, cut=, step_ms=}, step_ms=, monotone=, runs=,
--                     simulation=}... }, by_method = {[method] = entry} }
--   (probability, per_step and cdf at the top are the first method's.)
--
-- The model of a step, as Opacus draws it: the logical batch is B ~ Binomial(N, q) samples of
-- the data set (each sample in with probability q), split by dpprof.data.split into
-- k = ceil(B / m) physical batches (the first B mod k one larger); a physical batch of b samples
-- is padded to its longest, rounded up to pad_to (dpprof.data.pad). Its peak is that of a plan run
-- of b samples of that length (model.seq_len = the padded length, model.batch =
-- dp.max_physical_batch_size = b; the model's positions kept): exact allocator accounting, and the
-- reserved peak the CUDA pool would hold (plan.budget). A step's peak is the largest of its
-- physical batches'; an empty step (B = 0) is counted at the peak of one sample of the shortest
-- padded length (it holds the model, the optimizer and the noise: no more than that).
--
-- The samples of a logical batch are a uniformly random B-subset of the data set, in the data
-- set's order: the data set is taken to be in random order (a shuffled data set; a lengths file
-- sorted by length is not, and a small data set's own order moves the answer by O(1/sqrt(N))).
-- Without group_by_length the physical batches are then random disjoint subsets, and the step fits
-- iff the larger batches' rs samples all lie in A (the samples at whose padded length a batch of
-- the larger size fits) and the other B - rs in C (the same for the smaller size): a sum of
-- hypergeometric terms over the samples in both. With group_by_length (a logical batch sorted by
-- length, dpprof.data.physical_batches) the order statistics decide: at least rs of the B within
-- T(larger) and all within T(smaller), T(b) the longest padded length below which every length
-- fits b samples, a hypergeometric tail (exact when the peak grows with the length; where it does
-- not, an upper bound on the probability of exceeding). Summed over B's Binomial weights (B with
-- probability below 1e-18 left out and counted as exceeding; the weights kept are normalised to
-- the rest), this is P(one step exceeds the budget) = per_step, and the run's probability is
-- 1 - (1 - per_step)^steps.
--
-- The plan runs: a row per physical batch size b that occurs, the reserved peak at every distinct
-- padded length of the data set, so nothing assumes the peak grows with the length (flash_clip's
-- does not everywhere: `monotone` says whether the rows did). A row is read from pieces: the peak
-- of a piece of lengths in which the same allocations make it is a quadratic in the length (sums
-- of tensor sizes, each the length at most squared times whole numbers), so a piece is taken as
-- the quadratic through its plan runs at both ends and the middle when two more runs, at its
-- quarter points, equal it to the byte and every length inside reads as whole bytes; otherwise it
-- is split at those points, down to pieces planned whole (risk.PIECE_PLAN_ALL). About 30 to 120
-- runs a row instead of one a length (exhaustive = true plans every length; tests/lua/
-- test_risk_fast.lua compares the rows of each method both ways). Each round of runs is shared
-- among `workers` children (one a core; each run is the one this process would make); a step time
-- a piece did not plan is planned when asked for (st.step_ms). The
-- splits are counted in closed form (split_shape) and each sum skips only terms exp flushes to zero,
-- so the answer is the exhaustive search's exactly (tests/lua/test_risk_fast.lua). The CDF of the step peak is exact at cdf_points levels from the smallest step's peak to
-- the largest's, and at the budget. safe: the largest max_physical_batch_size such that every
-- bound up to it keeps the run's probability at most target (bounds past the largest logical
-- batch change nothing: whole_logical_batch); length_cap: for the run's m, the longest padded
-- length of the data set to cut samples at (too_long = "cut" at it) that keeps the run under
-- target. step_ms: the plan's modelled time of a typical step: the expected logical batch
-- (round(N q), at least 1) split by m, each physical batch at the median of its padded length
-- (the shortest length that at least half its b-sample batches stay within), the sum of their
-- plan runs' step times (each a whole optimizer step, so an upper bound).
--
-- simulate = S: S steps drawn by the engine's Poisson sampler itself (dp.dpsgd.poisson_draw, the
-- draw priv:next_step() makes), split by dpprof.data.physical_batches in the data
-- set's order, and each physical batch planned (the same rows): the simulated steps' logical batch
-- sizes (`logical`, what priv:next_step() gives the same seed's steps) and peaks, their
-- empirical CDF at the same levels and its largest distance from the computed one (ks), with the
-- 99% Kolmogorov bound 1.63 / sqrt(S).
local dp = require("dpprof")
local plan = require("dpprof.plan")
local data = require("dpprof.data")
local fit = require("dpprof.fit")
local experiment = require("dpprof.experiment")

local risk = {}

risk.OPTION_KEYS = { "model", "method", "methods", "data", "sample_rate", "dataset_size", "steps",
                     "max_physical_batch_size", "budget_gb", "device_model", "target", "seed", "optimizer",
                     "cdf_points", "simulate", "quiet", "progress", "workers", "exhaustive" }
risk.DEFAULT_TARGET = 1e-3
risk.DEFAULT_CDF_POINTS = 24
-- Logical batch sizes with a Binomial probability below this are left out (counted as exceeding).
risk.NEGLIGIBLE = 1e-18
-- Plan runs are shared among children (one a core) only when each gets at least this many.
risk.MIN_RUNS_PER_CHILD = 16
-- The largest data set held (lengths and log-factorials: ~100 bytes a sample), the longest sample
-- (a uint32 token count, as the engine's lengths are) and the largest reserve_overhead taken.
risk.MAX_DATASET_SIZE = 10000000
risk.MAX_LENGTH = 2147483647
risk.MAX_RESERVE_OVERHEAD = 1
-- A row's piece of at most this many lengths inside is planned whole, not read as a quadratic.
risk.PIECE_PLAN_ALL = 4
-- How far from a whole number of bytes a piece's quadratic may read (the floating rounding of
-- Lagrange's form on peaks below 2^53, bases no larger than ~1.2) and still be taken.
risk.PIECE_WHOLE_TOLERANCE = 0.01
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
local function log1p(x)
  if math.abs(x) < 1e-5 then return x - x * x / 2 + x * x * x / 3 end
  return math.log(1 + x)
end
local function expm1(x)
  if math.abs(x) < 1e-5 then return x + x * x / 2 + x * x * x / 6 end
  return math.exp(x) - 1
end

-- The run's probability from the per-step one: 1 - (1 - p)^steps.
function risk.run_probability(p, steps)
  if p >= 1 then return 1.0 end
  if p <= 0 then return 0.0 end
  return -expm1(steps * log1p(-p))
end

-- Checks the options; returns the working state (see the header for the keys).
function risk.options(opts)
  if type(opts) ~= "table" then refuse("expects a table of options") end
  for k in pairs(opts) do
    if not contains(risk.OPTION_KEYS, k) then
      refuse("unknown key '%s' (valid: %s)", tostring(k), table.concat(risk.OPTION_KEYS, ", "))
    end
  end
  local o = { quiet = opts.quiet ~= false, seed = opts.seed and int_at_least(opts.seed, "seed", 0) or 0 }
  if type(opts.model) ~= "table" then refuse("model must be a model configuration (a table, as dp.experiment's model)") end
  if opts.method ~= nil and opts.methods ~= nil then refuse("give method or methods, not both") end
  local methods = opts.methods or (opts.method and { opts.method }) or nil
  if methods == nil then refuse("method is required (valid: %s, or \"norms+clip\")", table.concat(dp.dpsgd.METHODS, ", ")) end
  if type(methods) ~= "table" or #methods == 0 then refuse("methods must be a non-empty list of method names") end
  for _, m in ipairs(methods) do
    if type(m) ~= "string" or not (contains(dp.dpsgd.METHODS, m) or m:find("^[%w_]+%+[%w_]+$")) then
      refuse("unknown method '%s' (valid: %s, or \"norms+clip\")", tostring(m), table.concat(dp.dpsgd.METHODS, ", "))
    end
  end
  o.methods = methods
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
  o.target = opts.target == nil and risk.DEFAULT_TARGET or opts.target
  if type(o.target) ~= "number" or not (o.target > 0 and o.target < 1) then
    refuse("target must be a probability in (0, 1), got %s", tostring(opts.target))
  end
  -- progress: true writes a line to stderr at most once a second once the answer takes longer
  -- than a second (what the work has reached); a function is given those lines instead
  if opts.progress ~= nil and type(opts.progress) ~= "boolean" and type(opts.progress) ~= "function" then
    refuse("progress must be true, false or a function(line), got %s", tostring(opts.progress))
  end
  if opts.progress then
    local write = type(opts.progress) == "function" and opts.progress
                  or function(line) io.stderr:write("dpprof risk: ", line, "\n") end
    local t0, last = dp.clock(), nil
    o.progress = function(what)
      local now = dp.clock()
      if now - t0 >= 1 and (last == nil or now - last >= 1) then
        last = now
        write(string.format("%s (%.0f s)", what, now - t0))
      end
    end
  end
  -- workers: the children plan runs are shared among (default: the threads OpenMP may use, the cores)
  local env = dp.environment()
  o.workers = opts.workers and int_at_least(opts.workers, "workers", 1) or math.max(1, env.threads or env.cores or 1)
  -- exhaustive: plan every padded length of every row (false: read rows from verified pieces)
  if opts.exhaustive ~= nil and type(opts.exhaustive) ~= "boolean" then
    refuse("exhaustive must be true or false, got %s", tostring(opts.exhaustive))
  end
  o.exhaustive = opts.exhaustive == true
  o.cdf_points = opts.cdf_points and int_at_least(opts.cdf_points, "cdf_points", 2) or risk.DEFAULT_CDF_POINTS
  o.simulate = opts.simulate and int_at_least(opts.simulate, "simulate", 1) or nil
  -- the model: its sequence length is the cut (model.seq_len, else a checkpoint's positions)
  local okm, mcfg = pcall(experiment.model_options, opts.model, "plan")
  if not okm then refuse("model: %s", dp.error_text(mcfg):gsub("^dpprof%.experiment: ", "")) end
  o.model = dp.deep_copy(opts.model)
  o.seq_len = mcfg.seq_len or mcfg.max_positions
  if o.seq_len == nil then refuse("model.seq_len is required: samples longer than it are cut (or refused)") end
  o.positions = mcfg.max_positions or o.seq_len
  o.optimizer = opts.optimizer
  -- the data set's lengths
  if spec.length_distribution == nil and opts.dataset_size ~= nil and spec.lengths then
    local n = #spec.lengths
    if int_at_least(opts.dataset_size, "dataset_size", 1) ~= n then
      refuse("dataset_size (%s) differs from the %d samples of data.lengths (leave dataset_size out)",
             tostring(opts.dataset_size), n)
    end
  end
  if opts.dataset_size ~= nil then
    local n = int_at_least(opts.dataset_size, "dataset_size", 1)
    if n > risk.MAX_DATASET_SIZE then
      refuse("dataset_size must be an integer in 1..%d (every sample's length and the log-factorials up to it are "
             .. "held: about 100 bytes a sample), got %s", risk.MAX_DATASET_SIZE, tostring(opts.dataset_size))
    end
  end
  -- a lognormal's draws are whole tokens: a p99 that draws past 2^31 tokens is none (the engine's
  -- lengths are uint32), refused before drawing
  local ld = spec.length_distribution
  if ld and ld.kind == "lognormal" and ld.p99 > risk.MAX_LENGTH then
    refuse("data: length_distribution.p99 must be at most %d tokens (a length is a uint32), got %s", risk.MAX_LENGTH,
           tostring(ld.p99))
  end
  local okl, lengths, info = pcall(data.lengths, spec, { seq_len = o.seq_len, dataset_size = opts.dataset_size, seed = o.seed })
  if not okl then refuse("%s", dp.error_text(lengths):gsub("^dpprof%.data: ", "data: ")) end
  if opts.dataset_size ~= nil and spec.lengths_file and math.tointeger(opts.dataset_size) ~= #lengths then
    refuse("dataset_size (%s) differs from the %d samples of data.lengths_file '%s' (leave dataset_size out)",
           tostring(opts.dataset_size), #lengths, spec.lengths_file)
  end
  if #lengths > risk.MAX_DATASET_SIZE then
    refuse("data: %d samples, more than dp.risk holds (at most %d)", #lengths, risk.MAX_DATASET_SIZE)
  end
  if math.type(info.longest) ~= "integer" or info.longest > risk.MAX_LENGTH then
    refuse("data: the longest sample has %s tokens, past %d (a length is a uint32 count of tokens: lower the "
           .. "distribution's median or p99)", string.format("%.4g", info.longest), risk.MAX_LENGTH)
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
  -- the device model and the budget, as dp.fit reads them
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
  if dm.reserve_overhead > risk.MAX_RESERVE_OVERHEAD then
    refuse("device_model: reserve_overhead must be a fraction in 0..%g (the pool's reserved-but-unused bytes over "
           .. "the allocated peak; measured 0.0024 to 0.036), got %s", risk.MAX_RESERVE_OVERHEAD,
           tostring(dm.reserve_overhead))
  end
  o.model_spec, o.device_model = model_spec, dm
  o.budget = dm.memory_bytes - dm.context_bytes
  -- the distinct padded lengths P[1] < ... < P[D], and C[d] = the samples within P[d]
  local counts = {}
  for _, l in ipairs(lengths) do
    local p = data.pad(l, spec.pad_to)
    counts[p] = (counts[p] or 0) + 1
  end
  local P = {}
  for p in pairs(counts) do P[#P + 1] = p end
  table.sort(P)
  local C, cnt, acc = {}, {}, 0
  for d, p in ipairs(P) do acc = acc + counts[p]; C[d], cnt[d] = acc, counts[p] end
  C[0] = 0
  o.P, o.C, o.cnt, o.D = P, C, cnt, #P
  -- the Binomial(N, q) weights of B, and the log-factorials the hypergeometric terms need
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
    if p >= risk.NEGLIGIBLE then
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
  o.m = opts.max_physical_batch_size and int_at_least(opts.max_physical_batch_size, "max_physical_batch_size", 1) or nil
  -- check the first plan configuration as dp.experiment does (a bad model key is the user's)
  local okc, errc = pcall(experiment.config, risk.point_config(o, methods[1], 1, P[1]))
  if not okc then refuse("model: %s", dp.error_text(errc):gsub("^dpprof%.experiment: ", "")) end
  return o
end

-- The configuration of the plan run of b samples padded to L with method.
function risk.point_config(o, method, b, L)
  local c = { model = dp.deep_copy(o.model), dp = { max_physical_batch_size = b } }
  c.model.seq_len, c.model.batch = L, b
  if c.model.path == nil then c.model.max_positions = o.positions end
  if method:find("+", 1, true) then c.norms, c.clip = method:match("^(.-)%+(.*)$") else c.method = method end
  c.optimizer = o.optimizer
  c.device, c.device_model, c.snapshots = "plan", o.model_spec, "none"
  c.iters, c.warmup = 1, 1
  c.name = string.format("%s,b=%d,L=%d", method, b, L)
  return c
end

-- log C(n, k) (-inf when k is out of 0..n).
local function lchoose(lf, n, k)
  if k < 0 or k > n or n < 0 then return -math.huge end
  return lf[n] - lf[k] - lf[n - k]
end

-- The physical batches of a logical batch of B samples with at most m in one, as data.split makes
-- them (the engine's dpsgd_split: k = ceil(B / m) batches, the first B mod k one larger), without
-- listing them: the number k, the larger size big, the smaller size small and how many r are
-- big (r = 0: all are small = big).
local function split_shape(B, m)
  local k = B // m + (B % m ~= 0 and 1 or 0)
  local small, r = B // k, B % k
  return k, r > 0 and small + 1 or small, small, r
end
risk.split_shape = split_shape

-- Plans the (b, L) runs of tasks ({b=, d=} each) and returns their reserved peaks and step times,
-- (and allocated peaks) in the tasks' order: on every core (dp.environment().threads: children of dp.isolate_start, each
-- a contiguous share, each run exactly the one this process would make) when there are enough
-- runs to share, else here. progress(n) is told the runs done so far.
local function plan_runs(o, method, tasks, progress)
  local function run_slice(first, last, tell)
    local reserved, step_ms, peak = {}, {}, {}
    for i = first, last do
      local t = tasks[i]
      local r = fit.run_point(risk.point_config(o, method, t.b, o.P[t.d]))
      reserved[#reserved + 1], step_ms[#step_ms + 1], peak[#peak + 1] = r.plan.predicted_reserved_bytes,
                                                                        r.timing.avg_ms, r.plan.peak_bytes
      if tell then tell(i, #tasks, 1) end
    end
    return reserved, step_ms, peak
  end
  local n = #tasks
  local children = math.min(o.workers, n // risk.MIN_RUNS_PER_CHILD)
  if children <= 1 then return run_slice(1, n, progress) end
  local running, slices, waiting = {}, {}, {}
  for w = 1, children do
    local first, last = (w - 1) * n // children + 1, w * n // children
    slices[w] = { first = first, last = last }
    running[w] = dp.isolate_start(function(a, z)
      local ok, res, ms, pk = pcall(run_slice, a, z)
      if not ok then
        return { failed = dp.error_text(res), refused = type(res) == "table" and res.exit_status == 2 }
      end
      return { reserved = res, step_ms = ms, peak = pk }
    end, first, last, { threads = 1 })
    waiting[w] = running[w]
  end
  local ok, err = pcall(function()
    while #waiting > 0 do
      dp.isolate_wait(waiting, 1)
      for i = #waiting, 1, -1 do
        if waiting[i]:finished() then table.remove(waiting, i) end
      end
      if progress then
        local done = 0
        for w = 1, children do
          if running[w]:finished() then done = done + slices[w].last - slices[w].first + 1 end
        end
        progress(done, n, children)
      end
    end
  end)
  if not ok then -- an interrupt: the children go with it
    for w = 1, children do if not running[w]:finished() then running[w]:stop() end end
    error(err, 0)
  end
  local reserved, step_ms, peak = {}, {}, {}
  for w = 1, children do
    local res = running[w]:result()
    if res.failed then
      if res.refused then dp.refuse(res.failed) end
      error(res.failed, 0)
    end
    if res.status ~= "ok" then
      error(string.format("dpprof.risk: the child planning runs %d..%d of %s ended %s%s", slices[w].first,
                          slices[w].last, method, tostring(res.status),
                          res.message and (": " .. tostring(res.message)) or ""), 0)
    end
    for j = 1, #res.reserved do
      reserved[#reserved + 1], step_ms[#step_ms + 1], peak[#peak + 1] = res.reserved[j], res.step_ms[j], res.peak[j]
    end
  end
  return reserved, step_ms, peak
end

-- The quarter points of the piece [i, j] of a row (indices of the padded lengths, i < q1 < mid < q3 < j).
local function piece_points(i, j)
  local span = j - i
  return { i + span // 4, i + span // 2, i + (3 * span) // 4 }
end

-- The allocated peaks of the lengths inside [i, j] read as the quadratic in the length through the
-- plan runs at P[i], P[m] and P[j] (Lagrange's form, the lengths taken from P[i]), or nil when it is
-- not that quadratic: a run at P[c1] or P[c2] differs from it, or a length inside does not read as
-- a whole number of bytes (an allocator's sizes are whole in every length). The peak's bytes are
-- sums of tensor sizes, each a product of the length (at most squared: T x T scores) and whole
-- numbers, so a piece in which the same allocations make the peak is such a quadratic.
local function read_piece(o, known, i, m, j, c1, c2)
  local P = o.P
  local x0, x1, x2 = 0.0, (P[m] - P[i]) + 0.0, (P[j] - P[i]) + 0.0
  local y0, y1, y2 = known[i][3], known[m][3], known[j][3]
  local function at(x) -- x: a float, the length less P[i]
    local v = y0 * (((x - x1) * (x - x2)) / ((x0 - x1) * (x0 - x2)))
            + y1 * (((x - x0) * (x - x2)) / ((x1 - x0) * (x1 - x2)))
            + y2 * (((x - x0) * (x - x1)) / ((x2 - x0) * (x2 - x1)))
    local r = math.floor(v + 0.5)
    if math.abs(v - r) > risk.PIECE_WHOLE_TOLERANCE then return nil end
    return math.tointeger(r) or r
  end
  for _, c in ipairs({ c1, c2 }) do
    if at((P[c] - P[i]) + 0.0) ~= known[c][3] then return nil end
  end
  local values = {}
  for d = i + 1, j - 1 do
    local v = at((P[d] - P[i]) + 0.0)
    if v == nil or v < 0 then return nil end
    values[d] = v
  end
  return values
end

-- The state of one method: its plan runs, a row per physical batch size b (the reserved peak and
-- step time at every padded length P[d], planned when b is first needed: st.need plans the rows
-- of several sizes at once, on every core), and the counts.
local function method_state(o, method)
  local st = { method = method, runs = 0, rows = {}, monotone = true, sizes = {} }
  -- whether row is no less than the row below it and no more than the one above (the planned
  -- sizes in order: while every pair so far is monotone, the neighbours decide for all)
  local function add_row(b, row)
    for d = 2, o.D do
      if row.reserved[d] < row.reserved[d - 1] then st.monotone = false break end
    end
    local sizes = st.sizes
    local lo, hi = 1, #sizes + 1 -- the insertion point: sizes[lo - 1] < b < sizes[lo]
    while lo < hi do
      local mid = (lo + hi) // 2
      if sizes[mid] < b then lo = mid + 1 else hi = mid end
    end
    if st.monotone then -- across sizes: more samples, no less memory
      local below, above = sizes[lo - 1] and st.rows[sizes[lo - 1]], sizes[lo] and st.rows[sizes[lo]]
      for d = 1, o.D do
        if (below and below.reserved[d] > row.reserved[d]) or (above and above.reserved[d] < row.reserved[d]) then
          st.monotone = false
          break
        end
      end
    end
    table.insert(sizes, lo, b)
    if not o.quiet then
      print(string.format("  %s b=%d: %d plan runs (%d padded lengths), reserved %s at %d tokens .. %s at %d", method, b,
                          row.planned, o.D,
                          dp.format_bytes(row.reserved[1]), o.P[1], dp.format_bytes(row.reserved[o.D]), o.P[o.D]))
    end
    st.rows[b] = row
  end
  -- plans the rows of the sizes in list that are not planned yet: every padded length planned
  -- (exhaustive), or read from pieces: a piece [i, j] of a row (its ends planned) is the quadratic
  -- in the length through P[i], P[mid] and P[j] when the runs at its quarter points equal that
  -- quadratic to the byte and every length inside reads as a whole number of bytes; else it is
  -- split at those points and each part read the same way, down to pieces of at most
  -- PIECE_PLAN_ALL lengths, planned whole. Each round's runs are planned together (on every core).
  function st.need(list)
    local todo, seen = {}, {}
    for _, b in ipairs(list) do
      if not st.rows[b] and not seen[b] then seen[b] = true; todo[#todo + 1] = b end
    end
    if #todo == 0 then return end
    local known, pending = {}, {} -- known[b][d] = {reserved, step_ms, peak} of a plan run; pending[b] = pieces {i, j}
    for _, b in ipairs(todo) do
      known[b], pending[b] = {}, {}
      if o.exhaustive or o.D <= risk.PIECE_PLAN_ALL + 2 then
        for d = 1, o.D do known[b][d] = false end -- false: to plan
      else
        known[b][1], known[b][o.D] = false, false
        pending[b][1] = { 1, o.D }
      end
    end
    local filled = {} -- filled[b][d] = the allocated peak read from a verified piece
    for _, b in ipairs(todo) do filled[b] = {} end
    local round = 0
    while true do
      -- the runs this round needs: every piece's quarter points (or all its lengths when short)
      for _, b in ipairs(todo) do
        for _, pc in ipairs(pending[b]) do
          local i, j = pc[1], pc[2]
          if j - i - 1 <= risk.PIECE_PLAN_ALL then
            for d = i + 1, j - 1 do if known[b][d] == nil then known[b][d] = false end end
          else
            for _, d in ipairs(piece_points(i, j)) do if known[b][d] == nil then known[b][d] = false end end
          end
        end
      end
      local tasks = {}
      for _, b in ipairs(todo) do
        for d = 1, o.D do if known[b][d] == false then tasks[#tasks + 1] = { b = b, d = d } end end
      end
      if #tasks > 0 then
        round = round + 1
        local done_before = st.runs
        local reserved, step_ms, peak = plan_runs(o, method, tasks, o.progress and function(k, n, cores)
          o.progress(string.format("%s: planning batch size%s %s, round %d: %d of %d runs on %d core%s; %d before",
                                   method, #todo == 1 and "" or "s", #todo == 1 and tostring(todo[1])
                                   or (todo[1] .. ".." .. todo[#todo]), round, k, n, cores, cores == 1 and "" or "s",
                                   done_before))
        end)
        st.runs = st.runs + #tasks
        for t, task in ipairs(tasks) do known[task.b][task.d] = { reserved[t], step_ms[t], peak[t] } end
      end
      -- each piece: read, or split
      local any = false
      for _, b in ipairs(todo) do
        local next_pending = {}
        for _, pc in ipairs(pending[b]) do
          local i, j = pc[1], pc[2]
          if j - i - 1 > risk.PIECE_PLAN_ALL then
            local pts = piece_points(i, j)
            local values = read_piece(o, known[b], i, pts[2], j, pts[1], pts[3])
            if values then
              for d = i + 1, j - 1 do if not known[b][d] then filled[b][d] = values[d] end end
            else
              local cuts = { i, pts[1], pts[2], pts[3], j }
              for c = 1, 4 do
                if cuts[c + 1] - cuts[c] > 1 then next_pending[#next_pending + 1] = { cuts[c], cuts[c + 1] } end
              end
            end
          end
        end
        pending[b] = next_pending
        if #next_pending > 0 then any = true end
      end
      if not any then break end
    end
    for _, b in ipairs(todo) do
      local row = { reserved = {}, step_ms = {}, planned = 0 }
      for d = 1, o.D do
        local k = known[b][d]
        if k then row.reserved[d], row.step_ms[d], row.planned = k[1], k[2], row.planned + 1
        else row.reserved[d] = plan.budget(o.device_model, filled[b][d]).predicted_reserved_bytes end
        assert(row.reserved[d], "dpprof.risk: a padded length of a row was neither planned nor read")
      end
      add_row(b, row)
    end
  end
  -- the plan's step time of b samples at P[d]: its run's, planned now if the row read it from a piece
  function st.step_ms(b, d)
    local row = st.row(b)
    if row.step_ms[d] == nil then
      local reserved, step_ms = plan_runs(o, method, { { b = b, d = d } })
      st.runs = st.runs + 1
      if reserved[1] ~= row.reserved[d] then
        error(string.format("dpprof.risk: the plan run of %s at b=%d L=%d reserves %d bytes, its row read %d "
                            .. "(a row's piece is not the quadratic it was read as: run with exhaustive = true)",
                            method, b, o.P[d], reserved[1], row.reserved[d]), 0)
      end
      row.step_ms[d] = step_ms[1]
    end
    return row.step_ms[d]
  end
  function st.row(b)
    if not st.rows[b] then st.need({ b }) end
    return st.rows[b]
  end
  function st.reserved(b, d) return st.row(b).reserved[d] end
  return st
end

-- The counts of one level x, per batch size b (and pair of sizes), each worked out once over the
-- padded lengths and kept in st for every cut: W[d] the samples at lengths up to P[d] whose batch
-- of b fits under x, ok[d] whether a batch of b at P[d] does, first_fail the first length at
-- which it does not (nil: none).
local function level_counts(o, st, x)
  st.levels = st.levels or {}
  local lv = st.levels[x]
  if lv then return lv end
  lv = { one = {}, two = {} }
  local function tally(ok)
    local W, acc, first_fail = {}, 0, nil
    for d = 1, o.D do
      if ok[d] then acc = acc + o.cnt[d] elseif not first_fail then first_fail = d end
      W[d] = acc
    end
    return { W = W, ok = ok, first_fail = first_fail }
  end
  function lv.of(b)
    local e = lv.one[b]
    if e then return e end
    local row, ok = st.row(b).reserved, {}
    for d = 1, o.D do ok[d] = row[d] <= x end
    e = tally(ok)
    lv.one[b] = e
    return e
  end
  function lv.both(big, small)
    local key = big * (o.Bhi + 2) + small
    local e = lv.two[key]
    if e then return e end
    local a, c, ok = lv.of(big).ok, lv.of(small).ok, {}
    for d = 1, o.D do ok[d] = a[d] and c[d] end
    e = tally(ok)
    lv.two[key] = e
    return e
  end
  st.levels[x] = lv
  return lv
end

-- The counts one level x (and cut at P[cap], nil: none) needs, per batch size, in O(1) each from
-- level_counts: count(b) the samples whose batch of b fits under x (a sample longer than P[cap]
-- is cut to it), count(b, true) those below the first padded length that does not
-- (group_by_length's reading: see the header), count_both(big, small) those at which both fit.
local function counts_at(o, st, x, cap)
  local lv, total = level_counts(o, st, x), o.C[o.D]
  local function within(e)
    if not cap then return e.W[o.D] end
    return e.W[cap] + (e.ok[cap] and (total - o.C[cap]) or 0)
  end
  local c = {}
  function c.count(b, prefix)
    local e = lv.of(b)
    if not prefix then return within(e) end
    if e.first_fail and (not cap or e.first_fail <= cap) then return o.C[e.first_fail - 1] end
    return total -- every length up to the cut fits, and the longer ones are cut to it
  end
  function c.count_both(big, small) return within(lv.both(big, small)) end
  return c
end

-- sum over i = lo..hi of exp(term(i)), in that order, term concave in i (a sum of log-binomials
-- whose arguments are affine in i) and finite on lo..hi: the terms under exp's range (exp(t) = 0
-- for t below -745.2) are left out, which leaves the sum exactly what adding them gives. From the
-- largest term (found by bisection on the sign of term(i + 1) - term(i)) each way until a term
-- is below FAR: past it a concave term only falls (the log-factorials' rounding, ~1e-7 at N = 10^8,
-- is far inside the margin).
local FAR = -800
local function sum_exp(term, lo, hi)
  if lo > hi then return 0 end
  local a, z = lo, hi
  while a < z do
    local mid = (a + z) // 2
    if term(mid + 1) > term(mid) then a = mid + 1 else z = mid end
  end
  local first, last = a, a
  while first > lo and term(first) >= FAR do first = first - 1 end
  while last < hi and term(last) >= FAR do last = last + 1 end
  local total = 0
  for i = first, last do total = total + math.exp(term(i)) end
  return total
end

-- P(a step of B samples fits under x) with at most m in a physical batch (counts: counts_at's).
local function fit_given_B(o, counts, B, m)
  local _, big, small, r = split_shape(B, m)
  local lf, N = o.lf, o.N
  if big == small then
    local c = counts.count(big, o.spec.group_by_length)
    return math.exp(lchoose(lf, c, B) - lchoose(lf, N, B))
  end
  local rs = r * big
  if o.spec.group_by_length then -- at least rs of the B within T(big), all within T(small)
    local c = counts.count(small, true)
    local a = math.min(c, counts.count(big, true))
    local den = lchoose(lf, N, B)
    local function term(j) return lchoose(lf, a, j) + lchoose(lf, c - a, B - j) - den end
    -- the terms of j = rs..B that are finite: j <= a and B - j <= c - a
    return math.min(1, sum_exp(term, math.max(rs, B - (c - a)), math.min(B, a)))
  end
  -- the larger batches' rs samples in A (big fits), the other B - rs in C (small fits), disjoint
  local a, c = counts.count(big, false), counts.count(small, false)
  local n11 = counts.count_both(big, small)
  local n10 = a - n11
  local den = lchoose(lf, N, rs) + lchoose(lf, N - rs, B - rs)
  local function term(i)
    return lchoose(lf, n11, i) + lchoose(lf, n10, rs - i) + lchoose(lf, c - i, B - rs) - den
  end
  -- the terms of i = max(0, rs - n10)..min(rs, n11) that are finite: also B - rs <= c - i
  return math.min(1, sum_exp(term, math.max(0, rs - n10), math.min(rs, n11, c - (B - rs))))
end

-- The physical batch sizes that occur with m (over B's support).
local function sizes_of(o, m)
  local seen, out = {}, {}
  for B = math.max(1, o.Blo), o.Bhi do
    if o.pmf[B] then
      local _, big, small = split_shape(B, m)
      for _, s in ipairs({ big, small }) do
        if not seen[s] then seen[s] = true; out[#out + 1] = s end
      end
    end
  end
  table.sort(out)
  return out
end

-- F(x): the probability that a step's peak is at most x, with m and the cut at P[cap] (nil: none).
local function cdf_at(o, st, m, x, cap)
  st.need(sizes_of(o, m))
  if (o.pmf[0] or 0) > 0 then st.need({ 1 }) end
  local counts = counts_at(o, st, x, cap)
  local f = 0
  for B = o.Blo, o.Bhi do
    local w = o.pmf[B]
    if w then
      if B == 0 then
        if st.reserved(1, 1) <= x then f = f + w end
      else
        f = f + w * fit_given_B(o, counts, B, m)
      end
    end
  end
  return math.min(1, f)
end

-- The typical step's modelled time for m (with lengths cut at P[cap], if given).
local function typical_step_ms(o, st, m, cap)
  local B = math.max(1, math.floor(o.N * o.q + 0.5))
  local top = cap or o.D
  local k, big, small, r = split_shape(B, m)
  local ms = {}
  for _, b in ipairs({ big, small }) do
    if not ms[b] then
      local d = top
      for i = 1, top - 1 do
        if (o.C[i] / o.N) ^ b >= 0.5 then d = i break end
      end
      ms[b] = st.step_ms(b, d)
    end
  end
  local total = 0 -- the physical batches' times added in their order, as they were listed
  for j = 1, k do total = total + ms[j <= r and big or small] end
  return total
end

-- The per-step and run probabilities of exceeding the budget with m (and the cut at P[cap]).
local function exceed(o, st, m, cap)
  local p = math.min(1, math.max(0, 1 - cdf_at(o, st, m, o.budget, cap)) + o.tail)
  return p, risk.run_probability(p, o.steps)
end

-- Runs one method; see the header.
local function run_method(o, method)
  local st = method_state(o, method)
  local m = o.m or math.max(1, o.Bhi)
  local e = { method = method, max_physical_batch_size = m }
  e.per_step, e.probability = exceed(o, st, m)
  e.step_ms = typical_step_ms(o, st, m)
  -- the CDF at cdf_points levels from the smallest step's peak to the largest's, and the budget
  local sizes = sizes_of(o, m)
  local low, high = st.reserved(1, 1), 0
  for _, b in ipairs(sizes) do
    for d = 1, o.D do high = math.max(high, st.reserved(b, d)) end
  end
  local levels = { o.budget }
  for i = 0, o.cdf_points - 1 do
    levels[#levels + 1] = math.floor(low + (high - low) * i / (o.cdf_points - 1) + 0.5)
  end
  table.sort(levels)
  e.cdf = {}
  for _, x in ipairs(levels) do
    if #e.cdf == 0 or e.cdf[#e.cdf].bytes ~= x then e.cdf[#e.cdf + 1] = { bytes = x, p = cdf_at(o, st, m, x) } end
  end
  -- the largest m such that every m' up to it keeps the run under target (m past the largest
  -- logical batch changes nothing)
  local safe
  local top, t_last = math.max(1, o.Bhi), dp.clock()
  for mm = 1, top do
    if o.progress and dp.clock() - t_last >= 1 then
      t_last = dp.clock()
      o.progress(string.format("%s: safe max_physical_batch_size: %d of %d checked", method, mm - 1, top))
    end
    local p, pr = exceed(o, st, mm)
    if pr > o.target then break end
    safe = { max_physical_batch_size = mm, per_step = p, probability = pr }
  end
  if safe then
    safe.step_ms = typical_step_ms(o, st, safe.max_physical_batch_size)
    safe.whole_logical_batch = safe.max_physical_batch_size >= o.Bhi
  end
  e.safe = safe
  -- the longest cut at m that keeps the run under target
  for d = o.D, 1, -1 do
    local p, pr = exceed(o, st, m, d)
    if pr <= o.target then
      e.length_cap = { length = o.P[d], per_step = p, probability = pr, cut = o.N - o.C[d],
                       step_ms = typical_step_ms(o, st, m, d) }
      break
    end
  end
  e.monotone = st.monotone
  e.st = st
  return e
end

-- The simulation of S steps (see the header) for a method's state; returns {steps=, peaks=,
-- per_step=, cdf=, ks=}.
local function simulate(o, e, S)
  local st, m, N = e.st, e.max_physical_batch_size, o.N
  local index = {}
  for d, p in ipairs(o.P) do index[p] = d end
  local peaks, logical, over = {}, {}, 0
  for s = 1, S do
    local chosen = {}
    for j, i in ipairs(dp.dpsgd.poisson_draw(o.seed, s - 1, o.q, N)) do chosen[j] = o.lengths[i] end
    logical[s] = #chosen
    local peak
    if #chosen == 0 then
      peak = st.reserved(1, 1)
    else
      peak = 0
      for _, pb in ipairs(data.physical_batches(chosen, m, o.spec)) do
        peak = math.max(peak, st.reserved(pb.size, index[pb.padded]))
      end
    end
    peaks[s] = peak
    if peak > o.budget then over = over + 1 end
  end
  local sorted = table.move(peaks, 1, S, 1, {})
  table.sort(sorted)
  local cdf, ks, j = {}, 0, 0
  for i, c in ipairs(e.cdf) do
    while j < S and sorted[j + 1] <= c.bytes do j = j + 1 end
    cdf[i] = { bytes = c.bytes, p = j / S }
    ks = math.max(ks, math.abs(j / S - c.p))
  end
  return { steps = S, seed = o.seed, peaks = peaks, logical = logical, per_step = over / S, cdf = cdf, ks = ks,
           ks_bound_99 = 1.63 / math.sqrt(S) }
end

-- The rows of a method as dp.risk reads them: {lengths = {P[1], ...}, [b] = {reserved = {...},
-- planned = runs}} for each physical batch size in sizes (the reserved peak of b samples padded to
-- each distinct padded length of the data), and the plan runs made.
function risk.rows(opts, method, sizes)
  local o = risk.options(opts)
  plan.prepare(o.device_model)
  local st = method_state(o, method)
  st.need(sizes)
  local out = { lengths = table.move(o.P, 1, o.D, 1, {}), runs = st.runs }
  for _, b in ipairs(sizes) do out[b] = { reserved = st.rows[b].reserved, planned = st.rows[b].planned } end
  return out
end

function risk.run(opts)
  local o = risk.options(opts)
  plan.prepare(o.device_model)
  local out = { budget_bytes = o.budget, device_model = o.device_model, steps = o.steps, sample_rate = o.q,
                dataset_size = o.N, target = o.target, seed = o.seed, seq_len = o.seq_len,
                max_physical_batch_size = o.m or o.Bhi, whole_logical_batch = o.m == nil,
                data = { samples = o.N, cut = o.info.cut, longest = o.info.longest, source = o.info.source,
                         pad_to = o.spec.pad_to, group_by_length = o.spec.group_by_length, padded_lengths = o.D },
                logical_batch = { mean = o.N * o.q, low = o.Blo, high = o.Bhi, tail = o.tail, empty = o.pmf[0] or 0 },
                methods = {}, by_method = {} }
  for _, method in ipairs(o.methods) do
    local e = run_method(o, method)
    if o.simulate then e.simulation = simulate(o, e, o.simulate) end
    e.runs = e.st.runs
    e.st = nil
    out.methods[#out.methods + 1] = e
    out.by_method[method] = e
  end
  local first = out.methods[1]
  out.probability, out.per_step, out.cdf = first.probability, first.per_step, first.cdf
  return out
end

return risk
