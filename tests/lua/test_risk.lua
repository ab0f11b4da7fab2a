-- test_risk.lua: dp.risk and `dpprof risk` (issue 31). The per-step probability equals a brute
-- force over every logical batch and every order of its samples, planned pair by pair here (for
-- methods whose peak is and is not monotone in the length, with and without group_by_length);
-- the run's probability is 1 - (1 - p)^steps; the computed CDF agrees with a simulation of the
-- run's steps drawn with the seed and planned one by one (the agreement measured is printed); the
-- safe max_physical_batch_size and the length cap are the boundaries they claim; bad input is
-- refused naming the key (exit 2 from the CLI); the CLI answers and writes its JSON.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local data = dp.data

local TINY = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 32 }

-- An exact card of `bytes`: no context, no workspace, reserved = allocated.
local function card(bytes)
  return { name = "exact", memory_bytes = bytes, peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 }
end

-- The reserved peak of b samples padded to L with method, planned here (as the engine plans a
-- physical batch: seq_len L, the model's positions kept).
local peaks = {}
local function peak(method, b, L)
  local key = string.format("%s/%d/%d", method, b, L)
  if not peaks[key] then
    local model = dp.deep_copy(TINY)
    model.seq_len, model.batch, model.max_positions = L, b, TINY.seq_len
    local r = dp.experiment{ model = model, method = method, device = "plan", device_model = card(1 << 40), iters = 1,
                             warmup = 1, snapshots = "none", dp = { max_physical_batch_size = b } }
    check.eq(r.status, "ok", "plan run " .. key)
    peaks[key] = r.plan.predicted_reserved_bytes
  end
  return peaks[key]
end

-- P(one step exceeds x) by brute force: every subset of the data set with its Poisson weight, and
-- (without group_by_length) every order of its samples, split as Opacus splits them.
local function brute(method, lengths, q, m, x, pad_to, grouped)
  local N, total = #lengths, 0
  local shortest = math.huge
  for _, l in ipairs(lengths) do shortest = math.min(shortest, data.pad(l, pad_to)) end
  local function exceeds(order)
    local at = 1
    for _, size in ipairs(data.split(#order, m)) do
      local longest = 0
      for j = at, at + size - 1 do longest = math.max(longest, order[j]) end
      if peak(method, size, data.pad(longest, pad_to)) > x then return true end
      at = at + size
    end
    return false
  end
  local function permutations(list, k, visit)
    if k <= 1 then return visit(list) end
    for i = 1, k do
      list[i], list[k] = list[k], list[i]
      permutations(list, k - 1, visit)
      list[i], list[k] = list[k], list[i]
    end
  end
  for mask = 0, (1 << N) - 1 do
    local chosen = {}
    for i = 1, N do if mask & (1 << (i - 1)) ~= 0 then chosen[#chosen + 1] = lengths[i] end end
    local w = q ^ #chosen * (1 - q) ^ (N - #chosen)
    if #chosen == 0 then
      if peak(method, 1, shortest) > x then total = total + w end
    elseif grouped then
      table.sort(chosen)
      if exceeds(chosen) then total = total + w end
    else
      local n, bad = 0, 0
      permutations(chosen, #chosen, function(order)
        n = n + 1
        if exceeds(order) then bad = bad + 1 end
      end)
      total = total + w * bad / n
    end
  end
  return total
end

-- 1. Exact: the computed per-step probability is the brute force's, at budgets through the range.
do
  local lengths, q, m, pad_to = { 3, 9, 17, 30, 5, 12, 25 }, 0.35, 2, 4
  local cases = 0
  for _, method in ipairs({ "vanilla", "flash_clip" }) do
    for _, grouped in ipairs({ false, true }) do
      local levels = { peak(method, 1, 4), peak(method, 2, 12), peak(method, 2, 20), peak(method, 1, 32),
                       peak(method, 2, 32) - 1 }
      for _, x in ipairs(levels) do
        local r = dp.risk{ model = TINY, method = method, data = { lengths = lengths, pad_to = pad_to, group_by_length = grouped },
                           sample_rate = q, steps = 50, max_physical_batch_size = m, device_model = card(x) }
        local e = r.methods[1]
        local want = brute(method, lengths, q, m, x, pad_to, grouped)
        if e.monotone or not grouped then -- exact; group_by_length with a non-monotone peak is an upper bound
          check.near(e.per_step, want, 1e-9, string.format("%s grouped=%s at %d: per-step probability", method, grouped, x))
        else
          check.truthy(e.per_step >= want - 1e-12, string.format("%s grouped at %d: an upper bound (%g >= %g)", method, x,
                                                                 e.per_step, want))
        end
        check.near(e.probability, 1 - (1 - e.per_step) ^ 50, 1e-12, "the run's probability")
        check.eq(r.probability, e.probability, "the first method's probability on top")
        cases = cases + 1
      end
    end
  end
  check.eq(cases, 20, "brute-force cases")
  -- the exact budget: just at a pair's peak it fits, one byte below it does not
  local at = dp.risk{ model = TINY, method = "vanilla", data = { lengths = { 30 } }, sample_rate = 1, steps = 1,
                      device_model = card(peak("vanilla", 1, 30)) }
  check.eq(at.per_step, 0.0, "a step exactly at the budget fits")
  local below = dp.risk{ model = TINY, method = "vanilla", data = { lengths = { 30 } }, sample_rate = 1, steps = 1,
                         device_model = card(peak("vanilla", 1, 30) - 1) }
  check.eq(below.per_step, 1.0, "a byte over the budget does not")
end

-- 2. The run's probability for small p keeps its digits.
do
  local risk = require("dpprof.risk")
  check.near(risk.run_probability(1e-9, 10000), 1 - math.exp(10000 * math.log(1 - 1e-9)), 1e-6, "small p")
  check.near(risk.run_probability(1e-12, 10000), 9.99999995e-9, 1e-7, "tiny p: 1e-8 less its square")
  check.eq(risk.run_probability(0, 10), 0.0, "p = 0")
  check.eq(risk.run_probability(1, 10), 1.0, "p = 1")
end

-- 3. Against a simulation of the run (Opacus's draws with the seed, each physical batch planned):
-- the CDFs differ by at most the 99% Kolmogorov bound, and at a budget in the middle the
-- simulated share of steps over it is within 4 standard deviations of the computed probability.
do
  local model = { arch = "gpt", vocab = 2048, hidden = 128, layers = 2, heads = 4, seq_len = 128 }
  local dist = { kind = "lognormal", median = 40, p99 = 200 }
  for _, method in ipairs({ "vanilla", "flash_clip" }) do
    for _, grouped in ipairs({ false, true }) do
      local base = { model = model, method = method, data = { length_distribution = dist, pad_to = 8, group_by_length = grouped },
                     dataset_size = 4000, sample_rate = 0.003, steps = 1000, max_physical_batch_size = 4, seed = 1,
                     device_model = card(1 << 40) }
      local first = dp.risk(base).methods[1]
      -- on a card that holds every step only the Binomial terms below 1e-18 count as exceeding (a
      -- bound on them: 3.5e-15 here)
      -- (the log-factorials' rounding once made it 1e-12 at N = 4000)
      check.truthy(first.per_step <= 1e-13, "no phantom tail: " .. first.per_step)
      local budget
      for _, c in ipairs(first.cdf) do if c.p <= 0.85 then budget = c.bytes end end -- the last level under 0.85
      base.device_model, base.simulate = card(budget), 2000
      local e = dp.risk(base).methods[1]
      local s = e.simulation
      print(string.format("test_risk: %s group_by_length=%s: computed P(step) %.4f, simulated %.4f over %d steps; "
                          .. "largest CDF difference %.4f (99%% bound %.4f)", method, grouped, e.per_step, s.per_step,
                          s.steps, s.ks, s.ks_bound_99))
      check.truthy(s.ks <= s.ks_bound_99, string.format("%s grouped=%s: the CDFs agree (%.4f <= %.4f)", method, grouped,
                                                        s.ks, s.ks_bound_99))
      local sd = math.sqrt(e.per_step * (1 - e.per_step) / s.steps)
      check.truthy(math.abs(s.per_step - e.per_step) <= 4 * sd + 1e-12,
                   string.format("%s grouped=%s: simulated P(step) %.4f vs computed %.4f", method, grouped, s.per_step,
                                 e.per_step))
      check.truthy(e.per_step >= 0.15 and e.per_step < 0.9, "the budget is in the middle: " .. e.per_step)
    end
  end
end

-- 3b. The simulation draws the engine's own Poisson batches: its logical sizes are those the DP
-- wrapper's sampler (priv:next_step) draws for the same seed, step by step.
do
  local N, q, seed = 500, 0.02, 7
  local r = dp.risk{ model = TINY, method = "vanilla", data = { length_distribution = { kind = "uniform", min = 2, max = 30 } },
                     dataset_size = N, sample_rate = q, steps = 100, max_physical_batch_size = 4, seed = seed,
                     device_model = card(1 << 40), simulate = 60 }
  dp.device("cpu")
  local m <close> = dp.model{ vocab = 32, hidden = 8, layers = 1, heads = 2, seq_len = 4, batch = 10 }
  local opt <close> = dp.optim.sgd(m, { lr = 0.1 })
  local priv <close> = dp.dpsgd.wrap(m, opt, { method = "vanilla", max_grad_norm = 1, noise_multiplier = 1, sample_rate = q,
                                            dataset_size = N, poisson = true, seed = seed, max_physical_batch_size = 4 })
  local sizes, total = {}, 0
  for s = 1, 60 do
    local plan = priv:next_step()
    sizes[s] = plan.logical_size
    total = total + plan.logical_size
  end
  check.eq(table.concat(r.methods[1].simulation.logical, ","), table.concat(sizes, ","),
           "the simulation's logical batches are the engine's")
  check.truthy(total > 400 and total < 800, "about q N = 10 a step: " .. total)
end

-- 4. The safe max_physical_batch_size and the length cap are the boundaries they claim.
do
  local lengths = data.draw({ kind = "lognormal", median = 10, p99 = 30 }, 300, 3)
  local function at(m, ls, bytes)
    return dp.risk{ model = TINY, method = "vanilla", data = { lengths = ls or lengths, pad_to = 4 }, sample_rate = 0.02,
                    steps = 200, max_physical_batch_size = m, target = 0.01, device_model = card(bytes) }.methods[1]
  end
  local budget = peak("vanilla", 3, 32)
  local e = at(8, nil, budget)
  check.truthy(e.safe ~= nil, "a safe max_physical_batch_size")
  local m = e.safe.max_physical_batch_size
  check.truthy(m >= 2 and m < 8, "the safe m is inside the range: " .. m)
  check.truthy(at(m, nil, budget).probability <= 0.01, "the safe m keeps the run under target")
  check.truthy(at(m + 1, nil, budget).probability > 0.01, "m + 1 does not")
  check.near(e.safe.probability, at(m, nil, budget).probability, 1e-12, "the safe m's probability")
  check.truthy(e.probability > 0.01, "the asked m=8 is over target: " .. e.probability)
  local cap = e.length_cap
  check.truthy(cap ~= nil, "a length cap at m=8")
  local cut = {}
  local n_cut = 0
  for i, l in ipairs(lengths) do
    cut[i] = math.min(l, cap.length)
    if data.pad(l, 4) > cap.length then n_cut = n_cut + 1 end
  end
  check.eq(cap.cut, n_cut, "samples the cap cuts")
  check.near(at(8, cut, budget).probability, cap.probability, 1e-12, "the capped data set's probability")
  local longer = {}
  for i, l in ipairs(lengths) do longer[i] = math.min(l, cap.length + 4) end
  check.truthy(at(8, longer, budget).probability > 0.01, "a cap one padded length longer is over target")
  check.truthy(e.step_ms > 0 and e.safe.step_ms > 0 and cap.step_ms > 0, "step times")
end

-- 5. Bad input: refusals naming the key, exit 2.
do
  local good = { model = TINY, method = "vanilla", data = { lengths = { 4, 8 } }, sample_rate = 0.5, steps = 10,
                 device_model = card(1 << 30) }
  local function bad(change, substrings, what)
    local o = dp.deep_copy(good)
    for k, v in pairs(change) do o[k] = v end
    if change.nil_key then o[change.nil_key], o.nil_key = nil, nil end
    local ok, err = pcall(dp.risk, o)
    check.eq(ok, false, what .. " raises")
    check.eq(type(err) == "table" and err.exit_status, 2, what .. ": exit 2: " .. tostring(err))
    for _, s in ipairs(substrings) do
      check.truthy(tostring(err):find(s, 1, true), string.format("%s: %q mentions %q", what, tostring(err), s))
    end
  end
  bad({ smaple_rate = 1 }, { "unknown key 'smaple_rate'", "sample_rate" }, "a misspelt key")
  bad({ nil_key = "method" }, { "method is required" }, "no method")
  bad({ method = "fast" }, { "unknown method 'fast'" }, "a method")
  bad({ sample_rate = 0 }, { "sample_rate must be a probability" }, "q = 0")
  bad({ sample_rate = 1e-6 }, { "leaves the run's batches empty" }, "every batch empty")
  bad({ nil_key = "steps" }, { "steps is required" }, "no steps")
  bad({ steps = 0 }, { "steps must be an integer >= 1" }, "steps 0")
  bad({ target = 1 }, { "target must be a probability in (0, 1)" }, "target")
  bad({ max_physical_batch_size = 0 }, { "max_physical_batch_size must be an integer >= 1" }, "m = 0")
  bad({ dataset_size = 5 }, { "dataset_size (5) differs from the 2 samples of data.lengths" }, "dataset_size")
  bad({ data = { lengths = { 4, 0 } } }, { "data.lengths[2] is 0" }, "a length of 0")
  bad({ data = { lengths = { 4, 40 }, too_long = "error" } }, { "sample 2 (data.lengths[2]) has length 40, longer than seq_len 32" },
      "too long")
  bad({ data = { length_distribution = { kind = "fixed", length = 4 } } }, { "dataset_size", "required" },
      "a distribution without dataset_size")
  bad({ budget_gb = -1 }, { "budget_gb must be a positive number" }, "budget_gb")
  bad({ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 3, seq_len = 32 } }, { "model:" }, "a bad model")
  -- issue 37 item 7: each refused naming the input and its range, before any work
  bad({ data = { length_distribution = { kind = "lognormal", median = 1, p99 = 1e308 } }, dataset_size = 100 },
      { "length_distribution.p99 must be at most 2147483647 tokens", "1e+308" }, "a p99 past a uint32")
  bad({ data = { length_distribution = { kind = "lognormal", median = 1, p99 = 2e9 } }, dataset_size = 1000 },
      { "the longest sample has", "past 2147483647" }, "draws past a uint32")
  bad({ data = { length_distribution = { kind = "fixed", length = 4 } }, dataset_size = 1e9 },
      { "dataset_size must be an integer in 1..10000000", "1000000000" }, "a data set too large to hold")
  bad({ device_model = { base = "h100", reserve_overhead = 1e300 } },
      { "reserve_overhead must be a fraction in 0..1", "1e+300" }, "a reserve_overhead past 1")
end

-- 5b. Inputs at their edges are answered (issue 37 item 7): one step whose batch may be empty
-- (P = 0.5^2 here), and a bound past every logical batch (2^63 - 1: the engine's split once
-- overflowed computing ceil(n / max)), which is the whole logical batch.
do
  check.eq(#dp.data.split(5, math.maxinteger), 1, "split by 2^63 - 1: one batch")
  check.eq(dp.data.split(5, math.maxinteger)[1], 5, "of all five")
  local base = { model = TINY, method = "vanilla", data = { lengths = { 4, 8 } }, sample_rate = 0.5, steps = 1,
                 device_model = card(1 << 30) }
  local one = dp.risk(base)
  check.eq(one.steps, 1, "one step is a run")
  check.eq(one.logical_batch.empty, 0.25, "its batch empty with probability 1/4")
  base.max_physical_batch_size = math.maxinteger
  local huge = dp.risk(base)
  base.max_physical_batch_size = nil
  local whole = dp.risk(base)
  check.eq(huge.per_step, whole.per_step, "a bound past every batch: the whole logical batch's probability")
  check.eq(huge.methods[1].safe.max_physical_batch_size, whole.methods[1].safe.max_physical_batch_size, "and safe bound")
end

-- 6. The command line: an answer, its JSON, and one-line refusals with exit 2.
do
  local root = string.format("/tmp/dpprof-test-risk-%d-%d", dp.pid(), os.time())
  assert(dp.mkdir_p(root))
  assert(dp.write_file(root .. "/lengths.txt", "12\n40\n7\n200\n33\n"))
  local exe = string.format("'%s' risk ", dp.executable)
  local cmd = exe .. "preset=small method=vanilla,flash_clip lengths_file=" .. root .. "/lengths.txt pad_to=8 "
              .. "sample_rate=0.5 steps=100 max_physical_batch_size=2 budget_gb=1 context_mb=0 workspace=false out="
              .. root .. "/risk.json"
  local code, text = check.sh(cmd)
  check.eq(code, 0, "dpprof risk answers: " .. text)
  check.truthy(text:find("5 samples (lengths_file), 1 cut at seq_len 128", 1, true), "it says the data: " .. text)
  check.truthy(text:find("flash_clip", 1, true) and text:find("P(run)", 1, true), "a row per method")
  local doc = dp.json.decode(assert(dp.read_file(root .. "/risk.json")))
  check.eq(doc.kind, "dpprof.risk", "the JSON's kind")
  check.eq(#doc.methods, 2, "a JSON entry per method")
  check.eq(doc.methods[1].method, "vanilla", "in order")
  check.truthy(#doc.methods[1].cdf >= 2, "its CDF")
  local function refused(args, want, what)
    local c, t = check.sh(exe .. args)
    check.eq(c, 2, what .. ": exit 2 (" .. t .. ")")
    check.truthy(t:find(want, 1, true), string.format("%s: %q mentions %q", what, t, want))
    check.eq(select(2, t:gsub("\n", "")), 1, what .. ": one line")
  end
  local ok_args = "preset=small method=vanilla sample_rate=0.5 steps=10 "
  refused(ok_args .. "lengths=4,8 colour=red", "unknown key 'colour'", "an unknown key")
  refused(ok_args .. "lengths=4,x", "lengths: 'x' is not a number", "a bad list")
  refused("preset=small method=vanilla steps=10 lengths=4", "sample_rate= is required", "no sample_rate")
  refused(ok_args .. "distribution=lognormal median=10", "distribution=lognormal needs p99=", "a missing p99")
  refused(ok_args .. "lengths=4 median=10", "median= belongs to distribution=lognormal", "a stray key")
  assert(dp.write_file(root .. "/bad.txt", "12\n40\nseven\n"))
  refused(ok_args .. "lengths_file=" .. root .. "/bad.txt", root .. "/bad.txt' line 3: 'seven' is not a number",
          "a lengths file that is not numbers")
  assert(dp.write_file(root .. "/zero.txt", "12\n0\n"))
  refused(ok_args .. "lengths_file=" .. root .. "/zero.txt", "zero.txt' line 2: length 0", "a zero length")
  refused(ok_args .. "lengths=4,8 steps=x", "steps must be a whole number, got 'x'", "steps")
  refused(ok_args .. "distribution=lognormal median=1 p99=1e308 dataset_size=100", "p99 must be at most 2147483647",
          "a p99 past a uint32")
  refused(ok_args .. "distribution=fixed length=4 dataset_size=1e9", "dataset_size must be an integer in 1..10000000",
          "a data set too large")
  refused(ok_args .. "lengths=4,8 reserve_overhead=1e300", "reserve_overhead must be a fraction in 0..1",
          "a reserve_overhead past 1")
  local c1, t1 = check.sh(exe .. "preset=small method=vanilla sample_rate=0.5 lengths=4,8,9,10 steps=1 "
                          .. "max_physical_batch_size=9223372036854775807")
  check.eq(c1, 0, "one step and a bound of 2^63 - 1 are answered: " .. t1)
  os.execute("rm -rf '" .. root .. "'")
end

print("test_risk: ok")
