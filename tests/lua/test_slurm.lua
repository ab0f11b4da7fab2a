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

os.execute("rm -rf " .. root)
print("test_slurm: ok")
