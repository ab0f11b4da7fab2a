-- dpprof.slurm_submit: submits a sweep's points that have no result yet as Slurm job arrays
-- (one per kind of job: an array's tasks share --ntasks) and the job that collects them.
local dp = require("dpprof")
local repeats = require("dpprof.repeats")
local shell = require("dpprof.slurm_shell")
local options = require("dpprof.slurm_options")
local states_of = require("dpprof.slurm_states")
local manifest = require("dpprof.slurm_manifest")

local submit = {}

-- "0-3,5,7-8" for the sorted indices given.
function submit.ranges(indices)
  local parts, i = {}, 1
  while i <= #indices do
    local j = i
    while j < #indices and indices[j + 1] == indices[j] + 1 do j = j + 1 end
    parts[#parts + 1] = i == j and tostring(indices[i]) or (indices[i] .. "-" .. indices[j])
    i = j + 1
  end
  return table.concat(parts, ",")
end

local function write_text(path, text)
  local ok, err = dp.write_file(path, text)
  if not ok then error("dpprof.sweep: " .. err, 0) end
end

-- The submitted job's id from `sbatch --parsable` ("123" or "123;cluster").
local function job_id_of(text)
  return text:match("^%s*(%d+)") or text:match("\n%s*(%d+)%s*$")
end

-- The script each task runs again and its arguments (absolute against here): the session's, or
-- this process's own.
local function script_of(session, here)
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
  return shell.absolute(script, here), args
end

-- The sweep's manifest (sw: the submission's state): the one in its directory when it is of the
-- same points, else a new one; with this submission's fields and points.
local function manifest_of(sw, ctx)
  local points, n = ctx.points, sw.n
  local m = manifest.read_manifest(sw.dir)
  if m then
    local same = #m.points == #points and (m.repeats or 1) == n
    for i, p in ipairs(points) do
      local q = m.points[i]
      same = same and q and q.name == p.name and q.config_hash == p.config_hash
    end
    if not same then
      error(string.format("dpprof.sweep: %s holds a Slurm sweep of other points (its %s); give another out or "
                          .. "remove it", sw.dir, manifest.MANIFEST_FILE), 0)
    end
  else
    m = { format = manifest.MANIFEST_FORMAT, version = manifest.MANIFEST_VERSION, submissions = dp.json.array() }
  end
  m.name, m.out, m.cwd, m.script, m.args, m.call = ctx.name, sw.dir, sw.here, sw.script, dp.json.array(sw.args), ctx.call
  m.dpprof = dp.executable
  m.repeats = n > 1 and n or nil
  m.points = {}
  for i, p in ipairs(points) do
    m.points[i] = { index = i - 1, name = p.name, file = p.name .. ".json", vary = p.vary, config = p.resolved,
                    config_hash = p.config_hash }
  end
  return m
end

-- The submission's state: where it is, what it runs, its checked texts and its manifest.
local function start(ctx)
  local session = ctx.session or {}
  local sw = { here = session.cwd or shell.cwd(), n = ctx.repeats or 1 }
  sw.dir = shell.absolute(ctx.out, sw.here)
  sw.script, sw.args = script_of(session, sw.here)
  shell.check_text("out (the sweep's directory)", sw.dir)
  shell.check_text("the sweep's name", ctx.name)
  shell.check_text("the script's path", sw.script)
  shell.check_text("the working directory", sw.here)
  if #ctx.points * sw.n > manifest.MAX_ARRAY_SIZE then
    error(string.format("dpprof.sweep: %d points%s: more than one Slurm array holds by default (MaxArraySize %d); "
                        .. "split the sweep", #ctx.points, sw.n > 1 and string.format(" x %d runs", sw.n) or "",
                        manifest.MAX_ARRAY_SIZE), 0)
  end
  sw.m = manifest_of(sw, ctx)
  return sw
end

-- What runs (sw.todo: task indices): every point (each run of it) without a kept result, less
-- those whose task has not ended (sw.active: their descriptions); sw.status_of each point's.
local function plan_tasks(sw, ctx)
  local n, m = sw.n, sw.m
  local latest = manifest.latest_tasks(m)
  local states = #m.submissions > 0 and states_of.states(manifest.job_ids(m)) or {}
  sw.todo, sw.active, sw.status_of = {}, {}, {}
  for i, p in ipairs(ctx.points) do
    if ctx.prior[i] then
      sw.status_of[i] = ctx.prior[i].status
    else
      for k = 1, n do
        if not (p.runs and p.runs[k]) then
          local task = repeats.task_of(i, k, n)
          local t = latest[task]
          local s = t and states[t.job_id .. "_" .. t.task]
          if s and states_of.ACTIVE_STATES[s.state] then
            sw.active[#sw.active + 1] = string.format("%s%s (%s_%d %s)", p.name, n > 1 and " run " .. k or "",
                                                      t.job_id, t.task, s.state:lower())
            sw.status_of[i] = sw.status_of[i] or s.state:lower()
          else
            sw.todo[#sw.todo + 1] = task
            sw.status_of[i] = "submitted"
          end
        end
      end
      sw.status_of[i] = sw.status_of[i] or "runs done" -- every run kept: collect writes the point's file
    end
  end
end

-- The sweep's result table before anything is submitted: every point's status and prior result.
local function result_of(sw, ctx)
  local result = { out = ctx.out, name = ctx.name, points = ctx.points, counts = {},
                   slurm = { submitted = #sw.todo, active = #sw.active, manifest = manifest.manifest_path(sw.dir) } }
  for i, p in ipairs(ctx.points) do
    p.status = sw.status_of[i]
    p.result = ctx.prior[i]
    p.skipped = ctx.prior[i] ~= nil
    result.counts[p.status] = (result.counts[p.status] or 0) + 1
  end
  return result
end

-- The tasks to run by what their point's job asks (options.point_tasks): one group per kind,
-- since an array's tasks all get the same --ntasks; fewest tasks first, CPU before GPU.
local function groups_of(sw, points)
  local groups, group_of = {}, {}
  for _, task in ipairs(sw.todo) do
    local tasks = options.point_tasks(points[repeats.task(task, sw.n)].resolved)
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
  return groups
end

-- Writes each group's task script (g.script) and the collect script (sw.collect_script).
local function write_scripts(sw, o)
  local dir = sw.dir
  local ok, err = dp.mkdir_p(dir .. "/slurm")
  if not ok then error("dpprof.sweep: " .. err, 0) end
  local exe = shell.check_text("the dpprof executable's path", dp.executable or "dpprof")
  local scripts = {}
  for _, g in ipairs(sw.groups) do
    local nt = g.tasks.ntasks
    if nt == 1 then
      g.script = dir .. "/slurm/task.sh"
      scripts[g.script] = shell.script_text(
        "dpprof sweep: Slurm array task i runs point i (0-based) of the sweep in the directory below\n"
        .. "(its manifest: " .. manifest.MANIFEST_FILE .. " there)", { exe, "sweep", "task", dir })
    else
      g.script = string.format("%s/slurm/task_%dtasks%s.sh", dir, nt, g.tasks.cuda and "_gpu" or "")
      scripts[g.script] = shell.script_text(string.format(
        "dpprof sweep: Slurm array task i runs point i (0-based) of the sweep in the directory below as\n"
        .. "%d ranks, one srun task each (its manifest: %s there); rank 0 writes the point's result", nt,
        manifest.MANIFEST_FILE), options.srun_argv(o, g.tasks, exe, dir))
    end
  end
  for file, text in pairs(scripts) do write_text(file, text) end
  sw.collect_script = dir .. "/slurm/collect.sh"
  write_text(sw.collect_script, shell.script_text(
    "dpprof sweep: once the array has ended, results for the tasks that left none, and the charts",
    { exe, "sweep", "collect", dir }))
end

-- Submits group g as one array (its job id in g.job), recorded in the manifest at once; raises
-- when sbatch refuses it, naming the arrays submitted before it.
local function submit_array(sw, ctx, o, g)
  local dir, m = sw.dir, sw.m
  local array = submit.ranges(g.todo) .. (o.max_parallel and "%" .. o.max_parallel or "")
  local nt = g.tasks.ntasks
  local argv = { "sbatch", "--parsable", "--job-name=dpprof-" .. ctx.name .. (nt > 1 and "-" .. nt .. "tasks" or ""),
                 "--array=" .. array, "--output=" .. dir:gsub("%%", "%%%%") .. "/slurm/%A_%a.out", "--chdir=" .. sw.here }
  for _, a in ipairs(options.sbatch_options(o, g.tasks)) do argv[#argv + 1] = a end
  argv[#argv + 1] = g.script
  local code, text = shell.command(argv)
  local job = code == 0 and job_id_of(text) or nil
  local submitted = sw.submitted
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
  manifest.write(dir, m)
  g.job, g.array, g.submission = job, array, submission
  submitted[#submitted + 1] = job
end

-- Submits the collect job, run when every array has ended however they ended: its id in
-- sw.collect_job (nil when sbatch refused it, its answer in sw.collect_text).
local function submit_collect(sw, ctx, o)
  local dir = sw.dir
  local argv = { "sbatch", "--parsable", "--job-name=dpprof-" .. ctx.name .. "-collect",
                 "--dependency=afterany:" .. table.concat(sw.submitted, ":"),
                 "--output=" .. dir:gsub("%%", "%%%%") .. "/slurm/collect_%j.out", "--chdir=" .. sw.here, "--ntasks=1" }
  for _, k in ipairs({ "partition", "account", "time" }) do
    if o[k] then argv[#argv + 1] = "--" .. k .. "=" .. tostring(o[k]) end
  end
  argv[#argv + 1] = sw.collect_script
  local code, text = shell.command(argv)
  sw.collect_job, sw.collect_text = code == 0 and job_id_of(text) or nil, text
  for _, g in ipairs(sw.groups) do g.submission.collect_job_id = sw.collect_job end
  manifest.write(dir, sw.m)
end

-- Says what was submitted and how to follow it; the job ids into result.slurm.
local function report(sw, ctx, result)
  local say, groups, n, points = ctx.say, sw.groups, sw.n, ctx.points
  local what = string.format("%d of %d %s", #sw.todo, #points * n,
                             n > 1 and string.format("runs (%d per point)", n) or #points == 1 and "point" or "points")
  result.slurm.job_id, result.slurm.tasks = groups[1].job, groups[1].array
  if #groups == 1 and groups[1].tasks.ntasks == 1 then
    say(string.format("sweep %s: %s submitted as Slurm array job %s (tasks %s) -> %s", ctx.name, what, groups[1].job,
                      groups[1].array, sw.dir))
  else
    local parts = {}
    for _, g in ipairs(groups) do
      local nt = g.tasks.ntasks
      parts[#parts + 1] = string.format("%s (tasks %s; %d task%s each%s%s)", g.job, g.array, nt, nt == 1 and "" or "s",
                                        g.tasks.cuda and ", 1 GPU a task" or "",
                                        nt > 1 and ": srun -n " .. nt or "")
    end
    say(string.format("sweep %s: %s submitted as Slurm array job%s %s -> %s", ctx.name, what, #groups > 1 and "s" or "",
                      table.concat(parts, ", "), sw.dir))
  end
  result.slurm.job_ids, result.slurm.collect_job_id = sw.submitted, sw.collect_job
  if sw.collect_job then
    say(string.format("  job %s collects the results and renders the charts when the array%s end%s", sw.collect_job,
                      #groups > 1 and "s" or "", #groups > 1 and "" or "s"))
  else
    say("  the collect job was not submitted (" .. (sw.collect_text:gsub("%s+$", "")) .. "): run dpprof sweep collect "
        .. sw.dir .. " once the array" .. (#groups > 1 and "s have" or " has") .. " ended")
  end
  say("  follow it: dpprof sweep status " .. sw.dir)
end

-- Submits the points of a sweep that have no result yet (ctx from dpprof.sweep: out, name,
-- points, prior, call, options, session, timeout, say, quiet). Returns the sweep's result table
-- with slurm = {job_id, collect_job_id, tasks, submitted, active, manifest}.
function submit.submit(ctx)
  local sw = start(ctx)
  plan_tasks(sw, ctx)
  local say = ctx.say
  local result = result_of(sw, ctx)
  if #sw.active > 0 then
    say(string.format("sweep %s: %d point%s still queued or running, not submitted again: %s", ctx.name, #sw.active,
                      #sw.active == 1 and " is" or "s are", table.concat(sw.active, ", ")))
  end
  if #sw.todo == 0 then
    manifest.write(sw.dir, sw.m)
    local kept = #ctx.points - #sw.active
    say(string.format("sweep %s: nothing to submit (%d point%s with a result, %d queued or running) -> %s", ctx.name,
                      kept, kept == 1 and "" or "s", #sw.active, sw.dir))
    return result
  end
  if not shell.have("sbatch") then
    error("dpprof.sweep: backend=\"slurm\": sbatch is not on PATH (run this on a Slurm login node, or "
          .. "apt-get install slurm-client)", 0)
  end
  local o = ctx.options
  sw.groups = groups_of(sw, ctx.points)
  write_scripts(sw, o)
  manifest.write(sw.dir, sw.m) -- the manifest first: a task that starts at once reads it
  sw.submitted = {}
  for _, g in ipairs(sw.groups) do submit_array(sw, ctx, o, g) end
  submit_collect(sw, ctx, o)
  report(sw, ctx, result)
  return result
end

return submit
