-- test_experiment_save.lua: an experiment's `save = DIR` writes the trained model as Hugging Face
-- files. A one-process run's file, loaded back with dp.model.load, holds the trained parameters bit
-- for bit (and so does a world of one under ddp, zero2 and fsdp, whose fsdp gathers its blocks
-- first); a bad DIR or a plan run is refused before anything runs (one line naming the key, exit
-- 2, nothing written). tests/distributed/save_equal.lua checks rank 0's file under mpirun -np 2.
-- Issue 38.7, files others load: a model built without a checkpoint's weights and trained on
-- documents saves their eos as eos_token_id (config.json and generation_config.json; without eos
-- the ids are null, never transformers' defaults); a PEFT adapter folder trains on its base
-- (model = {path = BASE, adapter = DIR}), recorded in the result, and the saved
-- adapter_config.json names that base; the plan device takes the adapter's rank; the folder alone, an adapter without path or beside lora, and
-- m:save's ids outside the vocabulary are refused in one line naming the key and the valid choices.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local MODEL = { arch = "llama", vocab = 64, hidden = 16, layers = 2, heads = 2, kv_heads = 1, seq_len = 8, batch = 4,
                tie_head = true }

local values = check.param_values

-- no_callback: no on.finished (fsdp's blocks are then gathered for the save alone); the file is
-- compared with `want` (the one-process file) to ddp_equal's bound
local function saved_equals_trained(distributed, sub, no_callback, want)
  local path = dir .. "/" .. sub
  local trained
  local r = dp.experiment{ device = "cpu", iters = 2, warmup = 1, method = "ghost", threads = 1, snapshots = "none",
                           model = MODEL, save = path, distributed = distributed, seed = 3,
                           on = { finished = not no_callback and function(ctx) trained = values(ctx.model) end or nil } }
  check.eq(r.status, "ok", sub .. ": " .. tostring(r.message))
  check.eq(r.save_dir, path, sub .. ": save_dir")
  local ok, why = dp.results.validate(r)
  check.truthy(ok, why)
  local back <close> = dp.model.load(path, { device = "cpu", batch = 4, seq_len = 8 })
  local got, n = values(back)
  check.truthy(n > 1000, sub .. ": elements " .. n)
  local init <close> = dp.model(dp.deep_copy(MODEL)) -- the run did train: the file is not the initial model
  local moved = false
  local first = values(init)
  if want then
    for name, vals in pairs(want) do
      check.eq(#got[name], #vals, sub .. ": " .. name .. " size")
      for i, v in ipairs(vals) do
        check.truthy(math.abs(got[name][i] - v) <= 1e-6 * math.max(1, math.abs(v)),
                     string.format("%s: %s[%d]: saved %.9g, one process %.9g", sub, name, i, got[name][i], v))
      end
    end
    return got
  end
  for name, vals in pairs(trained) do
    check.eq(#got[name], #vals, sub .. ": " .. name .. " size")
    for i, v in ipairs(vals) do
      if got[name][i] ~= v then error(string.format("%s: %s[%d]: saved %.9g, trained %.9g", sub, name, i, got[name][i], v)) end
      if first[name][i] ~= v then moved = true end
    end
  end
  check.truthy(moved, sub .. ": trained parameters differ from the initial ones")
  return got
end

local single = saved_equals_trained(nil, "single")
for _, strategy in ipairs(dp.dist.STRATEGIES) do
  saved_equals_trained({ strategy = strategy }, strategy)
  saved_equals_trained({ strategy = strategy }, strategy .. "_no_callback", true, single)
end

-- refused before the run, naming the key; nothing written
local function refused(cfg, want)
  cfg.model, cfg.device = cfg.model or MODEL, cfg.device or "cpu"
  local ok, e = pcall(dp.experiment, cfg)
  check.eq(ok, false, "refused: " .. want)
  check.eq(type(e) == "table" and e.exit_status, 2, "exit status of: " .. tostring(e))
  check.truthy(tostring(e):find(want, 1, true), string.format("%q names %q", tostring(e), want))
  check.eq(tostring(e):find("\n", 1, true), nil, "one line: " .. tostring(e))
end
refused({ device = "plan", save = dir .. "/plan" }, "dpprof.experiment: save: a plan run has no parameter values")
check.eq(io.open(dir .. "/plan", "r"), nil, "plan: nothing written")
refused({ save = dir .. "/no/such/parent" }, "dpprof.experiment: save: " .. dir .. "/no/such/parent")
check.eq(io.open(dir .. "/no", "r"), nil, "bad parent: nothing written")
refused({ save = 3 }, "dpprof.experiment: save must be the directory")
refused({ save = "" }, "dpprof.experiment: save must be the directory")

-- ---- issue 38.7: the files others load -----------------------------------------------------------
local json = dp.json
local HF = arg[0]:match("(.*/)") .. "../fixtures/hf/"
local function saved_json(path, name) return json.decode(assert(dp.read_file(path .. "/" .. name))) end
local function ids_of(t) return { t.bos_token_id, t.eos_token_id, t.pad_token_id } end
local null = json.null

-- documents ending with eos 0, a model made from a shape: eos 0 saved, bos and pad null
assert(dp.write_file(dir .. "/docs.tok", string.pack("<I2<I2<I2<I2<I2<I2<I2<I2", 5, 6, 7, 0, 8, 9, 0, 0)))
local shape = { vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }
local r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "ghost", snapshots = "none",
                         model = shape, data = { file = dir .. "/docs.tok", eos = 0 }, save = dir .. "/docs" }
check.eq(r.status, "ok", "documents: " .. tostring(r.message))
for _, name in ipairs({ "config.json", "generation_config.json" }) do
  local got = ids_of(saved_json(dir .. "/docs", name))
  check.eq(got[1], null, name .. ": bos_token_id")
  check.eq(got[2], 0, name .. ": eos_token_id, the documents' eos")
  check.eq(got[3], null, name .. ": pad_token_id")
end
-- a checkpoint's config.json with random weights: the documents' eos too (no weights, no origin)
r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "ghost", snapshots = "none",
                   model = { path = HF .. "gpt2", weights = "random", seq_len = 8, batch = 2 },
                   data = { file = dir .. "/docs.tok", eos = 0 }, save = dir .. "/docs_random" }
check.eq(r.status, "ok", "random weights: " .. tostring(r.message))
check.eq(saved_json(dir .. "/docs_random", "config.json").eos_token_id, 0, "random weights: the documents' eos")
-- without documents: null ids, present (absent, transformers reads GPT-2's 50256)
r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "ghost", snapshots = "none", model = shape,
                   save = dir .. "/windows" }
check.eq(r.status, "ok", "windows: " .. tostring(r.message))
local cfg = saved_json(dir .. "/windows", "config.json")
for _, k in ipairs({ "bos_token_id", "eos_token_id", "pad_token_id" }) do check.eq(cfg[k], null, "windows: " .. k) end

-- PEFT's adapter folder as PEFT wrote it, on its base
r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "ghost", snapshots = "none", save = dir .. "/peft",
                   model = { path = HF .. "gpt2", adapter = HF .. "peft/gpt2", seq_len = 8, batch = 2 } }
