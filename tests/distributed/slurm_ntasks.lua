-- slurm_ntasks.lua: a Slurm sweep whose point is itself an N-task job, its ranks really started.
--   dpprof run slurm_ntasks.lua mpirun=MPIRUN   (tests/distributed/CMakeLists.txt)
-- sbatch and sacct are stand-ins (check.fake_slurm); srun's stand-in starts the --ntasks=N ranks
-- of its command under Open MPI's mpirun -np N, which gives each rank the world that srun
-- --mpi=pmix gives it on a cluster (docs/cluster.md; tests/slurm/run_cluster_test.sh does the
-- same with Slurm's own srun). A sweep over world_size = {1, 2} of a tiny GPT under ddp on the CPU
-- is submitted as two arrays; each task's generated script runs as Slurm would run it; the
-- 2-rank point's file is rank 0's combined result, with every rank's peaks, and equals what the
-- same experiment gives under mpirun -np 2 by hand; run without its launcher the point is refused
-- by the experiment, naming the world; collect then finds every point done. With repeats = 2 each
-- run of the 2-rank point is a 2-task array task, and rank 0 of the last one writes the point.
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local slurm = require("dpprof.slurm")
local q = slurm.quote

local mpirun = dp.args.mpirun
if type(mpirun) ~= "string" then error("slurm_ntasks.lua needs mpirun=MPIRUN (Open MPI's)") end
if dp.dist.world_size() ~= 1 then error("slurm_ntasks.lua starts its own ranks: run it without a launcher") end

local root = string.format("/tmp/dpprof-test-slurm-ntasks-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. q(root))
local fake = root .. "/bin"
local env = check.fake_slurm(fake) .. " FAKE_MPIRUN=" .. q(mpirun .. " --allow-run-as-root --oversubscribe")
  .. " OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1"
local function sh(cmd) return check.sh(env .. " " .. cmd) end
local exe = dp.executable

local base = [[{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 4 },
                 method = "ghost", device = "cpu", threads = 1, iters = 1, warmup = 0, snapshots = "none",
                 distributed = { strategy = "ddp" } }]]
local script = root .. "/sweep.lua"
assert(dp.mkdir_p(root))
assert(dp.write_file(script, string.format([[
local dp = require("dpprof")
dp.sweep{ base = %s, vary = { world_size = { 1, 2 } }, out = dp.args.out, backend = "slurm",
          slurm = { time = 10, cpus_per_task = 1 } }
]], base)))
local out = root .. "/out"

-- submit: one array per world size, the 2-rank one an srun of 2
local code, text = sh(string.format("%s sweep submit %s out=%s", q(exe), q(script), q(out)))
check.eq(code, 0, "submit: " .. text)
check.truthy(text:find("2 of 2 points submitted as Slurm array jobs 100 (tasks 0; 1 task each), 101 (tasks 1; 2 tasks "
                       .. "each: srun -n 2)", 1, true), text)
local log = assert(dp.read_file(fake .. "/sbatch.log"))
check.truthy(log:find("--job-name=dpprof-out-2tasks --array=1 ", 1, true)
             and log:find("--ntasks=2 --time=10 --cpus-per-task=1 " .. out .. "/slurm/task_2tasks.sh", 1, true),
             "the 2-rank array asks for 2 tasks: " .. log)
check.truthy(log:find("--dependency=afterany:100:101 ", 1, true), "collect after both: " .. log)
local m = assert(slurm.read_manifest(out))

-- the 2-rank point without its launcher: the experiment refuses it, naming the world, and the
-- point's file says so (rank 0 of a world of 1)
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_JOB_ID=101 %s sweep task %s", q(exe), q(out)))
check.eq(code, 0, "the task ends, its point's file written: " .. text)
local refused = dp.results.read(out .. "/world_size=2.json")
check.eq(refused.status, "error", "world_size 2 in a world of 1")
check.truthy(refused.message:find("distributed.world_size is 2 but this run was launched with 1 rank(s)", 1, true),
             refused.message)

-- as Slurm runs them: task 0 is one process, task 1 srun's two ranks
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=100 sh %s", q(out .. "/slurm/task.sh")))
check.eq(code, 0, "task 0: " .. text)
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_JOB_ID=101 SLURM_CPUS_PER_TASK=1 sh %s",
                              q(out .. "/slurm/task_2tasks.sh")))
check.eq(code, 0, "task 1 (2 ranks): " .. text)
check.eq(dp.read_file(fake .. "/srun.log"),
         string.format("--ntasks=2 --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1 %s sweep task %s\n", exe, out),
         "task_2tasks.sh runs srun -n 2 of dpprof sweep task")
check.eq(select(2, text:gsub("%[2/2%] world_size=2: ok", "")), 1, "one progress line, rank 0's: " .. text)

