-- dpprof.risk: the chance that some step of a DP-SGD run with Poisson sampling and samples of
-- their own lengths runs out of memory, from plan runs (issue 31).
--
--   dp.risk{ model = {...}, method = "flash_clip" | methods = {...}, data = {...dpprof.data spec...},
--            sample_rate = q, dataset_size = N, steps = S, max_physical_batch_size = m,
--            budget_gb = G | device_model = "h100"|"h200"|"h100-calibrated"|"FILE.json"|{...}, target = 1e-3, seed = 0,
--            optimizer = {...}, cdf_points = 24, simulate = STEPS, quiet = true, progress = false,
--            workers = cores, exhaustive = false, clipping = {clipping =, clip_fn =, gamma =, bounds =, groups =} }
--   (clipping: the plan runs' clipping style, as an experiment's dp table gives it)
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
--
-- Its parts: the options and the working state (dpprof.risk_options), the rows of plan runs
-- (dpprof.risk_rows); this module is the probability model and the answer.
local dp = require("dpprof")
local plan = require("dpprof.plan")
local data = require("dpprof.data")
local risk_options = require("dpprof.risk_options")
local risk_rows = require("dpprof.risk_rows")

local risk = {}

for _, k in ipairs({ "OPTION_KEYS", "DEFAULT_TARGET", "DEFAULT_CDF_POINTS", "NEGLIGIBLE", "MAX_DATASET_SIZE",
                     "MAX_LENGTH", "MAX_RESERVE_OVERHEAD", "options", "point_config" }) do
  risk[k] = risk_options[k]
end
for _, k in ipairs({ "MIN_RUNS_PER_CHILD", "PIECE_PLAN_ALL", "PIECE_WHOLE_TOLERANCE" }) do risk[k] = risk_rows[k] end
local log1p, expm1 = risk_options.log1p, risk_options.expm1
local method_state = risk_rows.method_state

-- The run's probability from the per-step one: 1 - (1 - p)^steps.
function risk.run_probability(p, steps)
  if p >= 1 then return 1.0 end
  if p <= 0 then return 0.0 end
  return -expm1(steps * log1p(-p))
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

-- dp.risk: the answer for every method (see the header for the options and the result).
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
  local t = o.info.text -- a data set of text: what its reading found
  if t then
    out.data.dataset, out.data.records, out.data.bad, out.data.tokens = o.spec.dataset, t.records, t.bad, t.tokens
    out.data.bad_records = dp.json.array(t.bad_list)
  end
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
