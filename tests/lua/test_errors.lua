-- test_errors.lua: what a user sees when something is wrong. A mistake is one line naming the
-- problem (and the valid choices), placed at the user's line or at none, never at a line inside
-- dpprof's own Lua code and never followed by a traceback through it; a sweep refuses a point it
-- would refuse anyway before any point runs; the CLI's --help and missing values answer plainly.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local MODEL = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }
local function cfg(extra)
  local c = { model = {}, device = "cpu", iters = 1, warmup = 0, snapshots = "none" }
  for k, v in pairs(MODEL) do c.model[k] = v end
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end
local THIS = arg[0]:match("([^/]+)$")
local function no_own_position(msg, what)
  msg = tostring(msg)
  for src in msg:gmatch("([^%s:]+%.lua):%d+:") do
    check.truthy(not dp.is_own_source(src), string.format("%s: no position in dpprof's code: %s", what, msg))
  end
end

-- dp.error_text: strips a position in dpprof's own modules, keeps the user's and plain messages.
local own = dp.lua_dir .. "/dpprof/experiment.lua"
check.eq(dp.error_text(own .. ":326: dpprof.model: bad"), "dpprof.model: bad", "own position stripped")
check.eq(dp.error_text("..." .. own:sub(-20) .. ":12: x"), "x", "shortened own position stripped")
check.eq(dp.error_text("my/experiment.lua:3: x"), "my/experiment.lua:3: x", "another file's position kept")
check.eq(dp.error_text("plain"), "plain", "no position")
check.truthy(dp.is_own_source(dp.lua_dir .. "/dpprof/sweep.lua"), "sweep.lua is dpprof's")
check.truthy(not dp.is_own_source("/tmp/dpprof/sweep.lua"), "a user's dpprof/ directory is not")
-- A long message costs time linear in its length (is_own_source's unanchored pattern was
-- quadratic in a source with a long first segment: 40 KB took 7 s, this 1 MB one would take
-- over an hour); the results are those of a short one.
local long_dir = string.rep("d", 1000000)
local user_msg = long_dir .. "/experiment.lua:7: boom"
check.eq(dp.error_text(user_msg), user_msg, "1 MB user position kept whole")
check.truthy(not dp.is_own_source(long_dir .. "/experiment.lua"), "a long user path is not dpprof's")
check.truthy(not dp.is_own_source(long_dir .. "/x.luax"), "a long path of no .lua file is not dpprof's")
check.truthy(not dp.is_own_source(long_dir), "a long name without '/' or .lua is not dpprof's")
check.truthy(not dp.is_own_source(long_dir .. "/.lua"), "'.lua' alone is no module name")
local own_msg = own .. ":326: " .. string.rep("m", 1000000)
check.eq(dp.error_text(own_msg), string.rep("m", 1000000), "1 MB message at an own position: stripped")
check.eq(dp.error_text(string.rep("a/", 500000) .. "x.lua:1: y"), string.rep("a/", 500000) .. "x.lua:1: y",
         "a path of 500,000 directories kept")

-- norms= without clip= is a configuration mistake, named (it used to fail inside experiment.lua
-- with "attempt to concatenate a nil value").
local err = check.raises(function() dp.experiment(cfg{ norms = "ghost" }) end,
                         { "norms= and clip= go together", "twopass, bk" }, "norms without clip")
check.truthy(err:find(THIS, 1, true), "placed at the caller's line: " .. err)

-- A count given as a string is shown as one ("got 3" said nothing).
check.raises(function() dp.experiment(cfg{ iters = "3" }) end, { 'iters must be an integer >= 1, got "3" (a string)' })

-- A device that cannot be had: at the caller's line, with the valid names.
err = check.raises(function() dp.experiment(cfg{ device = "gpu" }) end, { "unknown device 'gpu'", "cpu, cuda, plan" })
check.truthy(err:find(THIS, 1, true), "device error at the caller's line: " .. err)
check.eq(table.concat(dp.DEVICES, ","), "cpu,cuda,plan,auto", "the engine's device names, which experiments take")
check.eq(dp.MAX_THREADS, 4096, "the thread limit dp.threads, isolate and experiments share")
check.eq(string.format("%s %s %s %s", dp.is_finite(1.5), dp.is_finite(0 / 0), dp.is_finite(-math.huge),
                       dp.is_finite("1")), "true false false false", "dp.is_finite: numbers, not NaN nor infinite")
