-- test_data_tokens.lua: feeding exact samples (issue 38.8).
--   * data = {tokens = {{id, ...}, ...}}: each list one sample, trained on exactly those ids: the
--     same documents as a token file with eos give the identical per-sample norms and parameters;
--     dp.batch{tokens=} makes the inputs, targets and pads written out by hand here (a sample of n
--     ids: n - 1 positions, targets the next ids, pads input 0 and target -100), the count of
--     target tokens a padded batch's loss is the mean of, cut at seq_len (counted) or refused;
--   * data = {file =, order = "sequential"}: row r of step s (fixed batch B) gets window s B + r of
--     the file read in order, (k mod floor((n - 1) / seq_len)) * seq_len, wrapping: a run equals a
--     data.tokens run of those windows written out here, and dp.batch's windows are those;
--   * bad input: a one-line refusal naming the key and the valid choices.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local data = dp.data

local dir = string.format("/tmp/dpprof-test-data-tokens-%d-%d", dp.pid(), os.time())
os.execute("mkdir -p " .. dir)

local refused = check.refused

local function write_tokens(path, ids)
  local bytes = {}
  for i, t in ipairs(ids) do bytes[i] = string.pack("<I2", t) end
  assert(dp.write_file(path, table.concat(bytes)))
end

local function flat(t) -- a tensor's numbers, one list
  local out = {}
  local function walk(v) for _, x in ipairs(v) do if type(x) == "table" then walk(x) else out[#out + 1] = x end end end
  walk(t:totable())
  return out
end

local MODEL = { arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }

-- Trains 1 warm-up + 2 timed steps; returns the result, the parameters after them and each timed
-- physical batch's per-sample gradient norms.
local function train(d, over)
  local vals, norms = nil, {}
  local cfg = { model = dp.deep_copy(MODEL), method = "ghost", device = "cpu", iters = 2, warmup = 1,
                snapshots = "none", threads = 1, data = d,
                on = { after_clip = function(ctx) norms[#norms + 1] = ctx.priv:stats().norms end,
                       finished = function(ctx) vals = select(3, check.param_values(ctx.model)) end } }
  for k, v in pairs(over or {}) do cfg[k] = v end
  collectgarbage() -- the tensors an earlier run's finished callback read are gone before this one
  local r = dp.experiment(cfg)
  check.eq(r.status, "ok", "run: " .. tostring(r.message))
  return r, vals, norms
end

local function same_training(a, b, what)
  local _, va, na = table.unpack(a)
  local _, vb, nb = table.unpack(b)
  check.eq(#na, #nb, what .. ": physical batches")
  for k = 1, #na do
    check.eq(#na[k], #nb[k], what .. ": norms of batch " .. k)
    for j = 1, #na[k] do check.eq(na[k][j], nb[k][j], what .. ": batch " .. k .. " sample " .. j .. "'s norm") end
  end
  check.eq(#va, #vb, what .. ": parameter tensors")
  local n = 0
  for i = 1, #va do
    for j = 1, #va[i] do
      check.eq(va[i][j], vb[i][j], what .. ": parameter " .. i .. " element " .. j)
      n = n + 1
    end
  end
  check.truthy(n > 0, what .. ": parameters compared")
end

-- 1. data.tokens: the documents of a token file with eos, given as ids, train identically
local DOCS = { { 5, 6, 7, 0 }, { 8, 9, 0 }, { 11, 12, 13, 14, 15, 0 }, { 3, 2, 0 } }
do
  local all = {}
  for _, d in ipairs(DOCS) do table.move(d, 1, #d, #all + 1, all) end
  local path = dir .. "/docs.u16"
  write_tokens(path, all)
  local from_file = { train{ file = path, eos = 0 } }
  local given = { train{ tokens = DOCS } }
  same_training(from_file, given, "data.tokens vs the same documents from a file with eos")
  local r = given[1]
  check.eq(r.data.source, "tokens", "the result names the source")
  check.eq(r.data.samples, 4, "four samples")
  check.eq(r.data.longest, 5, "the longest: 6 ids, 5 positions")
  check.eq(r.config.dp.dataset_size, 4, "the data set is the samples")
  check.eq(r.steps[1].physical[1].padded, 5, "step 2 (the first timed): samples 3 and 4, padded to 5")
  check.truthy(dp.results.validate(r), "the result validates")
  -- a different id: a different training (the ids are the ones trained on)
  local other = dp.deep_copy(DOCS)
  other[1][2] = 4
  local _, vo = train{ tokens = other }
  local differs = false
  for i = 1, #vo do for j = 1, #vo[i] do differs = differs or vo[i][j] ~= given[2][i][j] end end
  check.truthy(differs, "another id trains otherwise")
  -- on the plan device (no values): the same steps
  local p = dp.experiment{ model = dp.deep_copy(MODEL), method = "ghost", device = "plan", iters = 2, warmup = 1,
                           snapshots = "none", data = { tokens = DOCS } }
  check.eq(p.status, "ok", "plan run: " .. tostring(p.message))
  check.eq(#p.steps, #r.steps, "plan: the same steps")
  for k, st in ipairs(r.steps) do
    check.eq(p.steps[k].physical[1].padded, st.physical[1].padded, "plan: step " .. k .. "'s padded length")
    check.eq(p.steps[k].logical_size, st.logical_size, "plan: step " .. k .. "'s size")
  end
end

-- 2. dp.batch{tokens=}: inputs, targets and pads as written out by hand
do
  local m <close> = dp.model{ arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 6, batch = 3,
                              device = "cpu" }
  local b = dp.batch{ model = m, tokens = { { 1, 2, 3 }, { 4, 5, 6, 7, 8 }, { 9, 10 } } }
  check.eq(b.size, 3, "three samples")
  check.eq(b.padded, 4, "padded to the longest: 5 ids, 4 positions")
  check.eq(table.concat(flat(b.inputs), ","), "1,2,0,0,4,5,6,7,9,0,0,0", "inputs: ids but the last, then 0")
  check.eq(table.concat(flat(b.targets), ","), "2,3,-100,-100,5,6,7,8,10,-100,-100,-100",
           "targets: the next ids, then -100")
  -- the padded batch's loss is the mean over its samples of each one's mean over its 2, 4 and 1 targets
  local loss, per = m:forward(b)
  check.eq(#per, 3, "a loss a sample")
  check.near(loss, (per[1] + per[2] + per[3]) / 3, 1e-6, "the batch loss is the mean of the samples'")
  m:release_activations()
  dp.free_batch(b)
  for k, ids in ipairs({ { 1, 2, 3 }, { 4, 5, 6, 7, 8 }, { 9, 10 } }) do -- each sample alone, unpadded
    local one = dp.batch{ model = m, tokens = { ids } }
    check.eq(one.padded, #ids - 1, "alone: no pad")
    local l = m:forward(one)
    check.near(per[k], l, 1e-5, "sample " .. k .. "'s loss padded or alone")
    m:release_activations()
    dp.free_batch(one)
  end
  -- lengths cut a sample to its first lengths + 1 ids
  local c = dp.batch{ model = m, tokens = { { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }, lengths = { 6 } }
  check.eq(table.concat(flat(c.targets), ","), "2,3,4,5,6,7", "cut at 6 positions")
  dp.free_batch(c)
  local p <close> = dp.model{ arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 6, batch = 3,
                              device = "plan" }
  check.raises(function() dp.batch{ model = p, tokens = { { 1, 16 } } } end, { "16", "outside the vocabulary [0, 16)" },
               "plan: an id outside the vocabulary")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, -1 } } } end, { "-1", "outside the vocabulary" },
               "a negative id")
  check.raises(function() dp.batch{ model = m, tokens = { { 1 } } } end, { "tokens[1] holds 1 id", "at least 2" },
               "one id")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, 2, 3, 4, 5, 6, 7, 8 } } } end,
               { "tokens[1] holds 8 ids", "seq_len 6" }, "longer than seq_len")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, 2.5 } } } end, { "tokens[1][2]", "integer" },
               "not an integer")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, 2 } }, file = "x" } end, { "'tokens'", "'file'" },
               "tokens and file")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, 2, 3 } }, lengths = { 3 } } end,
               { "lengths[1] is 3", "holds 3 ids" }, "lengths above the ids")
  check.raises(function() dp.batch{ model = m, tokens = { { 1, 2 }, { 1, 2 }, { 1, 2 }, { 1, 2 } } } end,
               { "1 to 3 samples" }, "more samples than the batch")
