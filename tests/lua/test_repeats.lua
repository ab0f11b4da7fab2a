-- test_repeats.lua: dp.sweep{repeats = N}: each point runs N times, each run in a fresh process;
-- the point's file keeps every run (repeats.runs) and their spread; memory is the same in every
-- run (exact), time is not; a rerun keeps a point only when it has as many runs as asked for.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local results = dp.results

local out = string.format("/tmp/dpprof-test-repeats-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. out)
local pids = out .. ".pids"

-- A run that notes its process id, so the test can count processes per point.
local function run(cfg, vary)
  local f = assert(io.open(pids, "a"))
  f:write(string.format("%d %d\n", vary.seq_len, dp.pid()))
  f:close()
  return { status = "ok", value = vary.seq_len }
end
local s = dp.sweep{ base = {}, vary = { seq_len = { 1, 2 } }, out = out .. "/fn", run = run, repeats = 3, quiet = true }
check.eq(#s.points, 2, "two points")
local seen, per_point = {}, {}
for line in io.lines(pids) do
  local T, pid = line:match("^(%d+) (%d+)$")
  per_point[T] = (per_point[T] or 0) + 1
  check.truthy(not seen[pid] and tonumber(pid) ~= dp.pid(), "each run in a fresh process (" .. pid .. ")")
  seen[pid] = true
end
check.eq(per_point["1"], 3, "point 1 ran three times")
check.eq(per_point["2"], 3, "point 2 ran three times")
for _, p in ipairs(s.points) do check.eq(p.result.repeats.n, 3, p.name .. ": repeats.n") end
os.remove(pids)
check.raises(function() dp.sweep{ base = {}, vary = { seq_len = { 1 } }, out = out .. "/bad", run = run, repeats = 0 } end,
             "repeats must be an integer >= 1", "repeats = 0 refused")

-- Real experiments: every run's timing and peak kept; the peak is exact, the same in every run.
local base = { model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 },
               method = "ghost", device = "cpu", iters = 2, warmup = 1 }
local sw = dp.sweep{ base = base, vary = { seq_len = { 8, 16 } }, out = out .. "/exp", repeats = 2, quiet = true }
for _, p in ipairs(sw.points) do
  local r = results.read(p.file)
  local ok, problems = results.validate(r)
  check.truthy(ok, p.name .. " validates: " .. table.concat(problems or {}, "; "))
  check.eq(r.repeats.n, 2, p.name .. ": two runs")
  check.eq(#r.repeats.runs, 2, p.name .. ": both kept")
  local times = {}
  for k, run_r in ipairs(r.repeats.runs) do
    check.eq(run_r.status, "ok", p.name .. " run " .. k)
    check.eq(#run_r.iter_ms, 2, p.name .. " run " .. k .. " keeps its iterations")
    check.eq(run_r.peak_bytes, r.memory.peak_bytes, p.name .. " run " .. k .. ": the peak is exact")
    times[k] = run_r.avg_ms
  end
  check.eq(r.repeats.avg_ms.min, math.min(times[1], times[2]), p.name .. ": min over the runs")
  check.eq(r.repeats.avg_ms.max, math.max(times[1], times[2]), p.name .. ": max over the runs")
  check.eq(r.repeats.runs[1].avg_ms, r.timing.avg_ms, p.name .. ": the file's own figures are its first run's")
  check.eq(r.repeats.peak_bytes.min, r.repeats.peak_bytes.max, p.name .. ": memory does not vary")
end
-- Resume: kept with as many runs; run again when more are asked for.
local again = dp.sweep{ base = base, vary = { seq_len = { 8, 16 } }, out = out .. "/exp", repeats = 2, quiet = true }
for _, p in ipairs(again.points) do check.truthy(p.skipped, p.name .. " kept with 2 runs") end
local more = dp.sweep{ base = base, vary = { seq_len = { 8 } }, out = out .. "/exp", repeats = 3, quiet = true }
check.truthy(not more.points[1].skipped and more.points[1].result.repeats.n == 3, "rerun for 3 runs")
os.execute("rm -rf " .. out)
print("test_repeats: ok")