no_own_position(err, "device")

-- A configuration the engine would refuse raises at the caller's line, in the engine's words,
-- before anything is built (it used to come back as status "error" while the script went on to
-- exit 0); only what fails while running (out of memory, a callback's error) is a result.
local function model(extra)
  local m = {}
  for k, v in pairs(MODEL) do m[k] = v end
  for k, v in pairs(extra) do m[k] = v end
  return m
end
err = check.raises(function() dp.experiment(cfg{ model = model{ hidden = 30, heads = 4 } }) end,
                   { "dpprof.experiment: dpprof.model: 'heads' (4) must divide 'hidden' (30)" }, "heads not dividing hidden")
check.truthy(err:find(THIS, 1, true), "at the caller's line: " .. err)
no_own_position(err, "model check")
check.raises(function() dp.experiment(cfg{ model = model{ max_positions = 64, seq_len = 128 } }) end,
             { "'max_positions' (64) must be at least 'seq_len' (128)" }, "max_positions below seq_len")
check.raises(function() dp.experiment(cfg{ method = "flash_clip", dp = { flash_impl = "strip" } }) end,
             { "dpprof.dpsgd.wrap: unknown flash_impl 'strip' (valid: tiles, strips)" }, "bad flash_impl")
check.raises(function() dp.experiment(cfg{ dp = { max_grad_norm = -1 } }) end, { "max_grad_norm -1 must be positive" })
-- what only building can tell (the layer table's size) raises too, from the building of the model
err = check.raises(function() dp.experiment(cfg{ model = model{ layers = 200000 } }) end,
                   { "dpprof.experiment: dpprof.model: 'layers' 200000 is too many" }, "too many layers")
check.truthy(err:find(THIS, 1, true), "at the caller's line: " .. err)
check.eq(dp.memory.stats("cpu").allocated, 0, "nothing left allocated after the refused build")
-- a callback's error is the run's: a result with status "error" and the message
local r = dp.experiment(cfg{ on = { after_step = function() error("boom in a callback") end } })
check.eq(r.status, "error", "a callback's error is a result")
check.truthy(r.message:find("boom in a callback", 1, true), r.message)
-- an error object that is not a string says what it is, never "table: 0x..."
r = dp.experiment(cfg{ on = { after_step = function() error({}) end } })
check.eq(r.status, "error", "error({}) in a callback")
check.eq(r.message, "(an error object of type table, with no message)", "error({}) message")
r = dp.experiment(cfg{ on = { after_step = function() error({ message = "from a table" }) end } })
check.eq(r.message, "from a table", "an error table's message field")

-- dpprof.model's messages name it: "dpprof.model: out of memory ...", not "dpprof.out of memory"
-- (the engine's message was glued to "dpprof." for the configuration checks' "model: ..." form).
dp.device("cpu")
dp.memory.set_limit(1000)
local mok, merr = pcall(dp.model, { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8 })
dp.memory.set_limit(0)
check.eq(mok, false, "a model over the limit")
check.truthy(tostring(merr):find("dpprof.model: out of memory", 1, true), tostring(merr))
mok, merr = pcall(dp.model, { vocab = 64, hidden = 2 ^ 40, layers = 1, heads = 2, seq_len = 8, device = "plan" })
check.truthy(tostring(merr):find("dpprof.model: tensor of that shape is too large", 1, true), tostring(merr))
check.truthy(not tostring(merr):find("dpprof.tensor", 1, true), tostring(merr))

-- Numbers are numbers: a string is refused with the key named, everywhere (model.hidden="16" used
-- to be taken where iters="3" was refused), and an integral float is an integer (4 * 2^20 used
-- to be refused as "got 4194304.0").
check.raises(function() dp.experiment(cfg{ model = model{ hidden = "16" } }) end,
             { "dpprof.model: 'hidden' must be an integer (got string)" }, "hidden as a string")
check.raises(function() dp.model{ vocab = 64, hidden = 16, layers = "1", heads = 2, seq_len = 8 } end,
             { "'layers' must be an integer (got string)" }, "dpprof.model directly")
r = dp.experiment(cfg{ memory_limit = 4 * 2 ^ 20, iters = 2.0, model = model{ hidden = 2 ^ 4 } })
check.eq(r.status, "ok", "integral floats accepted: " .. tostring(r.message))
check.eq(math.type(r.config.iters), "integer", "iters stored as an integer")
check.eq(r.config.iters, 2, "iters")
check.eq(#r.timing.iter_ms, 2, "two timed iterations")
check.eq(math.type(r.config.model.hidden), "integer", "hidden echoed as an integer")
check.raises(function() dp.experiment(cfg{ memory_limit = 4.5 }) end, { "memory_limit must be an integer >= 0, got 4.5" })

-- A sweep checks every point's configuration before the first runs: nothing is written.
local out = string.format("/tmp/dpprof-test-errors-%d-%d", dp.pid(), os.time())
err = check.raises(function()
  dp.sweep{ base = cfg(), vary = { method = { "vanilla", "gost" } }, out = out, quiet = true }
end, { "point method=gost", "unknown method 'gost'", "flash_clip" }, "sweep with a misspelt method")
no_own_position(err, "sweep")
check.eq(dp.list_dir(out), nil, "no point ran, no directory made")

-- The command line.
local exe = dp.executable
local sh = check.sh
local script = out .. ".lua"
local function run_script(src)
  local f = assert(io.open(script, "w"))
  f:write(src)
  f:close()
  return sh(string.format("%q run %q", exe, script))
end

local code, text = sh(string.format("%q run --help", exe))
check.eq(code, 0, "run --help exits 0: " .. text)
check.truthy(text:find("usage: dpprof run SCRIPT.lua", 1, true), "run usage: " .. text)
code, text = sh(string.format("%q plot --help", exe))
check.eq(code, 0, "plot --help exits 0: " .. text)
check.truthy(text:find("usage: dpprof plot DIR", 1, true) and text:find("--scale", 1, true), "plot usage: " .. text)
code, text = sh(string.format("%q plot %q --scale", exe, out))
check.eq(code, 2, "plot --scale without a value")
check.truthy(text:find("--scale needs a value", 1, true), "says the value is missing: " .. text)
code, text = sh(string.format("%q plot %q", exe, out .. "-absent"))
check.eq(code, 1, "plot of a missing directory")
local _, lines = text:gsub("cannot open results directory", "")
check.eq(lines, 1, "the problem said once: " .. text)

-- A mistake dpprof reports: one line, no traceback through dpprof.
code, text = run_script('local dp = require("dpprof")\ndp.experiment{ methd = "ghost" }\n')
check.eq(code, 1, "script error exits 1")
check.truthy(text:find("unknown key 'methd'", 1, true), "names the key: " .. text)
check.eq(select(2, text:gsub("\n", "")), 1, "one line: " .. text)
no_own_position(text, "CLI mistake")
-- A mistake deep in the user's code: their frames only.
code, text = run_script("local function f(t) return t.x.y end\nlocal function g() f({}) end\ng()\n")
check.eq(code, 1, "user error exits 1")
check.truthy(text:find("stack traceback (your code", 1, true) and text:find(":3: in main chunk", 1, true), text)
check.truthy(not text:find("[C]", 1, true), "no C frames: " .. text)
-- DPPROF_TRACEBACK=1: everything.
code, text = sh(string.format("DPPROF_TRACEBACK=1 %q run %q", exe, script))
check.truthy(text:find("[C]", 1, true) or text:find("stack traceback:", 1, true), "full traceback: " .. text)
-- Ctrl-C: one line, no traceback, and the process ends as an interrupted one (it used to print a
-- traceback through sweep.lua, or nothing). During a sweep the point's child is stopped; the
-- signal comes here from the point itself, as a terminal would send it to the foreground.
local t0 = dp.clock()
code, text = run_script(string.format([[
local dp = require("dpprof")
local parent = dp.pid()
local function inner()
  dp.sweep{ vary = { method = { "a", "b" } }, out = %q, quiet = true,
            run = function() os.execute("kill -INT " .. parent) dp.sleep(30) return {} end }
end
local function outer() inner() end
outer()
]], out .. "-int"))
check.truthy(code == 2 or code == 130, "ended by SIGINT: " .. tostring(code))
check.eq(text, "dpprof: dpprof.isolate: interrupted by SIGINT; the child was stopped\n", "one line")
check.truthy(dp.clock() - t0 < 15, "the sleeping child was stopped")
os.execute("rm -rf " .. out .. "-int")
-- in Lua code: at the next instruction
code, text = run_script([[
local dp = require("dpprof")
os.execute("(sleep 0.3; kill -INT " .. dp.pid() .. ") &")
local function spin() local x = 0 while true do x = x + 1 end end
local function outer() spin() end
outer()
]])
check.truthy(code == 2 or code == 130, "a loop ended by SIGINT: " .. tostring(code) .. " " .. text)
check.eq(text, "dpprof: interrupted by SIGINT\n", "one line")

-- The experiment scripts refuse an argument they do not read (it used to be ignored: metods=ghost
-- ran the default three methods, layers=2,4 the default depths), before running anything.
local experiments = arg[0]:match("(.*/)") .. "../../experiments/"
for _, case in ipairs({ { "default.lua", "metods=ghost", "unknown argument 'metods'", "methods" },
                        { "sweep_layers.lua", "layers=2,4", "unknown argument 'layers'", "layer_counts" },
                        { "sweep_seqlen.lua", "seq_len=64,128", "unknown argument 'seq_len'", "seq_lens" },
                        { "fit_frontier.lua", "budget=80", "unknown argument 'budget'", "budget_gb" },
                        { "llama3_lora.lua", "seq_len=1024", "unknown argument 'seq_len'", "seq_lens" } }) do
  code, text = sh(string.format("%q run %q %s out=%q", exe, experiments .. case[1], case[2], out .. "-exp"))
  check.eq(code, 2, case[1] .. " " .. case[2] .. ": " .. text)
  check.truthy(text:find(case[3], 1, true) and text:find(case[4], 1, true), "names it and the valid ones: " .. text)
  check.eq(dp.list_dir(out .. "-exp"), nil, case[1] .. ": nothing ran")
end

-- llama3_lora.lua on the plan device: Llama-3.1-8B's config.json alone, every point ok
code, text = sh(string.format("%q run %q seq_lens=512 batches=1,2 physicals=1 ranks=8 methods=bk,flash_clip out=%q", exe,
                              experiments .. "llama3_lora.lua", out .. "-l3"))
check.eq(code, 0, "llama3_lora.lua on plan: " .. text)
local oks = 0
for _ in text:gmatch("seq_len=512: ok,") do oks = oks + 1 end
check.eq(oks, 4, "four plan points, each ok: " .. text)
local l3 = dp.results.read(out .. "-l3/method=bk,lora_rank=8,batch=2,max_physical_batch_size=1,seq_len=512.json")
check.eq(l3.config.model.kv_heads, 8, "the 8B's grouped-query attention")
check.eq(l3.config.model.lora.rank, 8)
check.eq(l3.predicted, true)
os.execute("rm -rf " .. out .. "-l3")

-- An OOM point says which request did not fit and against what, not "needed N more" (the
-- request is not the shortfall).
code, text = run_script(string.format([[
local dp = require("dpprof")
dp.sweep{ base = { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }, device = "cpu",
                   iters = 1, warmup = 0, memory_limit = 20000 }, vary = { method = { "ghost" } }, out = %q }
]], out .. "-oom"))
check.eq(code, 0, "an OOM point is a result, not a failure of the script: " .. text)
check.truthy(text:find("oom, a [%d.]+ [KMG]?i?B request for %a+ in [%w_.()]+ did not fit %([%d.]+ [KMG]?i?B live, limit 19%.53 KiB%)"),
             "the request, its category and module, what was live and the limit: " .. text)
check.truthy(text:find("1 point (1 to run)", 1, true), "one point, not 'points': " .. text)
check.truthy(not text:find("needed", 1, true), "no 'needed ... more': " .. text)
os.execute("rm -rf " .. out .. "-oom")

-- A plan point that would not fit its modelled device says so (its status stays "ok": the plan
-- ran; plan.fits is false), on the progress line with the figures and in the summary's note.
code, text = run_script(string.format([[
local dp = require("dpprof")
dp.sweep{ base = { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }, device = "plan",
                   device_model = { base = "h100", name = "small", memory_bytes = 640 * 1024 * 1024 },
                   iters = 1, warmup = 0 }, vary = { method = { "ghost" } }, out = %q }
]], out .. "-plan"))
check.eq(code, 0, "plan sweep: " .. text)
check.truthy(text:find("does not fit small (reserved ", 1, true) and text:find(" > budget ", 1, true),
             "the progress line says it does not fit, with the figures: " .. text)
check.truthy(text:find("plan: does not fit small; time estimated", 1, true), "the summary's note: " .. text)
os.execute("rm -rf " .. out .. "-plan")

-- A suite whose points all failed ends with exit status 1 and says how many (it used to end 0,
-- so a CI job running scripts/run-default.sh passed with nothing measured).
code, text = sh(string.format("%q run %q timeout=0.001 out=%q", exe, experiments .. "default.lua", out .. "-t"))
check.eq(code, 1, "every point failed: exit 1: " .. text)
check.truthy(text:find("3 of 3 points did not finish (timeout: 3)", 1, true), "says how many and how: " .. text)
check.truthy(text:find("timed out after", 1, true), "the sweep's table names the problem: " .. text)
os.execute("rm -rf " .. out .. "-t")
-- A configuration no point could run with is refused before any runs.
code, text = sh(string.format("%q run %q heads=3 out=%q", exe, experiments .. "default.lua", out .. "-h3"))
check.eq(code, 2, "heads=3: a refused configuration exits 2: " .. text)
check.truthy(text:find("must divide", 1, true) and text:find("point method=", 1, true), "names the point: " .. text)
check.eq(dp.list_dir(out .. "-h3"), nil, "heads=3: nothing ran")
-- A device or method that does not exist is refused the same way, before the default out
-- (results/run_<time>/, under the working directory) is made: exit 2, naming the valid values.
local cwd = out .. "-cwd"
assert(dp.mkdir_p(cwd))
for _, case in ipairs({ { "device=gpu", "unknown device 'gpu' (valid: cpu, cuda, plan, auto)" },
                        { "methods=flash", "unknown method 'flash' (valid: vanilla" } }) do
  code, text = sh(string.format("cd %q && %q run %q %s", cwd, exe, experiments .. "default.lua", case[1]))
  check.eq(code, 2, case[1] .. ": exit 2: " .. text)
  check.truthy(text:find(case[2], 1, true), case[1] .. ": names the key and its valid values: " .. text)
  check.eq(dp.list_dir(cwd .. "/results"), nil, case[1] .. ": no results folder made")
end
os.execute("rm -rf " .. cwd)

-- compare: a file that is not JSON is named without dpprof's own line.
local notjson = out .. ".csv"
local f = assert(io.open(notjson, "w"))
f:write("a,b\n1,2\n")
f:close()
code, text = sh(string.format("%q compare %q %q", exe, notjson, notjson))
check.eq(code, 2, "compare of a non-JSON file exits 2")
check.truthy(text:find(notjson .. ": invalid JSON", 1, true), "names the file: " .. text)
no_own_position(text, "compare")
os.remove(notjson)

-- A bad DPPROF_DEVICE is named as the cause when a tensor needs the default device.
f = assert(io.open(script, "w"))
f:write('local dp = require("dpprof")\nlocal t = dp.tensor{ shape = { 2 } }\n')
f:close()
code, text = sh(string.format("DPPROF_DEVICE=gpu %q run %q", exe, script))
check.truthy(code ~= 0, "a bad DPPROF_DEVICE fails the run")
check.truthy(text:find("DPPROF_DEVICE='gpu': unknown device (valid: cpu, cuda, plan, auto)", 1, true),
             "names the variable: " .. text)
os.remove(script)

-- A method's argument error names the method where Lua cannot name the call (pcall(m.forward, m,
-- x), a call from C): it said "bad argument #2 to '?'" (issue 26)
do
  dp.device("cpu")
  local m <close> = dp.model(MODEL)
  local opt <close> = dp.optim.sgd(m, { lr = 0.1 })
  local priv <close> = dp.dpsgd.wrap(m, opt, { method = "ghost", max_grad_norm = 1, noise_multiplier = 1,
                                            sample_rate = 0.01, expected_batch_size = 2 })
  local t <close> = dp.tensor{ shape = { 2 } }
  for _, case in ipairs({
    { m.forward, m, 5, "bad argument #2 to 'model:forward' (table expected, got number)" },
    { m.nonfinite, m, "weights", "bad argument #2 to 'model:nonfinite' (invalid option 'weights')" },
    { opt.set_lr, opt, "x", "bad argument #2 to 'optim:set_lr' (number expected, got string)" },
    { t.fill, t, "x", "bad argument #2 to 'tensor:fill'" },
    { priv.forward, priv, 5, "bad argument #2 to 'dpsgd:forward'" },
  }) do
    local ok, err = pcall(case[1], case[2], case[3])
    check.eq(ok, false, case[4])
    check.truthy(tostring(err):find(case[4], 1, true), "names the method: " .. tostring(err))
  end