end

-- 3. too long: cut (counted) or refused, naming the sample
do
  local long = { { 1, 2, 3 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 } } -- 10 positions, seq_len 8
  local r = train({ tokens = long }, { iters = 1, warmup = 0 })
  check.eq(r.data.cut, 1, "one sample cut")
  check.eq(r.data.longest, 10, "its length before the cut")
  check.eq(r.steps[1].physical[1].padded, 8, "cut to seq_len")
  -- cut equals the sample given cut
  same_training({ train{ tokens = long } }, { train{ tokens = { { 1, 2, 3 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 } } } },
                "a cut sample vs its first seq_len + 1 ids")
  refused(function() train{ tokens = long, too_long = "error" } end,
          { "sample 2 (data.tokens[2], 11 ids)", "length 10", "seq_len 8" }, "too_long = error")
end

-- 4. a token file read in order: rows get windows s B + r, wrapping
do
  local path = dir .. "/seq.u16"
  local ids = {}
  for i = 1, 19 do ids[i] = (i * 7) % 16 end -- 19 tokens, seq_len 8: floor(18 / 8) = 2 whole windows
  write_tokens(path, ids)
  local T = MODEL.seq_len
  local windows = {}
  for w = 0, 1 do windows[w + 1] = table.move(ids, w * T + 1, w * T + T + 1, 1, {}) end
  check.eq(#windows[2], T + 1, "a whole window")
  -- dp.batch: windows 1, 2 (wrapped to 0) and 3 (to 1)
  local m <close> = dp.model{ arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = T, batch = 3,
                              device = "cpu" }
  local b = dp.batch{ model = m, file = path, order = "sequential", first = 1, size = 3 }
  local want_in, want_tg = {}, {}
  for _, w in ipairs({ 2, 1, 2 }) do
    for j = 1, T do want_in[#want_in + 1], want_tg[#want_tg + 1] = windows[w][j], windows[w][j + 1] end
  end
  check.eq(table.concat(flat(b.inputs), ","), table.concat(want_in, ","), "sequential inputs: windows 1, 0, 1")
  check.eq(table.concat(flat(b.targets), ","), table.concat(want_tg, ","), "sequential targets")
  dp.free_batch(b)
  -- seq_len 3: floor(18 / 3) = 6 whole windows of 4 tokens, at 0, 3, ..., 15 (the last ends at token 18)
  local m3 <close> = dp.model{ arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 3, batch = 2,
                               device = "cpu" }
  local s = dp.batch{ model = m3, file = path, order = "sequential", first = 5, size = 2 }
  check.eq(table.concat(flat(s.inputs), ","), table.concat({ ids[16], ids[17], ids[18], ids[1], ids[2], ids[3] }, ","),
           "window 5 at token 15, window 6 wraps to 0")
  check.eq(table.concat(flat(s.targets), ","), table.concat({ ids[17], ids[18], ids[19], ids[2], ids[3], ids[4] }, ","),
           "their targets: the last token of the file is window 5's last target")
  dp.free_batch(s)
  m:free()
  m3:free()
  -- an experiment (fixed batch 2, 3 steps: windows 0 1, 0 1, 0 1) equals data.tokens of those windows
  local seq = { train{ file = path, order = "sequential" } }
  local given = { train{ tokens = windows } }
  same_training(seq, given, "order = sequential vs data.tokens of the windows in order")
  -- three windows a step over five: windows 0 1 2 | 3 4 0 | 1 2 3 (steps 0 to 2, warm-up first)
  local ids3 = {}
  for i = 1, 41 do ids3[i] = (i * 5 + 3) % 16 end -- floor(40 / 8) = 5 whole windows
  local path3 = dir .. "/seq3.u16"
  write_tokens(path3, ids3)
  local five = {}
  for w = 0, 4 do five[w + 1] = table.move(ids3, w * T + 1, w * T + T + 1, 1, {}) end
  local over = { model = { arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 3 },
                 dp = { max_physical_batch_size = 2 } }
  same_training({ train({ file = path3, order = "sequential" }, over) }, { train({ tokens = five }, over) },
                "batch 3 in physical batches of 2, wrapping mid-step")
  -- order = "random" (the default): windows at random offsets, not the sequential ones
  local rnd = { train{ file = path, order = "random" } }
  local differs = false
  for i = 1, #rnd[2] do for j = 1, #rnd[2][i] do differs = differs or rnd[2][i][j] ~= seq[2][i][j] end end
  check.truthy(differs, "random order trains on other windows")
  -- plan: the file is checked, the steps run
  local p = dp.experiment{ model = dp.deep_copy(MODEL), method = "ghost", device = "plan", iters = 1, warmup = 0,
                           snapshots = "none", data = { file = path, order = "sequential" } }
  check.eq(p.status, "ok", "plan run in order: " .. tostring(p.message))
  local mp <close> = dp.model{ arch = "llama", vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = T, batch = 3,
                               device = "plan" }
  check.raises(function() dp.batch{ model = mp, file = path, order = "sequential", step = 1 } end, { "no 'step'" },
               "sequential with step")
  check.raises(function() dp.batch{ model = mp, order = "sequential" } end, { "give 'file'" },
               "sequential without file")
  check.raises(function() dp.batch{ model = mp, file = path, order = "backwards" } end,
               { "order 'backwards'", "random, sequential" }, "an unknown order")
  check.raises(function() dp.batch{ model = mp, file = path, order = "sequential", lengths = { 2 } } end,
               { "leave 'lengths' out" }, "sequential padded")
end

-- 5. bad data: one-line refusals naming the key and the choices
refused(function() data.check{ tokens = {} } end, { "data.tokens is empty" }, "no sample")
refused(function() data.check{ tokens = { 1, 2 } } end, { "data.tokens[1] must be a list" }, "a flat list")
refused(function() data.check{ tokens = { { 1, 2 }, { 3 } } } end, { "data.tokens[2] holds 1 id", "at least 2" },
        "one id")
refused(function() data.check{ tokens = { { 1, -2 } } } end, { "data.tokens[1][2] is -2" }, "a negative id")
refused(function() data.check{ tokens = { { 1, 0.5 } } } end, { "data.tokens[1][2] is 0.5" }, "a fraction")
refused(function() data.check{ tokens = { { 1, 2 } }, lengths = { 1 } } end, { "not lengths and tokens" },
        "two sources")
refused(function() data.check{ tokens = { x = { 1, 2 } } } end, { "key 'x'" }, "not a list")
refused(function() data.check{ order = "sequential" } end, { "data.order", "without data.file" }, "order without file")
refused(function() data.check{ file = "f", order = "shuffled" } end, { "data.order 'shuffled'", "random, sequential" },
        "an unknown order")
refused(function() data.check{ file = "f", eos = 0, order = "sequential" } end, { "without eos" }, "order with eos")
refused(function() train{ tokens = { { 1, 2, 16 } } } end, { "data.tokens[1][3] is 16", "vocabulary [0, 16)" },
        "an id outside the model's vocabulary")
do
  local l = data.lengths({ tokens = DOCS }, { seq_len = 4 })
  check.eq(table.concat(l, ","), "3,2,4,2", "data.lengths of tokens: ids less one, cut at seq_len")
  check.eq(table.concat(data.ORDERS, ","), "random,sequential", "data.ORDERS")
end
do -- from the command line: one line, exit 2
  local script = dir .. "/bad.lua"
  dp.write_file(script, 'local dp = require("dpprof")\ndp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, '
                .. 'layers = 1, heads = 2, seq_len = 8 }, device = "plan", data = { tokens = { { 3 } } } }\n')
  local code, text = check.sh(string.format("'%s' run '%s'", dp.executable, script))
  check.eq(code, 2, "exit 2: " .. text)
  check.eq(select(2, text:gsub("\n", "")), 1, "one line: " .. text)
end

os.execute("rm -rf " .. dir)
print("test_data_tokens: ok")
