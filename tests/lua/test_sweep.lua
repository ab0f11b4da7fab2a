-- test_sweep.lua: dp.sweep with plain functions: the cartesian product and its stable names,
-- one file per point written as soon as the point ends, failures (error, crash, timeout, OOM)
-- recorded without losing the other points, and resume: done points skipped, failed ones rerun
-- (or kept with retry_failed=false), and a point whose configuration changed never reused.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local out = string.format("/tmp/dpprof-test-sweep-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. out)

-- Each point's behaviour is chosen by its values; the attempt (a file beside out, not the
-- configuration, so a rerun resumes the same sweep) lets a rerun succeed.
local attempt_file = out .. ".attempt"
local function run(cfg, vary)
  local attempt = dp.read_file(attempt_file) and 2 or 1
  -- the files of the points before this one are on disk already (written as each point ended)
  local files = 0
  for _, name in ipairs(dp.list_dir(cfg.out_dir) or {}) do
    if name:match("%.json$") and not name:match("^%.") then files = files + 1 end
  end
  local m, T = vary.method, vary.seq_len
  if attempt == 1 then
    if m == "b" and T == 2 then error("point b,2 fails") end
    if m == "c" and T == 1 then dp.testing_crash("segv") end
    if m == "c" and T == 2 then dp.sleep(30) end
  end
  if m == "a" and T == 2 then -- does not fit: the engine's OOM
    dp.device("cpu")
    dp.memory.set_limit(1000)
    local t = dp.tensor{ shape = { 1000 }, category = "activations" }
    return { t = t }
  end
  return { value = T * 10, model_seq_len = cfg.model.seq_len, method = cfg.method, attempt = attempt,
           files_before = files, pid = dp.pid() }
end

local function sweep(extra)
  local opts = { base = { out_dir = out, model = { hidden = 8 } },
                 vary = { method = { "a", "b", "c" }, seq_len = { 1, 2 } },
                 out = out, run = run, timeout = 1, quiet = true }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return dp.sweep(opts)
end