end

-- Non-finite numbers are an error result naming the first non-finite tensor, not status ok with a
-- NaN loss (issue 26): a yarn rope whose attention factor overflows the scores (the logits), and a
-- weight made NaN between steps (the parameter).
do
  local llama = { arch = "llama", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2,
                  rope_scaling = { rope_type = "yarn", factor = 4, original_max_position_embeddings = 4,
                                   mscale = 1e30, mscale_all_dim = 1e-30 } }
  for _, method in ipairs({ "vanilla", "ghost" }) do
    local r = dp.experiment{ model = llama, device = "cpu", iters = 1, warmup = 1, snapshots = "none", method = method }
    check.eq(r.status, "error", method .. ": a NaN loss is an error")
    check.eq(r.message, "non-finite loss (nan) in warm-up step 1, physical batch 1: the first non-finite tensor is "
             .. "the activation 'logits'", method .. ": names the logits")
  end
  local poisoned
  local r = dp.experiment(cfg{ method = "ghost", on = { after_warmup = function(ctx)
    poisoned = ctx.model:params()[3].name
    local t = ctx.model:param(poisoned)
    t:fill(1 / 0)
    ctx.model:set_param(poisoned, t)
  end }, warmup = 1 })
  check.eq(r.status, "error", "an infinite weight: error")
  check.eq(r.message, "non-finite loss (nan) in timed iteration 1, physical batch 1: the first non-finite tensor is "
           .. "the parameter '" .. poisoned .. "'", "names the parameter")
  -- a weight made infinite between the forward and the backward: the loss is finite, the
  -- per-sample gradient norms are not
  r = dp.experiment(cfg{ method = "ghost", on = { after_forward = function(ctx)
    local ps = ctx.model:params()
    poisoned = ps[#ps - 1].name
    local t = ctx.model:param(poisoned)
    t:fill(1 / 0)
    ctx.model:set_param(poisoned, t)
  end } })
  check.eq(r.status, "error", "a non-finite gradient: error")
  check.eq(r.message, "non-finite per-sample gradient norm (nan) in timed iteration 1, physical batch 1: the first "
           .. "non-finite tensor is the parameter '" .. poisoned .. "'", "names it: " .. tostring(r.message))
  local fine = dp.experiment(cfg{ method = "ghost" })
  check.eq(fine.status, "ok", "a finite run is ok")
end

print("test_errors: ok")