check.eq(r.status, "ok", "adapter: " .. tostring(r.message))
check.eq(r.config.model.adapter, HF .. "peft/gpt2", "the adapter recorded")
check.eq(r.config.model.lora.rank, 4, "the adapter's rank")
local ok, why = dp.results.validate(r)
check.truthy(ok, why)
local adapter = saved_json(dir .. "/peft", "adapter_config.json")
check.truthy(adapter.base_model_name_or_path:sub(1, 1) == "/"
             and adapter.base_model_name_or_path:sub(-#"/fixtures/hf/gpt2") == "/fixtures/hf/gpt2",
             "base_model_name_or_path names the base: " .. tostring(adapter.base_model_name_or_path))
local got = ids_of(saved_json(dir .. "/peft", "config.json"))
check.eq(got[2], 95, "the base checkpoint's eos_token_id carried over")
local back <close> = dp.model.load(dir .. "/peft", { device = "cpu", seq_len = 8 })
check.eq(back:config().lora.rank, 4, "the saved directory loads with its adapters")
local plan = dp.experiment{ device = "plan", iters = 1, warmup = 0, method = "ghost",
                            model = { path = HF .. "gpt2", adapter = HF .. "peft/gpt2", seq_len = 8, batch = 2 } }
check.eq(plan.status, "ok", "plan: " .. tostring(plan.message))
check.eq(plan.config.model.lora.rank, 4, "plan: the adapter's rank")

local function one_line(f, want, what)
  local ok2, e = pcall(f)
  check.eq(ok2, false, what)
  check.truthy(tostring(e):find(want, 1, true), string.format("%s: %q names %q", what, tostring(e), want))
  check.eq(tostring(e):find("\n", 1, true), nil, what .. ": one line: " .. tostring(e))
end
local function run(model) return function() dp.experiment{ device = "cpu", iters = 1, warmup = 0, model = model } end end
one_line(run({ path = HF .. "peft/gpt2", seq_len = 8 }),
         "holds a PEFT adapter (adapter_config.json) but no config.json: load it with its base model, as "
         .. "model = {path = BASE, adapter = \"" .. HF .. "peft/gpt2\"}", "the adapter folder alone")
one_line(run({ adapter = HF .. "peft/gpt2", seq_len = 8 }), "model.adapter needs model.path", "adapter without path")
one_line(run({ path = HF .. "gpt2", adapter = HF .. "peft/gpt2", lora = { rank = 4 }, seq_len = 8 }),
         "model.lora and model.adapter", "adapter and lora")
one_line(run({ path = HF .. "gpt2", adapter = 4, seq_len = 8 }), "model.adapter must be a PEFT adapter directory",
         "adapter not a string")
one_line(run({ path = HF .. "gpt2", adapter = HF .. "llama", seq_len = 8 }),
         "no adapter_config.json: adapter = DIR names a PEFT adapter folder", "adapter not an adapter")
one_line(function() dp.model.load(HF .. "peft/gpt2") end, "dpprof.model.load(BASE, {adapter = ", "load of the folder alone")

local m <close> = dp.model{ vocab = 16, hidden = 16, layers = 1, heads = 2, seq_len = 8, device = "cpu" }
one_line(function() m:save(dir .. "/ids", { eos_token_id = 16 }) end,
         "model:save: 'eos_token_id' must be a token id from 0 to 15 (the vocabulary of 16; got 16)", "eos past vocab")
one_line(function() m:save(dir .. "/ids", { pad_token_id = -1 }) end, "'pad_token_id' must be a token id from 0 to 15",
         "negative pad")
one_line(function() m:save(dir .. "/ids", { eos = 1 }) end,
         "model:save: unknown key 'eos' (valid: bos_token_id, eos_token_id, pad_token_id)", "unknown key")
m:save(dir .. "/ids", { bos_token_id = 1, eos_token_id = 2, pad_token_id = 15 })
check.eq(table.concat(ids_of(saved_json(dir .. "/ids", "generation_config.json")), ","), "1,2,15", "m:save's ids")

os.execute("rm -rf " .. dir)
print("test_experiment_save: ok")
