-- test_data_steps.lua: experiments on samples of their own lengths (issue 31, items 1, 2 and 4).
--   * Poisson steps are the engine's draw: each step's samples (priv:next_step().samples) are
--     distinct, increasing, as many as its logical size, and the result's physical batches and
--     padded lengths are dpprof.data's split of exactly those samples' lengths (pad_to,
--     group_by_length); the mean logical size is near q N; empty steps run, add noise and count;
--   * on the plan device a step's peak grows with its physical batch's padded length;
--   * epsilon is the accountant's for the sample rate and steps as drawn; fixed batches keep the
--     caveat;
--   * a token file with eos: each document a sample, cut at seq_len and counted, or refused;
--   * bad input (a length of 0, too long with too_long = "error", an empty data set, a sample rate
--     that expects no sample, a dataset_size that contradicts the data) is a refusal, exit 2.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local data = dp.data

local dir = string.format("/tmp/dpprof-test-data-steps-%d-%d", dp.pid(), os.time())
os.execute("mkdir -p " .. dir)

local refused = check.refused

-- 40 lengths from 1 to 64
local LENGTHS = {}
for i = 1, 40 do LENGTHS[i] = (i * 37) % 64 + 1 end
local MODEL = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 64 }

local function run(over)
  local cfg = { model = dp.deep_copy(MODEL), method = "ghost", device = "plan", iters = 30, warmup = 2,
                snapshots = "none", seed = 3,
                dp = { poisson = true, sample_rate = 0.2, max_physical_batch_size = 3 },
                data = { lengths = LENGTHS, pad_to = 8, group_by_length = true } }
  for k, v in pairs(over or {}) do cfg[k] = v end
  return dp.experiment(cfg)
end

