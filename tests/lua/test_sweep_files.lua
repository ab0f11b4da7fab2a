-- test_sweep_files.lua: what a sweep does with its files when the directory or the disk is not
-- as it should be. One sweep at a time in a directory (a second says who holds it); a failed
-- write is tried again once, then stops the sweep with the finished points intact and the result
-- kept in the error; names too long for the file system are refused before the first point;
-- NaN and infinities in vary values and ctx.extra are written as strings, never losing a record;
-- a point named outside `out` stays inside it; and resume on real experiments notices a changed
-- base (seq_len 32 -> 64 used to print "done before, skipped").
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local root = string.format("/tmp/dpprof-test-sweep-files-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
assert(dp.mkdir_p(root))

local function value_run(cfg, vary) return { x = vary.method, seen = cfg.model and cfg.model.hidden } end

-- One sweep at a time: a second sweep on the same directory, started while the first one runs
-- (here from inside the first one's point, a separate process), is refused and told who holds it.
do
  local out = root .. "/locked"
  local function run(cfg)
    local ok, err = pcall(dp.sweep, { vary = { method = { 1 } }, out = cfg.out_dir, run = value_run, quiet = true })
    return { second_ok = ok, second_err = tostring(err) }
  end
  local s = dp.sweep{ base = { out_dir = out }, vary = { method = { 1 } }, out = out, run = run, quiet = true,
                      name = "first" }
  local r = s.points[1].result
  check.eq(r.status, "ok", tostring(r.message))
  check.eq(r.second_ok, false, "the second sweep is refused")
  check.truthy(r.second_err:find(out .. " is in use by another sweep: pid " .. dp.pid(), 1, true)
               and r.second_err:find("(sweep 'first')", 1, true), "says who holds it: " .. r.second_err)
  -- once the first has ended, the directory is free
  local s2 = dp.sweep{ vary = { method = { 2 } }, out = out, run = value_run, quiet = true }
  check.eq(s2.counts.ok, 1, "the lock is released when a sweep ends")
  -- and when it raises
  check.raises(function() dp.sweep{ vary = { method = { 3 } }, out = out, run = value_run, quiet = true, timeout = -1 } end,
               "timeout must be")
  check.eq(dp.sweep{ vary = { method = { 3 } }, out = out, run = value_run, quiet = true }.counts.ok, 1, "free after an error")
end

-- A write that fails once is tried again; the point is written and the sweep goes on.
do
  local out = root .. "/retry"
  local real_write = dp.results.write
  local failures = 0
  dp.results.write = function(path, value)
    if path:find("method=2", 1, true) and failures == 0 then
      failures = failures + 1
      error(path .. ": cannot write: No space left on device")
    end
    return real_write(path, value)
  end
  local ok, s = pcall(dp.sweep, { vary = { method = { 1, 2, 3 } }, out = out, run = value_run, quiet = true })
  dp.results.write = real_write
  check.truthy(ok, "one failed write does not stop the sweep: " .. tostring(s))
  check.eq(failures, 1, "the write failed once")
  check.eq(s.counts.ok, 3, "all three points ok")
  check.eq(dp.results.read(out .. "/method=2.json").x, 2, "the point that failed once was written the second time")
end

-- A write that fails twice stops the sweep: the points before are intact, the ones after do not
-- run, and the result is not thrown away (it used to become an error record, or nothing, and the
-- sweep went on and ended 0). Here the point's own name is made a directory by the point.
do
  local out = root .. "/full"
  local function run(cfg, vary)
    if vary.method == 2 then assert(dp.mkdir_p(cfg.out_dir .. "/method=2.json")) end
    return { x = vary.method }
  end
  local ok, err = pcall(dp.sweep, { base = { out_dir = out }, vary = { method = { 1, 2, 3 } }, out = out, run = run,
                                    quiet = true })
  check.eq(ok, false, "the sweep stops")
  local msg = tostring(err)
  check.truthy(msg:find("writing the result of point method=2 (ok) to " .. out .. "/method=2.json failed twice: ", 1, true)
               and msg:find("method=2.json: refusing to write: it is a directory", 1, true), "says what and why: " .. msg)
  check.truthy(msg:find("The sweep stopped there: 1 point finished before it and is kept in " .. out .. "; 1 point did "
                        .. "not run;", 1, true), "says what is done: " .. msg)
  check.truthy(msg:find("run the sweep again to resume", 1, true), "says how to go on: " .. msg)
  check.eq(type(err) == "table" and err.result.x, 2, "the unwritten result is kept in the error")
  check.eq(dp.results.read(out .. "/method=1.json").x, 1, "the point before is intact")
  check.eq(dp.read_file(out .. "/method=3.json"), nil, "the point after did not run")
  -- as a script: one line, exit 1
  local script = root .. "/full.lua"
  assert(dp.write_file(script, string.format([[
local dp = require("dpprof")
dp.sweep{ vary = { method = { 2 } }, out = %q, run = function() return {} end, quiet = true }
]], out)))
  local code, text = check.sh(string.format("%q run %q", dp.executable, script))
  check.eq(code, 1, "a sweep stopped by a failed write fails the script: " .. text)
  check.eq(select(2, text:gsub("\n", "")), 1, "in one line: " .. text)
  check.truthy(text:find("failed twice", 1, true) and text:find("0 points finished before it and are kept in", 1, true),
               text)
end

-- Names too long for the file system are refused before the first point runs.
do
  local out = root .. "/long"
  local ran = root .. "/long.ran"
  local long = string.rep("v", 300)
  check.raises(function()
    dp.sweep{ vary = { method = { "short", long } }, out = out, quiet = true,
              run = function() dp.write_file(ran, "1") return {} end }
  end, { "point method=" .. long, "is 312 bytes, longer than the 255", "shorten the vary values" }, "a name too long")
  check.eq(dp.read_file(ran), nil, "no point ran")
  -- with trace files the longest name is <point>.trace.json
  local almost = string.rep("v", 241) -- "method=" .. almost .. ".json" is 253 bytes, .trace.json 259
  check.raises(function()
    dp.sweep{ vary = { method = { almost } }, out = out, quiet = true, trace = true, run = function() return {} end }
  end, { "is 259 bytes" }, "a trace name too long")
end

-- NaN and infinities in vary values and ctx.extra: written as strings, the record kept.
do
  local out = root .. "/nan"
  local s = dp.sweep{ vary = { ["model.scale"] = { 0 / 0, 1 / 0 } }, out = out, quiet = true,
                      run = function(cfg) return { got = cfg.model.scale, minus = -1 / 0 } end }
  check.eq(s.counts.ok, 2, "both points ok")
  local files = {}
  for _, name in ipairs(dp.list_dir(out)) do if name:match("%.json$") and not name:match("^%.") then files[#files + 1] = name end end
  check.eq(#files, 2, "both written: " .. table.concat(files, " "))
  for _, name in ipairs(files) do
    local r = dp.results.read(out .. "/" .. name)
    local want = name:find("inf", 1, true) and "Infinity" or "NaN"
    check.eq(r.sweep.vary["model.scale"], want, name .. ": the vary value")
    check.eq(r.got, want, name .. ": in the result")
    check.eq(r.minus, "-Infinity", name .. ": -inf")
    check.eq(r.sweep.config.model.scale, want, name .. ": in the recorded configuration")
  end
  -- resume matches a NaN point (NaN ~= NaN, but its recorded configuration is the same)
  local again = dp.sweep{ vary = { ["model.scale"] = { 0 / 0, 1 / 0 } }, out = out, quiet = true,
                          run = function() return {} end }
  for _, p in ipairs(again.points) do check.truthy(p.skipped, p.name .. " resumed") end
  -- ctx.extra from a real experiment, run in a child as a sweep runs it
  local r = dp.isolate(dp.experiment, { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 },
                                        device = "plan", iters = 1, warmup = 0, snapshots = "none",
                                        on = { after_step = function(ctx) ctx.extra.loss = 0 / 0 end } })
  check.eq(r.status, "ok", "an experiment whose extra holds NaN: " .. tostring(r.message))
  check.eq(r.extra.loss, "NaN", "extra.loss kept as \"NaN\"")
  check.truthy(dp.results.validate(r), "and the result is valid")
end

-- A point named outside out (base.name with no vary) stays inside it.
do
  local out = root .. "/inside/out"
  local s = dp.sweep{ base = { name = "../../escaped" }, out = out, quiet = true, run = function() return {} end }
  check.eq(s.points[1].name, "_._.._escaped", "the name made safe")
  check.truthy(dp.read_file(out .. "/_._.._escaped.json"), "written inside out")
  check.eq(dp.read_file(root .. "/escaped.json"), nil, "nothing written outside")
  check.eq(require("dpprof.sweep").safe_name(".hidden"), "_hidden", "no hidden files")
  check.eq(require("dpprof.sweep").safe_name(".."), "_.", "no ..")
end

-- Resume on real experiments (plan runs, in this process): a changed base seq_len is noticed.
do
  local out = root .. "/stale"
  local function base(T)
    return { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = T, batch = 2 }, device = "plan",
             iters = 1, warmup = 0, snapshots = "none" }
  end
  local s = dp.sweep{ base = base(32), vary = { method = { "vanilla", "ghost" } }, out = out, quiet = true,
                      isolate = false }
  check.eq(s.counts.ok, 2, "two plan points")
  local r = dp.results.read(out .. "/method=ghost.json")
  check.truthy(dp.results.validate(r), "a sweep point's result with sweep.config is valid")
  check.eq(r.sweep.config.model.seq_len, 32, "the resolved configuration")
  check.eq(r.sweep.config.dp.delta, 1e-5, "with the defaults filled in")
  check.eq(dp.sweep{ base = base(32), vary = { method = { "vanilla", "ghost" } }, out = out, quiet = true,
                     isolate = false }.points[2].skipped, true, "the same base resumes")
  check.raises(function()
    dp.sweep{ base = base(64), vary = { method = { "vanilla", "ghost" } }, out = out, quiet = true, isolate = false }
  end, { "point method=vanilla: model.seq_len 32 -> 64", "(and 1 more point)" }, "seq_len 32 -> 64")
  -- what does not change the measurement does not count: the trace file, callbacks
  local same = base(32)
  same.on = { finished = function() end }
  check.eq(dp.sweep{ base = same, vary = { method = { "vanilla", "ghost" } }, out = out, quiet = true,
                     isolate = false }.points[1].skipped, true, "a callback does not change the configuration")
end


-- A writer killed mid-write (kill -9) leaves its temporary ".<name>.<host>.<pid>.<n>.tmp": the
-- next sweep in the directory removes this host's whose process is gone, and no other (a live
-- writer's, another host's on a shared filesystem, other names). It stayed for good before.
do
  local out = root .. "/stale"
  assert(dp.mkdir_p(out .. "/runs"))
  local host = (dp.environment().hostname or ""):gsub("[^%w%-]", "_"):sub(1, 32)
  if host == "" then host = "host" end
  local p = io.popen("sh -c 'echo $$'")
  local dead = tonumber(p:read("l"))
  p:close() -- that shell has ended: its pid names a dead writer
  local function plant(name) assert(dp.write_file(out .. "/" .. name, "half a result")) end
  local stale = { string.format(".method=1.json.%s.%d.0.tmp", host, dead),
                  string.format("runs/.method=1.run1.json.%s.%d.7.tmp", host, dead) }
  local kept = { string.format(".method=2.json.%s.1.0.tmp", host), -- pid 1 lives
                 string.format(".method=2.json.%s.%d.0.tmp", host, dp.pid()), -- this process
                 string.format(".method=2.json.%sz.%d.0.tmp", host, dead), -- another host
                 string.format(".method=2.json.%d.0.tmp", dead), "notes.tmp" }
  for _, n in ipairs(stale) do plant(n) end
  for _, n in ipairs(kept) do plant(n) end
  local s = dp.sweep{ vary = { method = { 1 } }, out = out, run = value_run, quiet = true, isolate = false }
  for _, n in ipairs(stale) do check.eq(dp.read_file(out .. "/" .. n), nil, "a dead writer's temporary is removed: " .. n) end
  for _, n in ipairs(kept) do check.truthy(dp.read_file(out .. "/" .. n), "left alone: " .. n) end
  check.eq(s.counts.ok, 1, "the sweep ran")
  check.eq(dp.remove_stale_temps(out), 0, "none left")
  local none, why = dp.remove_stale_temps(out .. "/absent")
  check.eq(none, nil, "a missing directory")
  check.truthy(why:find("absent: cannot read the directory", 1, true), why)
end

os.execute("rm -rf " .. root)
-- combined = true: one more file, memory_profile_results.json, every point's result under its name,
-- the same as the point's own file (issue 27: the name users of the earlier tooling look for).
do
  local out = root .. "/combined"
  local s = dp.sweep{ vary = { method = { 1, 2, 3 } }, out = out, run = value_run, quiet = true, combined = true }
  check.eq(s.counts.ok, 3, "three points")
  local all = dp.results.read(out .. "/memory_profile_results.json")
  local n = 0
  for name, r in pairs(all) do
    n = n + 1
    local own = dp.results.read(out .. "/" .. name .. ".json")
    check.eq(r.x, own.x, name .. ": its value")
    check.eq(r.status, "ok", name .. ": its status")
    check.eq(r.sweep.config_hash, own.sweep.config_hash, name .. ": the same result")
  end
  check.eq(n, 3, "every point in the combined file")
  check.truthy(all["method=2"] and all["method=2"].x == 2, "keyed by point name")
  -- without it, no such file; a name of one's own; a bad one refused before anything runs
  local plain = root .. "/not_combined"
  dp.sweep{ vary = { method = { 1 } }, out = plain, run = value_run, quiet = true }
  check.eq(dp.read_file(plain .. "/memory_profile_results.json"), nil, "off by default")
  dp.sweep{ vary = { method = { 1 } }, out = plain, run = value_run, quiet = true, combined = "all.json" }
  check.truthy(dp.results.read(plain .. "/all.json")["method=1"], "combined = \"all.json\"")
  check.raises(function() dp.sweep{ vary = { method = { 1 } }, out = plain, run = value_run, quiet = true,
                                    combined = "../x.json" } end, "combined must be true, false or a file name")
end

print("test_sweep_files: ok")
