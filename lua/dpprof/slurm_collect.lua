-- dpprof.slurm_collect: `dpprof sweep status` (each point's result or Slurm state) and `dpprof
-- sweep collect` (a result for every task that ended without one, then the charts).
local dp = require("dpprof")
local results = require("dpprof.results")
local repeats = require("dpprof.repeats")
local outdir = require("dpprof.outdir") -- a sweep's out directory, as dpprof.sweep writes it
local states_of = require("dpprof.slurm_states")
local manifest = require("dpprof.slurm_manifest")

local collect = {}

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
  local latest = manifest.latest_tasks(m)
  local states = states_of.states(manifest.job_ids(m))
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
  if states_of.ACTIVE_STATES[row.state.state] then return row.state.state:lower() end
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
    elseif not row.result and row.state and not states_of.ACTIVE_STATES[row.state.state] then
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
function collect.status(dir, say)
  local m, why = manifest.read_manifest(dir)
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

-- A result for a task (row: the point q's, or one of its runs') that ended without one, from
-- its end state, written to file (c: the collect's state: dir, m, say, written). Returns it, or
-- nil and why it could not be written.
local function from_state(c, q, row, file)
  local s = row.state
  local status, meaning = states_of.end_status(s.state)
  local message = string.format("Slurm task %s_%d%s ended %s%s (exit code %s; state from %s); its log: %s",
                                row.task.job_id, row.task.task, s.node and " on " .. s.node or "", s.state,
                                meaning and ", " .. meaning or "", tostring(s.exit_code or "?"), s.source,
                                manifest.log_of(c.dir, row.task.job_id, row.task.task))
  local r = results.failure{ name = q.name, status = status, message = message, config = q.config }
  r = outdir.finish_result(r, { name = q.name, vary = q.vary, resolved = q.config, config_hash = q.config_hash },
                           c.m.name, { host = s.node, slurm = { job_id = row.task.job_id, array_task_id = row.task.task,
                                                                state = s.state, exit_code = s.exit_code,
                                                                state_source = s.source } })
  local ok, err = outdir.write_result(file, r)
  if not ok then return nil, err end
  row.result = r
  c.written = c.written + 1
  c.say(string.format("%s: %s (%s)", q.name, status, message))
  return r
end

-- Whether row's task ended without leaving a result.
local function ended(row) return not row.result and row.state and not states_of.ACTIVE_STATES[row.state.state] end

-- Gives row (a point of the survey) its result where its task, or each of its runs' tasks, has
-- ended: from the end states, and with repeats the point's combined file once every run has
-- one. Returns true, or nil and why a file could not be written.
local function collect_row(c, row)
  local q, n, dir = row.point, c.m.repeats or 1, c.dir
  if row.runs and not row.result then
    local runs = {}
    for k, run in ipairs(row.runs) do
      if ended(run) then
        local ok, err = from_state(c, q, run, repeats.run_file(dir, q.name, k))
        if not ok then return nil, err end
      end
      runs[k] = run.result
    end
    if repeats.have(runs, n) == n then
      local r = repeats.combine(runs, n)
      local ok, err = outdir.write_result(dir .. "/" .. q.file, r)
      if not ok then return nil, err end
      row.result = r
    end
  elseif ended(row) then
    local ok, err = from_state(c, q, row, dir .. "/" .. q.file)
    if not ok then return nil, err end
  end
  return true
end

-- dpprof sweep collect DIR: a result for every point whose task ended without one, from its
-- Slurm end state; the charts once every point has one. Returns the exit status: 0 every point
-- has a result, 1 some have none yet (queued, running, or their end unknown), 2 not a sweep.
function collect.collect(dir, say)
  local m, why = manifest.read_manifest(dir)
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
  local c = { dir = dir, m = m, say = say, written = 0 }
  local waiting, points = {}, {}
  for i, row in ipairs(survey(dir, m)) do
    local ok, err = collect_row(c, row)
    if not ok then
      io.stderr:write("dpprof sweep collect: ", err, "\n")
      return 1
    end
    local q = row.point
    if not row.result then waiting[#waiting + 1] = string.format("%s (%s)", q.name, row_status(row)) end
    points[i] = { name = q.name, result = row.result, status = row.result and row.result.status }
  end
  if #waiting > 0 then
    say(string.format("sweep %s: %d result%s written; %d point%s without one yet: %s", m.name, c.written,
                      c.written == 1 and "" or "s", #waiting, #waiting == 1 and "" or "s", table.concat(waiting, ", ")))
    say("charts: when every point has a result (dpprof sweep collect " .. dir .. " again)")
    return 1
  end
  outdir.print_summary(m.name, dir, points)
  local ok, err, messages = dp.plot.render_dir(dir)
  for _, msg in ipairs(messages or {}) do say("plot: " .. msg) end
  if ok then say("charts: rendered in " .. dir) else say("charts: not rendered: " .. tostring(err)) end
  return 0
end

return collect
