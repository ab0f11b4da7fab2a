-- check_ntasks.lua: what tests/slurm/run_cluster_test.sh expects of sweep_ntasks.lua's files: the
-- world_size=2 point ran as two ranks that Slurm's srun started (rank and world from the launcher),
-- and its file is rank 0's, with both ranks' peaks; world_size=1 ran as one process.
--   dpprof run tests/slurm/check_ntasks.lua out=DIR job1=J job2=J
--   dpprof run tests/slurm/check_ntasks.lua mpi=1   exits 0 when this dpprof has the MPI transport
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

if dp.args.mpi then os.exit(dp.dist.mpi_compiled and 0 or 1) end
local out = dp.args.out
for ws, job in ipairs({ tostring(dp.args.job1), tostring(dp.args.job2) }) do
  local name = "world_size=" .. ws
  local r = dp.results.read(out .. "/" .. name .. ".json")
  local ok, problems = dp.results.validate(r)
  check.truthy(ok, name .. ".json is a valid result: " .. table.concat(problems or {}, "; "))
  check.eq(r.status, "ok", name .. " status: " .. tostring(r.message))
  check.eq(r.distributed.world_size, ws, name .. ": the launched world")
  check.eq(r.distributed.rank, 0, name .. ": rank 0's file")
  check.eq(r.sweep.placement.slurm.job_id, job, name .. ": its array job")
  check.eq(r.sweep.placement.slurm.array_task_id, ws - 1, name .. ": its task")
  if ws == 1 then
    check.eq(r.distributed.ranks, nil, name .. ": nothing to combine")
  else
    check.eq(#r.distributed.ranks, 2, name .. ": both ranks' peaks")
    check.eq(r.distributed.ranks[2].rank, 1, name .. ": rank 1's")
    check.truthy(r.distributed.ranks[2].peak_bytes > 0, name .. ": rank 1 measured")
    check.eq(r.distributed.largest.peak_bytes, math.max(r.distributed.ranks[1].peak_bytes, r.distributed.ranks[2].peak_bytes),
             name .. ": the largest rank's peak")
  end
end
print("check_ntasks.lua: ok")
