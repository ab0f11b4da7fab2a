-- test_risk_fast.lua: dp.risk's fast search (issue 37 item 6: the splits in closed form, each
-- level's counts once, the hypergeometric sums over the terms exp does not flush to zero, the rows
-- planned on every core, rows read from pieces) gives exactly the answers of the exhaustive one it replaced
-- (risk_reference.lua: every bound scanned, every split listed, every term summed, every run
-- here): every field of every method, compared with ==, over methods whose peak is and is not
-- monotone, with and without group_by_length, pad_to, a given and the whole logical batch, cards
-- from tight to roomy, and the rows read from pieces here (workers = 1) and planned at every length
-- in children (workers = 2, exhaustive = true).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local reference = dofile(arg[0]:match("(.*/)") .. "risk_reference.lua")

local TINY = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 32 }
local function card(bytes)
  return { name = "exact", memory_bytes = bytes, peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 }
end

-- a == b, field by field (numbers with ==: the same double or integer), naming the first difference
local function same(a, b, path)
  if type(a) ~= type(b) then return false, string.format("%s: %s vs %s", path, tostring(a), tostring(b)) end
  if type(a) ~= "table" then
    if a == b then return true end
    return false, string.format("%s: %s vs %s", path, tostring(a), tostring(b))
  end
  for k, v in pairs(a) do
    local ok, why = same(v, b[k], path .. "." .. tostring(k))
    if not ok then return false, why end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, string.format("%s.%s: missing in the fast answer", path, tostring(k)) end
  end
  return true
end

local cases = 0
local function compare(opts, what)
  local want = reference.run(dp.deep_copy(opts))
  -- in this process from pieces, and in children at every length
  for _, way in ipairs({ { workers = 1, exhaustive = false }, { workers = 2, exhaustive = true } }) do
    do
      local workers, exhaustive = way.workers, way.exhaustive
      local o = dp.deep_copy(opts)
      o.workers, o.exhaustive = workers, exhaustive
      local got = dp.risk(o)
      -- rows read from pieces plan fewer runs, and nothing else differs
      if not exhaustive then
        for i, e in ipairs(got.methods) do
          check.truthy(e.runs <= want.methods[i].runs, string.format("%s: %d runs read from pieces, %d every length",
                                                                     what, e.runs, want.methods[i].runs))
          e.runs = want.methods[i].runs
        end
      end
      local ok, why = same(got, want, "answer")
      check.truthy(ok, string.format("%s, workers %d, exhaustive %s: the fast answer is the exhaustive one (%s)", what,
                                     workers, exhaustive, tostring(why)))
    end
  end
  cases = cases + 1
  return want
end

