-- test_slurm.lua: dp.sweep{backend="slurm"} and `dpprof sweep` without a cluster. Slurm's
-- outputs are parsed as each tool prints them (sacct, scontrol -o, the jobcomp/filetxt log);
-- options are checked and become the sbatch options they name; end states map to statuses.
-- Then sbatch and sacct are stand-ins (shell scripts first on PATH) so that what dpprof asks of
-- Slurm is seen whole: the array and collect jobs' options, the manifest, an array task run by
-- hand (the same command Slurm runs), collect from sacct's states (OUT_OF_MEMORY is oom, FAILED is
-- crashed, RUNNING waits), resubmission of only what failed and is not running, and the refusals.
-- tests/slurm/run_cluster_test.sh runs the same against a real cluster.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local slurm = require("dpprof.slurm")

-- options
local o = slurm.options({ partition = "gpu", time = 30, extra = { "--qos=high" } }, { time = "01:00:00", mem = "16G" })
check.eq(o.time, "01:00:00", "the command line wins over the script")
check.eq(o.partition, "gpu", "the script's options stay")
check.eq(table.concat(slurm.sbatch_options(o), " "), "--ntasks=1 --partition=gpu --time=01:00:00 --mem=16G --qos=high",
         "sbatch options")
check.eq(table.concat(slurm.sbatch_options(slurm.options({ gpus_per_task = 1, cpus_per_task = 8, account = "a",
                                                          extra = "--exclusive --qos=x" })), " "),
         "--ntasks=1 --account=a --gpus-per-task=1 --cpus-per-task=8 --exclusive --qos=x", "extra as text is split")
check.raises(function() slurm.options({ partitions = "x" }) end,
             { "unknown slurm option 'partitions'", "valid: partition, account, time" })
check.raises(function() slurm.options({ gpus_per_task = 0 }) end, "slurm.gpus_per_task must be an integer >= 1")
check.raises(function() slurm.options({ time = "an hour" }) end, "slurm.time must be minutes")
check.raises(function() slurm.options({ mem = "lots" }) end, "slurm.mem must be MiB")
check.raises(function() slurm.options({ partition = "" }) end, "slurm.partition must be a name")
check.raises(function() slurm.options({ extra = { "qos=high" } }) end, "slurm.extra[1] must be an sbatch option")
check.eq(slurm.ranges({ 0, 1, 2, 3, 5, 7, 8 }), "0-3,5,7-8", "array ranges")
check.eq(slurm.ranges({ 4 }), "4", "one task")

-- a point distributed on a real device is an N-task job: --ntasks=N, one GPU a rank on cuda
-- (packed gpus_per_node to a node when given), its ranks started by srun
check.eq(slurm.point_tasks({ device = "cpu" }).ntasks, 1, "no distributed: one task")
check.eq(slurm.point_tasks({ device = "plan", distributed = { world_size = 8 } }).ntasks, 1, "a plan point: one task")
check.eq(slurm.point_tasks({ device = "cpu", distributed = { strategy = "ddp" } }).ntasks, 1, "no world_size: 1")
local t4 = slurm.point_tasks({ device = "cpu", distributed = { strategy = "ddp", world_size = 4 } })
check.eq(t4.ntasks, 4, "world_size 4 on cpu: 4 tasks")
check.eq(t4.cuda, nil, "cpu ranks ask no GPU")
local t16 = slurm.point_tasks({ device = "cuda", distributed = { strategy = "fsdp", world_size = 16 } })
check.eq(t16.ntasks, 16, "world_size 16 on cuda: 16 tasks")
check.eq(t16.cuda, true, "cuda ranks ask a GPU each")
local og = slurm.options({ partition = "gpu", time = 60, cpus_per_task = 4, gpus_per_node = 8 })
check.eq(table.concat(slurm.sbatch_options(og, t16), " "),
         "--ntasks=16 --nodes=2 --ntasks-per-node=8 --partition=gpu --time=60 --gpus-per-task=1 --cpus-per-task=4",
         "16 ranks on 8-GPU nodes: 2 nodes of 8")
check.eq(table.concat(slurm.sbatch_options(og, { ntasks = 12, cuda = true }), " "),
         "--ntasks=12 --nodes=2 --ntasks-per-node=8 --partition=gpu --time=60 --gpus-per-task=1 --cpus-per-task=4",
         "12 ranks on 8-GPU nodes: 2 nodes, 8 and 4")
check.eq(table.concat(slurm.sbatch_options(og, { ntasks = 4, cuda = true }), " "),
         "--ntasks=4 --nodes=1 --ntasks-per-node=4 --partition=gpu --time=60 --gpus-per-task=1 --cpus-per-task=4",
         "4 ranks: one node")
check.eq(table.concat(slurm.sbatch_options(slurm.options({ time = 5 }), t16), " "),
         "--ntasks=16 --time=5 --gpus-per-task=1", "without gpus_per_node Slurm places the 16 ranks")
