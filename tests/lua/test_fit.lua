-- test_fit.lua: dp.fit finds the boundary exactly (the value found fits and value + granularity
-- does not, checked with separate plan runs), for seq_len, batch and layers; the peak and the
-- dominating category it reports are those of the run at that value; lo that does not fit and hi
-- that does; nothing leaks between runs (and a leak is caught); the errors name the valid choices;
-- the CLI form answers and rejects bad arguments.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local MODEL = { arch = "gpt", vocab = 256, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 2 }

local copy = dp.deep_copy

-- An exact budget: no context, no workspace, reserved = allocated.
local function model_of(bytes)
  return { name = "exact", memory_bytes = bytes, peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 }
end

-- One plan run at value, as fit makes it: its result.
local function plan_run(method, vary, value, device_model, base)
  local c = { model = copy((base or {}).model or MODEL), method = method, device = "plan", device_model = device_model,
              iters = 1, warmup = 1, snapshots = "none" }
  if vary == "batch" then
    c.model.batch = value
    c.dp = { max_physical_batch_size = value }
  else
    c.model[vary] = value
  end
  local r = dp.experiment(c)
  check.eq(r.status, "ok", string.format("plan run %s %s=%d", method, vary, value))
  return r
end

local function peak_at(method, vary, value)
  return plan_run(method, vary, value, model_of(1 << 40)).plan.peak_bytes
end

-- The budget that a value exactly fills: the value fits, the next one does not.
for _, case in ipairs({ { vary = "seq_len", at = 40, g = 1 }, { vary = "seq_len", at = 40, g = 8 },
                        { vary = "batch", at = 5, g = 1 }, { vary = "layers", at = 6, g = 1 },
                        { vary = "layers", at = 6, g = 3 } }) do
  for _, method in ipairs({ "vanilla", "ghost", "flash_clip" }) do
    local budget = peak_at(method, case.vary, case.at)
    local dm = model_of(budget)
    local f = dp.fit{ base = { model = copy(MODEL) }, method = method, vary = case.vary, device_model = dm,
                      granularity = case.g, hi = 4096 }
    local e = f.by_method[method]
    local what = string.format("%s %s granularity %d", method, case.vary, case.g)
    check.eq(f.methods[1], e, what .. ": methods[1] is by_method[method]")
    check.eq(e.largest, case.at, what .. ": largest")
    check.eq(e.first_unfit, case.at + case.g, what .. ": first unfit")
    check.eq(e.hi_reached, false, what .. ": hi not reached")
    -- checked independently: the value fits and value + granularity does not
    local r = plan_run(method, case.vary, e.largest, dm)
    check.eq(r.plan.fits, true, what .. ": the largest fits")
    check.eq(e.peak_bytes, r.plan.peak_bytes, what .. ": the peak at the largest")
    check.eq(e.peak_bytes, budget, what .. ": it fills the budget exactly")
    local best, bytes = nil, -1
    for _, c in ipairs(dp.results.CATEGORIES) do
      local lap = r.memory.categories[c].live_at_peak_bytes
      if lap > bytes then best, bytes = c, lap end
    end
    check.eq(e.dominant.category, best, what .. ": dominating category")
    check.eq(e.dominant.bytes, bytes, what .. ": its bytes")
    local r2 = plan_run(method, case.vary, e.first_unfit, dm)
    check.eq(r2.plan.fits, false, what .. ": largest + granularity does not fit")
    check.eq(e.first_unfit_peak_bytes, r2.plan.peak_bytes, what .. ": the first unfit peak")
    check.truthy(e.runs <= 2 * math.ceil(math.log(4096 / case.g, 2)) + 2, what .. ": a logarithmic search")
  end
end

