-- test_sweep_parallel.lua: dp.sweep{parallel=} on the CPU. Run two at a time, real experiments
-- give the same files as one at a time (memory to the byte, every status: ok, oom, error,
-- crashed, timeout); the points really overlap; each child gets its share of the thread budget
-- and no more (recorded per point, and what the engine saw); progress counts finished points.
-- A parent killed with SIGKILL while children run leaves no child behind, no lock, no partial
-- file, and the sweep resumes. CUDA_VISIBLE_DEVICES is handed out one GPU per child. Bad
-- parallel values are refused before anything runs.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local parallel = require("dpprof.parallel")

local budget = dp.environment().threads
if budget < 2 then
  print("skipped: parallel sweeps need 2 CPU threads; this process has " .. budget)
  os.exit(77)
end
local root = string.format("/tmp/dpprof-test-sweep-parallel-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
assert(dp.mkdir_p(root))

-- Every way a point can end, from real experiments: ghost and bk at seq_len 16 and 32 run; at
-- seq_len 64 bk gets a memory limit (oom), ghost raises (error), flat crashes, vanilla outlives
-- the timeout. Each point sleeps 0.3 s first, and records when it ran.
local function run(cfg, vary)
  local t0 = dp.time()
  dp.sleep(0.3)
  if vary.seq_len == 64 then
    if vary.method == "bk" then cfg.memory_limit = 200 * 1024 end
    if vary.method == "ghost" then error("this point raises") end
    if vary.method == "flat" then dp.testing_crash("segv") end
    if vary.method == "vanilla" then dp.sleep(30) end
  end
  local r = dp.experiment(cfg)
  r.extra = { started = t0, ended = dp.time() }
  return r
end
local base = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 16, batch = 2 },
               device = "cpu", iters = 1, warmup = 0 }
local vary = { method = { "vanilla", "ghost", "flat", "bk" }, seq_len = { 16, 32, 64 } }

local serial = dp.sweep{ base = base, vary = vary, run = run, out = root .. "/serial", timeout = 3, quiet = true }

-- the progress lines of the parallel sweep, caught from print
local lines = {}
local real_print = print
print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end -- luacheck: ignore
local ok, par = pcall(dp.sweep, { base = base, vary = vary, run = run, out = root .. "/parallel", timeout = 3,
                                  parallel = 2 })
print = real_print -- luacheck: ignore
check.truthy(ok, "the parallel sweep ran: " .. tostring(par))

local want_threads = budget // 2
check.truthy(lines[1]:find("(12 to run, 2 at a time, " .. want_threads .. " thread", 1, true), lines[1])
local seen, last_eta = {}, nil
for _, l in ipairs(lines) do
  local k = l:match("^%[%s*(%d+)/12%]")
  if k then
    check.eq(seen[k], nil, "one progress line per point")
    seen[k] = true
    last_eta = l:match("ETA (.*)$")
  end
end
local n = 0
for _ in pairs(seen) do n = n + 1 end
check.eq(n, 12, "a progress line for every point")
check.eq(last_eta, "done", "the last line to finish says done")

local statuses = {}
for i, p in ipairs(serial.points) do
  local s, q = p.result, par.points[i].result
  check.eq(par.points[i].name, p.name, "same points in the same order")
  check.eq(q.status, s.status, p.name .. " status")
  statuses[s.status] = (statuses[s.status] or 0) + 1
  if s.status == "ok" then
    check.eq(q.memory.peak_bytes, s.memory.peak_bytes, p.name .. " peak bytes")
    for cat, v in pairs(s.memory.categories) do
      check.eq(q.memory.categories[cat].peak_bytes, v.peak_bytes, p.name .. " " .. cat .. " peak")
      check.eq(q.memory.categories[cat].live_at_peak_bytes, v.live_at_peak_bytes, p.name .. " " .. cat .. " at peak")
    end
    check.eq(q.breakdown.total_allocated_mb, s.breakdown.total_allocated_mb, p.name .. " breakdown")
    -- no oversubscription: the child ran on its share, and says so
    check.eq(q.environment.threads, want_threads, p.name .. " threads in the parallel child")
    check.eq(s.environment.threads, budget, p.name .. " one at a time: the whole budget")
  elseif s.status == "oom" then
    check.eq(q.oom.requested_bytes, s.oom.requested_bytes, p.name .. " the request that did not fit")
  end
  local pl = q.sweep.placement
  check.eq(pl.threads, want_threads, p.name .. " placement.threads")
  check.eq(pl.slots, 2, p.name .. " placement.slots")
  check.truthy(pl.slot == 1 or pl.slot == 2, p.name .. " placement.slot")
  check.truthy(pl.threads * pl.slots <= budget, "slots x threads within the budget")
  check.eq(pl.host, dp.environment().hostname, p.name .. " placement.host")
  check.eq(s.sweep.placement.slot, nil, p.name .. " one at a time has no slot")
  check.eq(dp.results.read(root .. "/parallel/" .. p.name .. ".json").status, q.status, p.name .. " file written")
  local valid, problems = dp.results.validate(q)
  check.truthy(valid, p.name .. " valid: " .. table.concat(problems or {}, "; "))