check.eq(table.concat(slurm.sbatch_options(og, t4), " "), "--ntasks=4 --partition=gpu --time=60 --cpus-per-task=4",
         "cpu ranks: no GPU, no node packing")
check.eq(table.concat(slurm.srun_argv(og, t16, "/opt/dpprof", "/shared/out"), " "),
         "srun --ntasks=16 --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=4 --gpus-per-task=1 /opt/dpprof sweep task "
         .. "/shared/out", "the ranks' srun: pmix by default")
check.eq(table.concat(slurm.srun_argv(slurm.options({ mpi = "pmi2" }), t4, "dpprof", "/o"), " "),
         "srun --ntasks=4 --mpi=pmi2 --kill-on-bad-exit=1 dpprof sweep task /o", "slurm.mpi names the plugin")
check.raises(function() slurm.options({ mpi = "pmix; rm -rf /" }) end, "slurm.mpi must name srun's --mpi plugin")
check.raises(function() slurm.options({ gpus_per_node = 0 }) end, "slurm.gpus_per_node must be an integer >= 1")
check.raises(function() slurm.check_tasks(slurm.options({ gpus_per_task = 2 }), t16, "world_size=16") end,
             { "point world_size=16: distributed on cuda is one rank per GPU", "slurm.gpus_per_task is 2" })