-- 1. the steps as the engine draws them
local r = run()
check.eq(r.status, "ok", "plan run: " .. tostring(r.message))
check.eq(#r.steps, 30, "one record per timed step")
check.eq(r.data.samples, 40, "data.samples")
check.eq(r.data.longest, 64, "data.longest")
check.eq(r.config.model.batch, 8, "expected batch int(q N)")
check.truthy(dp.results.validate(r), "the result validates")
do -- the same draw, from a wrapper of the same seed and options
  local m <close> = dp.model{ arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 64, batch = 3,
                              device = "plan" }
  local opt <close> = dp.optim.sgd(m, { lr = 0.1 })
  local priv <close> = dp.dpsgd.wrap(m, opt, { method = "ghost", poisson = true, sample_rate = 0.2, dataset_size = 40,
                                            expected_batch_size = 8, max_physical_batch_size = 3, seed = 3 })
  local spec = { lengths = LENGTHS, pad_to = 8, group_by_length = true }
  local total, padded_seen = 0, {}
  for step = 0, 31 do
    local plan = priv:next_step()
    check.eq(#plan.samples, plan.logical_size, "step " .. step .. ": samples drawn")
    local lens = {}
    for j, id in ipairs(plan.samples) do
      check.truthy(id >= 1 and id <= 40 and (j == 1 or id > plan.samples[j - 1]), "increasing ids in 1..N")
      lens[j] = LENGTHS[id]
    end
    if step >= 2 then
      local rec = r.steps[step - 1]
      check.eq(rec.step, step, "step index")
      check.eq(rec.logical_size, plan.logical_size, "step " .. step .. ": logical size is the engine's draw")
      local want = data.physical_batches(lens, 3, spec)
      check.eq(#rec.physical, #want, "step " .. step .. ": physical batches")
      for k, b in ipairs(want) do
        check.eq(rec.physical[k].size, b.size, "step " .. step .. " batch " .. k .. " size")
        check.eq(rec.physical[k].padded, b.padded, "step " .. step .. " batch " .. k .. " padded")
        check.eq(b.padded % 8, 0, "pad_to 8")
        padded_seen[b.padded] = true
      end
      total = total + plan.logical_size
      priv:noise()
    end
  end
  check.truthy(math.abs(total / 30 - 8) < 2.5, "mean logical size near q N = 8: " .. total / 30)
  local kinds = 0
  for _ in pairs(padded_seen) do kinds = kinds + 1 end
  check.truthy(kinds >= 3, "padded lengths vary between batches")
end

-- 2. a step's peak grows with its padded length (one physical batch of the same size)
do
  local by = {}
  for _, s in ipairs(r.steps) do
    if #s.physical == 1 then
      local b = s.physical[1]
      by[#by + 1] = { size = b.size, padded = b.padded, peak = s.peak_bytes }
    end
  end
  local strict = 0
  for _, a in ipairs(by) do
    for _, b in ipairs(by) do
      if a.size >= b.size and a.padded >= b.padded then
        check.truthy(a.peak >= b.peak, string.format("peak of %dx%d >= %dx%d", a.size, a.padded, b.size, b.padded))
        if a.padded > b.padded and a.size == b.size then
          check.truthy(a.peak > b.peak, "a longer padded batch peaks higher")
          strict = strict + 1
        end
      end
    end
  end
  check.truthy(strict > 0, "two single-batch steps of one size and two padded lengths")
  -- the same draw twice: the same steps
  local again = run()
  check.eq(dp.json.encode(again.steps), dp.json.encode(r.steps), "deterministic with the seed")
end

-- 3. empty steps, and epsilon as drawn
do
  local e = run{ dp = { poisson = true, sample_rate = 0.04, max_physical_batch_size = 3 }, iters = 20, warmup = 0 }
  check.eq(e.status, "ok", "sparse Poisson run")
  local empty = 0
  for _, s in ipairs(e.steps) do
    if s.logical_size == 0 then
      empty = empty + 1
      check.eq(#s.physical, 0, "an empty step has no physical batch")
    end
  end
  check.truthy(empty > 0, "some steps drew no sample")
  check.eq(e.privacy.steps, 20, "empty steps count")
  check.eq(e.privacy.sample_rate, 0.04, "q as given")
  local want = dp.privacy.epsilon{ accountant = e.privacy.accountant, sample_rate = 0.04, noise_multiplier = 1,
                                   steps = 20, delta = e.privacy.delta }
  check.near(e.privacy.epsilon, want.epsilon, 1e-12, "epsilon of the steps as drawn")
  check.eq(e.privacy.caveat, nil, "Poisson: no caveat")
  local f = run{ dp = { poisson = false, max_physical_batch_size = 3 }, iters = 3, warmup = 0,
                 model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 64, batch = 5 } }
  check.eq(f.status, "ok", "fixed batches")
  check.eq(f.privacy.sampling, "fixed", "fixed sampling")
  check.truthy(f.privacy.caveat, "fixed batches keep the caveat")
  check.near(f.privacy.sample_rate, 5 / 40, 1e-12, "fixed: q = B / N")
  for k, s in ipairs(f.steps) do check.eq(s.logical_size, 5, "fixed step " .. k) end
end

-- 4. training on the CPU, and a token file with documents
do
  local c = run{ device = "cpu", iters = 3, warmup = 0, method = "flash_clip",
                 model = { arch = "llama", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 64 } }
  check.eq(c.status, "ok", "CPU run on padded batches: " .. tostring(c.message))
  local path = dir .. "/docs.u16"
  local toks = { 5, 6, 7, 0, 8, 0, 0 } -- documents of 3 and 1 positions; an eos alone (dropped)
  for i = 1, 20 do toks[#toks + 1] = 10 + i end -- one of 20 positions: cut at seq_len 12
  toks[#toks + 1] = 0
  local bytes = {}
  for i, t in ipairs(toks) do bytes[i] = string.pack("<I2", t) end
  dp.write_file(path, table.concat(bytes))
  local cfg = { model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 12, batch = 2 },
                method = "ghost", device = "cpu", iters = 2, warmup = 0, snapshots = "none",
                data = { file = path, eos = 0 } }
  local t = dp.experiment(cfg)
  check.eq(t.status, "ok", "token file with eos: " .. tostring(t.message))
  check.eq(t.data.samples, 3, "three documents")
  check.eq(t.data.cut, 1, "one cut at seq_len")
  check.eq(t.data.longest, 20, "its length before the cut")
  check.eq(t.data.empty_documents, 1, "the lone eos")
  check.eq(t.steps[1].physical[1].padded, 3, "fixed step 1: documents 1 and 2, padded to 3")
  check.eq(t.steps[2].physical[1].padded, 12, "step 2: the cut document and the first again")
  cfg.data.too_long = "error"
  refused(function() dp.experiment(cfg) end, { "document 3", "length 20", "seq_len 12" }, "too_long = error")
  dp.write_file(dir .. "/eos_only.u16", string.pack("<I2<I2", 0, 0))
  cfg.data = { file = dir .. "/eos_only.u16", eos = 0 }
  refused(function() dp.experiment(cfg) end, { "empty data set" }, "a token file without a document")
  dp.write_file(dir .. "/odd.u16", "\5\0\0\0\7")
  cfg.data = { file = dir .. "/odd.u16", eos = 0 }
  refused(function() dp.experiment(cfg) end, { "partial token" }, "a file of a partial token")
end

-- 5. bad input
refused(function() run{ data = { lengths = { 4, 0, 3 } } } end, { "data.lengths[2]", "0" }, "a length of 0")
refused(function() run{ data = { lengths = { 4, -2 } } } end, { "data.lengths[2]" }, "a negative length")
refused(function() run{ data = { lengths = { 4, 65 }, too_long = "error" } } end, { "sample 2", "seq_len 64" },
        "longer than seq_len")
refused(function() run{ data = { lengths = {} } } end, { "empty" }, "an empty data set")
refused(function() run{ dp = { poisson = true, sample_rate = 0.01 } } end, { "sample_rate 0.01", "40 samples" },
        "a sample rate that expects no sample")
refused(function() run{ dp = { poisson = true, sample_rate = 0.2, dataset_size = 50 } } end,
        { "dataset_size 50", "40 samples" }, "a dataset size the data contradicts")
do -- from the command line: one line, exit 2
  local script = dir .. "/bad.lua"
  dp.write_file(script, 'local dp = require("dpprof")\ndp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, '
                .. 'layers = 1, heads = 2, seq_len = 8 }, device = "plan", data = { lengths = { 3, 0 } } }\n')
  local code, text = check.sh(string.format("'%s' run '%s'", dp.executable, script))
  check.eq(code, 2, "exit 2: " .. text)
  check.eq(select(2, text:gsub("\n", "")), 1, "one line: " .. text)
end

do -- fixed-length windows: the physical batches of a logical batch hold different samples (they
   -- all held samples 0..n-1 of the step, so a batch of 4 in two physical batches trained on 2)
  local norms = {}
  local r = dp.experiment{ model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 4 },
                           method = "ghost", device = "cpu", iters = 1, warmup = 0, snapshots = "none",
                           dp = { max_physical_batch_size = 2 },
                           on = { after_clip = function(ctx, _, k) norms[k] = ctx.priv:stats().norms end } }
  check.eq(r.status, "ok", "windows in two physical batches")
  check.eq(#norms[2], 4, "the step's four norms after the second physical batch")
  check.truthy(norms[2][3] ~= norms[2][1] and norms[2][4] ~= norms[2][2],
           string.format("the second physical batch holds samples 2 and 3, not 0 and 1 again (%s)",
                         table.concat(norms[2], ", ")))
  -- the same four samples in one physical batch: the same norms (each sample's own)
  local one
  dp.experiment{ model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 4 },
                 method = "ghost", device = "cpu", iters = 1, warmup = 0, snapshots = "none",
                 on = { after_clip = function(ctx) one = ctx.priv:stats().norms end } }
  for j = 1, 4 do check.near(norms[2][j], one[j], 1e-5, "sample " .. j .. "'s norm split or not") end
end

os.execute("rm -rf " .. dir)
print("test_data_steps: ok")
