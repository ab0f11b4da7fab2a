-- test_dp.lua: dpprof.dpsgd from scripts. Every method's per-sample norms equal PyTorch's (the
-- Hugging Face fixtures, norms computed in float64 by tests/fixtures/hf/gen_fixtures.py one sample
-- at a time: a reference independent of this engine, relative 1e-5), and the explicit ones (the
-- model run on each sample alone, relative 1e-4: f32 sums in another order), clip factors
-- follow min(1, C / (norm + 1e-6)), the layer records name valid formulations; the logical step
-- plan (fixed and Poisson); epsilon equals the accountant's; errors name the valid choices; the
-- wrapper refuses phases out of order and use after free.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local explicit_norms = require("explicit_norms")
dp.device("cpu")

local T = 6

local function tiny(extra)
  local cfg = { arch = "gpt", vocab = 19, hidden = 16, layers = 2, heads = 2, seq_len = T, batch = 3, seed = 3,
                init_std = 0.2 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return dp.model(cfg)
end

local FORMS = { direct = true, materialize = true, ghost = true, gram_tile = true, grad_tile = true, batch1 = true,
                grouped = true, gram_strip = true, grad_strip = true }

local methods = {
  { method = "flat", norms = "materialize", clip = "bk" },
  { method = "ghost", norms = "ghost", clip = "twopass" },
  { method = "mixed_ghost", norms = "mixed", clip = "twopass" },
  { method = "bk", norms = "mixed", clip = "bk" },
  { method = "flash_clip", norms = "flash", clip = "bk" },
  { norms = "flash", clip = "twopass" },
  { method = "flash_clip", norms = "flash", clip = "bk", flash_impl = "strips" },
}

for _, lora in ipairs({ false, true }) do
  local m = tiny(lora and { lora = { rank = 2, alpha = 4, targets = { "qkv", "fc" } } } or nil)
  local batch = dp.batch{ model = m, size = 3, seed = 1 }
  local want = explicit_norms(m, batch, 3)
  for _, mt in ipairs(methods) do
    local opt = dp.optim.sgd(m, { lr = 0.1 })
    local what = (mt.method or (mt.norms .. "+" .. mt.clip)) .. (mt.flash_impl and " strips" or "") ..
                 (lora and " lora" or "")
    local opts = { max_grad_norm = 0.5 * want[1], noise_multiplier = 0, dataset_size = 100,
                   flash_impl = mt.flash_impl }
    if mt.method then opts.method = mt.method else opts.norms, opts.clip = mt.norms, mt.clip end
    local priv = dp.dpsgd.wrap(m, opt, opts)
    check.eq(priv.method, mt.method or (mt.norms .. "+" .. mt.clip), what .. ": priv.method")
    check.eq(priv.norms, mt.norms, what .. ": priv.norms")
    check.eq(priv.clip_method, mt.clip, what .. ": priv.clip_method")
    check.eq(type(priv.clip), "function", what .. ": priv:clip is the clip phase")
    local step = priv:next_step()
    check.eq(step.logical_size, 3, what .. ": fixed logical batch")
    check.eq(#step.physical, 1, what .. ": one physical batch")
    local loss, per_sample = priv:forward(batch)
    check.eq(#per_sample, 3, what .. ": per-sample losses")
    check.near((per_sample[1] + per_sample[2] + per_sample[3]) / 3, loss, 1e-6, what .. ": loss is their mean")
    priv:backward()
    priv:clip()
    priv:noise()
    opt:step()
    opt:zero_grad()
    local st = priv:stats()
    check.eq(st.steps, 1, what .. ": steps")
    check.eq(#st.norms, 3, what .. ": three norms")
    for i = 1, 3 do
      check.near(st.norms[i], want[i], 1e-4 * math.min(1, want[i]), what .. ": norm of sample " .. i)
      local c = math.min(1, opts.max_grad_norm / (st.norms[i] + 1e-6))
      check.near(st.clip_factors[i], c, 1e-6, what .. ": clip factor of sample " .. i)
    end
    check.truthy(st.clip_factors[1] < 1, what .. ": sample 1 is clipped")
    check.truthy(#st.layers > 0, what .. ": layers recorded")
    local strips = 0
    for _, l in ipairs(st.layers) do
      check.truthy(FORMS[l.norms], what .. ": layer formulation " .. tostring(l.norms))
      if l.norms == "gram_strip" or l.norms == "grad_strip" then strips = strips + 1 end
      check.eq(type(l.module), "string", what .. ": layer module")
      check.eq(type(l.kind), "string", what .. ": layer kind")
    end
    check.eq(strips > 0, mt.flash_impl == "strips", what .. ": strips used exactly where asked")
    priv:free()
    opt:free()
    -- the step moved the parameters: undo nothing, the next method starts from here (norms are
    -- recomputed above from the same parameters: refresh them)
    want = explicit_norms(m, batch, 3)
  end
  dp.free_batch(batch)
  m:free()
end

-- against PyTorch: the fixtures' per-sample gradient norms (reference.json), every method, on the
-- tied GPT-2 and on Llama; measured within 1e-6 relative (f32 sums over a few thousand terms)
do
  local hf = arg[0]:match("(.*/)") .. "../fixtures/hf/"
  for _, name in ipairs({ "gpt2", "llama" }) do
    local ref = dp.json.decode(assert(dp.read_file(hf .. name .. "/reference.json")))
    local B, T = ref.batch, ref.seq_len
    local m = dp.model.load(hf .. name, { device = "cpu", seq_len = T, batch = B })
    local ins, tgs = {}, {}
    for i = 1, B do
      for t = 1, T do
        ins[#ins + 1] = ref.tokens[i][t]
        tgs[#tgs + 1] = ref.tokens[i][t + 1]
      end
    end
    local batch = { inputs = dp.tensor{ shape = { B, T }, dtype = "i32", category = "inputs" }:set(ins),
                    targets = dp.tensor{ shape = { B, T }, dtype = "i32", category = "inputs" }:set(tgs), size = B }
    for _, mt in ipairs(methods) do
      local opts = { max_grad_norm = 1e9, noise_multiplier = 0, flash_impl = mt.flash_impl }
      if mt.method then opts.method = mt.method else opts.norms, opts.clip = mt.norms, mt.clip end
      local priv = dp.dpsgd.wrap(m, nil, opts)
      priv:next_step()
      priv:forward(batch)
      priv:backward()
      priv:clip()
      local norms = priv:stats().norms
      for i = 1, B do
        check.near(norms[i], ref.per_sample_grad_norm[i], 1e-5 * ref.per_sample_grad_norm[i],
                   name .. " " .. (mt.method or (mt.norms .. "+" .. mt.clip)) .. ": PyTorch's norm of sample " .. i)
      end
      priv:free()
      m:zero_grad()
    end
    dp.free_batch(batch)
    m:free()
  end
end

-- vanilla: the same phases, no DP; its backward averages over the logical batch
do
  local m = tiny()
  local priv = dp.dpsgd.wrap(m, nil, { method = "vanilla" })
  check.eq(priv.method, "vanilla")
  check.eq(priv.norms, nil, "vanilla has no norms method")
  local batch = dp.batch{ model = m, size = 3, seed = 2 }
  priv:next_step()
  priv:forward(batch)
  priv:backward()
  priv:clip()
  priv:noise()
  local g = m:grad("transformer.h.0.mlp.c_fc.weight"):sumsq()
  m:zero_grad()
  m:forward(batch)
  m:backward{}
  check.near(m:grad("transformer.h.0.mlp.c_fc.weight"):sumsq(), g, 1e-6 * g, "vanilla = the mean gradient")
  check.eq(priv:epsilon(), math.huge, "vanilla: no privacy")
  check.eq(#priv:stats().norms, 0, "vanilla: no norms")
  dp.free_batch(batch)
  priv:free()
  m:free()
end

-- the step plan: Poisson sizes split into physical batches; epsilon from the accountant
do
  local m = tiny()
  local priv = dp.dpsgd.wrap(m, nil, { method = "bk", poisson = true, dataset_size = 400, sample_rate = 0.01,
                                    max_physical_batch_size = 2, noise_multiplier = 1.1, seed = 9 })
  local total = 0
  for _ = 1, 50 do
    local step = priv:next_step()
    local sum = 0
    for _, n in ipairs(step.physical) do
      check.truthy(n >= 1 and n <= 2, "physical batch within max_physical_batch_size")
      sum = sum + n
    end
    check.eq(sum, step.logical_size, "physical batches add up to the logical one")
    total = total + step.logical_size
    priv:noise()
  end
  check.near(total / 50, 4, 5 * math.sqrt(4 * 0.99 / 50), "mean logical batch q N")
  check.eq(priv:stats().expected_batch_size, 4, "expected batch int(q N)")
  local want = dp.privacy.epsilon{ sample_rate = 0.01, noise_multiplier = 1.1, steps = 50, delta = 1e-5 }
  check.near(priv:epsilon(1e-5), want.epsilon, 1e-12, "epsilon = the accountant's")
  check.near(priv:epsilon(), want.epsilon, 1e-12, "default delta 1e-5")
  local want6 = dp.privacy.epsilon{ sample_rate = 0.01, noise_multiplier = 1.1, steps = 50, delta = 1e-6 }
  check.near(priv:epsilon(1e-6), want6.epsilon, 1e-12, "epsilon at another delta")
  priv:free()
  m:free()
end

-- errors name what is wrong and the valid choices
do
  local m = tiny()
  local wrap = function(o) return function() return dp.dpsgd.wrap(m, nil, o) end end
  check.raises(wrap{ method = "fast" }, { "dpprof.dpsgd.wrap", "'fast'", "vanilla, flat, ghost, mixed_ghost, bk, flash_clip" })
  check.raises(wrap{ method = "flat", max_norm = 1 }, { "dpprof.dpsgd.wrap", "max_norm", "max_grad_norm" })
  check.raises(wrap{ norms = "gram", clip = "bk" }, { "'gram'", "materialize, ghost, mixed, flash" })
  check.raises(wrap{ norms = "ghost", clip = "once" }, { "'once'", "twopass, bk" })
  check.raises(wrap{ norms = "ghost" }, { "go together" })
  check.raises(wrap{ method = "flat", norms = "ghost", clip = "bk" }, { "either" })
  check.raises(wrap{}, { "'method' is required" })
  check.raises(wrap{ method = "flat", poisson = true }, { "dataset_size" })
  check.raises(wrap{ method = "flat", max_grad_norm = -1 }, { "max_grad_norm" })
  check.raises(wrap{ method = "flash_clip", flash_impl = "fused" }, { "'fused'", "tiles, strips" })
  check.raises(wrap{ method = "flat", max_physical_batch_size = 4 }, { "max_physical_batch_size" })
  check.raises(function() dp.dpsgd.wrap("model", nil, { method = "flat" }) end, { "dpprof.model" })
  local priv = dp.dpsgd.wrap(m, nil, { method = "flat" })
  check.raises(function() priv:backward() end, { "priv:backward", "forward first" })
  check.raises(function() priv:epsilon() end, { "sample_rate or dataset_size" })
  check.raises(function() priv:epsilon(2) end, { "delta" })
  local batch = dp.batch{ model = m, size = 3 }
  priv:forward(batch)
  priv:backward()
  check.raises(function() priv:noise() end, { "clip first" })
  priv:clip()
  dp.free_batch(batch)
  priv:free()
  priv:free() -- idempotent
  check.raises(function() priv:stats() end, { "freed" })
  local p2 = dp.dpsgd.wrap(m, nil, { method = "ghost" })
  m:free()
  check.raises(function() p2:stats() end, { "model was freed" })
end

-- Privacy bookkeeping: the accountant's q, the sampler and the noise's divisor (the expected batch
-- size) agree, or the run says why not. dp.experiment used to pass the model's batch as the
-- expected size whatever sample_rate x dataset_size was: sample_rate=0.001, dataset_size=100,
-- batch=2 ran "ok", accounted q = 0.001 and divided the noise by 2 where 0.1 samples were expected.
do
  local m = tiny() -- batch 3
  local wrap = function(o) return function() return dp.dpsgd.wrap(m, nil, o) end end
  check.raises(wrap{ method = "flat", sample_rate = 0.001, dataset_size = 100 },
               { "sample_rate 0.001 x dataset_size 100 = 0.1 samples a step, but the expected batch size is 3",
                 "give dataset_size 3000 for this batch" }, "fixed batches")
  check.raises(wrap{ method = "flat", sample_rate = 0.1, dataset_size = 10000, expected_batch_size = 3, poisson = true },
               { "= 1000 samples a step, but the expected batch size is 3" }, "Poisson far above the batch")
  check.raises(function() dp.dpsgd.check({ method = "flat", sample_rate = 0.001, dataset_size = 100 }, 3) end,
               { "= 0.1 samples a step" }, "dp.dpsgd.check: the same check without a model")
  -- agreeing figures: q N within one sample of the batch (Opacus takes int(q N))
  local p1 = dp.dpsgd.wrap(m, nil, { method = "flat", sample_rate = 0.01, dataset_size = 300 })
  check.eq(p1:stats().expected_batch_size, 3, "q N = 3")
  local p2 = dp.dpsgd.wrap(m, nil, { method = "flat", sample_rate = 0.0299, dataset_size = 100 })
  check.eq(p2:stats().expected_batch_size, 3, "q N = 2.99: the batch of 3 agrees")
  local p3 = dp.dpsgd.wrap(m, nil, { method = "flat", dataset_size = 600 })
  check.near(p3:stats().sample_rate, 3 / 600, 1e-15, "q derived from the batch")
  p1:free() p2:free() p3:free()
  -- through dp.experiment: refused before anything is built, and a dataset size alone derives q
  local cfg = { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }, device = "plan",
                iters = 1, warmup = 0, snapshots = "none", method = "ghost" }
  cfg.dp = { sample_rate = 0.001, dataset_size = 100 }
  check.raises(function() dp.experiment(cfg) end,
               { "dpprof.experiment: dpprof.dpsgd.wrap: dp: sample_rate 0.001 x dataset_size 100 = 0.1 samples a step" },
               "the issue's configuration")
  cfg.dp = { sample_rate = 0.1, dataset_size = 10000, poisson = true }
  check.raises(function() dp.experiment(cfg) end, { "= 1000 samples a step, but the expected batch size is 2" },
               "Poisson with q N far above the batch")
  cfg.dp = { dataset_size = 200 }
  local r = dp.experiment(cfg)
  check.eq(r.status, "ok", tostring(r.message))
  check.eq(r.config.dp.sample_rate, 0.01, "q = batch / dataset_size, not the default rate")
  check.eq(r.privacy.sample_rate, 0.01, "the accountant's q")
  local want = dp.privacy.epsilon{ sample_rate = 0.01, noise_multiplier = 1.0, steps = 1, delta = 1e-5 }.epsilon
  check.near(r.privacy.epsilon, want, 1e-12, "epsilon at the derived q")
end

-- A batch a pending backward reads is immutable (issue 13 item 5). Token ids changed between the
-- DP forward and its backward used to write out of bounds in cpu_scatter_rows and read out of
-- bounds in cpu_gather_cols / cpu_tied_rows (ghost, mixed_ghost, bk, flash_clip with a tied
-- head): the ids are checked once, at the forward. Every write path and :free() refuse while the
-- wrapper's backward or clip still reads them; once clipped the batch is the script's again, and
-- the norms are those of the batch as it was at the forward.
local PINNED = { "a batch that a pending backward reads" }
local function writes(t, other)
  local n = #t
  local bad = {}
  for i = 1, n do bad[i] = 1000000 end
  local f32 = dp.tensor{ shape = { 1 } }
  return {
    set = function() t:set(bad) end,
    fill = function() t:fill(1e6) end,
    random = function() t:random{ dist = "uniform", low = 0, high = 1e6 } end,
    copy = function() t:copy(other) end,
    add = function() t:add(other) end,
    scale = function() t:scale(1e6) end,
    axpy = function() t:axpy(1e6, other) end,
    matmul = function() dp.matmul(t, f32, f32) end,
    free = function() t:free() end,
  }
end
for _, method in ipairs({ "ghost", "mixed_ghost", "bk", "flash_clip", "flat" }) do
  local m = tiny()
  local priv = dp.dpsgd.wrap(m, nil, { method = method, max_grad_norm = 1e6 })
  local batch = dp.batch{ model = m, size = 3, seed = 4 }
  local want = explicit_norms(m, batch, 3)
  local other = dp.batch{ model = m, size = 3, seed = 5 }
  priv:next_step()
  priv:forward(batch)
  for _, key in ipairs({ "inputs", "targets" }) do
    for name, fn in pairs(writes(batch[key], other[key])) do
      check.raises(fn, PINNED, method .. ": " .. key .. ":" .. name .. " between forward and backward")
    end
  end
  check.raises(function() dp.free_batch(batch) end, PINNED, method .. ": free_batch before the backward")
  priv:backward()
  if method ~= "flat" then -- the others' clip goes back through the model's state (flat's books copy)
    check.raises(function() batch.inputs:set(other.inputs:totable()) end, PINNED,
                 method .. ": still read until the clip")
  end
  priv:clip()
  local norms = priv:stats().norms
  for i = 1, 3 do check.near(norms[i], want[i], 1e-4 * want[i], method .. ": norm of the batch as forwarded") end
  batch.inputs:copy(other.inputs) -- the script's again
  priv:noise()
  dp.free_batch(batch)
  dp.free_batch(other)
  priv:free()
  m:free()
end

-- The batch the model holds is the one of its last forward, whoever ran it (issue 13 item 6):
-- priv:forward(b1); m:forward(b2); dp.free_batch(b2); priv:backward() used to read freed memory.
-- The second forward replaces the first's state: b1 is the script's again, b2 cannot be freed
-- while the model holds it, and the wrapper's backward says its forward is gone.
do
  local m = tiny()
  for _, method in ipairs({ "ghost", "bk", "flat", "vanilla" }) do
    local priv = dp.dpsgd.wrap(m, nil, { method = method })
    local b1 = dp.batch{ model = m, size = 3, seed = 1 }
    local b2 = dp.batch{ model = m, size = 1, seed = 2 }
    priv:next_step()
    priv:forward(b1)
    m:forward(b2)
    check.raises(function() dp.free_batch(b2) end, PINNED, method .. ": b2 is held by the model")
    check.raises(function() priv:backward() end, { "priv:backward", "no longer holds this wrapper's forward" },
                 method .. ": a stale backward")
    b1.inputs:fill(0) -- no longer pinned: the model let go of it
    dp.free_batch(b1)
    m:backward() -- the model's own forward is intact
    dp.free_batch(b2)
    -- forward, backward (retained for twopass and bk), then another forward before the clip
    local b3 = dp.batch{ model = m, size = 3, seed = 3 }
    local b4 = dp.batch{ model = m, size = 2, seed = 4 }
    priv:forward(b3)
    priv:backward()
    m:forward(b4)
    if method == "ghost" or method == "bk" then
      check.raises(function() priv:clip() end, { "priv:clip", "no longer holds" }, method .. ": a stale clip")
    else
      priv:clip() -- flat and vanilla clip from what the backward kept, not from the model's state
    end
    m:release_activations()
    dp.free_batch(b4)
    dp.free_batch(b3)
    -- a batch table's fields reassigned after the forward: the model holds the tensors themselves
    local b5 = dp.batch{ model = m, size = 3, seed = 5 }
    priv:forward(b5)
    b5.inputs, b5.targets = nil, nil
    collectgarbage()
    collectgarbage()
    priv:backward()
    priv:clip()
    priv:noise()
    priv:free()
    m:zero_grad()
  end
  -- a to-be-closed batch tensor going out of scope while pinned is left to the collector
  do
    local b6 = dp.batch{ model = m, size = 3, seed = 6 }
    do
      local ins <close> = b6.inputs
      m:forward(b6)
    end
    check.eq(b6.inputs.alive, true, "__close leaves a pinned tensor alone")
    m:backward()
    do
      local ins <close> = b6.inputs
    end
    check.eq(b6.inputs.alive, false, "__close frees it once unpinned")
  end
  m:free()
end

-- Ghost norms form an input's Gram once for the linears that read it (llama's q, k and v; gate and
-- up: the model brackets them): per block 4 input Grams and 7 output-gradient Grams, not 7 + 7;
-- plus the head's 2 and the embedding's 1. The norms are the explicit ones (test_dp_norms,
-- test_dp_tiles); here the ledger counts the products, on the plan device, one step.
do
  local L = 3
  local r = dp.experiment{ device = "plan", iters = 1, warmup = 0, method = "ghost", snapshots = "none",
                           model = { arch = "llama", vocab = 64, hidden = 32, heads = 2, kv_heads = 1, layers = L,
                                     seq_len = 12, batch = 4 } }
  check.eq(r.status, "ok", "llama ghost on the plan: " .. tostring(r.message))
  local grams, steps
  for _, e in ipairs(r.ledger) do
    if e.op == "dp_ghost_gram" then grams = e.calls end
    if e.op == "cross_entropy_fwd" then steps = e.calls end
  end
  check.eq(grams, steps * (L * (4 + 7) + 2 + 1), "llama ghost: one Gram per shared input")
end

print("test_dp: all checks passed")
