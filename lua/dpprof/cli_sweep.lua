-- dpprof.cli_sweep: `dpprof sweep` (dpprof.cli.sweep), written in Lua; returns the process exit status.
local dp = require("dpprof")
local util = require("dpprof.cli_util")
local slurm = require("dpprof.slurm")
local sweep = require("dpprof.sweep")

local eprint = util.eprint

local cli = {}

---------------------------------------------------------------------------------------------
-- dpprof sweep submit | status | collect | task

local SWEEP_USAGE = [[
usage: dpprof sweep submit SCRIPT [key=value ...]
       dpprof sweep submit DIR [key=value ...]
       dpprof sweep status DIR
       dpprof sweep collect DIR

Runs the sweeps of a script on a Slurm cluster, one job array per sweep (docs/cluster.md).

  submit SCRIPT  runs SCRIPT as `dpprof run` does, but each dp.sweep in it submits its points as
                 one Slurm array job (task i runs point i and writes <out>/<point>.json) and one
                 job that collects them when the array ends; out's points with a result are not
                 submitted. The key=value pairs go to the script, except these sbatch options,
                 which override the script's dp.sweep{slurm=}:
                   partition=NAME  account=NAME  time=MINUTES|[D-]HH:MM:SS  mem=MIB|16G
                   gpus_per_task=N  cpus_per_task=N  max_parallel=N (tasks at once)
                   extra="--qos=high --constraint=a100" (more sbatch options)
                   gpus_per_node=G  mpi=pmix (N-task points: see below)
                 A point with distributed = {world_size = N} on cpu or cuda is an N-task job
                 (--ntasks=N, one GPU a rank on cuda, packed G to a node with gpus_per_node)
                 whose task is `srun --ntasks=N --mpi=pmix dpprof sweep task`; one array per N
  submit DIR     submits again the points of the sweep in DIR with no result or a failed one
                 (error, crashed, timeout), never one still queued or running; the sbatch
                 options above may change (the last ones are kept otherwise)
  status DIR     each point's result, or its task's Slurm state, and the job ids
  collect DIR    a result for each point whose task ended without writing one, from Slurm's end
                 state (OUT_OF_MEMORY: oom; TIMEOUT, DEADLINE: timeout; CANCELLED, NODE_FAIL,
                 FAILED, ...: crashed, the state named), then the charts once every point has one
  task DIR       what array task $SLURM_ARRAY_TASK_ID runs (DIR/slurm/task.sh calls it)

DIR, the script and the dpprof binary must be on a filesystem every node shares. End states come
from sacct, else from scontrol (recent jobs), else from a jobcomp/filetxt log.
exit status: 0 done (collect: every point has a result); 1 an error, or (collect) points still
without a result; 2 bad arguments, or DIR is not a Slurm sweep
]]

-- A key=value argument's value as `dpprof run` gives it to a script (dpprof.args).
local function script_value(v)
  if v == "true" then return true end
  if v == "false" then return false end
  local n = tonumber(v)
  if n ~= nil then return n end
  return v
end

-- Loads SCRIPT and sets dpprof.args and the global arg as `dpprof run SCRIPT raw...` does.
-- Returns the chunk, or nil and why.
local function load_script(script, raw)
  local args, argt = {}, { [0] = script }
  for i, a in ipairs(raw) do
    local k, v = tostring(a):match("^([^=]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value", tostring(a)) end
    args[k], argt[i] = script_value(v), a
  end
  local chunk, err = loadfile(script, "t")
  if not chunk then return nil, err end
  dp.args = args
  _G.arg = argt
  return chunk
end

local function is_slurm_key(k)
  for _, name in ipairs(slurm.OPTION_KEYS) do
    if name == k then return true end
  end
  return false
end

