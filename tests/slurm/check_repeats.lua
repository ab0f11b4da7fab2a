-- check_repeats.lua: what tests/slurm/run_cluster_test.sh expects of sweep_repeats.lua's files:
-- each point's file holds both of its runs, each run its own array task (point i's runs are tasks
-- 2i and 2i+1), with the same peak (memory is exact) and the spread of their times.
--   dpprof run tests/slurm/check_repeats.lua out=DIR job=J
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local out, job = dp.args.out, tostring(dp.args.job)
for i, name in ipairs({ "method=vanilla", "method=ghost" }) do
  local r = dp.results.read(out .. "/" .. name .. ".json")
  local ok, problems = dp.results.validate(r)
  check.truthy(ok, name .. ".json is a valid result: " .. table.concat(problems or {}, "; "))
  check.eq(r.status, "ok", name .. " status")
  check.eq(r.repeats.n, 2, name .. ": two runs")
  for k, run in ipairs(r.repeats.runs) do
    check.eq(run.status, "ok", name .. " run " .. k)
    check.eq(run.placement.slurm.job_id, job, name .. " run " .. k .. ": its array job")
    check.eq(run.placement.slurm.array_task_id, 2 * (i - 1) + k - 1, name .. " run " .. k .. ": its task")
    check.eq(run.peak_bytes, r.memory.peak_bytes, name .. " run " .. k .. ": the same peak")
    check.truthy(dp.results.read(out .. "/runs/" .. name .. ".run" .. k .. ".json"), name .. " run " .. k .. "'s file")
  end
  check.truthy(r.repeats.avg_ms.min <= r.repeats.avg_ms.max, name .. ": the spread")
end
print("check_repeats.lua: ok")