local r1 = dp.results.read(out .. "/world_size=1.json")
check.eq(r1.status, "ok", "world_size=1")
check.eq(r1.distributed.world_size, 1, "one rank")
check.eq(r1.distributed.ranks, nil, "no ranks to combine")
local r2 = dp.results.read(out .. "/world_size=2.json")
check.eq(r2.status, "ok", "world_size=2: " .. tostring(r2.message))
check.eq(r2.distributed.world_size, 2, "the launched world")
check.eq(r2.distributed.rank, 0, "rank 0 wrote the point")
check.eq(#r2.distributed.ranks, 2, "every rank's peaks")
check.eq(r2.distributed.ranks[2].rank, 1, "rank 1's")
check.truthy(r2.distributed.ranks[2].peak_bytes > 0, "rank 1 measured its memory")
check.eq(r2.sweep.config_hash, m.points[2].config_hash, "the point's configuration")
check.eq(r2.sweep.placement.slurm.array_task_id, 1, "placement: task 1")
check.eq(r2.sweep.placement.slurm.job_id, "101", "placement: the 2-rank array")
local valid, problems = dp.results.validate(r2)
check.truthy(valid, "valid: " .. table.concat(problems or {}, "; "))

-- the same experiment under mpirun -np 2 by hand: the same memory, rank by rank
local direct = root .. "/direct.lua"
assert(dp.write_file(direct, string.format([[
local dp = require("dpprof")
local c = %s
c.distributed.world_size = 2
local r = dp.experiment(c)
if dp.dist.rank() == 0 then require("dpprof.results").write(dp.args.out, r) end
]], base)))
code, text = sh(string.format("%s --allow-run-as-root --oversubscribe -np 2 %s run %s out=%s", q(mpirun), q(exe),
                              q(direct), q(root .. "/direct.json")))
check.eq(code, 0, "mpirun -np 2 by hand: " .. text)
local rd = dp.results.read(root .. "/direct.json")
check.eq(r2.memory.peak_bytes, rd.memory.peak_bytes, "rank 0's peak as by hand")
for i = 1, 2 do
  check.eq(r2.distributed.ranks[i].peak_bytes, rd.distributed.ranks[i].peak_bytes, "rank " .. (i - 1) .. "'s peak")
  for cat, bytes in pairs(rd.distributed.ranks[i].categories) do
    check.eq(r2.distributed.ranks[i].categories[cat], bytes, "rank " .. (i - 1) .. "'s " .. cat)
  end
end

-- collect: both arrays ended, every point has its file
assert(dp.write_file(fake .. "/sacct.txt", "100_0|COMPLETED|0:0|n1\n101_1|COMPLETED|0:0|n[1-2]\n"))
code, text = sh(string.format("%s sweep collect %s", q(exe), q(out)))
check.eq(code, 0, "collect: " .. text)
code, text = sh(string.format("%s sweep status %s", q(exe), q(out)))
check.truthy(text:find("101 (tasks 1, 2 tasks each, collect 102)", 1, true) and text:find("points: ok 2", 1, true), text)

-- repeats = 2: two array tasks of 2 ranks each; each run's file is its rank 0's, and the task
-- that finds both writes the point's file, with the same peak (memory is exact)
local rscript = root .. "/rep.lua"
assert(dp.write_file(rscript, string.format([[
local dp = require("dpprof")
dp.sweep{ base = %s, vary = { world_size = { 2 } }, out = dp.args.out, backend = "slurm", repeats = 2 }
]], base)))
local rout = root .. "/rep"
code, text = sh(string.format("%s sweep submit %s out=%s", q(exe), q(rscript), q(rout)))
check.eq(code, 0, "submit with repeats: " .. text)
local rj = text:match("2 of 2 runs %(2 per point%) submitted as Slurm array job (%d+) %(tasks 0%-1; 2 tasks each: srun %-n 2%)")
check.truthy(rj, text)
for t = 0, 1 do
  code, text = sh(string.format("SLURM_ARRAY_TASK_ID=%d SLURM_ARRAY_JOB_ID=%s sh %s", t, rj,
                                q(rout .. "/slurm/task_2tasks.sh")))
  check.eq(code, 0, "run task " .. t .. ": " .. text)
end
local rp = dp.results.read(rout .. "/world_size=2.json")
check.eq(rp.status, "ok", "the repeated 2-rank point: " .. tostring(rp.message))
check.eq(rp.repeats.n, 2, "both runs")
check.eq(rp.repeats.runs[2].placement.slurm.array_task_id, 1, "run 2 ran as task 1")
check.eq(rp.repeats.runs[1].peak_bytes, rp.repeats.runs[2].peak_bytes, "the same peak")
check.eq(rp.memory.peak_bytes, r2.memory.peak_bytes, "as the point without repeats")
check.eq(#rp.distributed.ranks, 2, "rank 0's combined result")

os.execute("rm -rf " .. q(root))
print("slurm_ntasks: ok")
