-- dpprof.slurm: a sweep's points as one Slurm job array (dp.sweep{backend="slurm"}, and the
-- `dpprof sweep submit | status | collect | task` commands).
--
-- Submitting writes the sweep's manifest, <out>/.dpprof-sweep.json (the script and its
-- arguments, the working directory, which dp.sweep call of the script it is, every point's name,
-- vary values, resolved configuration and hash, and each submission's job ids), then one
-- `sbatch --array`: array task i runs `dpprof sweep task <out>`, which runs the script again up
-- to that sweep call and runs point i (0-based, in the sweep's order) through the same isolated
-- child as a local sweep, writing <out>/<point>.json; then one job with an afterany dependency on
-- the array runs `dpprof sweep collect <out>`. Collect gives every point whose task ended without
-- a result file one from Slurm's end state (OUT_OF_MEMORY -> oom, TIMEOUT and DEADLINE ->
-- timeout, any other -> crashed, the state named) and renders the charts once every point has a
-- file. Submitting again submits only the points with no file or a failed one (error, crashed,
-- timeout), and never one whose task is still queued or running. Slurm does placement, retries
-- and limits: nothing here schedules.
--
-- End states come from `sacct` (Slurm's accounting database), else from the controller's
-- memory of recent jobs (`scontrol show job`, kept MinJobAge seconds), else from the
-- job-completion log (JobCompType=jobcomp/filetxt, its JobCompLoc file, when readable).
-- `out`, the script and the dpprof binary must be on a filesystem every node shares.
--
-- A point distributed on a real device (distributed.world_size = N on cpu or cuda) is an N-task
-- job: its array asks for --ntasks=N (cuda: a GPU a task) and its task is `srun --ntasks=N
-- --mpi=<slurm.mpi> dpprof sweep task <out>`, the point run in every rank, rank 0 writing its
-- file. An array's tasks share --ntasks, so the points go in one array per N (each a submission
-- of the manifest, with ntasks), and the collect job waits for them all.
--
-- With repeats = N each run is a task of its own: task t runs run t % N + 1 of point t // N
-- (dpprof.repeats), writes <out>/runs/<point>.run<k>.json, and the task that finds every run of
-- its point there writes the point's file; collect gives a run whose task ended without a file
--
-- The parts: slurm_shell (quoting, the scripts, the commands run), slurm_options (the slurm
-- table and what a point's job asks), slurm_states (tasks' states from Slurm), slurm_manifest
-- (the manifest), slurm_submit and slurm_collect (the commands); this module gathers them.
local shell = require("dpprof.slurm_shell")
local options = require("dpprof.slurm_options")
local states_of = require("dpprof.slurm_states")
local manifest = require("dpprof.slurm_manifest")
local submit = require("dpprof.slurm_submit")
local collect = require("dpprof.slurm_collect")

local slurm = {}

-- every part's names as slurm.NAME (slurm.command is shell.command: a stand-in for Slurm's tools
-- replaces shell.command, where every part calls it)
for _, part in ipairs({ shell, options, states_of, manifest, submit, collect }) do
  for k, v in pairs(part) do
    if slurm[k] ~= nil then error("dpprof.slurm: two of its parts name " .. k, 0) end
    slurm[k] = v
  end
end

-- Point i (1-based) of a Slurm array task, checked against the manifest (the script must still
-- make the sweep it made when it was submitted).
function slurm.task_point(session, points, i)
  local want = session.manifest.points[i]
  local p = points[i]
  if not want then error(string.format("dpprof sweep task: the manifest has no point %d", i - 1), 0) end
  if not p or p.name ~= want.name or p.config_hash ~= want.config_hash then
    error(string.format("dpprof sweep task: point %d of the script's sweep is now %s, not %s (%s) as when it was "
                        .. "submitted: the script or its files changed; submit it again to another out",
                        i - 1, p and (p.name .. " (" .. p.config_hash .. ")") or "absent", want.name,
                        want.config_hash), 0)
  end
  return p
end

-- Where a task runs: the placement its result records, and the CPU threads its child gets
-- (Slurm's cpus_per_task, when the job asked for it).
function slurm.task_placement(host)
  local threads = math.tointeger(tonumber(os.getenv("SLURM_CPUS_PER_TASK") or ""))
  return {
    host = host,
    threads = threads,
    cuda_visible_devices = os.getenv("CUDA_VISIBLE_DEVICES"),
    slurm = { job_id = os.getenv("SLURM_ARRAY_JOB_ID"), array_task_id = math.tointeger(tonumber(
                os.getenv("SLURM_ARRAY_TASK_ID") or "")), task_job_id = os.getenv("SLURM_JOB_ID"),
              node = os.getenv("SLURMD_NODENAME"), cluster = os.getenv("SLURM_CLUSTER_NAME") },
  }, threads
end

---------------------------------------------------------------------------------------------
-- Status and collect

-- The result in file that was run with config_hash, or nil.
return slurm