-- A budget with overhead and context: fits means peak + round(peak x overhead) <= memory - context.
do
  local peak = peak_at("ghost", "seq_len", 64)
  local dm = { name = "o", memory_bytes = peak + (peak // 10) + 1000, context_bytes = 1000, reserve_overhead = 0.1,
               peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 }
  local f = dp.fit{ base = { model = copy(MODEL) }, method = "ghost", device_model = dm, granularity = 1, hi = 1024 }
  local e = f.by_method.ghost
  check.truthy(e.largest >= 64, "64 fits with 10% overhead and the context accounted")
  check.truthy(e.predicted_reserved_bytes <= f.budget_bytes, "reserved within the budget")
  check.truthy(e.first_unfit_reserved_bytes > f.budget_bytes, "the first unfit's reserved is over it")
  check.eq(f.budget_bytes, dm.memory_bytes - 1000, "budget = memory - context")
end

-- lo that does not fit; hi that fits; several methods in one call agree with single calls (no
-- state carried from one run to the next).
do
  local f = dp.fit{ base = { model = copy(MODEL) }, method = "vanilla", device_model = model_of(1000) }
  check.eq(f.methods[1].largest, nil, "nothing fits 1000 bytes")
  check.eq(f.methods[1].first_unfit, 64, "lo (the granularity) is the first unfit")
  check.eq(f.methods[1].runs, 1, "one run")
  local g = dp.fit{ base = { model = copy(MODEL) }, method = "vanilla", vary = "layers", device_model = model_of(1 << 40),
                    hi = 12 }
  check.eq(g.methods[1].largest, 12, "hi fits")
  check.eq(g.methods[1].first_unfit, nil, "no unfit value")
  check.eq(g.methods[1].hi_reached, true, "hi reached")
  local budget = peak_at("bk", "seq_len", 100)
  local all = dp.fit{ base = { model = copy(MODEL) }, methods = { "flat", "bk", "ghost" }, device_model = model_of(budget),
                      granularity = 4 }
  local one = dp.fit{ base = { model = copy(MODEL) }, method = "bk", device_model = model_of(budget), granularity = 4 }
  check.eq(#all.methods, 3, "three methods")
  check.eq(all.by_method.bk.largest, one.by_method.bk.largest, "bk alone = bk after flat")
  check.eq(all.by_method.bk.peak_bytes, one.by_method.bk.peak_bytes, "the same peak")
  check.eq(all.by_method.bk.largest, 100, "bk: 100 fills the budget")
  -- budget_gb is the card's memory in GiB on top of the device model
  local h = dp.fit{ base = { model = copy(MODEL) }, method = "vanilla", budget_gb = 1, vary = "layers", hi = 64 }
  check.eq(h.device_model.memory_bytes, 1 << 30, "budget_gb = 1 GiB")
  check.eq(h.budget_bytes, (1 << 30) - h.device_model.context_bytes, "less the h100's context")
  check.eq(h.device_model.workspace, true, "the h100's workspace is modelled")
end

-- Activation checkpointing: one search per setting, each entry saying its setting, its boundary
-- exact under that setting; checkpointing every block fits a longer sequence than none, every 2nd
-- block in between; by_method is the largest.
do
  local model = copy(MODEL)
  model.layers = 4
  local dm = model_of(plan_run("flash_clip", "seq_len", 96, model_of(1 << 40), { model = model }).plan.peak_bytes)
  local f = dp.fit{ base = { model = model }, method = "flash_clip", device_model = dm, granularity = 4,
                    checkpoint = { false, "blocks", 2 } }
  check.eq(#f.methods, 3, "one entry per setting")
  local by = {}
  for i, e in ipairs(f.methods) do
    check.eq(e.method, "flash_clip", "entry " .. i .. " method")
    by[tostring(e.checkpoint)] = e
    -- independently: largest fits and largest + granularity does not, with that setting
    local m2 = copy(model)
    m2.checkpoint = e.checkpoint
    local r = plan_run("flash_clip", "seq_len", e.largest, dm, { model = m2 })
    check.eq(r.plan.fits, true, tostring(e.checkpoint) .. ": the largest fits")
    check.eq(e.peak_bytes, r.plan.peak_bytes, tostring(e.checkpoint) .. ": its peak")
    check.eq(e.step_ms, r.timing.avg_ms, tostring(e.checkpoint) .. ": its estimated step")
    check.eq(plan_run("flash_clip", "seq_len", e.first_unfit, dm, { model = m2 }).plan.fits, false,
             tostring(e.checkpoint) .. ": largest + granularity does not")
  end
  check.eq(by["false"].largest, 96, "off: 96 fills the budget")
  check.truthy(by.blocks.largest > by["2"].largest and by["2"].largest > by["false"].largest,
               string.format("blocks %d > every 2nd %d > off %d", by.blocks.largest, by["2"].largest,
                             by["false"].largest))
  check.truthy(f.by_method.flash_clip == by.blocks, "the answer is the largest")
  check.eq(f.checkpoints[2], "blocks", "the settings searched")
  -- default: the base's own setting, one entry
  model.checkpoint = 2
  local g = dp.fit{ base = { model = model }, method = "flash_clip", device_model = dm, granularity = 4 }
  check.eq(#g.methods, 1, "one setting by default")
  check.eq(g.methods[1].checkpoint, 2, "base.model.checkpoint's")
  check.eq(g.methods[1].largest, by["2"].largest, "the same answer")
  check.raises(function() dp.fit{ base = { model = copy(MODEL) }, checkpoint = { false, "every" } } end,
               { "dpprof.fit: 'checkpoint' must be false, \"blocks\" (every block) or an integer N >= 1", "got \"every\"" })
  check.raises(function() dp.fit{ base = { model = copy(MODEL) }, checkpoint = {} } end, { "non-empty list" })
  -- every 4th block while the search tries 1 to 3 layers: block 0 alone, as checkpoint = layers
  -- says it (dp.model refuses N past the layers, issue 26 item 7)
  local deep = copy(MODEL)
  deep.layers, deep.checkpoint = 8, 4
  local k = dp.fit{ base = { model = deep }, method = "vanilla", vary = "layers", device_model = model_of(1 << 40),
                    hi = 6 }
  check.eq(k.methods[1].largest, 6, "layers 1..6 with checkpoint 4 all run")
  check.eq(k.methods[1].checkpoint, 4, "the setting searched with")
end

-- Nothing leaks between runs: the plan device holds only the workspace afterwards; a script that
-- keeps an allocation alive across a run is caught.
do
  dp.plan_workspace(false)
  local before = dp.memory.stats("plan")
  dp.fit{ base = { model = copy(MODEL) }, methods = { "vanilla", "mixed_ghost" }, device_model = model_of(1 << 22) }
  local after = dp.memory.stats("plan")
  check.eq(after.allocated, before.allocated, "plan device: nothing left behind")
  check.eq(after.n_live, before.n_live, "no live allocation left behind")
  local kept = {}
  check.raises(function()
    dp.fit{ base = { model = copy(MODEL), on = { finished = function()
      kept[#kept + 1] = dp.tensor{ shape = { 10 }, device = "plan", category = "other" }
    end } }, method = "vanilla", device_model = model_of(1 << 40), vary = "layers", hi = 2 }
  end, { "left 40 bytes in 1 allocation(s) behind" }, "a leak between runs")
  kept = nil
  collectgarbage()
end

-- Errors name the problem and the valid choices.
local base = { model = copy(MODEL) }
check.raises(function() dp.fit{ base = base, vary = "heads" } end, { "unknown vary 'heads'", "seq_len, batch, layers" })
check.raises(function() dp.fit{ base = base, method = "fast" } end, { "unknown method 'fast'", "flash_clip" })
check.raises(function() dp.fit{ base = base, budget = 80 } end, { "unknown key 'budget'", "budget_gb" })
check.raises(function() dp.fit{ base = base, method = "ghost", methods = { "bk" } } end, { "method or methods" })
check.raises(function() dp.fit{ base = base, budget_gb = -1 } end, { "budget_gb must be a positive number" })
check.raises(function() dp.fit{ base = base, lo = 100, granularity = 64 } end, { "multiple of granularity" })
check.raises(function() dp.fit{ base = base, granularity = 0 } end, { "granularity must be an integer >= 1" })
check.raises(function() dp.fit{ base = { model = copy(MODEL), device = "cuda" } } end, { "fit runs on the plan device" })
check.raises(function() dp.fit{ base = { model = { arch = "gpt", vocabulary = 10 } } } end, { "unknown key 'vocabulary'" })
check.raises(function() dp.fit{ base = base, device_model = "tpu" } end, { "unknown model 'tpu'", "h100, h200" })
check.raises(function() dp.fit{ base = { model = { arch = "gpt", vocab = 64, hidden = 30, layers = 1, heads = 4 } },
                                method = "vanilla" } end, { "base: dpprof.experiment: dpprof.model:", "must divide" })

-- The CLI form: an answer (exit 0) and bad arguments (exit 2).
local exe = dp.executable
local sh = check.sh

-- Durations as people read them (a modelled step of a large model is minutes, not 2824604.5 ms).
check.eq(dp.format_ms(812.34), "812.3 ms", "ms below a second")
check.eq(dp.format_ms(2830), "2.83 s", "seconds")
check.eq(dp.format_ms(2824604.5), "47.1 min", "minutes")
check.eq(dp.format_ms(7.85 * 3600e3), "7.85 h", "hours")
check.eq(dp.format_ms(nil), "-", "no time")
-- at each unit's edge the next unit, never "1000.0 ms", "60.00 s" or "60.0 min"; a tiny time keeps
-- its digits instead of "0.0 ms" (issue 38.4)
check.eq(dp.format_ms(999.96), "1.00 s", "999.96 ms rounds to a second")
check.eq(dp.format_ms(59999), "1.0 min", "59.999 s rounds to a minute")
check.eq(dp.format_ms(3599999), "1.00 h", "59.99 min rounds to an hour")
check.eq(dp.format_ms(0.0123), "0.0123 ms", "a tiny time keeps its digits")
check.eq(dp.format_ms(0), "0.0 ms", "zero")

-- The header says what was planned: one rank of the world, its share of the batch; LoRA's default
-- targets named as the default.
do
  local c, o = sh(string.format("%q fit preset=small method=ghost world_size=8 strategy=fsdp batch=8 budget_gb=1", exe))
  check.eq(c, 0, "fit under fsdp: " .. o)
  check.truthy(o:find("world: one rank (rank 0) of 8 under fsdp, 1 sample a rank (batch 8 is the global batch)", 1,
                      true), "the fsdp header: " .. o)
  -- without batch= (issue 38.4: `dpprof fit world_size=8 strategy=fsdp` was refused, 8 does not
  -- divide the batch of 1): each rank holds the model's batch, and the header says so
  c, o = sh(string.format("%q fit preset=large method=ghost world_size=8 strategy=fsdp hi=4096", exe))
  check.eq(c, 0, "fit under fsdp without batch=: " .. o)
  check.truthy(o:find("world: one rank (rank 0) of 8 under fsdp, 1 sample a rank (batch 8 is the global batch: "
                      .. "8 x 1, as batch= was not given)", 1, true), "the defaulted batch said: " .. o)
  c, o = sh(string.format("%q fit preset=small method=ghost world_size=4 budget_gb=1", exe))
  check.eq(c, 0, "fit under ddp, the small preset's batch a rank: " .. o)
  check.truthy(o:find("4 samples a rank (batch 16 is the global batch: 4 x 4, as batch= was not given)", 1, true), o)
  -- a batch the world does not divide (issue 38.8 splits it unevenly): the rank planned is the
  -- last, which holds the largest slice, and the header says so
  c, o = sh(string.format("%q fit preset=small method=ghost world_size=3 batch=4 budget_gb=1", exe))
  check.eq(c, 0, "fit of an uneven batch: " .. o)
  check.truthy(o:find("world: one rank (rank 2) of 3 under ddp, 2 samples on this rank, the largest slice (batch 4 is "
                      .. "the global batch, split unevenly: 1 or 2 a rank)", 1, true), "the uneven header: " .. o)
  -- vary=batch searches the global batch by the world size (it started at 1, which 8 does not divide)
  c, o = sh(string.format("%q fit preset=small method=ghost world_size=8 strategy=zero2 vary=batch budget_gb=1 hi=256",
                          exe))
  check.eq(c, 0, "vary=batch under zero2: " .. o)
  check.truthy(o:find("search: batch from 8 to 256 by 8", 1, true), "searched by the world size: " .. o)
  check.truthy(o:find("each rank holds batch / 8 samples", 1, true), o)
  c, o = sh(string.format("%q fit preset=small method=ghost lora_rank=4 budget_gb=1", exe))
  check.eq(c, 0, "fit with LoRA: " .. o)
  check.truthy(o:find("LoRA rank 4 on qkv (the default)", 1, true), "the default targets stated: " .. o)
  -- dpprof risk --help states the same default (it named lora_targets= with none)
  c, o = sh(string.format("%q risk --help", exe))
  check.truthy(c == 0 and o:find("lora_targets default qkv, q_proj,k_proj,v_proj", 1, true), "risk's LoRA default: " .. o)
  check.truthy(not o:find("world:", 1, true), "no world line for one process")
end
local code, out = sh(string.format("%q fit preset=small method=ghost,vanilla vary=layers budget_gb=1 hi=64", exe))
check.eq(code, 0, "dpprof fit exits 0: " .. out)
check.truthy(out:find("largest layers", 1, true), "a table header")
check.truthy(out:find("\n  ghost ", 1, true) and out:find("\n  vanilla ", 1, true), "a row per method")
check.truthy(out:find("checkpoint", 1, true) and out:find("blocks", 1, true) and out:find(" off ", 1, true),
             "searched with checkpointing off and on by default, the setting in its column: " .. out)
code, out = sh(string.format("%q fit preset=small method=flash_clip budget_gb=1 checkpoint=2,off", exe))
check.eq(code, 0, "checkpoint=2,off: " .. out)
check.truthy(out:find("every 2", 1, true) and out:find(" off ", 1, true), "the settings given: " .. out)
code, out = sh(string.format("%q fit preset=small checkpoint=sometimes", exe))
check.eq(code, 2, "bad checkpoint: exit 2")
check.truthy(out:find("'checkpoint' must be false", 1, true) and out:find("got \"sometimes\"", 1, true),
             "names the value: " .. out)
code, out = sh(string.format("%q fit vary=heads", exe))
check.eq(code, 2, "bad vary: exit 2")
check.truthy(out:find("seq_len, batch, layers", 1, true), "lists the valid choices: " .. out)
code, out = sh(string.format("%q fit budget=3", exe))
check.eq(code, 2, "unknown key: exit 2")
check.truthy(out:find("unknown key 'budget'", 1, true), "names the key: " .. out)
-- bad numbers (issue 26): each refused with exit 2, naming the key and what is valid, before any run
for _, case in ipairs({
  { "context_mb=nan", "context_mb must be a finite number, got 'nan'" },
  { "context_mb=-1", "context_mb must be a number of MiB >= 0, got -1" },
  { "budget_gb=1e999", "budget_gb must be a finite number" },
  { "workspace=maybe", "workspace must be true or false, got 'maybe'" },
  { "kv_heads=0", "kv_heads must be an integer >= 1, got 0 (leave kv_heads= out for the default, heads)" },
  { "head_dim=0", "head_dim must be an integer >= 1, got 0" },
  { "ffn=0", "ffn must be an integer >= 1, got 0" },
  { "seq_len=0", "dpprof.model: 'seq_len' must be a positive integer (got 0)" },
  { "vary=layers layers=0", "dpprof.model: 'layers' must be a positive integer (got 0)" },
  { "vary=batch batch=0", "model.batch must be an integer >= 1, got 0" },
  { "lora_rank=0", "dpprof.model: 'lora.rank' must be an integer from 1 to 1048576 (got 0)" },
  { "lora_rank=2147483648", "'lora.rank' must be an integer from 1 to 1048576 (got 2147483648)" },
  { "lora_rank=4 lora_alpha=0", "'lora.alpha' must be a positive number (got 0)" },
  { "hidden=0", "dpprof.model: 'hidden' must be a positive integer (got 0)" },
}) do
  code, out = sh(string.format("%q fit preset=small method=ghost budget_gb=1 checkpoint=off %s", exe, case[1]))
  check.eq(code, 2, case[1] .. ": exit 2: " .. out)
  check.truthy(out:find(case[2], 1, true), case[1] .. ": says " .. case[2] .. ": " .. out)
  check.truthy(not out:find("traceback", 1, true) and select(2, out:gsub("\n", "")) == 1, case[1] .. ": one line: " .. out)
end
-- an out= that cannot be written is refused before the search (it failed after it, the answer lost)
for _, case in ipairs({ { "out=", "dpprof fit: out: cannot write a file with an empty name" },
                        { "out=/nonexistent-dpprof-dir/fit.json", "cannot write: the directory /nonexistent-dpprof-dir "
                                                                  .. "does not exist" } }) do
  code, out = sh(string.format("%q fit preset=small method=ghost budget_gb=1 checkpoint=off %s", exe, case[1]))
  check.eq(code, 2, case[1] .. ": exit 2: " .. out)
  check.truthy(out:find(case[2], 1, true) and not out:find("largest", 1, true), case[1] .. ": before the search: " .. out)
end
-- the varied key's own value is checked through dp.fit too (the search would replace it)
local m0 = copy(MODEL)
m0.seq_len = 0
check.raises(function() dp.fit{ base = { model = m0 }, method = "ghost" } end,
             { "base: dpprof.experiment: dpprof.model: 'seq_len' must be a positive integer (got 0)" })
-- a checkpoint of fewer positions than the search's first value says so, and what to give
local fixture = arg[0]:match("(.*/)") .. "../fixtures/hf/llama" -- max_position_embeddings 16
code, out = sh(string.format("%q fit path=%q method=ghost budget_gb=1 checkpoint=off", exe, fixture))
check.eq(code, 2, "fit path= of 16 positions: exit 2: " .. out)
check.truthy(out:find("has 16 positions (config.json's max_position_embeddings), fewer than the search's first "
                      .. "seq_len (lo, 64): give a granularity= of at most 16", 1, true), out)
code, out = sh(string.format("%q fit path=%q method=ghost budget_gb=1 checkpoint=off granularity=4", exe, fixture))
check.eq(code, 0, "fit path= of 16 positions by 4: " .. out)
check.truthy(out:find("search: seq_len from 4 to 16 by 4", 1, true), out)
local _, unknown = sh(string.format("%q fit budget=3", exe))
code, out = sh(string.format("%q fit --help", exe))
check.eq(code, 0, "--help")
check.truthy(out:find("usage: dpprof fit", 1, true), "usage")
-- every key fit takes (the list its error gives) is in its usage, checkpoint= among them
local keys = unknown:match("%(valid: ([^)]*)%)")
check.truthy(keys and keys:find("checkpoint", 1, true), "the valid keys, checkpoint among them: " .. unknown)
local described = out:match("^(.-)\nexample:") or out -- the keys' descriptions, not the examples
for key in (keys or ""):gmatch("[%w_]+") do
  check.truthy(described:find("%f[%w_]" .. key .. "="), "the usage describes " .. key .. "=")
end

print("test_fit: ok")