os.remove(attempt_file)
local t0 = dp.clock()
local s = sweep()
check.eq(#s.points, 6, "3 x 2 points")
local want_names = { "method=a,seq_len=1", "method=a,seq_len=2", "method=b,seq_len=1", "method=b,seq_len=2",
                     "method=c,seq_len=1", "method=c,seq_len=2" }
local want_status = { "ok", "oom", "ok", "error", "crashed", "timeout" }
for i, p in ipairs(s.points) do
  check.eq(p.name, want_names[i], "point " .. i .. " name (keys sorted, first key slowest)")
  check.eq(p.file, out .. "/" .. want_names[i] .. ".json", "point file")
  local r = dp.results.read(p.file)
  check.eq(r.status, want_status[i], p.name .. " status on disk")
  check.eq(r.experiment, p.name, p.name .. " experiment name")
  check.eq(r.sweep.name, s.name, p.name .. " sweep name")
  check.eq(r.sweep.vary.method, p.name:match("method=(%a)"), p.name .. " vary.method")
  check.eq(r.sweep.vary.seq_len, tonumber(p.name:match("seq_len=(%d)")), p.name .. " vary.seq_len")
  check.eq(math.type(r.sweep.vary.seq_len), "integer", "vary values keep their type")
  if r.status ~= "ok" then
    check.truthy(type(r.message) == "string" and #r.message > 0, p.name .. " has a message")
    check.eq(r.schema_version, 1, p.name .. " failure result has the schema version")
    check.eq(r.config.model.hidden, 8, p.name .. " failure result echoes the config")
  end
end
check.eq(s.name, out:match("[^/]+$"), "default sweep name: the directory's")
-- the values reached the config: method and model.seq_len
local a1 = dp.results.read(out .. "/method=a,seq_len=1.json")
check.eq(a1.value, 10)
check.eq(a1.model_seq_len, 1, "seq_len went to config.model.seq_len")
check.eq(a1.method, "a", "method went to config.method")
-- files appear as each point ends: point k saw the k-1 files before it
check.eq(a1.files_before, 0, "first point saw no file")
check.eq(dp.results.read(out .. "/method=b,seq_len=1.json").files_before, 2, "third point saw two files")
-- failures have what they need
local oom = dp.results.read(out .. "/method=a,seq_len=2.json")
check.eq(oom.oom.requested_bytes, 4000, "OOM request recorded")
check.eq(oom.oom.category, "activations")
check.truthy(dp.results.read(out .. "/method=b,seq_len=2.json").message:find("point b,2 fails", 1, true), "error message")
check.eq(dp.results.read(out .. "/method=c,seq_len=1.json").signal, nil, "crash files keep only the schema's fields")
check.truthy(dp.results.read(out .. "/method=c,seq_len=1.json").message:find("signal 11", 1, true), "crash message")
check.eq(s.counts.ok, 2)
check.eq(s.counts.oom, 1)
check.eq(s.counts.error, 1)
check.eq(s.counts.crashed, 1)
check.eq(s.counts.timeout, 1)
check.truthy(dp.clock() - t0 < 20, "the timed-out point was stopped")
-- no temporary file is left behind
for _, name in ipairs(dp.list_dir(out)) do check.truthy(not name:match("%.tmp$"), "leftover " .. name) end

-- every file records the configuration it was run with and its hash
local b1 = dp.results.read(out .. "/method=b,seq_len=1.json")
check.eq(b1.sweep.config.model.seq_len, 1, "sweep.config: the point's resolved configuration")
check.eq(b1.sweep.config_hash, dp.results.config_hash(b1.sweep.config), "sweep.config_hash is the hash of sweep.config")
check.truthy(b1.sweep.config_hash:match("^fnv1a64:%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$"), b1.sweep.config_hash)
local before = {}
for _, n in ipairs(want_names) do before[n] = assert(dp.read_file(out .. "/" .. n .. ".json")) end

-- resume with retry_failed=false: every point is kept, failures too, and no file changes
local s_keep = sweep{ retry_failed = false }
for i, p in ipairs(s_keep.points) do
  check.truthy(p.skipped, p.name .. " kept with retry_failed=false")
  check.eq(p.status, want_status[i], p.name .. " keeps its status")
  check.eq(dp.read_file(p.file), before[p.name], p.name .. " file untouched")
end

-- resume: ok and oom points are skipped (their files untouched); failed ones run again
assert(dp.write_file(attempt_file, "2"))
local s2 = sweep()
local skipped = {}
for _, p in ipairs(s2.points) do skipped[p.name] = p.skipped or false end
for i, n in ipairs(want_names) do
  local now = dp.read_file(out .. "/" .. n .. ".json")
  local kept = want_status[i] == "ok" or want_status[i] == "oom"
  check.eq(skipped[n], kept, n .. " skipped on resume")
  check.eq(now == before[n], kept, n .. " file untouched on resume")
  if not kept then
    local r = dp.results.read(out .. "/" .. n .. ".json")
    check.eq(r.status, "ok", n .. " succeeded when rerun")
    check.eq(r.attempt, 2, n .. " rerun with the new base")
  end
end
check.eq(s2.counts.ok, 5)
check.eq(s2.counts.oom, 1)

-- a third run has nothing to do
local s3 = sweep()
for _, p in ipairs(s3.points) do check.truthy(p.skipped, p.name .. " skipped the third time") end

-- a changed configuration is never reused: the sweep refuses, naming what changed and how to
-- start afresh, and touches nothing (it used to skip every point as "done before")
for _, n in ipairs(want_names) do before[n] = dp.read_file(out .. "/" .. n .. ".json") end
local err = check.raises(function()
  sweep{ base = { out_dir = out, model = { hidden = 16 } } }
end, { "holds results run with another configuration", "point method=a,seq_len=1: model.hidden 8 -> 16",
       "(and 5 more points)", "resume=false" }, "changed base")
for _, n in ipairs(want_names) do check.eq(dp.read_file(out .. "/" .. n .. ".json"), before[n], n .. " untouched") end
-- resume=false runs every point again with the new configuration; then it resumes again
local s4 = sweep{ base = { out_dir = out, model = { hidden = 16 } }, resume = false }
for _, p in ipairs(s4.points) do
  check.truthy(not p.skipped, p.name .. " rerun with resume=false")
  check.eq(dp.results.read(p.file).sweep.config.model.hidden, 16, p.name .. " records the new configuration")
end
local s5 = sweep{ base = { out_dir = out, model = { hidden = 16 } } }
for _, p in ipairs(s5.points) do check.truthy(p.skipped, p.name .. " resumed with the new configuration") end
-- a file from before configurations were recorded is not reused either
local old = dp.results.read(out .. "/method=a,seq_len=1.json")
old.sweep.config, old.sweep.config_hash = nil, nil
dp.results.write(out .. "/method=a,seq_len=1.json", old)
check.raises(function() sweep{ base = { out_dir = out, model = { hidden = 16 } } } end,
             { "point method=a,seq_len=1: its file records no configuration" }, "file without a configuration")
os.remove(attempt_file)

-- names: floats, strings, three keys, explicit order; unknown keys are refused
local pts = require("dpprof.sweep").points({}, { sample_rate = { 0.01 }, method = { "ghost" }, layers = { 4, 8 } })
check.eq(pts[1].name, "layers=4,method=ghost,sample_rate=0.01", "three keys sorted")
check.eq(pts[2].config.model.layers, 8, "layers went to config.model.layers")
check.eq(pts[1].config.dp.sample_rate, 0.01, "sample_rate went to config.dp")
local ordered = require("dpprof.sweep").points({}, { seq_len = { 1, 2 }, method = { "x", "y" } }, { "seq_len", "method" })
check.eq(ordered[1].name, "seq_len=1,method=x", "explicit order names")
check.eq(ordered[2].name, "seq_len=1,method=y", "explicit order: last key fastest")
local lora = require("dpprof.sweep").points({ model = { lora = { alpha = 16 } } }, { lora_rank = { 0, 8 } })
check.eq(lora[1].config.model.lora, nil, "lora_rank 0: no LoRA")
check.eq(lora[2].config.model.lora.rank, 8, "lora_rank sets the rank")
check.eq(lora[2].config.model.lora.alpha, 16, "and keeps the base's LoRA settings")
local dotted = require("dpprof.sweep").points({}, { ["model.hidden"] = { 64 } })
check.eq(dotted[1].config.model.hidden, 64, "dotted path")
check.raises(function() dp.sweep{ vary = { colour = { 1 } }, out = out, run = run, quiet = true } end,
             { "unknown vary key 'colour'", "seq_len", "method" })
check.raises(function() dp.sweep{ vary = { seq_len = {} }, out = out, quiet = true } end, "non-empty list")
check.raises(function() dp.sweep{ bogus = 1 } end, { "unknown key 'bogus'", "vary" })
check.eq(require("dpprof.sweep").points({}, { accountant = { "pld" } })[1].config.dp.accountant, "pld",
         "accountant went to config.dp")

-- The CLI says epsilon, its accountant, and that fixed batches understate it (plan runs: fast).
do
  local script = out .. "-accountants.lua"
  local f = assert(io.open(script, "w"))
  f:write(string.format([[
local dp = require("dpprof")
dp.sweep{ base = { model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 },
                   device = "plan", iters = 1, warmup = 0, snapshots = "none" },
          vary = { accountant = { "prv", "pld" } }, out = %q, isolate = false }
]], out .. "-acct"))
  f:close()
  local code, text = check.sh(string.format("%q run %q", dp.executable, script))
  os.remove(script)
  os.execute("rm -rf " .. out .. "-acct")
  check.eq(code, 0, "the sweep runs: " .. text)
  local eps = dp.privacy.epsilon{ sample_rate = 0.01, noise_multiplier = 1, steps = 1, delta = 1e-5 }.epsilon
  check.truthy(text:find(string.format("epsilon %.4g at delta 1e-05 (prv; fixed batches: understated)", eps), 1, true),
               "the progress line gives epsilon and the caveat: " .. text)
  check.truthy(text:find("(pld)*", 1, true), "the summary's epsilon column marks fixed batches: " .. text)
  check.truthy(text:find("* " .. dp.results.FIXED_BATCH_CAVEAT, 1, true), "and explains the mark: " .. text)
end

os.execute("rm -rf " .. out)
print("ok")
