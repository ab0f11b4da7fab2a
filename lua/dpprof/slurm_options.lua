-- dpprof.slurm_options: dp.sweep's slurm table (and `dpprof sweep submit`'s key=value pairs)
-- checked, and what a point's job asks of Slurm: its tasks, sbatch's options, srun's command.
local shell = require("dpprof.slurm_shell")

local options = {}
local one_line = shell.one_line

-- The keys of dp.sweep's slurm table (and of `dpprof sweep submit`'s key=value pairs).
options.OPTION_KEYS = { "partition", "account", "time", "gpus_per_task", "cpus_per_task", "mem", "max_parallel",
                      "extra", "gpus_per_node", "mpi" }

-- srun's --mpi plugin for the points that are N-task jobs when slurm.mpi is not given: Open MPI
-- (Debian's, built with PMIx) starts its ranks under srun through PMIx.
options.DEFAULT_MPI = "pmix"

local function positive_integer(v) return math.type(v) == "integer" and v >= 1 end

-- The checked options: those of the script's dp.sweep{slurm=} with the command line's on top.
-- Raises naming a key that is unknown or of the wrong kind.
function options.options(from_script, from_command)
  local o = {}
  for _, source in ipairs({ from_script or {}, from_command or {} }) do
    for k, v in pairs(source) do
      local known = false
      for _, name in ipairs(options.OPTION_KEYS) do known = known or name == k end
      if not known then
        error(string.format("dpprof.sweep: unknown slurm option '%s' (valid: %s)", one_line(k),
                            table.concat(options.OPTION_KEYS, ", ")), 0)
      end
      o[k] = v
    end
  end
  for _, k in ipairs({ "partition", "account" }) do
    if o[k] ~= nil and (type(o[k]) ~= "string" or o[k] == "") then
      error(string.format("dpprof.sweep: slurm.%s must be a name (a non-empty string)", k), 0)
    end
  end
  if o.time ~= nil and not (positive_integer(o.time) or (type(o.time) == "string" and o.time:match("^[%d:-]+$"))) then
    error("dpprof.sweep: slurm.time must be minutes (an integer) or Slurm's [days-]hours:minutes:seconds text, "
          .. "e.g. \"01:30:00\" (got " .. one_line(o.time) .. ")", 0)
  end
  if o.mem ~= nil and not (positive_integer(o.mem) or (type(o.mem) == "string" and o.mem:match("^%d+[KMGT]?$"))) then
    error("dpprof.sweep: slurm.mem must be MiB (an integer) or a size such as \"16G\" (got " .. one_line(o.mem) .. ")", 0)
  end
  for _, k in ipairs({ "gpus_per_task", "cpus_per_task", "max_parallel", "gpus_per_node" }) do
    if o[k] ~= nil and not positive_integer(o[k]) then
      error(string.format("dpprof.sweep: slurm.%s must be an integer >= 1 (got %s)", k, one_line(o[k])), 0)
    end
  end
  if o.mpi ~= nil and not (type(o.mpi) == "string" and o.mpi:match("^[%w_]+$")) then
    error("dpprof.sweep: slurm.mpi must name srun's --mpi plugin, e.g. \"pmix\" (Open MPI), \"pmix_v4\", \"pmi2\" "
          .. "(got " .. one_line(o.mpi) .. ")", 0)
  end
  if type(o.extra) == "string" then
    local list = {}
    for word in o.extra:gmatch("%S+") do list[#list + 1] = word end
    o.extra = list
  end
  if o.extra ~= nil then
    if type(o.extra) ~= "table" then error("dpprof.sweep: slurm.extra must be a list of sbatch options", 0) end
    for i, v in ipairs(o.extra) do
      if type(v) ~= "string" or not v:match("^%-") then
        error(string.format("dpprof.sweep: slurm.extra[%d] must be an sbatch option such as \"--qos=high\" (got %s)",
                            i, one_line(v)), 0)
      end
    end
  end
  return o
end

-- What a point's job asks of Slurm (config: its resolved configuration): {ntasks = N, cuda =
-- true | nil, device = config.device}. A point distributed on a real device is an N-task job, N
-- its world_size (1 when not given), each rank one task started by srun; cuda: one GPU per rank.
-- Any other point, plan points included, is one task.
function options.point_tasks(config)
  local d = type(config) == "table" and config.distributed or nil
  if type(d) ~= "table" or config.device == "plan" then return { ntasks = 1 } end
  return { ntasks = math.tointeger(d.world_size) or 1, cuda = config.device == "cuda" or nil, device = config.device }
end

-- Raises unless the options can give point `name` the tasks it needs (options.point_tasks): its
-- ranks on cuda hold one GPU each, so gpus_per_task may only be 1; ranks of several tasks name
-- their device (on "auto" the job could not say whether to ask Slurm for GPUs).
function options.check_tasks(o, tasks, name)
  if tasks.ntasks > 1 and tasks.device ~= "cpu" and tasks.device ~= "cuda" then
    error(string.format("dpprof.sweep: point %s: a distributed point of %d ranks runs on device 'cpu' or 'cuda' "
                        .. "(got '%s': Slurm must be told whether its ranks hold a GPU each)", name, tasks.ntasks,
                        tostring(tasks.device)), 0)
  end
  if tasks.cuda and o.gpus_per_task and o.gpus_per_task ~= 1 then
    error(string.format("dpprof.sweep: point %s: distributed on cuda is one rank per GPU (--gpus-per-task=1); "
                        .. "slurm.gpus_per_task is %d: give 1 or leave it out", name, o.gpus_per_task), 0)
  end
end

-- The sbatch options the options ask for, for points of `tasks` (options.point_tasks; absent: one
-- task a point, --ntasks=1). An N-task point on cuda gets --gpus-per-task=1 and, with
-- gpus_per_node = G, its ranks packed on ceil(N / G) nodes (--nodes, --ntasks-per-node).
function options.sbatch_options(o, tasks)
  local n = tasks and tasks.ntasks or 1
  local args = { "--ntasks=" .. n }
  if tasks and tasks.cuda and n > 1 and o.gpus_per_node then
    args[#args + 1] = "--nodes=" .. (n + o.gpus_per_node - 1) // o.gpus_per_node
    args[#args + 1] = "--ntasks-per-node=" .. math.min(n, o.gpus_per_node)
  end
  if o.partition then args[#args + 1] = "--partition=" .. o.partition end
  if o.account then args[#args + 1] = "--account=" .. o.account end
  if o.time then args[#args + 1] = "--time=" .. tostring(o.time) end
  if tasks and tasks.cuda then
    args[#args + 1] = "--gpus-per-task=1"
  elseif o.gpus_per_task then
    args[#args + 1] = "--gpus-per-task=" .. o.gpus_per_task
  end
  if o.cpus_per_task then args[#args + 1] = "--cpus-per-task=" .. o.cpus_per_task end
  if o.mem then args[#args + 1] = "--mem=" .. tostring(o.mem) end
  for _, v in ipairs(o.extra or {}) do args[#args + 1] = v end
  return args
end

-- The command an N-task point's array task runs (n > 1): srun starting its n ranks, each
-- `exe sweep task dir` (rank and world size from srun, MPI through slurm.mpi's plugin); one rank
-- that fails ends the step (--kill-on-bad-exit), so no rank waits on a dead one.
function options.srun_argv(o, tasks, exe, dir)
  local argv = { "srun", "--ntasks=" .. tasks.ntasks, "--mpi=" .. (o.mpi or options.DEFAULT_MPI), "--kill-on-bad-exit=1" }
  if o.cpus_per_task then argv[#argv + 1] = "--cpus-per-task=" .. o.cpus_per_task end -- srun 22.05 does not inherit it
  if tasks.cuda then argv[#argv + 1] = "--gpus-per-task=1" end
  for _, a in ipairs({ exe, "sweep", "task", dir }) do argv[#argv + 1] = a end
  return argv
end


return options
