-- risk_reference.lua: dpprof.risk as it was before issue 37 item 6 (every bound scanned, every split
-- listed, every term summed): the exhaustive reference test_risk_fast.lua compares the fast one with.
-- Kept verbatim (only this header added); do not use it for anything else.
-- dpprof.risk: the chance that some step of a DP-SGD run with Poisson sampling and samples of
-- their own lengths runs out of memory, from plan runs (issue 31).
--
--   dp.risk{ model = {...}, method = "flash_clip" | methods = {...}, data = {...dpprof.data spec...},
--            sample_rate = q, dataset_size = N, steps = S, max_physical_batch_size = m,
--            budget_gb = G | device_model = "h100"|"h200"|"h100-calibrated"|"FILE.json"|{...}, target = 1e-3, seed = 0,
--            optimizer = {...}, cdf_points = 24, simulate = STEPS, quiet = true }
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
-- The plan runs: a row per physical batch size b that occurs, planned at every distinct padded
-- length of the data set (b x D runs; a few ms each for an 8B model), so nothing assumes the peak
-- grows with the length (flash_clip's does not everywhere: `monotone` says whether the rows
-- did). The CDF of the step peak is exact at cdf_points levels from the smallest step's peak to
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
                     "cdf_points", "simulate", "quiet" }
