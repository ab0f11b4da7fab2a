-- test_repeats.lua: dp.sweep{repeats = N}: each point runs N times, each run a job of its own in a
-- fresh process, kept in <out>/runs/ as it ends; the point's file keeps every run (repeats.runs,
-- with where it ran) and their spread; memory is the same in every run (exact), time is not; a
-- rerun keeps a point that has as many runs as asked for, and of one that has not, the runs done;
-- a failed run is run again alone; with parallel = 2 the runs of a point run side by side.
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
local function count_runs()
  local seen, per_point = {}, {}
  for line in io.lines(pids) do
    local T, pid = line:match("^(%d+) (%d+)$")
    per_point[T] = (per_point[T] or 0) + 1
    check.truthy(not seen[pid] and tonumber(pid) ~= dp.pid(), "each run in a fresh process (" .. pid .. ")")
    seen[pid] = true
  end
  os.remove(pids)
  return per_point
end
local s = dp.sweep{ base = {}, vary = { seq_len = { 1, 2 } }, out = out .. "/fn", run = run, repeats = 3, quiet = true }
check.eq(#s.points, 2, "two points")
local per_point = count_runs()
check.eq(per_point["1"], 3, "point 1 ran three times")
check.eq(per_point["2"], 3, "point 2 ran three times")
for _, p in ipairs(s.points) do
  check.eq(p.result.repeats.n, 3, p.name .. ": repeats.n")
  for k = 1, 3 do
    local kept = results.read(string.format("%s/fn/runs/%s.run%d.json", out, p.name, k))
    check.eq(kept.value, p.result.value, p.name .. ": run " .. k .. " kept in its own file")
    check.eq(p.result.repeats.runs[k].placement.host, dp.environment().hostname, p.name .. " run " .. k .. ": where")
  end
end
check.eq(dp.list_dir(out .. "/fn/runs") and #dp.list_dir(out .. "/fn/runs"), 6, "six run files")
check.raises(function() dp.sweep{ base = {}, vary = { seq_len = { 1 } }, out = out .. "/bad", run = run, repeats = 0 } end,
             "repeats must be an integer >= 1", "repeats = 0 refused")

-- A run that fails once: the point keeps its failed run; a rerun runs that run alone.
local flaky = out .. ".flaky"
local function fails_once(cfg, vary)
  local f = assert(io.open(pids, "a"))
  f:write(string.format("%d %d\n", vary.seq_len, dp.pid()))
  f:close()
  if vary.seq_len == 2 and not dp.read_file(flaky) then
    dp.write_file(flaky, "1")
    error("the first run of this point fails")
  end
  return { status = "ok", value = vary.seq_len }
end
local fl = dp.sweep{ base = {}, vary = { seq_len = { 1, 2 } }, out = out .. "/flaky", run = fails_once, repeats = 2,
                     quiet = true }
local r2 = fl.points[2].result
check.eq(r2.status, "ok", "a point with one ok run is ok")
check.eq(r2.repeats.runs[1].status, "error", "the failed run is kept")
check.truthy(r2.repeats.runs[1].message:find("the first run of this point fails", 1, true), r2.repeats.runs[1].message)
check.eq(r2.repeats.runs[2].status, "ok", "the second ran")
count_runs()
local again = dp.sweep{ base = {}, vary = { seq_len = { 1, 2 } }, out = out .. "/flaky", run = fails_once, repeats = 2,
                        quiet = true }
per_point = count_runs()
check.eq(per_point["1"], nil, "the point whose runs were ok is kept")
check.eq(per_point["2"], 1, "the failed run alone is run again")
check.eq(again.points[2].result.repeats.runs[1].status, "ok", "and the point's file now holds it")
os.remove(flaky)

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
-- Resume: kept with as many runs; with more asked for, only the runs missing run.
local again2 = dp.sweep{ base = base, vary = { seq_len = { 8, 16 } }, out = out .. "/exp", repeats = 2, quiet = true }
for _, p in ipairs(again2.points) do check.truthy(p.skipped, p.name .. " kept with 2 runs") end
local lines = {}
local real_print = print
print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end -- luacheck: ignore
local more = dp.sweep{ base = base, vary = { seq_len = { 8 } }, out = out .. "/exp", repeats = 3 }
print = real_print -- luacheck: ignore
check.truthy(not more.points[1].skipped and more.points[1].result.repeats.n == 3, "rerun for 3 runs")
check.truthy(lines[1]:find("(1 run to run, 3 per point)", 1, true), lines[1])
check.truthy(table.concat(lines, "\n"):find("2 of 3 runs done before, kept", 1, true), table.concat(lines, "\n"))
local rep3 = more.points[1].result.repeats
local row = string.format("%%s+%.1f +%%-? +[^\n]*3 runs: %.1f%%-%.1f ms", rep3.avg_ms.median, rep3.avg_ms.min,
                          rep3.avg_ms.max)
check.truthy(table.concat(lines, "\n"):find(row), "the summary shows the runs' median and range: "
             .. table.concat(lines, "\n"))
check.eq(more.points[1].result.repeats.runs[1].avg_ms, sw.points[1].result.repeats.runs[1].avg_ms,
         "the kept runs are the runs before")

-- Side by side: with parallel = 2 the two runs of one point overlap.
if dp.environment().threads >= 2 then
  local function timed(cfg, vary)
    local t0 = dp.time()
    dp.sleep(0.3)
    return { status = "ok", extra = { started = t0, ended = dp.time() } }
  end
  local par = dp.sweep{ base = {}, vary = { seq_len = { 1 } }, out = out .. "/par", run = timed, repeats = 2,
                        parallel = 2, quiet = true }
  local runs = par.points[1].result.repeats.runs
  check.eq(#runs, 2, "two runs side by side")
  local slots = { runs[1].placement.slot, runs[2].placement.slot }
  table.sort(slots)
  check.eq(table.concat(slots, ","), "1,2", "each run had a slot of its own")
  local a = results.read(out .. "/par/runs/seq_len=1.run1.json").extra
  local b = results.read(out .. "/par/runs/seq_len=1.run2.json").extra
  check.truthy(a.started < b.ended and b.started < a.ended, "the runs overlapped")
else
  print("test_repeats: parallel part skipped (one CPU thread)")
end
os.execute("rm -rf " .. out)
print("test_repeats: ok")
