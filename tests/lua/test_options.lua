-- test_options.lua: the one option schema (common/options_schema.h, dpprof.options) is what every
-- reader of options takes, its defaults are the engine's and the experiment's, and docs/lua.md
-- holds the table written from it.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local options = dp.options
local schema = dp.options_schema
local root = arg[0]:match("(.*/)") .. "../../"

local function joined(t) return table.concat(t, ",") end

-- every row is documented, typed, and in a known section; no key twice in a section
local seen = {}
for _, o in ipairs(schema.options) do
  check.truthy(o.doc and #o.doc > 0, o.section .. "." .. o.key .. " has a doc line")
  local id = o.section .. "." .. o.key
  check.truthy(not seen[id], id .. " once")
  seen[id] = true
  if o.type == "word" and o.choices then check.truthy(#o.choices >= 2, id .. "'s words") end
  if o.zero_default then check.eq(o.min, 0, id .. ": 0 means its default") end
end
check.eq(joined(options.SECTIONS), "experiment,model,checkpoint,dp,distributed,data,optimizer,device,sweep,fit,risk")

-- the bindings' lists are the schema's
check.eq(joined(dp.model.KEYS), joined(options.keys("model")))
check.eq(joined(dp.model.LOAD_KEYS), joined(options.keys("model", { load = true })))
check.eq(joined(dp.dist.KEYS), joined(options.keys("distributed")))
check.eq(joined(dp.dpsgd.WRAP_KEYS), joined(options.keys("dp", { experiment = false })))
check.eq(joined(dp.data.KEYS), joined(options.keys("data")))
check.eq(joined(options.keys("dp", { set_elsewhere = true })), "method,norms,clip,expected_batch_size,seed")
-- an optimizer refuses what the schema does not give it, naming the keys it does
local m <close> = dp.model{ vocab = 16, hidden = 8, layers = 1, heads = 2, seq_len = 4, device = "cpu" }
local ok, err = pcall(dp.optim.sgd, m, { lr = 0.1, betas = { 0.9, 0.99 } })
check.truthy(not ok and tostring(err):find("valid: lr, weight_decay, momentum", 1, true), tostring(err))
ok, err = pcall(dp.optim.adamw, m, { momentum = 0.9 })
check.truthy(not ok and tostring(err):find("valid: lr, betas, eps, weight_decay", 1, true), tostring(err))

-- the defaults the schema documents are those the engine and an experiment take
local E, D = dp.dpsgd.DEFAULTS, dp.experiment_defaults or require("dpprof.config").DEFAULTS
for _, k in ipairs({ "max_grad_norm", "noise_multiplier", "delta" }) do
  check.eq(tonumber(options.row("dp", k).default), E[k], "dp." .. k .. "'s default")
end
check.eq(options.row("dp", "poisson").default, tostring(E.poisson))
check.eq(options.row("dp", "accountant").default, E.accountant)
check.eq(options.row("dp", "flash_impl").default, E.flash_impl)
check.eq(tonumber(options.row("dp", "seed").default), E.seed)
check.eq(tonumber(options.row("dp", "sample_rate").default), D.dp.sample_rate)
for _, k in ipairs({ "iters", "warmup", "seed" }) do
  check.eq(tonumber(options.row("experiment", k).default), D[k], "experiment " .. k .. "'s default")
end
check.eq(options.row("experiment", "method").default, D.method)
check.eq(options.row("device", "device").default, D.device)
check.eq(options.row("optimizer", "name").default, D.optimizer.name)
check.eq(tonumber(options.row("optimizer", "lr").default), D.optimizer.lr)
check.eq(tonumber(options.row("optimizer", "weight_decay").default), D.optimizer.weight_decay)
-- dpprof.model's defaults, read back from a model built without them (gpt)
local c = m:config()
for _, k in ipairs({ "batch", "norm_eps", "rope_theta", "init_std", "seed" }) do
  check.near(tonumber(options.row("model", k).default), c[k], 1e-6, "model." .. k .. "'s default")
end
check.eq(options.row("model", "dtype").default, c.dtype)
check.eq(options.row("model", "arch").default, c.arch)
check.eq(tostring(c.master_weights), options.row("model", "master_weights").default)

-- rows and sections by name
local kv = options.row("model", "kv_heads")
check.eq(kv.min, 0)
check.truthy(kv.zero_default and kv.fit and kv.sweep, "kv_heads' flags")
check.eq(options.row("model", "colour"), nil)
check.truthy(not pcall(options.row, "colours", "red"))
ok, err = pcall(schema.keys, "colours")
check.truthy(not ok and tostring(err):find("valid: experiment, model", 1, true), tostring(err))

-- dp.sweep's bare keys are the schema's SWEEP rows (and the few it names a path for itself)
local sk = options.sweep_keys()
check.eq(joined(sk.seq_len), "model,seq_len")
check.eq(joined(sk.method), "method")
check.eq(joined(sk.device), "device")
check.eq(joined(sk.strategy), "distributed,strategy")
for k, path in pairs(sk) do check.eq(joined(require("dpprof.sweep").KEYS[k]), joined(path), "sweep key " .. k) end

-- docs/lua.md holds the table the schema writes
local doc = assert(dp.read_file(root .. "docs/lua.md"))
local _, b2 = doc:find("<!-- options:begin -->\n", 1, true)
local e1 = b2 and doc:find("<!-- options:end -->", b2, true)
local table_text = e1 and doc:sub(b2 + 1, e1 - 1)
check.truthy(table_text, "docs/lua.md has the options markers")
check.truthy(table_text == "\n" .. options.markdown() .. "\n",
             "docs/lua.md's options table is out of date: run `dpprof run scripts/options_doc.lua`")
print("test_options: ok")

-- dpprof fit's and dpprof risk's help name every word their command lines take
local cli = require("dpprof.cli")
local fit_help, risk_help = cli.fit_usage(), cli.risk_usage()
local function words_in(help, lists, what)
  for _, list in ipairs(lists) do
    for _, k in ipairs(list) do
      check.truthy(help:find(k .. "=", 1, true), what .. " --help names " .. k .. "=")
    end
  end
end
words_in(fit_help, { options.keys("fit"), options.keys("model", { fit = true }) }, "dpprof fit")
words_in(risk_help, { options.keys("risk"), options.keys("fit", { risk = true }) }, "dpprof risk")
check.eq(joined(cli.FIT_MODEL_KEYS), joined(options.keys("model", { fit = true })))
check.eq(joined(cli.RISK_KEYS), joined(options.keys("risk")))
print("test_options: help ok")

-- rope_theta, the schema's demonstration of an option added once (a FIT, SWEEP and LOAD row):
-- a checkpoint loaded with its weights takes it in place of its config.json's, an experiment
-- passes it on, fit's command line and a sweep take it by name
local HF = root .. "tests/fixtures/hf/llama3"
local file_theta = dp.model.read_config(HF).rope_theta
local function logits_of(opts)
  local lm <close> = dp.model.load(HF, opts)
  local b = dp.batch{ model = lm, seed = 3 }
  local loss = lm:forward(b)
  lm:release_activations()
  dp.free_batch(b)
  return lm:config().rope_theta, loss
end
local theta0, loss0 = logits_of({ device = "cpu", seq_len = 8 })
local theta1, loss1 = logits_of({ device = "cpu", seq_len = 8, rope_theta = file_theta * 4 })
check.eq(theta0, file_theta)
check.near(theta1, file_theta * 4, 1e-3)
check.truthy(loss0 ~= loss1, "a checkpoint's rope_theta override changes its forward")
check.raises(function() dp.model.load(HF, { device = "cpu", seq_len = 8, rope_theta = -1 }) end, { "rope_theta" })
collectgarbage("collect") -- the loads above freed: nothing of theirs is live in the experiment
local r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "vanilla",
                         model = { path = HF, seq_len = 8, batch = 1, rope_theta = file_theta * 4 } }
check.eq(r.status, "ok")
check.near(r.config.model.rope_theta, file_theta * 4, 1e-3)
check.eq(joined(require("dpprof.sweep").KEYS.rope_theta), "model,rope_theta")
check.truthy(fit_help:find("rope_theta=", 1, true), "fit --help names rope_theta=")
print("test_options: rope_theta ok")