risk.DEFAULT_TARGET = 1e-3
risk.DEFAULT_CDF_POINTS = 24
-- Logical batch sizes with a Binomial probability below this are left out (counted as exceeding).
risk.NEGLIGIBLE = 1e-18
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
  if opts.dataset_size ~= nil then int_at_least(opts.dataset_size, "dataset_size", 1) end
  local okl, lengths, info = pcall(data.lengths, spec, { seq_len = o.seq_len, dataset_size = opts.dataset_size, seed = o.seed })
  if not okl then refuse("%s", dp.error_text(lengths):gsub("^dpprof%.data: ", "data: ")) end
  if opts.dataset_size ~= nil and spec.lengths_file and math.tointeger(opts.dataset_size) ~= #lengths then
    refuse("dataset_size (%s) differs from the %d samples of data.lengths_file '%s' (leave dataset_size out)",
           tostring(opts.dataset_size), #lengths, spec.lengths_file)
  end
  o.lengths, o.info, o.N = lengths, info, #lengths
  -- an empty run: every step's batch empty (in expectation, fewer than one non-empty step)
  local p_empty = math.exp(o.N * log1p(-o.q))
  if o.q < 1 and o.steps * -expm1(o.N * log1p(-o.q)) < 1 then
    refuse("sample_rate %g over %d samples leaves the run's batches empty (P(empty batch) = %.4g: fewer than one "
           .. "non-empty step in %d expected); raise sample_rate or dataset_size", o.q, o.N, p_empty, o.steps)
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

-- The state of one method: its plan runs, a row per physical batch size b (the reserved peak and
-- step time at every padded length P[d], planned when b is first needed), and the counts.
local function method_state(o, method)
  local st = { method = method, runs = 0, rows = {}, monotone = true }
  function st.row(b)
    local row = st.rows[b]
    if row then return row end
    row = { reserved = {}, step_ms = {} }
    for d = 1, o.D do
      local r = fit.run_point(risk.point_config(o, method, b, o.P[d]))
      st.runs = st.runs + 1
      row.reserved[d], row.step_ms[d] = r.plan.predicted_reserved_bytes, r.timing.avg_ms
      if d > 1 and row.reserved[d] < row.reserved[d - 1] then st.monotone = false end
    end
    for bb, other in pairs(st.rows) do -- across sizes: more samples, no less memory
      for d = 1, o.D do
        if (bb < b and other.reserved[d] > row.reserved[d]) or (bb > b and other.reserved[d] < row.reserved[d]) then
          st.monotone = false
        end
      end
    end
    if not o.quiet then
      print(string.format("  %s b=%d: %d plan runs, reserved %s at %d tokens .. %s at %d", method, b, o.D,
                          dp.format_bytes(row.reserved[1]), o.P[1], dp.format_bytes(row.reserved[o.D]), o.P[o.D]))
    end
    st.rows[b] = row
    return row
  end
  function st.reserved(b, d) return st.row(b).reserved[d] end
  return st
end

-- Whether b samples padded to P[min(d, cap)] fit under x.
local function fits(st, b, d, x, cap)
  if cap and d > cap then d = cap end
  return st.row(b).reserved[d] <= x
end

-- Samples whose batch of b fits under x (with lengths cut at P[cap]); with prefix, those below the
-- first padded length that does not fit (group_by_length's reading: see the header).
local function count_within(o, st, b, x, cap, prefix)
  local n = 0
  for d = 1, o.D do
    local f = fits(st, b, d, x, cap)
    if prefix and not f then break end
    if f then n = n + o.cnt[d] end
  end
  return n
end

-- Samples whose batches of both big and small fit under x.
local function count_both(o, st, big, small, x, cap)
  local n = 0
  for d = 1, o.D do
    if fits(st, big, d, x, cap) and fits(st, small, d, x, cap) then n = n + o.cnt[d] end
  end
  return n
end

-- P(a step of B samples fits under x) with at most m in a physical batch.
local function fit_given_B(o, st, B, m, x, cap)
  local sizes = data.split(B, m)
  local big, small = sizes[1], sizes[#sizes]
  local lf, N = o.lf, o.N
  if big == small then
    local c = count_within(o, st, big, x, cap, o.spec.group_by_length)
    return math.exp(lchoose(lf, c, B) - lchoose(lf, N, B))
  end
  local r = 0
  for _, s in ipairs(sizes) do if s == big then r = r + 1 end end
  local rs = r * big
  if o.spec.group_by_length then -- at least rs of the B within T(big), all within T(small)
    local c = count_within(o, st, small, x, cap, true)
    local a = math.min(c, count_within(o, st, big, x, cap, true))
    local total, den = 0, lchoose(lf, N, B)
    for j = rs, B do total = total + math.exp(lchoose(lf, a, j) + lchoose(lf, c - a, B - j) - den) end
    return math.min(1, total)
  end
  -- the larger batches' rs samples in A (big fits), the other B - rs in C (small fits), disjoint
  local a, c = count_within(o, st, big, x, cap), count_within(o, st, small, x, cap)
  local n11 = count_both(o, st, big, small, x, cap)
  local n10 = a - n11
  local den = lchoose(lf, N, rs) + lchoose(lf, N - rs, B - rs)
  local total = 0
  for i = math.max(0, rs - n10), math.min(rs, n11) do
    total = total + math.exp(lchoose(lf, n11, i) + lchoose(lf, n10, rs - i) + lchoose(lf, c - i, B - rs) - den)
  end
  return math.min(1, total)
end

-- F(x): the probability that a step's peak is at most x, with m and the cut at P[cap] (nil: none).
local function cdf_at(o, st, m, x, cap)
  local f = 0
  for B = o.Blo, o.Bhi do
    local w = o.pmf[B]
    if w then
      if B == 0 then
        if st.reserved(1, 1) <= x then f = f + w end
      else
        f = f + w * fit_given_B(o, st, B, m, x, cap)
      end
    end
  end
  return math.min(1, f)
end

-- The physical batch sizes that occur with m (over B's support).
local function sizes_of(o, m)
  local seen, out = {}, {}
  for B = math.max(1, o.Blo), o.Bhi do
    if o.pmf[B] then
      for _, s in ipairs(data.split(B, m)) do
        if not seen[s] then seen[s] = true; out[#out + 1] = s end
      end
    end
  end
  table.sort(out)
  return out
end

-- The typical step's modelled time for m (with lengths cut at P[cap], if given).
local function typical_step_ms(o, st, m, cap)
  local B = math.max(1, math.floor(o.N * o.q + 0.5))
  local top = cap or o.D
  local total = 0
  for _, b in ipairs(data.split(B, m)) do
    local d = top
    for i = 1, top - 1 do
      if (o.C[i] / o.N) ^ b >= 0.5 then d = i break end
    end
    total = total + st.row(b).step_ms[d]
  end
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
  for mm = 1, math.max(1, o.Bhi) do
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
