-- check.lua: what tests/slurm/run_cluster_test.sh expects of the sweep's files at each phase.
--   dpprof run tests/slurm/check.lua out=DIR phase=cancelled|timeout|final job=J1 [job2=J2] [job3=J3]
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local slurm = require("dpprof.slurm")

local a = dp.args
local out, phase = a.out, a.phase
local j1, j2, j3 = tostring(a.job), a.job2 and tostring(a.job2), a.job3 and tostring(a.job3)
local CANCEL, SLOW = "method=ghost,seq_len=16", "method=vanilla,seq_len=32"
local FAST = { "method=vanilla,seq_len=8", "method=vanilla,seq_len=16", "method=ghost,seq_len=8",
               "method=ghost,seq_len=32" }

local function read(name)
  local r = dp.results.read(out .. "/" .. name .. ".json")
  local ok, problems = dp.results.validate(r)
  check.truthy(ok, name .. ".json is a valid result: " .. table.concat(problems or {}, "; "))
  return r
end

-- The manifest: every point in the sweep's order, and each submission's jobs and tasks.
local m = assert(slurm.read_manifest(out))
check.eq(#m.points, 6, "manifest points")
check.eq(m.points[5].name, CANCEL, "point 4 (0-based) is the cancelled one")
check.eq(m.points[3].name, SLOW, "point 2 is the slow one")
check.eq(m.submissions[1].job_id, j1, "first submission's job")
check.eq(m.submissions[1].array, "0-5", "first submission's tasks")
check.truthy(m.submissions[1].collect_job_id, "first submission has a collect job")

-- A finished point: ok, run by the given job's task for its index, on this host.
local function ran_ok(name, job)
  local r = read(name)
  check.eq(r.status, "ok", name .. " status")
  local pl = r.sweep.placement
  check.eq(pl.slurm.job_id, job, name .. " ran in job")
  local index
  for i, q in ipairs(m.points) do if q.name == name then index = i - 1 end end
  check.eq(pl.slurm.array_task_id, index, name .. " ran as task")
  check.eq(pl.host, r.environment.hostname, name .. " placement host")
  check.truthy(r.memory.peak_bytes > 0, name .. " measured its memory")
end

for _, name in ipairs(FAST) do ran_ok(name, j1) end

if phase == "cancelled" then
  local r = read(CANCEL)
  check.eq(r.status, "crashed", "the cancelled task's point")
  check.truthy(r.message:find("Slurm task " .. j1 .. "_4 on ", 1, true) and r.message:find(" ended CANCELLED (exit code", 1, true), "message: " .. r.message)
  check.eq(r.sweep.placement.slurm.state, "CANCELLED", "state recorded")
  check.eq(r.sweep.config_hash, m.points[5].config_hash, "the collect result carries the point's hash")
  check.eq(io.open(out .. "/" .. SLOW .. ".json"), nil, "no result yet for the running point")
elseif phase == "timeout" then
  local r = read(SLOW)
  check.eq(r.status, "timeout", "the timed-out task's point")
  check.truthy(r.message:find("Slurm task " .. j1 .. "_2 on ", 1, true)
                and r.message:find(" ended TIMEOUT, past its time limit (slurm.time) (exit code", 1, true), "message: " .. r.message)
  check.eq(r.sweep.placement.slurm.state, "TIMEOUT", "state recorded")
  ran_ok(CANCEL, j2)
  check.eq(m.submissions[2].job_id, j2, "second submission")
  check.eq(m.submissions[2].array, "4", "the second submission is the cancelled point alone")
elseif phase == "final" then
  ran_ok(CANCEL, j2)
  ran_ok(SLOW, j3)
  check.eq(#m.submissions, 3, "three submissions")
  check.eq(m.submissions[3].array, "2", "the third submission is the timed-out point alone")
else
  error("phase must be cancelled, timeout or final")
end
print("check.lua " .. phase .. ": ok")