end
check.eq(statuses.ok, 8, "ok points")
check.eq(statuses.oom, 1, "oom point")
check.eq(statuses.error, 1, "error point")
check.eq(statuses.crashed, 1, "crashed point")
check.eq(statuses.timeout, 1, "timeout point")
check.eq(statuses.error, par.counts.error, "counts")

-- the points really overlapped, and never more than two at once
local spans = {}
for _, p in ipairs(par.points) do
  local e = p.result.extra
  if e and e.started then spans[#spans + 1] = e end
end
local overlapped = false
for i, a in ipairs(spans) do
  local at_once = 1
  for j, b in ipairs(spans) do
    if i ~= j and b.started <= a.started and a.started < b.ended then at_once = at_once + 1 end
  end
  check.truthy(at_once <= 2, "at most two points at once")
  overlapped = overlapped or at_once == 2
end
check.truthy(overlapped, "two points ran at the same time")

-- a rerun resumes as one at a time does: nothing ok or oom runs again
local again = dp.sweep{ base = base, vary = vary, run = run, out = root .. "/parallel", timeout = 3, parallel = 2,
                        quiet = true, retry_failed = false }
for _, p in ipairs(again.points) do check.eq(p.skipped, true, p.name .. " kept on resume") end

-- refused before anything runs
check.raises(function() dp.sweep{ vary = { method = { 1 } }, run = run, out = root .. "/bad", parallel = 0 } end,
             "parallel must be a count >= 1 or \"gpus\"")
check.raises(function() dp.sweep{ vary = { method = { 1 } }, run = run, out = root .. "/bad", parallel = "all" } end,
             "parallel must be a count >= 1 or \"gpus\"")
check.raises(function() dp.sweep{ vary = { method = { 1 } }, run = run, out = root .. "/bad", parallel = budget + 1 } end,
             { "parallel=" .. (budget + 1) .. " on the CPU needs at least", "give parallel <= " .. budget })
check.raises(function() dp.sweep{ vary = { method = { 1 } }, run = run, out = root .. "/bad", parallel = 2, isolate = false } end,
             "parallel needs isolated points")
if #parallel.gpus() == 0 then
  check.raises(function() dp.sweep{ vary = { method = { 1 } }, run = run, out = root .. "/bad", parallel = "gpus" } end,
               "parallel=\"gpus\": no GPU found")
end
check.eq(dp.list_dir(root .. "/bad"), nil, "nothing was written for a refused sweep")

-- GPUs: one per child, from the parent's CUDA_VISIBLE_DEVICES (a child process of this test
-- with CUDA_VISIBLE_DEVICES=3,5; the points do not touch CUDA, they report what they were given)
local script = root .. "/gpus.lua"
local f = assert(io.open(script, "w"))
f:write([[
local dp = require("dpprof")
local function run(cfg, vary)
  local t0 = dp.time()
  dp.sleep(0.3)
  return { cvd = os.getenv("CUDA_VISIBLE_DEVICES"), threads = dp.environment().threads, started = t0, ended = dp.time() }
end
local s = dp.sweep{ base = { device = "cuda" }, vary = { seed = { 1, 2, 3, 4 } }, run = run, out = dp.args.out,
                    parallel = "gpus", quiet = true }
for _, p in ipairs(s.points) do
  local r = p.result
  print(string.format("point %s %s %s %d %.3f %.3f", p.name, r.cvd, r.sweep.placement.cuda_visible_devices,
                      r.threads, r.started, r.ended))
end
local ok, err = pcall(dp.sweep, { base = { device = "cuda" }, vary = { seed = { 1 } }, run = run,
                                  out = dp.args.out .. "_3", parallel = 3 })
print("three: " .. tostring(err))
]])
f:close()
local code, text = check.sh(string.format("CUDA_VISIBLE_DEVICES=3,5 %s run %s out=%s/gpus", dp.executable, script, root))
check.eq(code, 0, "the GPU sweep ran: " .. text)
local rows = {}
for name, cvd, placed, threads, t0, t1 in text:gmatch("point (%S+) (%S+) (%S+) (%d+) (%S+) (%S+)") do
  check.truthy(cvd == "3" or cvd == "5", name .. " got one of the GPUs: " .. cvd)
  check.eq(placed, cvd, name .. " placement records it")
  check.eq(tonumber(threads), want_threads, name .. " threads: the budget split over the two GPUs")
  rows[#rows + 1] = { cvd = cvd, t0 = tonumber(t0), t1 = tonumber(t1) }
end
check.eq(#rows, 4, "four points reported")
for i, a in ipairs(rows) do
  for j, b in ipairs(rows) do
    if i < j and a.t0 < b.t1 and b.t0 < a.t1 then check.truthy(a.cvd ~= b.cvd, "points at the same time have different GPUs") end
  end
end
check.truthy(text:find("three: dpprof.sweep: parallel=3, but 2 GPUs are (CUDA_VISIBLE_DEVICES): each point on CUDA "
                       .. "needs a device of its own", 1, true), text)

-- SIGKILL to the parent while two children run: the children die with it, the lock goes, no
-- file is half written, and the sweep resumes where it was
script = root .. "/killed.lua"
f = assert(io.open(script, "w"))
f:write([[
local dp = require("dpprof")
local dir = dp.args.dir
local out = dir .. "/out"
local function run(cfg, vary)
  local f = io.open(dir .. "/pids/" .. vary.seed, "w")
  f:write(dp.pid())
  f:close()
  dp.sleep(0.5)
  return { seed = vary.seed, pid = dp.pid() }
end
local f = io.open(dir .. "/parent.pid", "w")
f:write(dp.pid())
f:close()
dp.sweep{ vary = { seed = { 1, 2, 3, 4, 5, 6, 7, 8 } }, run = run, out = out, parallel = 2 }
]])
f:close()
assert(dp.mkdir_p(root .. "/kill/pids"))
local out = root .. "/kill/out"
os.execute(string.format("%s run %s dir=%s/kill > %s/kill/log 2>&1 &", dp.executable, script, root, root))
local function count_results()
  local n = 0
  for _, name in ipairs(dp.list_dir(out) or {}) do if name:match("^seed=%d%.json$") then n = n + 1 end end
  return n
end
local deadline = dp.clock() + 30
while count_results() < 2 and dp.clock() < deadline do dp.sleep(0.05) end
check.truthy(count_results() >= 2, "two points finished before the kill")
-- the next two are running: wait for their pid files, then kill the parent
local running
while dp.clock() < deadline do
  running = {}
  for _, seed in ipairs(dp.list_dir(root .. "/kill/pids")) do
    if not dp.read_file(out .. "/seed=" .. seed .. ".json") then running[#running + 1] = seed end
  end
  if #running >= 1 then break end
  dp.sleep(0.02)
end
check.truthy(#running >= 1, "a child was running")
local parent_pid = dp.read_file(root .. "/kill/parent.pid")
os.execute("kill -9 " .. parent_pid)
dp.sleep(0.5)
local alive = check.alive
check.eq(alive(parent_pid), false, "the parent is dead")
for _, seed in ipairs(dp.list_dir(root .. "/kill/pids")) do
  local pid = dp.read_file(root .. "/kill/pids/" .. seed)
  check.eq(alive(pid), false, "the child of seed " .. seed .. " died with its parent")
end
local lock = dp.lock(out .. "/.dpprof-sweep.lock", "test")
check.truthy(lock, "the lock went with the parent")
lock:release()
local before = {}
for _, name in ipairs(dp.list_dir(out)) do
  if name:match("%.json$") then
    local r = dp.results.read(out .. "/" .. name) -- raises on a partial file
    check.eq(r.status, "ok", name)
    before[name] = r.pid
  end
end
check.truthy(count_results() < 8, "the sweep did not finish before the kill")
code, text = check.sh(string.format("%s run %s dir=%s/kill", dp.executable, script, root))
check.eq(code, 0, "the rerun: " .. text)
for name, pid in pairs(before) do
  check.truthy(text:find(name:gsub("%.json$", "") .. ": ok (done before, skipped)", 1, true), name .. " kept: " .. text)
  check.eq(dp.results.read(out .. "/" .. name).pid, pid, name .. " not run again")
end
check.eq(count_results(), 8, "every point has its file after the resume")

os.execute("rm -rf " .. root)
print("test_sweep_parallel: ok")