-- 1. Small data sets at budgets through the range of the peaks (the first answer's CDF levels).
do
  local lengths = { 3, 9, 17, 30, 5, 12, 25, 31, 2, 14, 20, 7 }
  for _, method in ipairs({ "vanilla", "flash_clip" }) do
    for _, grouped in ipairs({ false, true }) do
      for _, pad_to in ipairs({ 1, 4 }) do
        local base = { model = TINY, method = method, data = { lengths = lengths, pad_to = pad_to, group_by_length = grouped },
                       sample_rate = 0.4, steps = 50, max_physical_batch_size = 3, target = 0.01,
                       device_model = card(1 << 40) }
        local first = compare(base, string.format("%s grouped=%s pad_to=%d roomy", method, grouped, pad_to))
        local levels = first.methods[1].cdf
        for _, i in ipairs({ 2, #levels // 2, #levels - 2 }) do
          local o = dp.deep_copy(base)
          o.device_model = card(levels[i].bytes)
          compare(o, string.format("%s grouped=%s pad_to=%d at %d", method, grouped, pad_to, levels[i].bytes))
          o.max_physical_batch_size = nil -- the whole logical batch
          compare(o, string.format("%s grouped=%s pad_to=%d whole at %d", method, grouped, pad_to, levels[i].bytes))
        end
      end
    end
  end
end

-- 2. Drawn data sets: larger logical batches (tens of samples, long hypergeometric sums), and a
-- safe search that runs far; two methods at once.
do
  for _, grouped in ipairs({ false, true }) do
    local base = { model = TINY, methods = { "flash_clip", "vanilla" },
                   data = { length_distribution = { kind = "lognormal", median = 10, p99 = 30 }, pad_to = 2,
                            group_by_length = grouped },
                   dataset_size = 3000, sample_rate = 0.01, steps = 200, max_physical_batch_size = 8, seed = 3,
                   target = 0.01, device_model = card(1 << 40) }
    local first = compare(base, string.format("drawn grouped=%s roomy", grouped))
    local levels = first.methods[1].cdf
    for _, i in ipairs({ #levels // 3, 2 * #levels // 3 }) do
      local o = dp.deep_copy(base)
      o.device_model = card(levels[i].bytes)
      compare(o, string.format("drawn grouped=%s at %d", grouped, levels[i].bytes))
    end
  end
end

-- 3. Rows read from pieces (each a quadratic in the length through three plan runs, taken when
-- two more equal it to the byte) are the rows planned at every length, for methods whose peak
-- grows linearly (vanilla, flash_clip), with the square of the length (ghost's T x T Gram
-- matrices), with breaks (flash_clip's strips), in f32 and bf16, and with LoRA.
do
  local risk = require("dpprof.risk")
  local lengths = {}
  for i = 1, 300 do lengths[i] = 1 + (i * 37) % 120 end -- 120 distinct lengths
  local SMALL = { arch = "llama", vocab = 96, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 120 }
  local BF16_LORA = { arch = "llama", vocab = 96, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 120,
                      dtype = "bf16", lora = { rank = 4 } }
  local read = 0
  for _, model in ipairs({ SMALL, BF16_LORA }) do
    for _, method in ipairs({ "vanilla", "ghost", "flash_clip", "bk", "flat" }) do
      local opts = { model = model, method = method, data = { lengths = lengths }, sample_rate = 0.05, steps = 10,
                     max_physical_batch_size = 4, device_model = card(1 << 40) }
      local every = dp.deep_copy(opts)
      every.exhaustive = true
      local want = risk.rows(every, method, { 1, 4 })
      local got = risk.rows(dp.deep_copy(opts), method, { 1, 4 })
      check.eq(#got.lengths, 120, "the distinct lengths")
      for _, b in ipairs({ 1, 4 }) do
        for d = 1, #want.lengths do
          check.eq(got[b].reserved[d], want[b].reserved[d], string.format("%s %s b=%d at %d tokens: the row read "
                   .. "from pieces", model.dtype or "f32", method, b, want.lengths[d]))
        end
        check.eq(want[b].planned, 120, "every length planned")
      end
      check.truthy(got.runs < want.runs, string.format("%s: %d runs read from pieces, %d every length", method,
                                                       got.runs, want.runs))
      read = read + 1
    end
  end
  print(string.format("test_risk_fast: %d methods' rows read from pieces equal the rows planned at every length", read))
end

-- 4. The closed-form split is the engine's.
do
  local risk = require("dpprof.risk")
  for B = 1, 60 do
    for m = 1, 70 do
      local sizes = dp.data.split(B, m)
      local k, big, small, r = risk.split_shape(B, m)
      check.eq(k, #sizes, "the number of physical batches")
      for j, s in ipairs(sizes) do check.eq(s, j <= r and big or small, string.format("split(%d, %d)[%d]", B, m, j)) end
    end
  end
end

check.truthy(cases >= 50, "cases compared: " .. cases)
print(string.format("test_risk_fast: %d answers identical to the exhaustive search's", cases))

-- 5. Plan runs one after another reuse the last epsilon only when its inputs are the same: each
-- run's epsilon is dp.privacy.epsilon's for its own sample rate and noise.
do
  local function run(q, sigma)
    local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 4 },
                             method = "flash_clip", device = "plan", device_model = card(1 << 40), iters = 1, warmup = 1,
                             snapshots = "none", dp = { sample_rate = q, noise_multiplier = sigma } }
    check.eq(r.status, "ok", "a plan run")
    local want = dp.privacy.epsilon{ accountant = r.privacy.accountant, sample_rate = q, noise_multiplier = sigma,
                                     steps = r.privacy.steps, delta = r.privacy.delta }.epsilon
    check.eq(r.privacy.epsilon, want, string.format("epsilon at q=%g sigma=%g", q, sigma))
    return r.privacy.epsilon
  end
  local a, b, c, d = run(0.01, 1.0), run(0.01, 1.0), run(0.02, 1.0), run(0.01, 2.0)
  check.eq(a, b, "the same inputs, the same epsilon")
  check.truthy(c > a and d < a, "another rate or noise, another epsilon")
end
print("test_risk_fast: ok")
