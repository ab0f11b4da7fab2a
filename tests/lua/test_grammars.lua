-- test_grammars.lua: the option grammars the engine declares once in C and exports (issue 28):
-- dpprof.model.KEYS and LOAD_KEYS, dpprof.dpsgd.WRAP_KEYS and the checkpoint setting's parser,
-- formatter and display. Each list is held to what the C side accepts and refuses (every key
-- taken, an unknown key's error listing exactly the list), the Lua modules' own lists to the
-- exported ones plus or less only their own keys, and the checkpoint grammar to dp.model's,
-- dp.model.load's, dp.fit's and the results validator's refusals, message for message.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local experiment = require("dpprof.experiment")
local results = require("dpprof.results")
local cli = require("dpprof.cli")

local HF = arg[0]:match("(.*/)") .. "../fixtures/hf/gpt2" -- 2 layers, 16 positions

-- The error fn raises, as its text without the position of the line that raised it (nil when it
-- does not raise).
local function refusal(fn)
  local ok, err = pcall(fn)
  if ok then return nil end
  local text = dp.error_text(err)
  return text:match("^[^\n:]-%.lua:%d+: (.*)$") or text
end

local function set_of(list)
  local s = {}
  for _, k in ipairs(list) do s[k] = true end
  return s
end

local function without(list, drop, plus)
  local out = {}
  for _, k in ipairs(list) do if not drop[k] then out[#out + 1] = k end end
  for _, k in ipairs(plus or {}) do out[#out + 1] = k end
  return out
end

-- dpprof.model.KEYS: a valid value for every key (a key added in C without one here fails this
-- test), all of them accepted together by dp.model.check and by dp.model on the CPU; an unknown
-- key's error lists exactly KEYS, in their order.
local MODEL_VALUES = {
  arch = "gpt", vocab = 50, hidden = 32, layers = 2, heads = 4, kv_heads = 4, head_dim = 8, seq_len = 16, batch = 2,
  mlp_ratio = 4, ffn = 128, max_positions = 16, tie_head = true, dtype = "f32", norm_eps = 1e-5, rope_theta = 10000,
  rope_scaling = { rope_type = "default" }, init_std = 0.02, seed = 3, device = "cpu", lora = { rank = 2 },
  master_weights = true, checkpoint = "blocks", distributed = { strategy = "ddp" },
  parts = { world_size = 2, rank = 1 },
}
do
  check.truthy(#dp.model.KEYS >= 20, "dpprof.model.KEYS is a list: " .. #dp.model.KEYS)
  local cfg = {}
  for _, k in ipairs(dp.model.KEYS) do
    check.truthy(MODEL_VALUES[k] ~= nil, "a value for dpprof.model.KEYS's '" .. k .. "' in this test")
    cfg[k] = MODEL_VALUES[k]
  end
  for k in pairs(MODEL_VALUES) do check.truthy(set_of(dp.model.KEYS)[k], "'" .. k .. "' is in dpprof.model.KEYS") end
  check.eq(dp.model.check(cfg), true, "every key of dpprof.model.KEYS accepted by dp.model.check")
  local m = dp.model(cfg)
  check.eq(m:config().checkpoint, "blocks", "and by dp.model")
  check.eq(m:config().lora.rank, 2, "lora taken")
  check.eq(m:config().parts.rank, 1, "parts taken")
  m:free()
  -- parts out of range, or half given: refused naming the key and the valid values
  for _, bad in ipairs({ { world_size = 2, rank = 2 }, { world_size = 0, rank = 0 }, { world_size = 2 }, 3 }) do
    local spec = dp.deep_copy(cfg)
    spec.parts = bad
    local why = refusal(function() dp.model.check(spec) end)
    check.truthy(why:find("'parts", 1, true) and (why:find("world_size", 1, true) or why:find("rank", 1, true)),
                 "a bad parts names the key: " .. why)
  end
  cfg.sharding = true
  check.eq(refusal(function() dp.model.check(cfg) end),
           "dpprof.model: unknown key 'sharding' (valid: " .. table.concat(dp.model.KEYS, ", ") .. ")",
           "dp.model's unknown key lists exactly dpprof.model.KEYS")
  check.eq(refusal(function() dp.model(cfg) end),
           "dpprof.model: unknown key 'sharding' (valid: " .. table.concat(dp.model.KEYS, ", ") .. ")",
           "the constructor's too")
end

-- dpprof.model.LOAD_KEYS: each a key of dp.model's, all accepted by dp.model.load; an unknown
-- key's error lists exactly LOAD_KEYS and adapter (a PEFT adapter folder: more files, no runtime
-- choice of dp.model's).
do
  local opts = {}
  for _, k in ipairs(dp.model.LOAD_KEYS) do
    check.truthy(set_of(dp.model.KEYS)[k], "load's '" .. k .. "' is one of dp.model's")
    opts[k] = MODEL_VALUES[k]
  end
  local m = dp.model.load(HF, opts)
  check.eq(m:config().checkpoint, "blocks", "every key of LOAD_KEYS accepted by dp.model.load")
  check.eq(m:config().seq_len, 16, "seq_len taken")
  m:free()
  opts.hidden = 64
  check.eq(refusal(function() dp.model.load(HF, opts) end),
           "dpprof.model.load: unknown key 'hidden' (valid: " .. table.concat(dp.model.LOAD_KEYS, ", ") .. ", adapter)",
           "load's unknown key lists exactly LOAD_KEYS and adapter")
end

-- dpprof.dpsgd.WRAP_KEYS: all accepted by dp.dpsgd.check (method, or norms and clip); an unknown key's
-- error lists exactly WRAP_KEYS.
do
  local values = { method = "ghost", norms = "ghost", clip = "twopass", max_grad_norm = 1, noise_multiplier = 1,
                   sample_rate = 0.04, dataset_size = 100, expected_batch_size = 4, max_physical_batch_size = 2,
                   poisson = false, seed = 5, delta = 1e-5, flash_impl = "tiles", clipping = "groups",
                   clip_fn = "automatic", gamma = 0.02, groups = { { name = "all", patterns = "*" } },
                   bounds = { ["*.mlp.*"] = 0.5 },
                   adaptive = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.2, max_clipbound = 10,
                                min_clipbound = 0.01, unclipped_num_std = 1 } }
  -- bounds go with per_layer, groups with groups: one of the pair in each call
  local with_method, with_pair = {}, {}
  for _, k in ipairs(dp.dpsgd.WRAP_KEYS) do
    check.truthy(values[k] ~= nil, "a value for dpprof.dpsgd.WRAP_KEYS's '" .. k .. "' in this test")
    if k ~= "norms" and k ~= "clip" then with_method[k] = values[k] end
    if k ~= "method" then with_pair[k] = values[k] end
  end
  -- adaptive goes with flat abadi clipping: in a third call
  with_method.bounds, with_pair.groups, with_pair.clipping = nil, nil, "per_layer"
  with_pair.clip = "bk"
  local adaptive = with_method.adaptive
  with_method.adaptive, with_pair.adaptive = nil, nil
  check.eq(dp.dpsgd.check({ method = "flash_clip", adaptive = adaptive }, 4), true, "adaptive accepted by dp.dpsgd.check")
  for k in pairs(values) do check.truthy(set_of(dp.dpsgd.WRAP_KEYS)[k], "'" .. k .. "' is in dpprof.dpsgd.WRAP_KEYS") end
  check.eq(dp.dpsgd.check(with_method, 4), true, "every key of WRAP_KEYS but norms and clip accepted by dp.dpsgd.check")
  check.eq(dp.dpsgd.check(with_pair, 4), true, "every key of WRAP_KEYS but method accepted by dp.dpsgd.check")
  with_method.accountant = "rdp"
  check.eq(refusal(function() dp.dpsgd.check(with_method, 4) end),
           "dpprof.dpsgd.wrap: unknown key 'accountant' (valid: " .. table.concat(dp.dpsgd.WRAP_KEYS, ", ") .. ")",
           "wrap's unknown key lists exactly WRAP_KEYS")
end

-- dp.experiment's model and dp keys: the exported lists with only the experiment's own changes
-- (model: less device, plus path, weights and adapter; dp: less what it sets elsewhere, plus accountant).
do
  local base = { model = { vocab = 50, hidden = 32, layers = 2, heads = 4, seq_len = 16, batch = 2 }, device = "plan" }
  local cfg = dp.deep_copy(base)
  cfg.model.sharding = true
  check.eq(refusal(function() experiment.config(cfg) end),
           "dpprof.experiment: model: unknown key 'sharding' (valid: "
           .. table.concat(without(dp.model.KEYS, { device = true, parts = true }, { "path", "weights", "adapter" }), ", ")
           .. ")",
           "an experiment's model keys: dpprof.model.KEYS less device and parts, plus path, weights and adapter")
  cfg = dp.deep_copy(base)
  cfg.model.parts = { world_size = 2, rank = 0 }
  check.truthy(refusal(function() experiment.config(cfg) end):find("unknown key 'parts'", 1, true),
               "model.parts refused (an fsdp experiment builds its ranks' models in parts itself)")
  cfg = dp.deep_copy(base)
  cfg.model.device = "cpu"
  check.truthy(refusal(function() experiment.config(cfg) end):find("unknown key 'device'", 1, true),
               "model.device refused (an experiment's device is at the top)")
  cfg = dp.deep_copy(base)
  cfg.dp = { seed = 1 }
  local own = { method = true, norms = true, clip = true, seed = true, expected_batch_size = true }
  check.eq(refusal(function() experiment.config(cfg) end),
           "dpprof.experiment: dp: unknown key 'seed' (valid: "
           .. table.concat(without(dp.dpsgd.WRAP_KEYS, own, { "accountant" }), ", ") .. ")",
           "an experiment's dp keys: WRAP_KEYS less what it sets elsewhere, plus accountant")
  -- every dp key of an experiment but its accountant is wrap's, passed on as given
  cfg = dp.deep_copy(base)
  cfg.dp = { max_grad_norm = 2, noise_multiplier = 0.5, sample_rate = 0.02, max_physical_batch_size = 1, delta = 1e-6,
             poisson = false, dataset_size = 100, flash_impl = "strips", accountant = "rdp" }
  local c = experiment.config(cfg)
  local w = experiment.wrap_options(c, 2, 1)
  for k, v in pairs(cfg.dp) do
    if k ~= "accountant" then check.eq(w[k], v, "dp." .. k .. " passed on to wrap") end
  end
  -- a checkpoint's runtime choices (model.path with its weights): load's options less device and parts
  local file = dp.model.read_config(HF)
  for _, k in ipairs(without(dp.model.LOAD_KEYS, { device = true, parts = true })) do
    local spec = { path = HF, [k] = MODEL_VALUES[k] }
    local ok, err = pcall(experiment.model_options, spec, "cpu")
    check.truthy(ok, "model." .. k .. " beside a checkpoint's weights: " .. tostring(err))
  end
  local ok, err = pcall(experiment.model_options, { path = HF, hidden = file.hidden * 2 }, "cpu")
  check.truthy(not ok and dp.error_text(err):find("model.hidden overrides", 1, true),
               "a key not of LOAD_KEYS beside the weights is refused: " .. tostring(err))
  -- fit's command line: model keys of dp.model's
  for _, k in ipairs(cli.FIT_MODEL_KEYS) do check.truthy(set_of(dp.model.KEYS)[k], "fit's '" .. k .. "' is dp.model's") end
  -- a sweep's vary shortcuts land on keys an experiment takes
  local exp_model = set_of(without(dp.model.KEYS, { device = true }, { "path", "weights" }))
  local exp_dp = set_of(without(dp.dpsgd.WRAP_KEYS, own, { "accountant" }))
  for short, path in pairs(require("dpprof.sweep").KEYS) do
    if path[1] == "model" then check.truthy(exp_model[path[2]], "sweep's " .. short .. " is a model key") end
    if path[1] == "dp" then check.truthy(exp_dp[path[2]], "sweep's " .. short .. " is a dp key") end
  end
end

-- The checkpoint setting: parse and format round-trip; what parse refuses, dp.model, dp.model.load,
-- dp.fit and the results validator refuse with its message; with the layers, as the engine bounds it.
do
  local parse, format, name = dp.model.checkpoint_parse, dp.model.checkpoint_format, dp.model.checkpoint_name
  check.eq(parse(nil), 0, "absent: off")
  check.eq(parse(false), 0, "false: off")
  check.eq(parse("blocks"), 1, "\"blocks\": every block")
  check.eq(parse(3), 3, "3: every 3rd block")
  check.eq(parse(2.0), nil, "2.0 is no integer (as everywhere in dpprof)")
  for _, n in ipairs({ 0, 1, 2, 7, 1 << 20 }) do check.eq(parse(format(n)), n, "parse(format(" .. n .. "))") end
  for _, v in ipairs({ false, "blocks", 2, 7 }) do check.eq(format(parse(v)), v, "format(parse(" .. tostring(v) .. "))") end
  check.eq(format(1), "blocks", "1 is written \"blocks\"")
  check.truthy(not pcall(format, -1), "format refuses a negative setting")
  check.eq(name(false), "off", "name(false)")
  check.eq(name(nil), "off", "name(nil)")
  check.eq(name("blocks"), "blocks", "name(\"blocks\")")
  check.eq(name(4), "every 4", "name(4)")
  check.eq(name(1), "every 1", "name(1): as written")
  local cfg = { vocab = 50, hidden = 32, layers = 4, heads = 4, seq_len = 8, batch = 1 }
  local fit_base = { model = { vocab = 50, hidden = 32, layers = 4, heads = 4, seq_len = 8, batch = 1 } }
  local doc = dp.json.decode(assert(dp.read_file(arg[0]:match("(.*/)") .. "../fixtures/results/single/ghost.json")))
  check.truthy(results.validate(doc), "the fixture result is valid")
  for _, bad in ipairs({ true, 0, -2, 1.5, "every", "2", "Blocks", (1 << 20) + 1, {} }) do
    local n, why = parse(bad)
    check.eq(n, nil, "parse refuses " .. tostring(bad))
    check.truthy(why:find("^'checkpoint' must be false, \"blocks\" %(every block%) or an integer N >= 1"),
                 "parse's why names the key and the valid settings: " .. why)
    cfg.checkpoint = bad
    check.eq(refusal(function() dp.model.check(cfg) end), "dpprof.model: " .. why, "dp.model.check's refusal")
    check.eq(refusal(function() dp.model(cfg) end), "dpprof.model: " .. why, "dp.model's refusal")
    check.eq(refusal(function() dp.model.load(HF, { checkpoint = bad }) end), "dpprof.model.load: " .. why,
             "dp.model.load's refusal")
    check.eq(refusal(function() dp.fit{ base = fit_base, checkpoint = { false, bad } } end), "dpprof.fit: " .. why,
             "dp.fit's refusal")
    check.eq(refusal(function() name(bad) end), "dpprof.model.checkpoint_name: " .. why, "name refuses it too")
    if type(bad) ~= "table" then -- a result's config (JSON has no table there that the model would read)
      local d = dp.deep_copy(doc)
      d.config.model.checkpoint = bad
      local ok, problems = results.validate(d)
      check.truthy(not ok and problems[1] == "config.model.checkpoint: " .. why,
                   "the validator's refusal: " .. table.concat(problems or {}, "; "))
    end
  end
  -- bounded by the layers, as dp_model_config_check bounds it
  check.eq(parse(4, 4), 4, "every 4th of 4 layers: block 0")
  local n, why = parse(5, 4)
  check.eq(n, nil, "5 of 4 layers refused")
  check.eq(why, "'checkpoint' 5 is more than the model's 4 layers (valid: false, \"blocks\" or N in 1..4, every N-th "
           .. "block)", "the engine's message")
  cfg.checkpoint = 5
  check.eq(refusal(function() dp.model.check(cfg) end), "dpprof.model: " .. why, "dp.model's refusal of 5 of 4 layers")
  cfg.checkpoint = 3
  check.eq(dp.model.check(cfg), true, "3 of 4 layers taken")
  -- a model writes its setting as format does
  for _, v in ipairs({ false, "blocks", 2 }) do
    cfg.checkpoint, cfg.device = v, "plan"
    local m = dp.model(cfg)
    check.eq(m:config().checkpoint, format(parse(v)), "m:config().checkpoint of " .. tostring(v))
    m:free()
  end
end

print("test_grammars: ok")