local function sweep_submit(rest)
  local target = rest[1]
  local options, raw = {}, {}
  for i = 2, #rest do
    local k, v = rest[i]:match("^([^=]+)=(.*)$")
    if not k then
      eprint("dpprof sweep submit: argument '", rest[i], "' is not key=value")
      return 2
    end
    if is_slurm_key(k) then options[k] = script_value(v) else raw[#raw + 1] = rest[i] end
  end
  local ok, err = pcall(slurm.options, nil, options)
  if not ok then
    eprint("dpprof sweep submit: ", (tostring(err):gsub("^dpprof%.sweep: ", "")))
    return 2
  end
  local session
  if dp.list_dir(target) then
    local m, why = slurm.read_manifest(target)
    if not m then
      eprint("dpprof sweep submit: ", why)
      return 2
    end
    if #raw > 0 then
      eprint("dpprof sweep submit: ", target, " is a sweep: only sbatch options may be given (",
             table.concat(slurm.OPTION_KEYS, ", "), "), not '", raw[1], "'")
      return 2
    end
    for k, v in pairs(m.slurm or {}) do if options[k] == nil then options[k] = v end end
    session = { mode = "resubmit", call = m.call, dir = m.out, cwd = m.cwd, slurm = options, script = m.script,
                args = m.args }
  else
    session = { mode = "submit", slurm = options, script = target, args = raw }
  end
  local chunk, why = load_script(session.script, session.args)
  if not chunk then
    eprint("dpprof sweep submit: ", why)
    return 2
  end
  sweep.session = session
  chunk() -- an error goes to the command line's handler, with the script's own lines
  sweep.session = nil
  if not session.reached then
    if session.mode == "resubmit" then
      eprint("dpprof sweep submit: ", session.script, " no longer reaches its dp.sweep call #", tostring(session.call),
             " that made ", target)
    else
      eprint("dpprof sweep submit: ", target, " ran to its end without calling dp.sweep: nothing was submitted")
    end
    return 1
  end
  return 0
end

local function sweep_task(dir)
  local m, why = slurm.read_manifest(dir)
  if not m then
    eprint("dpprof sweep task: ", why)
    return 2
  end
  local index = math.tointeger(tonumber(os.getenv("SLURM_ARRAY_TASK_ID") or ""))
  if not index then
    eprint("dpprof sweep task: SLURM_ARRAY_TASK_ID is not set: this is what a Slurm array task of ", dir, " runs")
    return 2
  end
  local chunk, err = load_script(m.script, m.args)
  if not chunk then
    eprint("dpprof sweep task: ", err)
    return 1
  end
  sweep.session = { mode = "task", call = m.call, dir = m.out, index = index, manifest = m }
  local ok, e = xpcall(chunk, function(e)
    if e == sweep.TASK_DONE then return e end
    return debug.traceback(dp.error_text(e), 2)
  end)
  sweep.session = nil
  if ok or e == sweep.TASK_DONE then
    if ok then
      eprint("dpprof sweep task: ", m.script, " ran to its end without reaching its dp.sweep call #", tostring(m.call))
      return 1
    end
    return 0
  end
  eprint("dpprof sweep task: ", tostring(e))
  return 1
end

function cli.sweep(args)
  local sub = args[1]
  if sub == nil or sub == "--help" or sub == "-h" then
    io.stdout:write(SWEEP_USAGE)
    return sub == nil and 2 or 0
  end
  local rest = { table.unpack(args, 2) }
  if util.help_asked(rest) then
    io.stdout:write(SWEEP_USAGE)
    return 0
  end
  local say = function(line) io.stdout:write(line, "\n") io.stdout:flush() end
  if sub == "submit" then
    if #rest < 1 then
      eprint("dpprof sweep submit: missing SCRIPT or DIR\n", SWEEP_USAGE)
      return 2
    end
    return sweep_submit(rest)
  end
  if sub ~= "status" and sub ~= "collect" and sub ~= "task" then
    eprint("dpprof sweep: unknown subcommand '", sub, "' (valid: submit, status, collect; see dpprof sweep --help)")
    return 2
  end
  if #rest ~= 1 then
    eprint("dpprof sweep ", sub, ": expected DIR, got ", #rest, " argument(s)")
    return 2
  end
  if sub == "status" then return slurm.status(rest[1], say) end
  if sub == "collect" then return slurm.collect(rest[1], say) end
  return sweep_task(rest[1])
end

return cli
