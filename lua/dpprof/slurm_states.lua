-- dpprof.slurm_states: where a Slurm sweep's tasks stand, from `sacct` (Slurm's accounting
-- database), else the controller's memory of recent jobs (`scontrol show job`, kept MinJobAge
-- seconds), else the job-completion log (JobCompType=jobcomp/filetxt, its JobCompLoc file).
local dp = require("dpprof")
local shell = require("dpprof.slurm_shell")

local states_of = {}

-- States of a task that has not ended.
states_of.ACTIVE_STATES = { PENDING = true, RUNNING = true, CONFIGURING = true, COMPLETING = true, SUSPENDED = true,
                        REQUEUED = true, REQUEUE_FED = true, REQUEUE_HOLD = true, RESIZING = true, SIGNALING = true,
                        STAGE_OUT = true, STOPPED = true, RESV_DEL_HOLD = true }

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
function states_of.parse_sacct(text, states)
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
function states_of.parse_job_lines(text, states, source)
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
  local code, text = shell.command({ "scontrol", "show", "config" })
  if code ~= 0 then return nil end
  local kind = text:match("\nJobCompType%s*=%s*(%S+)")
  local loc = text:match("\nJobCompLoc%s*=%s*(%S+)")
  if kind == "jobcomp/filetxt" and loc and loc:sub(1, 1) == "/" then return loc end
end

-- The state of every task of the given array jobs that Slurm still knows:
-- {["<job>_<task>"] = {state, exit_code, node, source}}, each from the first source that knows
-- it: sacct, then scontrol (recent jobs), then the job-completion log.
function states_of.states(job_ids)
  local states = {}
  if #job_ids == 0 then return states end
  local code, text = shell.command({ "sacct", "-n", "-P", "-X", "-j", table.concat(job_ids, ","), "-o",
                               "JobID,State,ExitCode,NodeList" })
  if code == 0 then states_of.parse_sacct(text, states) end
  local missing = {}
  for _, job in ipairs(job_ids) do
    code, text = shell.command({ "scontrol", "-o", "show", "job", job })
    if code == 0 then states_of.parse_job_lines(text, states, "scontrol") else missing[#missing + 1] = job end
  end
  if #missing > 0 then
    local file = jobcomp_file()
    local log = file and dp.read_file(file)
    if log then states_of.parse_job_lines(log, states, "jobcomp") end
  end
  return states
end

-- A point's result status for a Slurm end state (a task that left no file), and what the
-- state means, when it says more than its name.
function states_of.end_status(state)
  if state == "OUT_OF_MEMORY" then return "oom", "past its memory limit (slurm.mem)" end
  if state == "TIMEOUT" or state == "DEADLINE" then return "timeout", "past its time limit (slurm.time)" end
  if state == "COMPLETED" then return "crashed", "without writing a result" end
  return "crashed", nil
end

---------------------------------------------------------------------------------------------
-- The manifest

return states_of