slurm.check_tasks(slurm.options({ gpus_per_task = 2 }), t4, "cpu ranks take gpus_per_task as given")
-- device "auto" (an experiment's default) cannot say whether the ranks need GPUs: refused, named
check.raises(function()
  slurm.check_tasks(slurm.options({}), slurm.point_tasks({ device = "auto", distributed = { world_size = 4 } }), "p")
end, { "point p: a distributed point of 4 ranks runs on device 'cpu' or 'cuda' (got 'auto'" })
slurm.check_tasks(slurm.options({}), slurm.point_tasks({ device = "auto", distributed = { world_size = 1 } }), "one")

-- what each source prints, as it prints it
local st = slurm.parse_sacct(table.concat({
  "12_0|COMPLETED|0:0|node1",
  "12_3|CANCELLED by 1000|0:15|node1",
  "12_4|OUT_OF_MEMORY|0:125|node2",
  "12_[5-7%2]|PENDING|0:0|None assigned",
  "12_8|TIMEOUT|0:15|node3",
}, "\n"), {})
check.eq(st["12_0"].state, "COMPLETED", "sacct state")
check.eq(st["12_3"].state, "CANCELLED", "'CANCELLED by uid' is CANCELLED")
check.eq(st["12_4"].exit_code, "0:125", "sacct exit code")
check.eq(st["12_4"].node, "node2", "sacct node")
check.eq(st["12_6"].state, "PENDING", "a pending range is every task in it")
check.eq(st["12_7"].state, "PENDING", "the range's end")
check.eq(st["12_8"].source, "sacct", "source")
-- scontrol -o show job (Slurm 22.05), and jobcomp/filetxt's log lines
local sc = slurm.parse_job_lines(
  "JobId=5 ArrayJobId=1 ArrayTaskId=3 JobName=job.sh UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
  .. "Dependency=(null) ExitCode=0:15 RunTime=00:01:24 NodeList=vm BatchHost=vm\n"
  .. "JobId=1 ArrayJobId=1 ArrayTaskId=4-6%2 JobName=job.sh JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 "
  .. "NodeList=(null)\n", {}, "scontrol")
check.eq(sc["1_3"].state, "TIMEOUT", "scontrol state")
check.eq(sc["1_3"].node, "vm", "scontrol node")
check.eq(sc["1_5"].state, "PENDING", "scontrol's pending remainder")
check.eq(sc["1_5"].node, nil, "(null) is no node")
local jc = slurm.parse_job_lines(
  "JobId=4 UserId=root(0) GroupId=root(0) Name=job.sh JobState=CANCELLED Partition=debug TimeLimit=1 "
  .. "StartTime=2026-11-23T20:48:34 EndTime=2026-11-23T20:48:36 NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=/tmp/sl "
  .. "ReservationName= Tres=cpu=1,mem=4000M,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
  .. "SubmitTime=2026-11-23T20:48:33 EligibleTime=2026-11-23T20:48:34 ArrayJobId=1 ArrayTaskId=2 "
  .. "DerivedExitCode=0:0 ExitCode=0:0 \n", {}, "jobcomp")
check.eq(jc["1_2"].state, "CANCELLED", "jobcomp state")
check.eq(jc["1_2"].source, "jobcomp", "jobcomp source")

-- end states
local function maps(state, status, words)
  local s, why = slurm.end_status(state)
  check.eq(s, status, state)
  if words then check.truthy(why and why:find(words, 1, true), state .. ": " .. tostring(why)) end
end
maps("OUT_OF_MEMORY", "oom", "memory limit")
maps("TIMEOUT", "timeout", "time limit")
maps("DEADLINE", "timeout")
maps("NODE_FAIL", "crashed")
maps("CANCELLED", "crashed")
maps("FAILED", "crashed")
maps("COMPLETED", "crashed", "without writing a result")

-- The stand-ins: sbatch logs its arguments and answers job ids from 100; sacct prints
-- $FAKE/sacct.txt; scontrol knows no job (as once MinJobAge has passed).
local root = string.format("/tmp/dpprof-test-slurm-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
local fake = root .. "/bin"
local env = check.fake_slurm(fake, ";cluster")
local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end
local function sh(cmd) return check.sh(env .. " " .. cmd) end
local function sbatch_log()
  return dp.read_file(fake .. "/sbatch.log") or ""
end

local script = root .. "/sweep.lua"
local function write_script(seeds)
  write(script, string.format([[
local dp = require("dpprof")
dp.sweep{ vary = { seed = { %s } }, out = dp.args.out, backend = "slurm",
          run = function(cfg, vary) return { seed = vary.seed, threads = dp.environment().threads } end,
          slurm = { partition = "gpu", account = "acct", time = "00:10:00", gpus_per_task = 1, cpus_per_task = 2,
                    mem = "16G", max_parallel = 2, extra = { "--qos=high" } } }
]], seeds))
end
write_script("1, 2, 3")
local out = root .. "/out"
local exe = dp.executable

local code, text = sh(string.format("%s sweep submit %s out=%s", exe, script, out))
check.eq(code, 0, "submit: " .. text)
check.truthy(text:find("3 of 3 points submitted as Slurm array job 100 (tasks 0-2%2)", 1, true), text)
check.truthy(text:find("job 101 collects the results", 1, true), text)
local log = sbatch_log()
check.truthy(log:find("--parsable --job-name=dpprof-out --array=0-2%2 --output=" .. out .. "/slurm/%A_%a.out --chdir=", 1, true)
             and log:find("--ntasks=1 --partition=gpu --account=acct --time=00:10:00 --gpus-per-task=1 "
                          .. "--cpus-per-task=2 --mem=16G --qos=high " .. out .. "/slurm/task.sh", 1, true),
             "the array's sbatch: " .. log)
check.truthy(log:find("--dependency=afterany:100 --output=" .. out .. "/slurm/collect_%j.out", 1, true)
             and log:find("--ntasks=1 --partition=gpu --account=acct --time=00:10:00 " .. out .. "/slurm/collect.sh",
                          1, true), "the collect job's sbatch: " .. log)
check.truthy(dp.read_file(out .. "/slurm/task.sh"):find("'sweep' 'task' '" .. out .. "'", 1, true), "task.sh")
local m = assert(slurm.read_manifest(out))
check.eq(m.submissions[1].job_id, "100", "manifest: job")
check.eq(m.submissions[1].collect_job_id, "101", "manifest: collect job")
check.eq(m.submissions[1].array, "0-2%2", "manifest: tasks")
check.eq(m.script, script, "manifest: script")
check.eq(m.args[1], "out=" .. out, "manifest: the script's arguments")
check.eq(m.call, 1, "manifest: the script's first dp.sweep")
check.eq(#m.points, 3, "manifest: points")
check.eq(m.points[2].name, "seed=2", "manifest: point names in order")
check.eq(dp.list_dir(out .. "/seed=1.json"), nil, "nothing ran here")

-- the same script run with `dpprof run` submits too: the manifest names it and its arguments
code, text = sh(string.format("%s run %s out=%s/viarun", exe, script, root))
check.eq(code, 0, "dpprof run of a slurm sweep: " .. text)
local mr = assert(slurm.read_manifest(root .. "/viarun"))
check.eq(mr.script, script, "manifest of dpprof run: script")
check.eq(mr.args[1], "out=" .. root .. "/viarun", "manifest of dpprof run: arguments")
check.eq(mr.submissions[1].array, "0-2%2", "manifest of dpprof run: tasks")

-- the command line's sbatch options override the script's; script arguments pass through
code, text = sh(string.format("%s sweep submit %s out=%s/other partition=debug time=5 max_parallel=1", exe, script, root))
check.eq(code, 0, "submit with overrides: " .. text)
log = sbatch_log()
check.truthy(log:find("--array=0-2%1 ", 1, true) and log:find("--partition=debug --account=acct --time=5 ", 1, true),
             "overrides: " .. log)

-- array task 0, as Slurm would run it
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=100 SLURM_JOB_ID=102 SLURMD_NODENAME=n1 "
                              .. "SLURM_CPUS_PER_TASK=1 CUDA_VISIBLE_DEVICES=0 %s sweep task %s", exe, out))
check.eq(code, 0, "task 0: " .. text)
local r0 = dp.results.read(out .. "/seed=1.json")
check.eq(r0.status, "ok", "task 0's point")
check.eq(r0.seed, 1, "it ran point 0")
check.eq(r0.threads, 1, "the child ran on SLURM_CPUS_PER_TASK threads")
local pl = r0.sweep.placement
check.eq(pl.slurm.job_id, "100", "placement: array job")
check.eq(pl.slurm.array_task_id, 0, "placement: task")
check.eq(pl.slurm.task_job_id, "102", "placement: the task's own job id")
check.eq(pl.slurm.node, "n1", "placement: node")
check.eq(pl.threads, 1, "placement: threads")
check.eq(pl.cuda_visible_devices, "0", "placement: the GPU Slurm gave")
check.eq(pl.host, dp.environment().hostname, "placement: host")
code, text = sh(string.format("%s sweep task %s", exe, out))
check.eq(code, 2, "a task outside Slurm")
check.truthy(text:find("SLURM_ARRAY_TASK_ID is not set", 1, true), text)

-- collect from sacct: task 1 OUT_OF_MEMORY -> oom, task 2 still running -> waits
write(fake .. "/sacct.txt", "100_0|COMPLETED|0:0|n1\n100_1|OUT_OF_MEMORY|0:125|n2\n100_2|RUNNING|0:0|n3\n")
code, text = sh(string.format("%s sweep collect %s", exe, out))
check.eq(code, 1, "collect with a task running: " .. text)
check.truthy(text:find("1 point without one yet: seed=3 (running)", 1, true), text)
local r1 = dp.results.read(out .. "/seed=2.json")
check.eq(r1.status, "oom", "OUT_OF_MEMORY is oom")
check.truthy(r1.message:find("Slurm task 100_1 on n2 ended OUT_OF_MEMORY, past its memory limit (slurm.mem) "
                             .. "(exit code 0:125; state from sacct); its log: " .. out .. "/slurm/100_1.out", 1, true),
             r1.message)
check.eq(r1.sweep.placement.slurm.state, "OUT_OF_MEMORY", "state recorded")
check.eq(r1.sweep.config_hash, m.points[2].config_hash, "the point's hash")
local valid, problems = dp.results.validate(r1)
check.truthy(valid, "a Slurm oom result is valid without allocation details: " .. table.concat(problems or {}, "; "))
r1.sweep.placement.slurm.state = "COMPLETED"
check.eq(dp.results.validate(r1), false, "an engine oom still needs its details")
code, text = sh(string.format("%s sweep status %s", exe, out))
check.eq(code, 0, "status")
check.truthy(text:find("Slurm job 100 (tasks 0-2%2, collect 101)", 1, true), text)
check.truthy(text:find("seed=3 +running +100_2 +n3"), text)
check.truthy(text:find("points: ok 1, oom 1, running 1", 1, true), text)

-- resubmit: the oom point is a result and the running one is left alone: nothing to submit
code, text = sh(string.format("%s sweep submit %s", exe, out))
check.eq(code, 0, "resubmit: " .. text)
check.truthy(text:find("seed=3 (100_2 running)", 1, true) and text:find("nothing to submit", 1, true), text)
-- task 2 fails: collect says crashed, and a resubmission sends it alone, with the options it had
write(fake .. "/sacct.txt", "100_0|COMPLETED|0:0|n1\n100_1|OUT_OF_MEMORY|0:125|n2\n100_2|FAILED|1:0|n3\n")
code, text = sh(string.format("%s sweep collect %s", exe, out))
check.eq(code, 0, "collect once every task ended: " .. text)
check.eq(dp.results.read(out .. "/seed=3.json").status, "crashed", "FAILED is crashed")
check.truthy(dp.results.read(out .. "/seed=3.json").message:find("ended FAILED (exit code 1:0", 1, true), "state named")
code, text = sh(string.format("%s sweep submit %s time=20", exe, out))
check.eq(code, 0, "resubmit the failed: " .. text)
check.truthy(text:find("1 of 3 points submitted as Slurm array job %d+ %(tasks 2%%2%)"), text)
log = sbatch_log()
check.truthy(log:find("--array=2%2 --output=" .. out .. "/slurm/%A_%a.out --chdir=", 1, true)
             and log:find("--partition=gpu --account=acct --time=20 --gpus-per-task=1", 1, true), "resubmitted: " .. log)
m = assert(slurm.read_manifest(out))
check.eq(#m.submissions, 2, "two submissions")
check.eq(m.submissions[2].points[1], 2, "the second has point 2 alone")

-- a task whose script changed since it was submitted writes an error result naming it
write_script("1, 2, 4")
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=2 %s sweep task %s", exe, out))
check.eq(code, 1, "a changed script fails the task: " .. text)
local r2 = dp.results.read(out .. "/seed=3.json")
check.eq(r2.status, "error", "the point's file says so")
check.truthy(r2.message:find("point 2 of the script's sweep is now seed=4", 1, true)
             and r2.message:find("the script or its files changed", 1, true), r2.message)
-- and resubmitting a changed script into the same directory is refused
code, text = sh(string.format("%s sweep submit %s out=%s", exe, script, out))
check.eq(code, 1, "a changed sweep into the old directory")
check.truthy(text:find("holds a Slurm sweep of other points", 1, true), text)

-- repeats = 2: each run one task (task t runs point t // 2, run t % 2 + 1); the task that finds
-- both runs in out/runs writes the point's file; collect fills a run whose task ended without a
-- file and then the point's; a resubmission sends only the run that failed.
write(root .. "/rep.lua", [[
local dp = require("dpprof")
dp.sweep{ vary = { seed = { 1, 2 } }, out = dp.args.out, backend = "slurm", repeats = 2,
          run = function(cfg, vary) return { seed = vary.seed } end }
]])
local rep = root .. "/rep"
code, text = sh(string.format("%s sweep submit %s/rep.lua out=%s", exe, root, rep))
check.eq(code, 0, "submit with repeats: " .. text)
local rj = text:match("4 of 4 runs %(2 per point%) submitted as Slurm array job (%d+) %(tasks 0%-3%)")
check.truthy(rj, text)
check.eq(assert(slurm.read_manifest(rep)).repeats, 2, "the manifest says how many runs")
local function task(t) return sh(string.format("SLURM_ARRAY_TASK_ID=%d SLURM_ARRAY_JOB_ID=%s %s sweep task %s", t, rj, exe, rep)) end
code, text = task(0)
check.eq(code, 0, "task 0: " .. text)
check.eq(dp.results.read(rep .. "/runs/seed=1.run1.json").seed, 1, "task 0 ran run 1 of point 0")
check.eq(dp.list_dir(rep .. "/seed=1.json"), nil, "no point file with one run of two")
code, text = task(1)
check.eq(code, 0, "task 1: " .. text)
local rp = dp.results.read(rep .. "/seed=1.json")
check.eq(rp.repeats.n, 2, "the task with the last run wrote the point's file")
check.eq(rp.repeats.runs[1].placement.slurm.array_task_id, 0, "run 1 ran as task 0")
check.eq(rp.repeats.runs[2].placement.slurm.array_task_id, 1, "run 2 ran as task 1")
code, text = task(2)
check.eq(code, 0, "task 2: " .. text)
write(fake .. "/sacct.txt", string.format("%s_0|COMPLETED|0:0|n1\n%s_1|COMPLETED|0:0|n1\n%s_2|COMPLETED|0:0|n1\n"
                                          .. "%s_3|RUNNING|0:0|n2\n", rj, rj, rj, rj))
code, text = sh(string.format("%s sweep collect %s", exe, rep))
check.eq(code, 1, "collect with a run still running: " .. text)
check.truthy(text:find("seed=2 (1/2 runs, running)", 1, true), text)
write(fake .. "/sacct.txt", string.format("%s_0|COMPLETED|0:0|n1\n%s_1|COMPLETED|0:0|n1\n%s_2|COMPLETED|0:0|n1\n"
                                          .. "%s_3|FAILED|1:0|n2\n", rj, rj, rj, rj))
code, text = sh(string.format("%s sweep collect %s", exe, rep))
check.eq(code, 0, "collect once every run ended: " .. text)
local r2p = dp.results.read(rep .. "/seed=2.json")
check.eq(r2p.repeats.runs[2].status, "crashed", "the failed run's task, from its end state")
check.eq(r2p.status, "ok", "the point is its ok run")
code, text = sh(string.format("%s sweep submit %s", exe, rep))
check.eq(code, 0, "resubmit with repeats: " .. text)
check.truthy(text:find("1 of 4 runs %(2 per point%) submitted as Slurm array job %d+ %(tasks 3%)"), text)

-- a failed sbatch leaves a manifest a resubmission accepts (issue 38: it held "submissions": {},
-- which status, collect and a second submit refused); one an older version left so reads too
do
  local failbin = root .. "/failbin"
  os.execute("mkdir -p " .. failbin)
  write(failbin .. "/sbatch", "#!/bin/sh\necho 'sbatch: error: invalid partition specified' >&2\nexit 1\n")
  os.execute("chmod +x " .. failbin .. "/sbatch")
  local failed = root .. "/failed"
  code, text = sh(string.format("PATH=%s:%s:/usr/bin:/bin %s sweep submit %s out=%s", failbin, fake, exe, script, failed))
  check.eq(code, 1, "a failed sbatch fails the submission: " .. text)
  local manifest = assert(dp.read_file(failed .. "/.dpprof-sweep.json"))
  check.truthy(not manifest:find('"submissions": {}', 1, true) and not manifest:find('"submissions":{}', 1, true),
               "the manifest's submissions are a list: " .. manifest)
  code, text = sh(string.format("%s sweep status %s", exe, failed))
  check.eq(code, 0, "status reads it: " .. text)
  code, text = sh(string.format("%s sweep submit %s", exe, failed))
  check.eq(code, 0, "a resubmission is accepted: " .. text)
  check.truthy(text:find("3 of 3 points submitted", 1, true), text)
  local old = manifest:gsub('"submissions": %[%]', '"submissions": {}')
  assert(dp.write_file(failed .. "/.dpprof-sweep.json", old))
  code, text = sh(string.format("%s sweep status %s", exe, failed))
  check.eq(code, 0, "an older manifest's {} reads as no submissions: " .. text)
end

-- refusals
code, text = sh(string.format("PATH=/nonexistent %s sweep submit %s out=%s/nosbatch", exe, script, root))
check.eq(code, 1, "no sbatch")
check.truthy(text:find("sbatch is not on PATH", 1, true), text)
code, text = sh(string.format("%s sweep submit %s out=%s/x partition=", exe, script, root))
check.eq(code, 2, "an empty partition")
check.truthy(text:find("slurm.partition must be a name", 1, true), text)
code, text = sh(string.format("%s sweep submit %s out=%s time=30", exe, out, root))
check.eq(code, 2, "script arguments for a directory")
check.truthy(text:find("only sbatch options may be given", 1, true), text)
write(root .. "/nosweep.lua", "local x = 1\n")
code, text = sh(string.format("%s sweep submit %s/nosweep.lua", exe, root))
check.eq(code, 1, "a script without a sweep")
check.truthy(text:find("ran to its end without calling dp.sweep: nothing was submitted", 1, true), text)
code, text = sh(string.format("%s sweep status %s/none", exe, root))
check.eq(code, 2, "status of no directory")
check.truthy(text:find("no such directory", 1, true), text)
code, text = sh(string.format("%s sweep collect %s", exe, fake))
check.eq(code, 2, "collect of a directory that is no sweep")
check.truthy(text:find("is not a Slurm sweep: it has no .dpprof-sweep.json", 1, true), text)
code, text = sh(exe .. " sweep launch x")
check.eq(code, 2, "unknown subcommand")
check.truthy(text:find("unknown subcommand 'launch' (valid: submit, status, collect", 1, true), text)
code, text = sh(exe .. " sweep --help")
check.eq(code, 0, "help")
check.truthy(text:find("usage: dpprof sweep submit SCRIPT", 1, true), text)
check.raises(function() dp.sweep{ vary = { seed = { 1 } }, backend = "pbs", out = root .. "/pbs" } end,
             "unknown backend 'pbs' (valid: local, slurm)")
check.raises(function() dp.sweep{ vary = { seed = { 1 } }, backend = "slurm", slurm = { queue = "x" }, out = root .. "/q" } end,
             "unknown slurm option 'queue'")


-- points of different world sizes on cuda: one array per size (an array's tasks share --ntasks),
-- each N-task point's task an srun of N ranks with a GPU each; one collect job after them all;
-- status, collect and resubmission as for one array. (The ranks really running under a launcher:
-- tests/distributed/slurm_ntasks.lua.)
write(root .. "/gpu.lua", [[
local dp = require("dpprof")
dp.sweep{ base = { device = "cuda", distributed = { strategy = "fsdp" } }, vary = { world_size = { 1, 2, 16 } },
          out = dp.args.out, backend = "slurm", run = function(cfg, vary) return { ws = vary.world_size } end,
          slurm = { partition = "gpu", time = 30, cpus_per_task = 4, gpus_per_node = 8 } }
]])
local gpu = root .. "/gpu"
os.remove(fake .. "/sbatch.log")
code, text = sh(string.format("%s sweep submit %s/gpu.lua out=%s", exe, root, gpu))
check.eq(code, 0, "submit points of 1, 2 and 16 ranks: " .. text)
local g1, g2, g16, gc = text:match("3 of 3 points submitted as Slurm array jobs (%d+) %(tasks 0; 1 task each, 1 GPU a "
                                   .. "task%), (%d+) %(tasks 1; 2 tasks each, 1 GPU a task: srun %-n 2%), (%d+) %(tasks "
                                   .. "2; 16 tasks each, 1 GPU a task: srun %-n 16%).*job (%d+) collects the results "
                                   .. "and renders the charts when the arrays end")
check.truthy(g1 and g2 and g16 and gc, text)
log = sbatch_log()
check.truthy(log:find("--job-name=dpprof-gpu --array=0 --output=" .. gpu .. "/slurm/%A_%a.out --chdir=", 1, true)
             and log:find("--ntasks=1 --partition=gpu --time=30 --gpus-per-task=1 --cpus-per-task=4 " .. gpu
                          .. "/slurm/task.sh", 1, true), "the 1-rank array: " .. log)
check.truthy(log:find("--job-name=dpprof-gpu-2tasks --array=1 --output=", 1, true)
             and log:find("--ntasks=2 --nodes=1 --ntasks-per-node=2 --partition=gpu --time=30 --gpus-per-task=1 "
                          .. "--cpus-per-task=4 " .. gpu .. "/slurm/task_2tasks_gpu.sh", 1, true), "the 2-rank array: " .. log)
check.truthy(log:find("--job-name=dpprof-gpu-16tasks --array=2 --output=", 1, true)
             and log:find("--ntasks=16 --nodes=2 --ntasks-per-node=8 --partition=gpu --time=30 --gpus-per-task=1 "
                          .. "--cpus-per-task=4 " .. gpu .. "/slurm/task_16tasks_gpu.sh", 1, true), "the 16-rank array: " .. log)
check.truthy(log:find(string.format("--dependency=afterany:%s:%s:%s ", g1, g2, g16), 1, true),
             "collect waits for every array: " .. log)
check.eq(dp.read_file(gpu .. "/slurm/task_16tasks_gpu.sh"):match("\nexec ([^\n]*)\n$"),
         string.format("'srun' '--ntasks=16' '--mpi=pmix' '--kill-on-bad-exit=1' '--cpus-per-task=4' '--gpus-per-task=1' "
                       .. "%s 'sweep' 'task' %s", slurm.quote(exe), slurm.quote(gpu)), "task_16tasks_gpu.sh: srun -n 16")
check.truthy(dp.read_file(gpu .. "/slurm/task.sh"):find("\nexec " .. slurm.quote(exe) .. " 'sweep' 'task' ", 1, true),
             "the 1-rank point runs without srun")
local mg = assert(slurm.read_manifest(gpu))
check.eq(#mg.submissions, 3, "one submission per array")
check.eq(mg.submissions[1].ntasks, nil, "the 1-task array: no ntasks")
check.eq(mg.submissions[3].ntasks, 16, "the 16-task array's ntasks")
check.eq(mg.submissions[3].points[1], 2, "it holds point 2")
check.eq(mg.submissions[2].collect_job_id, gc, "each names the collect job")
-- task 0 ran; the 2-rank job failed; the 16-rank one still runs
code, text = sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=%s sh %s/slurm/task.sh", g1, gpu))
check.eq(code, 0, "task 0: " .. text)
check.eq(dp.results.read(gpu .. "/world_size=1.json").ws, 1, "task 0 ran point world_size=1")
write(fake .. "/sacct.txt", string.format("%s_0|COMPLETED|0:0|n1\n%s_1|FAILED|1:0|n2\n%s_2|RUNNING|0:0|n[3-4]\n",
                                          g1, g2, g16))
code, text = sh(string.format("%s sweep status %s", exe, gpu))
check.eq(code, 0, "status of three arrays: " .. text)
check.truthy(text:find(string.format("Slurm jobs %s (tasks 0, collect %s), %s (tasks 1, 2 tasks each, collect %s), %s "
                                     .. "(tasks 2, 16 tasks each, collect %s)", g1, gc, g2, gc, g16, gc), 1, true), text)
check.truthy(text:find("world_size=16 +running +" .. g16 .. "_2"), text)
code, text = sh(string.format("%s sweep collect %s", exe, gpu))
check.eq(code, 1, "collect with the 16-rank job running: " .. text)
check.truthy(text:find("world_size=16 (running)", 1, true), text)
local rf = dp.results.read(gpu .. "/world_size=2.json")
check.eq(rf.status, "crashed", "the failed 2-rank job: crashed")
check.truthy(rf.message:find("Slurm task " .. g2 .. "_1 on n2 ended FAILED", 1, true), rf.message)
code, text = sh(string.format("%s sweep submit %s", exe, gpu))
check.eq(code, 0, "resubmit: " .. text)
check.truthy(text:find("1 of 3 points submitted as Slurm array job %d+ %(tasks 1; 2 tasks each, 1 GPU a task: srun %-n 2%)")
             and text:find("world_size=16 (" .. g16 .. "_2 running)", 1, true), "only the failed one again: " .. text)
-- what cannot be expressed is refused before anything is queued: more than one GPU per cuda rank
code, text = sh(string.format("%s sweep submit %s/gpu.lua out=%s/gpu2 gpus_per_task=2", exe, root, root))
check.eq(code, 2, "gpus_per_task=2 for cuda ranks: " .. text)
check.truthy(text:find("point world_size=1: distributed on cuda is one rank per GPU (--gpus-per-task=1); "
                       .. "slurm.gpus_per_task is 2: give 1 or leave it out", 1, true), text)
check.eq(dp.read_file(root .. "/gpu2/" .. slurm.MANIFEST_FILE), nil, "nothing submitted")
-- what the experiment refuses of an N-task point is refused at submission, as for any point
-- (checked as a launch of its own world_size ranks, not against this process's world of one)
write(root .. "/bad_dist.lua", [[
local dp = require("dpprof")
dp.sweep{ base = { device = "cpu", method = "ghost", distributed = dp.args.rank and { world_size = 2, rank = 1 } or nil,
                   model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 4 } },
          vary = { world_size = { dp.args.ws } }, out = dp.args.out, backend = "slurm" }
]])
code, text = sh(string.format("%s sweep submit %s/bad_dist.lua out=%s/bad3 ws=0", exe, root, root))
check.eq(code, 2, "world_size 0: " .. text)
check.truthy(text:find("point world_size=0: dpprof.experiment: distributed.world_size must be at least 1, got 0",
                       1, true), text)
code, text = sh(string.format("%s sweep submit %s/bad_dist.lua out=%s/bad_rank ws=2 rank=1", exe, root, root))
check.eq(code, 2, "a rank on a real device: " .. text)
check.truthy(text:find(".rank is the launcher's on device 'cpu'", 1, true), text)
check.eq(dp.read_file(root .. "/bad3/" .. slurm.MANIFEST_FILE) or dp.read_file(root .. "/bad_rank/" .. slurm.MANIFEST_FILE),
         nil, "nothing submitted")
code, text = sh(string.format("%s sweep submit %s/bad_dist.lua out=%s/good2 ws=2", exe, root, root))
check.eq(code, 0, "world_size 2 of a batch of 4, from a process of one rank: " .. text)
check.truthy(text:find("(tasks 0; 2 tasks each: srun -n 2)", 1, true), text)

-- a local sweep's point is one child process: distributed on a real device is refused, naming Slurm
check.raises(function()
  dp.sweep{ base = { device = "cpu", distributed = { world_size = 2 },
                     model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 4 } },
            vary = { method = { "ghost" } }, out = root .. "/local_dist", quiet = true }
end, { "point method=ghost: distributed on device 'cpu': a local sweep's point is one process", "backend = \"slurm\"" })

-- a corrupted manifest: one line naming the file, the field and what is valid, exit 2 (a Lua
-- error from deep inside status or collect before; a file of "../" wrote outside the sweep)
local mpath = out .. "/" .. slurm.MANIFEST_FILE
local good = assert(dp.read_file(mpath))
local function corrupt(from, to, sub, want)
  local text, n = good:gsub(from, to, 1)
  check.eq(n, 1, "the manifest has " .. from)
  write(mpath, text)
  for _, what in ipairs({ "status", "collect", sub }) do
    code, text = sh(string.format("%s sweep %s %s", exe, what, out))
    check.eq(code, 2, what .. " of a corrupted manifest: " .. text)
    check.eq(text, "dpprof sweep " .. what .. ": " .. mpath .. ": " .. want .. "\n", what .. ": one line")
  end
end
corrupt('"file": "seed=2.json"', '"file": "../../escaped.json"', "task",
        'field points[2].file is "../../escaped.json"; valid: "seed=2.json" (its name\'s file)')
corrupt('"points": %[', '"points": null, "x": [', "submit",
        "field points is null; valid: a list of 1 to 1001 points")
corrupt('"job_id": "100"', '"job_id": 100', "task",
        "field submissions[1].job_id is 100 (an integer); valid: a Slurm job id, digits as a text")
corrupt('"name": "seed=3"', '"name": "../seed=3"', "submit",
        'field points[3].name is "../seed=3"; valid: a point\'s file name: letters, digits and _.+=,- (not first a .), '
        .. "at most 250 bytes")
corrupt('"version": 1', '"version": "1"', "task",
        'field version is "1"; valid: 1 (the manifest version this dpprof reads)')
check.eq(dp.list_dir(root .. "/escaped.json"), nil, "nothing written outside the sweep")
write(mpath, good)
-- an N-task submission's ntasks
local gpath = gpu .. "/" .. slurm.MANIFEST_FILE
local ggood = assert(dp.read_file(gpath))
local gbad, gn = ggood:gsub('"ntasks": 16', '"ntasks": 0', 1)
check.eq(gn, 1, "the manifest has ntasks 16")
write(gpath, gbad)
code, text = sh(string.format("%s sweep status %s", exe, gpu))
check.eq(code, 2, "status of a manifest with ntasks 0: " .. text)
check.eq(text, "dpprof sweep status: " .. gpath .. ": field submissions[3].ntasks is 0 (an integer); valid: absent (one "
         .. "task a point) or the tasks of each point, an integer >= 1\n", "ntasks 0: one line")
write(gpath, ggood)

os.execute("rm -rf " .. root)
print("test_slurm: ok")
