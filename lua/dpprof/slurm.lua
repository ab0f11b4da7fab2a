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
-- one from its end state, then the point its file. The manifest's submissions list the tasks.
local dp = require("dpprof")
local results = require("dpprof.results")
local repeats = require("dpprof.repeats")
local outdir = require("dpprof.outdir") -- a sweep's out directory, as dpprof.sweep writes it

local slurm = {}

slurm.MANIFEST_FILE = ".dpprof-sweep.json"
-- The most tasks one array holds (Slurm's default MaxArraySize): a sweep's points times its runs,
-- at submit and in a manifest read back.
slurm.MAX_ARRAY_SIZE = 1001
slurm.MANIFEST_FORMAT = "dpprof sweep manifest"
slurm.MANIFEST_VERSION = 1

-- The keys of dp.sweep's slurm table (and of `dpprof sweep submit`'s key=value pairs).
slurm.OPTION_KEYS = { "partition", "account", "time", "gpus_per_task", "cpus_per_task", "mem", "max_parallel",
                      "extra", "gpus_per_node", "mpi" }

-- srun's --mpi plugin for the points that are N-task jobs when slurm.mpi is not given: Open MPI
-- (Debian's, built with PMIx) starts its ranks under srun through PMIx.
slurm.DEFAULT_MPI = "pmix"

-- States of a task that has not ended.
slurm.ACTIVE_STATES = { PENDING = true, RUNNING = true, CONFIGURING = true, COMPLETING = true, SUSPENDED = true,
                        REQUEUED = true, REQUEUE_FED = true, REQUEUE_HOLD = true, RESIZING = true, SIGNALING = true,
                        STAGE_OUT = true, STOPPED = true, RESV_DEL_HOLD = true }

---------------------------------------------------------------------------------------------
-- Options

-- v as one line: control characters and \ written \ddd (a value from outside, in an error).
local function one_line(v)
  return (tostring(v):gsub("[%z\1-\31\127\\]", function(c) return string.format("\\%03d", c:byte()) end))
end

local function positive_integer(v) return math.type(v) == "integer" and v >= 1 end

-- The checked options: those of the script's dp.sweep{slurm=} with the command line's on top.
-- Raises naming a key that is unknown or of the wrong kind.
function slurm.options(from_script, from_command)
  local o = {}
  for _, source in ipairs({ from_script or {}, from_command or {} }) do
    for k, v in pairs(source) do
      local known = false
      for _, name in ipairs(slurm.OPTION_KEYS) do known = known or name == k end
      if not known then
        error(string.format("dpprof.sweep: unknown slurm option '%s' (valid: %s)", one_line(k),
                            table.concat(slurm.OPTION_KEYS, ", ")), 0)
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
function slurm.point_tasks(config)
  local d = type(config) == "table" and config.distributed or nil
  if type(d) ~= "table" or config.device == "plan" then return { ntasks = 1 } end
  return { ntasks = math.tointeger(d.world_size) or 1, cuda = config.device == "cuda" or nil, device = config.device }
end

-- Raises unless the options can give point `name` the tasks it needs (slurm.point_tasks): its
-- ranks on cuda hold one GPU each, so gpus_per_task may only be 1; ranks of several tasks name
-- their device (on "auto" the job could not say whether to ask Slurm for GPUs).
function slurm.check_tasks(o, tasks, name)
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

-- The sbatch options the options ask for, for points of `tasks` (slurm.point_tasks; absent: one
-- task a point, --ntasks=1). An N-task point on cuda gets --gpus-per-task=1 and, with
-- gpus_per_node = G, its ranks packed on ceil(N / G) nodes (--nodes, --ntasks-per-node).
function slurm.sbatch_options(o, tasks)
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
function slurm.srun_argv(o, tasks, exe, dir)
  local argv = { "srun", "--ntasks=" .. tasks.ntasks, "--mpi=" .. (o.mpi or slurm.DEFAULT_MPI), "--kill-on-bad-exit=1" }
  if o.cpus_per_task then argv[#argv + 1] = "--cpus-per-task=" .. o.cpus_per_task end -- srun 22.05 does not inherit it
  if tasks.cuda then argv[#argv + 1] = "--gpus-per-task=1" end
  for _, a in ipairs({ exe, "sweep", "task", dir }) do argv[#argv + 1] = a end
  return argv
end

---------------------------------------------------------------------------------------------
-- Commands

-- The one way text reaches a shell, in a generated script (slurm/task.sh, slurm/collect.sh) or a
-- command run here: s single-quoted, each ' written '\''. Inside single quotes every byte stands
-- for itself (newlines, $, `, \, non-ASCII alike) except NUL, which no argument can hold: raises.
-- Text from outside (out, the sweep's name, paths) is also checked by slurm.check_text first.
function slurm.quote(s)
  s = tostring(s)
  if s:find("\0", 1, true) then error("dpprof.sweep: cannot pass text with a NUL byte to the shell", 0) end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end
local quote = slurm.quote

-- Raises unless s (what: e.g. "out (the sweep's directory)") is free of control characters
-- (bytes 0-31 and 127: a newline, tab, escape...): no output directory, script or sweep name
-- needs one, and one would break a generated script's lines or Slurm's logs. Returns s.
function slurm.check_text(what, s)
  s = tostring(s)
  local at = s:find("[%z\1-\31\127]")
  if at then
    error(string.format("dpprof.sweep: %s \"%s\" has a control character (byte %d at position %d): names and paths "
                        .. "a Slurm sweep writes into its scripts may hold any character but bytes 0-31 and 127; "
                        .. "choose another", what, one_line(s), s:byte(at), at), 0)
  end
  return s
end

-- The text of a generated shell script: its comment (fixed text, never from outside), then one
-- `exec` of argv with every word through slurm.quote.
function slurm.script_text(comment, argv)
  local words = {}
  for i, a in ipairs(argv) do words[i] = quote(a) end
  return "#!/bin/sh\n# " .. comment:gsub("\n", "\n# ") .. "\nexec " .. table.concat(words, " ") .. "\n"
end

-- Runs argv (a list) through the shell: its exit code and everything it printed.
local function command(argv)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = quote(a) end
  local p = io.popen(table.concat(parts, " ") .. " 2>&1")
  local text = p:read("a")
  local _, _, code = p:close()
  return code, text
end
slurm.command = command

local function have(program)
  return command({ "command", "-v", program }) == 0
end

local function cwd()
  local p = io.popen("pwd -P")
  local dir = p:read("l")
  p:close()
  return dir
end

local function absolute(path, from)
  if path:sub(1, 1) == "/" then return path end
  return (from .. "/" .. path):gsub("/%./", "/"):gsub("/+", "/")
end

-- "0-3,5,7-8" for the sorted indices given.
function slurm.ranges(indices)
  local parts, i = {}, 1
  while i <= #indices do
    local j = i
    while j < #indices and indices[j + 1] == indices[j] + 1 do j = j + 1 end
    parts[#parts + 1] = i == j and tostring(indices[i]) or (indices[i] .. "-" .. indices[j])
    i = j + 1
  end
  return table.concat(parts, ",")
end

-- The task ids of "4", "[0-3,5%2]", "0-3,5%2" (an array's pending remainder).
local function expand_tasks(text)
  local out = {}
  text = text:gsub("^%[", ""):gsub("%]$", ""):gsub("%%%d+$", "")
  for part in text:gmatch("[^,]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    if a then
      for t = tonumber(a), tonumber(b) do out[#out + 1] = t end
    elseif part:match("^%d+$") then
      out[#out + 1] = tonumber(part)
    end
  end
  return out
end

local function record(states, job, task, state, exit_code, node, source)
  for _, t in ipairs(expand_tasks(task)) do
    local key = job .. "_" .. t
    if not states[key] then
      states[key] = { state = state, exit_code = exit_code, node = node, source = source }
    end
  end
end

-- Parses `sacct -n -P -X -o JobID,State,ExitCode,NodeList` lines ("12_4|TIMEOUT|0:0|node1",
-- "12_[5-7]|PENDING|0:0|None assigned", "12_3|CANCELLED by 0|0:15|node1") into states.
function slurm.parse_sacct(text, states)
  for line in text:gmatch("[^\n]+") do
    local id, state, exit_code, node = line:match("^([^|]*)|([^|]*)|([^|]*)|([^|]*)")
    local job, task = (id or ""):match("^(%d+)_(.+)$")
    if job and state ~= "" then
      record(states, job, task, state:match("^(%S+)"), exit_code, node ~= "" and node or nil, "sacct")
    end
  end
  return states
end

-- The key=value words of one line of `scontrol -o show job` or of the job-completion log.
local function fields(line)
  local f = {}
  for k, v in line:gmatch("(%w+)=(%S*)") do
    if f[k] == nil then f[k] = v end
  end
  return f
end

-- Parses `scontrol -o show job` lines, or the lines of a jobcomp/filetxt log (source names
-- which), into states: each names ArrayJobId, ArrayTaskId, JobState, ExitCode and NodeList.
function slurm.parse_job_lines(text, states, source)
  for line in text:gmatch("[^\n]+") do
    local f = fields(line)
    if f.ArrayJobId and f.ArrayTaskId and f.JobState then
      record(states, f.ArrayJobId, f.ArrayTaskId, f.JobState, f.ExitCode,
             f.NodeList ~= "" and f.NodeList ~= "(null)" and f.NodeList or nil, source)
    end
  end
  return states
end

-- The job-completion log's path when Slurm writes one as text (jobcomp/filetxt), else nil.
local function jobcomp_file()
  local code, text = slurm.command({ "scontrol", "show", "config" })
  if code ~= 0 then return nil end
  local kind = text:match("\nJobCompType%s*=%s*(%S+)")
  local loc = text:match("\nJobCompLoc%s*=%s*(%S+)")
  if kind == "jobcomp/filetxt" and loc and loc:sub(1, 1) == "/" then return loc end
end

-- The state of every task of the given array jobs that Slurm still knows:
-- {["<job>_<task>"] = {state, exit_code, node, source}}, each from the first source that knows
-- it: sacct, then scontrol (recent jobs), then the job-completion log.
function slurm.states(job_ids)
  local states = {}
  if #job_ids == 0 then return states end
  local code, text = slurm.command({ "sacct", "-n", "-P", "-X", "-j", table.concat(job_ids, ","), "-o",
                               "JobID,State,ExitCode,NodeList" })
  if code == 0 then slurm.parse_sacct(text, states) end
  local missing = {}
  for _, job in ipairs(job_ids) do
    code, text = slurm.command({ "scontrol", "-o", "show", "job", job })
    if code == 0 then slurm.parse_job_lines(text, states, "scontrol") else missing[#missing + 1] = job end
  end
  if #missing > 0 then
    local file = jobcomp_file()
    local log = file and dp.read_file(file)
    if log then slurm.parse_job_lines(log, states, "jobcomp") end
  end
  return states
end

-- A point's result status for a Slurm end state (a task that left no file), and what the
-- state means, when it says more than its name.
function slurm.end_status(state)
  if state == "OUT_OF_MEMORY" then return "oom", "past its memory limit (slurm.mem)" end
  if state == "TIMEOUT" or state == "DEADLINE" then return "timeout", "past its time limit (slurm.time)" end
  if state == "COMPLETED" then return "crashed", "without writing a result" end
  return "crashed", nil
end

---------------------------------------------------------------------------------------------
-- The manifest

function slurm.manifest_path(dir) return dir .. "/" .. slurm.MANIFEST_FILE end

local ARRAY_MT = getmetatable(dp.json.array())
local OBJECT_MT = getmetatable(dp.json.object())

-- A value of a manifest as an error shows it: one line, at most 40 characters of a text.
local function shown(v)
  if v == nil then return "nothing (the field is missing)" end
  if v == dp.json.null then return "null" end
  if type(v) == "string" then
    local t = one_line(v):gsub("\"", "\\034")
    return "\"" .. (#t > 40 and t:sub(1, 40) .. "..." or t) .. "\""
  end
  if type(v) == "table" then return getmetatable(v) == ARRAY_MT and "a list" or "an object" end
  local kinds = { integer = "an integer", float = "a number", boolean = "a boolean" }
  return string.format("%s (%s)", tostring(v), kinds[math.type(v) or type(v)] or "a " .. type(v))
end

-- A JSON list as dp.json.decode gives it (a sequence, marked as an array).
local function is_list(v) return type(v) == "table" and getmetatable(v) == ARRAY_MT end
-- A JSON object as dp.json.decode gives it.
local function is_object(v) return type(v) == "table" and getmetatable(v) == OBJECT_MT end

local function clean_text(v) return type(v) == "string" and not v:find("[%z\1-\31\127]") end
local function absolute_path(v) return clean_text(v) and v:sub(1, 1) == "/" end
local function job_id(v) return type(v) == "string" and v:match("^%d+$") ~= nil and #v <= 18 end

-- A point's name as dp.sweep makes it (sweep.safe_name): its file stays inside the directory.
local function point_name(v)
  return type(v) == "string" and #v >= 1 and #v <= 250 and v:match("^[%w_+=,%-][%w_.+=,%-]*$") ~= nil
end

-- nil when the decoded manifest m holds what status, collect, task and submit read, else one
-- line naming the field, what it holds and what is valid (a hand-edited or corrupted manifest
-- gives that, never a Lua error from deep inside).
function slurm.check_manifest(m)
  local function bad(field, v, valid)
    return string.format("field %s is %s; valid: %s", field, shown(v), valid)
  end
  if not clean_text(m.name) then return bad("name", m.name, "the sweep's name, a text without control characters") end
  for _, k in ipairs({ "out", "cwd", "script" }) do
    if not absolute_path(m[k]) then return bad(k, m[k], "an absolute path without control characters") end
  end
  if m.dpprof ~= nil and not clean_text(m.dpprof) then return bad("dpprof", m.dpprof, "the dpprof executable's path") end
  if not is_list(m.args) then return bad("args", m.args, "a list of the script's key=value arguments") end
  for i, a in ipairs(m.args) do
    if type(a) ~= "string" or not a:find("=", 2, true) then
      return bad(string.format("args[%d]", i), a, "a key=value argument of the script")
    end
  end
  if math.type(m.call) ~= "integer" or m.call < 1 then
    return bad("call", m.call, "which dp.sweep call of the script this is, an integer >= 1")
  end
  local n = m.repeats == nil and 1 or m.repeats
  local most = slurm.MAX_ARRAY_SIZE
  if math.type(n) ~= "integer" or n < 2 and m.repeats ~= nil or n > most then
    return bad("repeats", m.repeats, "absent (one run per point) or an integer from 2 to " .. most)
  end
  if not is_list(m.points) or #m.points < 1 or #m.points * n > most then
    return bad("points", m.points, string.format("a list of 1 to %d points", most // n))
  end
  local names = {}
  for i, q in ipairs(m.points) do
    local at = string.format("points[%d]", i)
    if not is_object(q) then return bad(at, q, "an object: index, name, file, vary, config, config_hash") end
    if q.index ~= i - 1 or math.type(q.index) ~= "integer" then
      return bad(at .. ".index", q.index, string.format("%d, its place in the list (0-based)", i - 1))
    end
    if not point_name(q.name) then
      return bad(at .. ".name", q.name, "a point's file name: letters, digits and _.+=,- (not first a .), "
                 .. "at most 250 bytes")
    end
    if names[q.name] then return bad(at .. ".name", q.name, "a name no other point has") end
    names[q.name] = true
    if q.file ~= q.name .. ".json" then return bad(at .. ".file", q.file, "\"" .. q.name .. ".json\" (its name's file)") end
    if not is_object(q.vary) then return bad(at .. ".vary", q.vary, "an object of the point's vary values") end
    if not is_object(q.config) then return bad(at .. ".config", q.config, "an object, the point's configuration") end
    if type(q.config_hash) ~= "string" or not q.config_hash:match("^fnv1a64:%x+$") or #q.config_hash ~= 24 then
      return bad(at .. ".config_hash", q.config_hash, "\"fnv1a64:\" and 16 hex digits")
    end
  end
  if not is_list(m.submissions) then return bad("submissions", m.submissions, "a list of submissions") end
  for i, sub in ipairs(m.submissions) do
    local at = string.format("submissions[%d]", i)
    if not is_object(sub) then return bad(at, sub, "an object: job_id, array, points, ...") end
    if not job_id(sub.job_id) then return bad(at .. ".job_id", sub.job_id, "a Slurm job id, digits as a text") end
    if sub.collect_job_id ~= nil and not job_id(sub.collect_job_id) then
      return bad(at .. ".collect_job_id", sub.collect_job_id, "absent or a Slurm job id, digits as a text")
    end
    if sub.ntasks ~= nil and (math.type(sub.ntasks) ~= "integer" or sub.ntasks < 1) then
      return bad(at .. ".ntasks", sub.ntasks, "absent (one task a point) or the tasks of each point, an integer >= 1")
    end
    if not clean_text(sub.array) then return bad(at .. ".array", sub.array, "the array's task ranges as sbatch took them") end
    if not is_list(sub.points) then return bad(at .. ".points", sub.points, "a list of task indices") end
    for j, t in ipairs(sub.points) do
      if math.type(t) ~= "integer" or t < 0 or t >= #m.points * n then
        return bad(string.format("%s.points[%d]", at, j), t, string.format("a task index from 0 to %d", #m.points * n - 1))
      end
    end
  end
  if m.slurm ~= nil then
    if not is_object(m.slurm) then return bad("slurm", m.slurm, "an object of sbatch options") end
    local ok, err = pcall(slurm.options, m.slurm)
    if not ok then return "field slurm: " .. tostring(err):gsub("^dpprof%.sweep: ", "") end
  end
  return nil
end

-- The manifest of the Slurm sweep in dir, or nil and why (one line naming the file).
function slurm.read_manifest(dir)
  if not dp.list_dir(dir) then return nil, dir .. ": no such directory" end
  local path = slurm.manifest_path(dir)
  local text = dp.read_file(path)
  if not text then
    return nil, string.format("%s is not a Slurm sweep: it has no %s (dpprof sweep submit writes it)", dir,
                              slurm.MANIFEST_FILE)
  end
  local ok, m = pcall(dp.json.decode, text, path)
  if not ok then return nil, dp.error_text(m) end
  if not is_object(m) or m.format ~= slurm.MANIFEST_FORMAT then
    return nil, string.format("%s: not a dpprof sweep manifest (its field format is %s, not \"%s\")", path,
                              shown(is_object(m) and m.format or nil), slurm.MANIFEST_FORMAT)
  end
  if m.version ~= slurm.MANIFEST_VERSION or math.type(m.version) ~= "integer" then
    return nil, string.format("%s: field version is %s; valid: %d (the manifest version this dpprof reads)", path,
                              shown(m.version), slurm.MANIFEST_VERSION)
  end
  if m.submissions == nil or (is_object(m.submissions) and next(m.submissions) == nil) then
    m.submissions = dp.json.array() -- older dpprof wrote an empty list as {} after a failed sbatch
  end
  local why = slurm.check_manifest(m)
  if why then return nil, path .. ": " .. why end
  return m
end

local function write_manifest(dir, m)
  results.write(slurm.manifest_path(dir), m)
end

-- The latest submission of each point (by 0-based index): {job_id=, task=}.
local function latest_tasks(m)
  local latest = {}
  for _, s in ipairs(m.submissions) do
    for _, i in ipairs(s.points or {}) do latest[i] = { job_id = s.job_id, task = i } end
  end
  return latest
end

local function job_ids(m)
  local ids, seen = {}, {}
  for _, s in ipairs(m.submissions) do
    if s.job_id and not seen[s.job_id] then ids[#ids + 1], seen[s.job_id] = s.job_id, true end
  end
  return ids
end

-- The log file of a task.
local function log_of(dir, job, task) return string.format("%s/slurm/%s_%d.out", dir, job, task) end

---------------------------------------------------------------------------------------------
-- Submitting (dp.sweep with backend = "slurm")

local function write_text(path, text)
  local ok, err = dp.write_file(path, text)
  if not ok then error("dpprof.sweep: " .. err, 0) end
end

-- The submitted job's id from `sbatch --parsable` ("123" or "123;cluster").
local function job_id_of(text)
  return text:match("^%s*(%d+)") or text:match("\n%s*(%d+)%s*$")
end

-- Submits the points of a sweep that have no result yet (ctx from dpprof.sweep: out, name,
-- points, prior, call, options, session, timeout, say, quiet). Returns the sweep's result table
-- with slurm = {job_id, collect_job_id, tasks, submitted, active, manifest}.
function slurm.submit(ctx)
  local session = ctx.session or {}
  local here = session.cwd or cwd()
  local dir = absolute(ctx.out, here)
  local script, args = session.script, session.args
  if not script then
    script = rawget(_G, "arg") and _G.arg[0]
    args = {}
    for i = 1, #(rawget(_G, "arg") or {}) do args[i] = _G.arg[i] end
  end
  if type(script) ~= "string" then
    error("dpprof.sweep: backend=\"slurm\" needs the sweep's script, which each task runs again: run it with "
          .. "`dpprof run SCRIPT` or `dpprof sweep submit SCRIPT`", 0)
  end
  script = absolute(script, here)
  local points = ctx.points
  slurm.check_text("out (the sweep's directory)", dir)
  slurm.check_text("the sweep's name", ctx.name)
  slurm.check_text("the script's path", script)
  slurm.check_text("the working directory", here)
  local n = ctx.repeats or 1
  if #points * n > slurm.MAX_ARRAY_SIZE then
    error(string.format("dpprof.sweep: %d points%s: more than one Slurm array holds by default (MaxArraySize %d); "
                        .. "split the sweep", #points, n > 1 and string.format(" x %d runs", n) or "",
                        slurm.MAX_ARRAY_SIZE), 0)
  end
  local m = slurm.read_manifest(dir)
  if m then
    local same = #m.points == #points and (m.repeats or 1) == n
    for i, p in ipairs(points) do
      local q = m.points[i]
      same = same and q and q.name == p.name and q.config_hash == p.config_hash
    end
    if not same then
      error(string.format("dpprof.sweep: %s holds a Slurm sweep of other points (its %s); give another out or "
                          .. "remove it", dir, slurm.MANIFEST_FILE), 0)
    end
  else
    m = { format = slurm.MANIFEST_FORMAT, version = slurm.MANIFEST_VERSION, submissions = dp.json.array() }
  end
  m.name, m.out, m.cwd, m.script, m.args, m.call = ctx.name, dir, here, script, dp.json.array(args), ctx.call
  m.dpprof = dp.executable
  m.repeats = n > 1 and n or nil
  m.points = {}
  for i, p in ipairs(points) do
    m.points[i] = { index = i - 1, name = p.name, file = p.name .. ".json", vary = p.vary, config = p.resolved,
                    config_hash = p.config_hash }
  end
  -- what runs: every point (each run of it) without a kept result, less those whose task has not ended
  local latest = latest_tasks(m)
  local states = {}
  if #m.submissions > 0 then states = slurm.states(job_ids(m)) end
  local todo, active, status_of = {}, {}, {}
  for i, p in ipairs(points) do
    if ctx.prior[i] then
      status_of[i] = ctx.prior[i].status
    else
      for k = 1, n do
        if not (p.runs and p.runs[k]) then
          local task = repeats.task_of(i, k, n)
          local t = latest[task]
          local s = t and states[t.job_id .. "_" .. t.task]
          if s and slurm.ACTIVE_STATES[s.state] then
            active[#active + 1] = string.format("%s%s (%s_%d %s)", p.name, n > 1 and " run " .. k or "", t.job_id,
                                                t.task, s.state:lower())
            status_of[i] = status_of[i] or s.state:lower()
          else
            todo[#todo + 1] = task
            status_of[i] = "submitted"
          end
        end
      end
      status_of[i] = status_of[i] or "runs done" -- every run kept: collect writes the point's file
    end
  end
  local say = ctx.say
  local result = { out = ctx.out, name = ctx.name, points = points, counts = {},
                   slurm = { submitted = #todo, active = #active, manifest = slurm.manifest_path(dir) } }
  for i, p in ipairs(points) do
    p.status = status_of[i]
    p.result = ctx.prior[i]
    p.skipped = ctx.prior[i] ~= nil
    result.counts[p.status] = (result.counts[p.status] or 0) + 1
  end
  if #active > 0 then
    say(string.format("sweep %s: %d point%s still queued or running, not submitted again: %s", ctx.name, #active,
                      #active == 1 and " is" or "s are", table.concat(active, ", ")))
  end
  if #todo == 0 then
    write_manifest(dir, m)
    say(string.format("sweep %s: nothing to submit (%d point%s with a result, %d queued or running) -> %s", ctx.name,
                      #points - #active, #points - #active == 1 and "" or "s", #active, dir))
    return result
  end
  if not have("sbatch") then
    error("dpprof.sweep: backend=\"slurm\": sbatch is not on PATH (run this on a Slurm login node, or "
          .. "apt-get install slurm-client)", 0)
  end
  local o = ctx.options
  -- the tasks by what their point's job asks (slurm.point_tasks): one array per kind, since an
  -- array's tasks all get the same --ntasks
  local groups, group_of = {}, {}
  for _, task in ipairs(todo) do
    local i = repeats.task(task, n)
    local p = points[i]
    local tasks = slurm.point_tasks(p.resolved)
    local key = tasks.ntasks .. (tasks.cuda and " cuda" or "")
    if not group_of[key] then
      group_of[key] = { tasks = tasks, todo = {} }
      groups[#groups + 1] = group_of[key]
    end
    local g = group_of[key].todo
    g[#g + 1] = task
  end
  table.sort(groups, function(x, y)
    if x.tasks.ntasks ~= y.tasks.ntasks then return x.tasks.ntasks < y.tasks.ntasks end
    return not x.tasks.cuda and y.tasks.cuda
  end)
  local ok, err = dp.mkdir_p(dir .. "/slurm")
  if not ok then error("dpprof.sweep: " .. err, 0) end
  local exe = slurm.check_text("the dpprof executable's path", dp.executable or "dpprof")
  local collect_script = dir .. "/slurm/collect.sh"
  local scripts = {}
  for _, g in ipairs(groups) do
    local nt = g.tasks.ntasks
    if nt == 1 then
      g.script = dir .. "/slurm/task.sh"
      g.text = slurm.script_text(
        "dpprof sweep: Slurm array task i runs point i (0-based) of the sweep in the directory below\n"
        .. "(its manifest: " .. slurm.MANIFEST_FILE .. " there)", { exe, "sweep", "task", dir })
    else
      g.script = string.format("%s/slurm/task_%dtasks%s.sh", dir, nt, g.tasks.cuda and "_gpu" or "")
      g.text = slurm.script_text(string.format(
        "dpprof sweep: Slurm array task i runs point i (0-based) of the sweep in the directory below as\n"
        .. "%d ranks, one srun task each (its manifest: %s there); rank 0 writes the point's result", nt,
        slurm.MANIFEST_FILE), slurm.srun_argv(o, g.tasks, exe, dir))
    end
    scripts[g.script] = g.text
  end
  for file, text in pairs(scripts) do write_text(file, text) end
  write_text(collect_script, slurm.script_text(
    "dpprof sweep: once the array has ended, results for the tasks that left none, and the charts",
    { exe, "sweep", "collect", dir }))
  -- the manifest first: a task that starts at once reads it
  write_manifest(dir, m)
  local submitted = {}
  for _, g in ipairs(groups) do
    local array = slurm.ranges(g.todo) .. (o.max_parallel and "%" .. o.max_parallel or "")
    local nt = g.tasks.ntasks
    local argv = { "sbatch", "--parsable", "--job-name=dpprof-" .. ctx.name .. (nt > 1 and "-" .. nt .. "tasks" or ""),
                   "--array=" .. array, "--output=" .. dir:gsub("%%", "%%%%") .. "/slurm/%A_%a.out", "--chdir=" .. here }
    for _, a in ipairs(slurm.sbatch_options(o, g.tasks)) do argv[#argv + 1] = a end
    argv[#argv + 1] = g.script
    local code, text = command(argv)
    local job = code == 0 and job_id_of(text) or nil
    if not job then
      error(string.format("dpprof.sweep: sbatch refused the array%s (exit %s): %s%s",
                          nt > 1 and string.format(" of %d-task points", nt) or "", tostring(code),
                          (text:gsub("%s+$", ""):gsub("\n", " | ")),
                          #submitted > 0 and string.format(" (array job%s %s submitted before it; dpprof sweep submit %s "
                                                           .. "again submits the rest)", #submitted > 1 and "s" or "",
                                                           table.concat(submitted, ", "), dir) or ""), 0)
    end
    local submission = { job_id = job, array = array, points = dp.json.array(g.todo), sbatch = dp.json.array(argv),
                         submitted = os.date("!%Y-%m-%dT%H:%M:%SZ"), options = o, ntasks = nt > 1 and nt or nil }
    m.submissions[#m.submissions + 1] = submission
    m.slurm = o
    write_manifest(dir, m)
    g.job, g.array, g.submission = job, array, submission
    submitted[#submitted + 1] = job
  end
  -- charts when every array has ended, however they ended
  local cargv = { "sbatch", "--parsable", "--job-name=dpprof-" .. ctx.name .. "-collect",
                  "--dependency=afterany:" .. table.concat(submitted, ":"),
                  "--output=" .. dir:gsub("%%", "%%%%") .. "/slurm/collect_%j.out", "--chdir=" .. here, "--ntasks=1" }
  for _, k in ipairs({ "partition", "account", "time" }) do
    if o[k] then cargv[#cargv + 1] = "--" .. k .. "=" .. tostring(o[k]) end
  end
  cargv[#cargv + 1] = collect_script
  local ccode, ctext = command(cargv)
  local collect_job = ccode == 0 and job_id_of(ctext) or nil
  for _, g in ipairs(groups) do g.submission.collect_job_id = collect_job end
  write_manifest(dir, m)
  local what = string.format("%d of %d %s", #todo, #points * n,
                             n > 1 and string.format("runs (%d per point)", n) or #points == 1 and "point" or "points")
  if #groups == 1 and groups[1].tasks.ntasks == 1 then
    local job, array = groups[1].job, groups[1].array
    result.slurm.job_id, result.slurm.tasks = job, array
    say(string.format("sweep %s: %s submitted as Slurm array job %s (tasks %s) -> %s", ctx.name, what, job, array, dir))
  else
    local parts = {}
    for _, g in ipairs(groups) do
      local nt = g.tasks.ntasks
      parts[#parts + 1] = string.format("%s (tasks %s; %d task%s each%s%s)", g.job, g.array, nt, nt == 1 and "" or "s",
                                        g.tasks.cuda and ", 1 GPU a task" or "",
                                        nt > 1 and ": srun -n " .. nt or "")
    end
    result.slurm.job_id, result.slurm.tasks = groups[1].job, groups[1].array
    say(string.format("sweep %s: %s submitted as Slurm array job%s %s -> %s", ctx.name, what, #groups > 1 and "s" or "",
                      table.concat(parts, ", "), dir))
  end
  result.slurm.job_ids, result.slurm.collect_job_id = submitted, collect_job
  if collect_job then
    say(string.format("  job %s collects the results and renders the charts when the array%s end%s", collect_job,
                      #groups > 1 and "s" or "", #groups > 1 and "" or "s"))
  else
    say("  the collect job was not submitted (" .. (ctext:gsub("%s+$", "")) .. "): run dpprof sweep collect "
        .. dir .. " once the array" .. (#groups > 1 and "s have" or " has") .. " ended")
  end
  say("  follow it: dpprof sweep status " .. dir)
  return result
end

---------------------------------------------------------------------------------------------
-- A task

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
local function result_in(file, config_hash)
  local text = dp.read_file(file)
  if not text then return nil end
  local ok, r = pcall(dp.json.decode, text, file)
  if ok and type(r) == "table" and type(r.status) == "string" and type(r.sweep) == "table"
     and r.sweep.config_hash == config_hash then
    return r
  end
end

-- Where each point of the sweep in dir stands: a list of {point (manifest entry), result (its
-- file, when it has one run with its configuration), task = {job_id, task} | nil, state = Slurm's
-- | nil, runs (with repeats: a row as this one per run, without runs)}.
local function survey(dir, m)
  local latest = latest_tasks(m)
  local states = slurm.states(job_ids(m))
  local n = m.repeats or 1
  local rows = {}
  for i, q in ipairs(m.points) do
    local row = { point = q, result = result_in(dir .. "/" .. q.file, q.config_hash) }
    local function place(r, task)
      r.task = latest[task]
      if r.task then r.state = states[r.task.job_id .. "_" .. r.task.task] end
      return r
    end
    if n == 1 then
      place(row, i - 1)
    else
      row.runs = {}
      for k = 1, n do
        row.runs[k] = place({ result = result_in(repeats.run_file(dir, q.name, k), q.config_hash) },
                            repeats.task_of(i, k, n))
      end
      row.task = row.runs[1].task
    end
    rows[i] = row
  end
  return rows
end

local function row_status(row)
  if row.result then return row.result.status end
  if row.runs then
    local done, states = 0, {}
    for _, run in ipairs(row.runs) do
      if run.result then done = done + 1 else states[#states + 1] = row_status(run) end
    end
    return string.format("%d/%d runs%s", done, #row.runs, #states > 0 and ", " .. states[1] or "")
  end
  if not row.task then return "not submitted" end
  if not row.state then return "unknown" end
  if slurm.ACTIVE_STATES[row.state.state] then return row.state.state:lower() end
  return "ended " .. row.state.state
end

local function print_rows(rows, say)
  local table_rows = { { "point", "status", "job", "node", "note" } }
  local counts, order = {}, {}
  for _, row in ipairs(rows) do
    local status = row_status(row)
    if not counts[status] then order[#order + 1] = status end
    counts[status] = (counts[status] or 0) + 1
    local note = ""
    if row.result and row.result.status ~= "ok" then
      note = tostring(row.result.message or ""):gsub("%s+", " "):sub(1, 70)
    elseif not row.result and row.state and not slurm.ACTIVE_STATES[row.state.state] then
      note = "no result file yet: dpprof sweep collect writes one"
    end
    local placement = row.result and type(row.result.sweep) == "table" and row.result.sweep.placement
    if type(placement) ~= "table" then placement = {} end
    local node = placement.host or (row.state and row.state.node) or "-"
    table_rows[#table_rows + 1] = { row.point.name, status,
                                    row.task and (row.task.job_id .. "_" .. row.task.task) or "-", tostring(node), note }
  end
  dp.print_table(table_rows, { false, false, false, false, false }, say)
  local parts = {}
  for _, s in ipairs(order) do parts[#parts + 1] = string.format("%s %d", s, counts[s]) end
  say("points: " .. table.concat(parts, ", "))
end

-- dpprof sweep status DIR: each point's result or Slurm state. Returns the exit status.
function slurm.status(dir, say)
  local m, why = slurm.read_manifest(dir)
  if not m then
    io.stderr:write("dpprof sweep status: ", why, "\n")
    return 2
  end
  local jobs = {}
  for _, s in ipairs(m.submissions) do
    jobs[#jobs + 1] = string.format("%s (tasks %s%s%s)", s.job_id, s.array,
                                    s.ntasks and string.format(", %d tasks each", s.ntasks) or "",
                                    s.collect_job_id and ", collect " .. s.collect_job_id or "")
  end
  say(string.format("sweep %s in %s: %d point%s; Slurm job%s %s", m.name, dir, #m.points, #m.points == 1 and "" or "s",
                    #jobs == 1 and "" or "s", #jobs > 0 and table.concat(jobs, ", ") or "none submitted"))
  print_rows(survey(dir, m), say)
  return 0
end

-- dpprof sweep collect DIR: a result for every point whose task ended without one, from its
-- Slurm end state; the charts once every point has one. Returns the exit status: 0 every point
-- has a result, 1 some have none yet (queued, running, or their end unknown), 2 not a sweep.
function slurm.collect(dir, say)
  local m, why = slurm.read_manifest(dir)
  if not m then
    io.stderr:write("dpprof sweep collect: ", why, "\n")
    return 2
  end
  local note = string.format("pid %d on %s since %s (dpprof sweep collect)", dp.pid(),
                             dp.environment().hostname or "?", os.date("%Y-%m-%d %H:%M:%S"))
  local lock <close>, holder = dp.lock(dir .. "/" .. outdir.LOCK_FILE, note)
  if not lock then
    io.stderr:write("dpprof sweep collect: ", dir, " is in use: ", holder, "\n")
    return 1
  end
  outdir.remove_stale_temps(dir, say)
  local rows = survey(dir, m)
  local n = m.repeats or 1
  local written, waiting = 0, {}
  local points = {}
  -- A result for a task (row: the point's, or one run's) that ended without one, from its end state.
  local function from_state(q, row, file)
    local s = row.state
    local status, meaning = slurm.end_status(s.state)
    local message = string.format("Slurm task %s_%d%s ended %s%s (exit code %s; state from %s); its log: %s",
                                  row.task.job_id, row.task.task, s.node and " on " .. s.node or "", s.state,
                                  meaning and ", " .. meaning or "", tostring(s.exit_code or "?"), s.source,
                                  log_of(dir, row.task.job_id, row.task.task))
    local r = results.failure{ name = q.name, status = status, message = message, config = q.config }
    r = outdir.finish_result(r, { name = q.name, vary = q.vary, resolved = q.config, config_hash = q.config_hash },
                            m.name, { host = s.node, slurm = { job_id = row.task.job_id, array_task_id = row.task.task,
                                                               state = s.state, exit_code = s.exit_code,
                                                               state_source = s.source } })
    local ok, err = outdir.write_result(file, r)
    if not ok then return nil, err end
    row.result = r
    written = written + 1
    say(string.format("%s: %s (%s)", q.name, status, message))
    return r
  end
  local function ended(row) return not row.result and row.state and not slurm.ACTIVE_STATES[row.state.state] end
  for i, row in ipairs(rows) do
    local q = row.point
    if row.runs and not row.result then
      local runs = {}
      for k, run in ipairs(row.runs) do
        if ended(run) then
          local ok, err = from_state(q, run, repeats.run_file(dir, q.name, k))
          if not ok then
            io.stderr:write("dpprof sweep collect: ", err, "\n")
            return 1
          end
        end
        runs[k] = run.result
      end
      if repeats.have(runs, n) == n then
        local r = repeats.combine(runs, n)
        local ok, err = outdir.write_result(dir .. "/" .. q.file, r)
        if not ok then
          io.stderr:write("dpprof sweep collect: ", err, "\n")
          return 1
        end
        row.result = r
      end
    elseif ended(row) then
      local ok, err = from_state(q, row, dir .. "/" .. q.file)
      if not ok then
        io.stderr:write("dpprof sweep collect: ", err, "\n")
        return 1
      end
    end
    if not row.result then waiting[#waiting + 1] = string.format("%s (%s)", q.name, row_status(row)) end
    points[i] = { name = q.name, result = row.result, status = row.result and row.result.status }
  end
  if #waiting > 0 then
    say(string.format("sweep %s: %d result%s written; %d point%s without one yet: %s", m.name, written,
                      written == 1 and "" or "s", #waiting, #waiting == 1 and "" or "s", table.concat(waiting, ", ")))
    say("charts: when every point has a result (dpprof sweep collect " .. dir .. " again)")
    return 1
  end
  outdir.print_summary(m.name, dir, points)
  local ok, err, messages = dp.plot.render_dir(dir)
  for _, msg in ipairs(messages or {}) do say("plot: " .. msg) end
  if ok then say("charts: rendered in " .. dir) else say("charts: not rendered: " .. tostring(err)) end
  return 0
end

return slurm
