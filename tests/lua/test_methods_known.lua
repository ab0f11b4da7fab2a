-- test_methods_known.lua: every preset of the engine's one table (engine/dp/dpsgd_method.c, seen
-- as dpprof.dpsgd.METHODS and dpprof.dpsgd.PRESETS) is known to every consumer: the wrapper, an
-- experiment (run on the plan device), the result's validator, fit, the scripts' method lists,
-- `dpprof fit --help`, dp.risk and `dpprof risk --help`, and the charts (a colour no other preset
-- has, and a rendered chart).
-- A preset added to that table alone is fully supported, or this test fails naming the consumer.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local results = dp.results

local METHODS, PRESETS = dp.dpsgd.METHODS, dp.dpsgd.PRESETS

local function set(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- The two views of the table agree: METHODS lists each preset once, vanilla (the baseline) first.
check.truthy(#METHODS >= 6, "the presets are there (" .. #METHODS .. ")")
check.eq(METHODS[1], "vanilla", "vanilla first")
check.eq(count(set(METHODS)), #METHODS, "each preset once in METHODS")
check.eq(count(PRESETS), #METHODS, "PRESETS has an entry per method")
local norms, clips = set(dp.dpsgd.NORMS), set(dp.dpsgd.CLIPS)
for name, p in pairs(PRESETS) do
  check.truthy(set(METHODS)[name], name .. " of PRESETS is in METHODS")
  if name == "vanilla" then
    check.truthy(p.norms == nil and p.clip == nil, "vanilla has no norms and clip choice")
  else
    check.truthy(norms[p.norms], name .. ": norms '" .. tostring(p.norms) .. "' is one of dp.dpsgd.NORMS")
    check.truthy(clips[p.clip], name .. ": clip '" .. tostring(p.clip) .. "' is one of dp.dpsgd.CLIPS")
  end
end
check.eq(table.concat(results.NORMS_KINDS, ","), table.concat(dp.dpsgd.FORMULATIONS, ","),
         "the validator's per-layer formulations are the engine's")

-- The scripts' lists: presets.ALL_METHODS (all=1), fit's methods, the defaults the scripts pick from.
local presets = require("dpprof.presets")
local fit = require("dpprof.fit")
check.eq(table.concat(presets.methods{ all = 1 }, ","), table.concat(METHODS, ","), "all=1 runs every preset")
check.eq(table.concat(fit.METHODS, ","), table.concat(METHODS, ","), "fit's methods")
for _, m in ipairs(presets.DEFAULT_METHODS) do check.truthy(PRESETS[m], "default method " .. m .. " is a preset") end
check.eq(dp.dpsgd.DEFAULTS.accountant, dp.privacy.default_accountant, "one default accountant")
local ed = require("dpprof.experiment").DEFAULTS
for _, k in ipairs({ "max_grad_norm", "noise_multiplier", "delta", "poisson", "accountant" }) do
  check.eq(ed.dp[k], dp.dpsgd.DEFAULTS[k], "the experiment's default " .. k .. " is the engine's")
end

-- Every preset through the consumers.
local out = os.tmpname()
os.remove(out)
assert(dp.mkdir_p(out))
local MODEL = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 16, batch = 2 }
local help_code, help = check.sh(string.format("%q fit --help", dp.executable))
check.eq(help_code, 0, "dpprof fit --help")
local risk_code, risk_help = check.sh(string.format("%q risk --help", dp.executable))
check.eq(risk_code, 0, "dpprof risk --help")
local colours = {}
for _, name in ipairs(METHODS) do
  -- the wrapper's checks and an experiment: a result naming the preset and its two choices
  check.truthy(dp.dpsgd.check({ method = name }, 2), name .. ": dp.dpsgd.check accepts it")
  local r = dp.experiment{ name = name, method = name, model = MODEL, device = "plan", iters = 1, warmup = 0,
                           snapshots = "none" }
  check.eq(r.status, "ok", name .. ": the experiment runs (" .. tostring(r.message) .. ")")
  check.eq(r.method, name, name .. ": the result's method")
  check.eq(dp.json.is_null(r.norms) and "null" or r.norms, PRESETS[name].norms or "null", name .. ": the result's norms")
  check.eq(dp.json.is_null(r.clip) and "null" or r.clip, PRESETS[name].clip or "null", name .. ": the result's clip")
  local ok, problems = results.validate(r)
  check.truthy(ok, name .. ": the result validates: " .. table.concat(problems or {}, "; "))
  results.write(out .. "/" .. name .. ".json", r)
  -- fit takes it by name
  check.truthy(fit.options{ base = { model = MODEL }, method = name, vary = "batch", hi = 2 }, name .. ": fit accepts it")
  -- the CLI's help names it
  check.truthy(help:find("%f[%w_]" .. name:gsub("%p", "%%%0") .. "%f[^%w_]"), name .. ": `dpprof fit --help` names it")
  -- risk plans it by name, and its help names it
  local rr = dp.risk{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 16 }, method = name,
                      data = { lengths = { 3, 9, 16 } }, sample_rate = 0.5, steps = 10, budget_gb = 1 }
  check.eq(rr.methods[1].method, name, name .. ": dp.risk plans it")
  check.truthy(risk_help:find("%f[%w_]" .. name:gsub("%p", "%%%0") .. "%f[^%w_]"), name .. ": `dpprof risk --help` names it")
  -- a colour of its own
  local c = dp.plot.method_color(name)
  check.truthy(colours[c] == nil, string.format("%s: colour %s is %s's too", name, c, tostring(colours[c])))
  colours[c] = name
end

-- The charts draw every preset, with no problem reading any result.
local ok, err, messages = dp.plot.render_dir(out)
check.truthy(ok, "charts of every preset: " .. tostring(err) .. " " .. table.concat(messages or {}, "; "))
for _, n in ipairs(dp.list_dir(out)) do os.remove(out .. "/" .. n) end
os.remove(out)
print("test_methods_known: ok (" .. #METHODS .. " presets)")
