-- dpprof.sweep: the cartesian product of a few variables, each point run in its own child process.
--
--   dp.sweep{ base={...experiment config...}, vary={method={...}, seq_len={...}, ...},
--             out="results/<dir>", name=, timeout=seconds, resume=true, retry_failed=true,
--             trace=false, order={keys...}, run=function(cfg, vary) ... end, isolate=true, quiet=false,
--             parallel=nil, backend="local", slurm={...}, repeats=1, combined=false }
--   -> {out=, name=, points={{name=, file=, status=, result=, skipped=}}, counts={status=n}}
--
-- Points are named by their values in key order, e.g. "method=ghost,seq_len=4096"; keys are
-- sorted unless `order` lists them (the first key varies slowest). Each point runs through
-- dp.isolate (timeout: per point), one progress line per point says how it ended, the elapsed time
-- and an ETA, and its result is written to <out>/<point>.json at once (temporary file + rename),
-- with sweep={name, vary, config, config_hash}. A rerun with the same out skips points whose file
-- holds status ok or oom (resume); points that errored, crashed or timed out run again unless
-- retry_failed=false. A kept file must have been run with the point's resolved configuration
-- (config_hash): otherwise the sweep refuses, naming what changed (resume=false runs all again).
-- One point's failure never stops the sweep; a point whose configuration dp.experiment refuses
-- (checked for every point before the first runs) stops it before it starts, and so does a file
-- name too long for out. The sweep holds a lock on out (a second sweep is refused); a result that
-- cannot be written, twice, stops the sweep with an error holding it. A summary table is
-- printed at the end. The default
-- run is dp.experiment; `run` replaces it (tests, custom measurements): it gets the point's config
-- and its vary table and returns a table. Default out: results/run_<timestamp>.
--
-- parallel = N runs up to N points at once, each still in a child of its own; parallel = "gpus"
-- runs one per GPU. On CUDA each child sees only its own GPU; on the CPU the thread budget is
-- split so points never share a core (dpprof.parallel). Files, resume and the lock are as for one
-- at a time; progress lines come as points finish. backend = "slurm" (with slurm = {partition=,
-- account=, time=, gpus_per_task=, cpus_per_task=, mem=, max_parallel=, extra={...}, gpus_per_node=,
-- mpi=}) submits the points as one Slurm job array instead of running them (dpprof.slurm; `dpprof
-- sweep submit`); a point distributed on a real device is an N-task job there (srun), and refused
-- by a local sweep.
-- Every result records where it ran: sweep.placement = {host, slot, slots, threads,
-- cuda_visible_devices, slurm} (the fields that apply).
--
-- combined = true also writes <out>/memory_profile_results.json (or the .json name given) when the
-- points are done: one JSON object, every point's result under its point name (local backend).
--
-- repeats = N runs each point N times, each run one more job of the sweep (in a fresh process
-- unless isolate=false; side by side with parallel; one more array task on Slurm), kept in
-- <out>/runs/ as it ends; the point's file is its first ok run with `repeats` added: every run's
-- timing, peak and placement, and their spread (dpprof.repeats). A rerun keeps a point whose
-- file has as many runs as asked for, and the runs done of one that has not.
local dp = require("dpprof")
local json = dp.json
local results = require("dpprof.results")
local options = require("dpprof.options")
local parallel = require("dpprof.parallel")
local repeats_of = require("dpprof.repeats")
local outdir = require("dpprof.outdir")
local sweep_points = require("dpprof.sweep_points")
local experiment = require("dpprof.experiment")
local fit = require("dpprof.fit")
local slurm = require("dpprof.slurm")

local sweep = {}

-- A sweep's out directory (its lock, a point's result file, the summary) is dpprof.outdir's,
-- which dpprof.slurm's collect writes too; its names stay reachable here.
sweep.LOCK_FILE = outdir.LOCK_FILE
sweep.finish_result = outdir.finish_result
sweep.write_result = outdir.write_result
sweep.remove_stale_temps = outdir.remove_stale_temps
sweep.describe = outdir.describe
sweep.print_summary = outdir.print_summary
local plain, finish_result, write_result = outdir.plain, outdir.finish_result, outdir.write_result
local describe, print_summary = outdir.describe, outdir.print_summary

local OPTION_KEYS = options.keys("sweep") -- dp.sweep's own options: the schema's sweep section

-- The combined results file a sweep writes with combined = true (the name users of the earlier
-- PyTorch tooling look for): every point's result in one JSON object, keyed by point name.
sweep.COMBINED_FILE = "memory_profile_results.json"

-- What a `dpprof sweep` command (dpprof.cli) asks of the sweeps of the script it runs, or nil:
-- {mode = "submit" | "resubmit" | "task", call =, dir =, index =, slurm =, script =, args =}
-- (dpprof.slurm says what each mode does).
sweep.session = nil

-- dp.sweep calls in this process so far: a Slurm sweep's manifest names its sweep by this count.
local calls = 0

-- What a Slurm task raises once its point's result is written, to end the script there.
sweep.TASK_DONE = setmetatable({}, { __tostring = function() return "dpprof.sweep: the Slurm task's point is done" end })

-- The points of a sweep and where its vary keys land (dpprof.sweep_points).
sweep.KEYS = sweep_points.KEYS
sweep.safe_name = sweep_points.safe_name
sweep.point_name = sweep_points.point_name
sweep.points = sweep_points.points

local function format_duration(s)
  if s < 60 then return string.format("%.1f s", s) end
  if s < 3600 then return string.format("%d min %02d s", math.floor(s / 60), math.floor(s % 60)) end
  return string.format("%d h %02d min", math.floor(s / 3600), math.floor(s % 3600 / 60))
end


-- The experiment; a plan point that does not fit its card, or fits only with checkpointing, also
-- gets plan.checkpoint_advice: which setting makes it fit, at what step time (dpprof.fit).
local function default_run(cfg)
  local r = experiment.run(cfg)
  if r.status == "ok" and r.predicted then
    local ok, advice = pcall(fit.checkpoint_advice, cfg, r)
    if ok and advice then
      r.plan.checkpoint_advice = advice
    elseif not ok then
      io.stderr:write(string.format("dpprof.sweep: point %s: no checkpointing advice: %s\n", tostring(cfg.name),
                                    dp.error_text(advice)))
    end
  end
  return r
end

-- Runs fn(cfg, vary) in this process (isolate=false): a raised error becomes status "error".
local function run_here(fn, cfg, vary)
  local ok, r = xpcall(fn, function(e) return debug.traceback(dp.error_text(e), 2) end, cfg, vary)
  if not ok then return { status = "error", message = r } end
  if type(r) ~= "table" then return { status = "ok", value = r } end
  if r.status == nil then r.status = "ok" end
  return r
end

-- The configuration a point resolves to, as recorded for resume: for the default run the
-- experiment's normalised configuration (every default filled in) less what does not change the
-- measurement (its name and trace file) and what cannot be compared (callbacks); for a custom
-- run, the point's configuration less functions.
local function resolved_config(p, default_config)
  local c = plain(default_config or p.config)
  if default_config then c.name, c.trace, c.on = nil, nil, nil end
  return c
end

-- Flattens a configuration into {"a.b.c" = "value"} (JSON text of each leaf).
local function flatten(t, prefix, out)
  out = out or {}
  if type(t) ~= "table" or json.is_null(t) then
    out[prefix] = json.is_null(t) and "null" or json.encode(t, { nonfinite = "string" })
    return out
  end
  for k, v in pairs(t) do flatten(v, prefix == "" and tostring(k) or (prefix .. "." .. tostring(k)), out) end
  return out
end

-- What differs between two configurations: "model.seq_len 32 -> 64" (at most three, then a count).
local function config_changes(old, new)
  local a, b = flatten(old, ""), flatten(new, "")
  local keys, seen = {}, {}
  for k in pairs(a) do keys[#keys + 1], seen[k] = k, true end
  for k in pairs(b) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys)
  local changes = {}
  for _, k in ipairs(keys) do
    if a[k] ~= b[k] then changes[#changes + 1] = string.format("%s %s -> %s", k, a[k] or "(absent)", b[k] or "(absent)") end
  end
  if #changes > 3 then changes = { changes[1], changes[2], changes[3], string.format("%d more", #changes - 3) } end
  return table.concat(changes, ", ")
end

-- The result a rerun keeps for a point, or nil to run it: a file whose status is ok or oom (any
-- status with retry_failed=false). A kept result must have been run with this point's resolved
-- configuration; when it was not, returns nil and what changed.
local function done_before(p, retry_failed)
  local text = dp.read_file(p.file)
  if not text then return nil end
  local ok, r = pcall(json.decode, text, p.file)
  if not ok or type(r) ~= "table" or type(r.status) ~= "string" then return nil end
  if not (r.status == "ok" or r.status == "oom" or not retry_failed) then return nil end
  local s = type(r.sweep) == "table" and r.sweep or {}
  if s.config_hash == p.config_hash then
    local rep = type(r.repeats) == "table" and r.repeats or {}
    local runs = math.type(rep.n) == "integer" and rep.n or 1
    if r.status == "ok" and runs < p.repeats then return nil end -- fewer runs than asked for now
    for _, run in ipairs(retry_failed and type(rep.runs) == "table" and rep.runs or {}) do
      if type(run) == "table" and run.status ~= "ok" and run.status ~= "oom" then return nil end -- a run to retry
    end
    return r
  end
  if type(s.config) ~= "table" or type(s.config_hash) ~= "string" then
    return nil, "its file records no configuration (an older dpprof wrote it)"
  end
  return nil, config_changes(s.config, p.resolved)
end

-- The error that stops a sweep whose result could not be written to file: its message says what
-- failed and where, what was done and how to go on; `result` keeps the measurement not written.
local function write_failure(p, r, err, points, out, file)
  local written = 0
  for _, q in ipairs(points) do if q.result then written = written + 1 end end
  local left = #points - written - 1
  local message = string.format(
    "dpprof.sweep: writing the result of point %s (%s) to %s failed twice: %s. The sweep stopped there: %d "
    .. "point%s finished before it and %s kept in %s; %d point%s did not run; the unwritten result is in this "
    .. "error's `result`. Free space in or fix %s and run the sweep again to resume.",
    p.name, describe(r), file, err, written, written == 1 and "" or "s", written == 1 and "is" or "are", out,
    left, left == 1 and "" or "s", out)
  return setmetatable({ message = message, result = r, point = p.name, points = points },
                      { __tostring = function(e) return e.message end })
end

-- The result of a sweep call that a `dpprof sweep` command passes over (another call of the
-- script is the one it acts on).
local function passed_over(out, name)
  return { out = out, name = name, points = {}, counts = {}, passed_over = true }
end


-- dp.sweep's options checked into the sweep's state: base, vary, run, timeout, out, name, resume,
-- retry_failed, isolate, repeats, say, session and backend (errors point at dp.sweep's caller).
local function sweep_options(opts)
  if type(opts) ~= "table" then error("dpprof.sweep: expects a table of options", 3) end
  for k in pairs(opts) do
    if not dp.contains(OPTION_KEYS, k) then
      error(string.format("dpprof.sweep: unknown key '%s' (valid: %s)", tostring(k), table.concat(OPTION_KEYS, ", ")), 3)
    end
  end
  local sw = { opts = opts, base = opts.base or {}, vary = opts.vary or {}, run = opts.run or default_run }
  if type(sw.run) ~= "function" then error("dpprof.sweep: run must be a function(cfg, vary)", 3) end
  local comb = opts.combined
  if comb ~= nil and type(comb) ~= "boolean" and not (type(comb) == "string" and comb:match("^[^/]+%.json$")) then
    error(string.format("dpprof.sweep: combined must be true, false or a file name ending in .json (no '/'), got %s",
                        type(comb) == "string" and "\"" .. comb .. "\"" or type(comb)), 3)
  end
  sw.timeout = opts.timeout or 0
  if type(sw.timeout) ~= "number" or sw.timeout < 0 then error("dpprof.sweep: timeout must be seconds >= 0 (0: none)", 3) end
  local out = opts.out or ("results/run_" .. os.date("%Y%m%d_%H%M%S"))
  if type(out) ~= "string" or out:gsub("/+$", "") == "" then
    error("dpprof.sweep: out must name a directory (got " .. (type(out) == "string" and "\"" .. out .. "\"" or type(out)) .. ")", 3)
  end
  sw.out = out:gsub("/+$", "")
  sw.name = opts.name or sw.out:match("([^/]+)$") or sw.out
  sw.resume, sw.retry_failed, sw.isolate = opts.resume ~= false, opts.retry_failed ~= false, opts.isolate ~= false
  local rok, repeats = pcall(repeats_of.count, opts.repeats)
  if not rok then error(repeats, 3) end
  sw.repeats = repeats
  sw.say = opts.quiet and function() end or function(...) print(...) io.stdout:flush() end
  sw.session = sweep.session
  sw.backend = sw.session and "slurm" or opts.backend or "local"
  if sw.backend ~= "local" and sw.backend ~= "slurm" then
    error(string.format("dpprof.sweep: unknown backend '%s' (valid: local, slurm)", tostring(sw.backend)), 3)
  end
  if opts.slurm ~= nil and type(opts.slurm) ~= "table" then error("dpprof.sweep: slurm must be a table of options", 3) end
  if opts.parallel ~= nil and not sw.isolate then
    error("dpprof.sweep: parallel needs isolated points (isolate=false runs them in this process, one at a time)", 3)
  end
  return sw
end

-- A Slurm sweep's options (sw.slurm), and its out and name refused before out is made when the
-- generated scripts could not hold them.
local function slurm_setup(sw)
  local sok, checked = pcall(slurm.options, sw.opts.slurm, sw.session and sw.session.slurm)
  if not sok then error(checked, 3) end
  sw.slurm = checked
  sok, checked = pcall(function()
    slurm.check_text("out (the sweep's directory)", sw.out)
    slurm.check_text("the sweep's name", sw.name)
  end)
  if not sok then dp.refuse(dp.error_text(checked)) end
end

-- Each point's resolved configuration and its hash: a point the experiment would refuse (a misspelt
-- method or key, a model that cannot be built) stops the sweep before any point runs, rather than
-- after the hours the points before it took.
local function resolve_points(sw, points)
  local checked = sw.run == default_run
  for _, p in ipairs(points) do
    local resolved
    if checked then
      -- a point distributed on a real device is never a rank of this process's world: on Slurm
      -- it is a job of its own world_size ranks (srun), checked as such ("launch"); locally refused
      local cok, cerr = pcall(experiment.config, p.config, "launch")
      if not cok then dp.refuse(string.format("dpprof.sweep: point %s: %s", p.name, dp.error_text(cerr))) end
      if sw.backend ~= "slurm" and cerr.distributed and cerr.device ~= "plan" then -- a local point is one child process
        dp.refuse(string.format("dpprof.sweep: point %s: distributed on device '%s': a local sweep's point is one "
                                .. "process; submit the sweep to Slurm (backend = \"slurm\": each such point an "
                                .. "N-task job, docs/cluster.md), run the experiment itself under mpirun or srun, or "
                                .. "plan it (device = \"plan\")", p.name, tostring(cerr.device)))
      end
      resolved = cerr
    end
    p.resolved = resolved_config(p, resolved)
    if sw.backend == "slurm" then
      local tok, terr = pcall(slurm.check_tasks, sw.slurm, slurm.point_tasks(p.resolved), p.name)
      if not tok then dp.refuse(dp.error_text(terr)) end
    end
    local hok, hash = pcall(results.config_hash, p.resolved)
    if not hok then
      error(string.format("dpprof.sweep: point %s: its configuration cannot be recorded: %s", p.name,
                          dp.error_text(hash)), 3)
    end
    p.config_hash = hash
  end
end

-- Every file a point writes must be nameable in out: checked before the first point runs.
local function check_file_names(sw, points)
  local name_max = dp.name_max(sw.out)
  for _, p in ipairs(points) do
    local longest = p.name .. (sw.repeats > 1 and ".run" .. sw.repeats or "") .. (sw.opts.trace and ".trace.json" or ".json")
    if #longest > name_max then
      error(string.format("dpprof.sweep: point %s: its file name '%s' is %d bytes, longer than the %d %s allows; "
                          .. "shorten the vary values or give fewer keys", p.name, longest, #longest, name_max, sw.out), 3)
    end
  end
end

-- The configuration of run k of point p (its trace beside its file).
local function prepare(sw, p, k)
  p.file = sw.out .. "/" .. p.name .. ".json"
  local cfg = p.config
  if sw.run == default_run then
    cfg.name = p.name
    if sw.opts.trace then
      cfg.trace = (sw.repeats > 1 and repeats_of.run_file(sw.out, p.name, k) or p.file):gsub("%.json$", ".trace.json")
    end
  end
  return cfg
end

-- Writes a task's result to file, or stops the task naming the point.
local function write_task_result(file, r, p)
  local wok, werr = write_result(file, r)
  if not wok then error(string.format("dpprof.sweep: the result of point %s could not be written: %s", p.name, werr), 4) end
end

-- A Slurm array task runs one point, writes its file and ends the script (tasks of one array run side
-- by side, each on its own file: no lock). Raises sweep.TASK_DONE when done.
local function run_task(sw, points)
  local session, out = sw.session, sw.out
  local n = session.manifest.repeats or 1
  local i, k = repeats_of.task(session.index, n)
  local tok, p = pcall(slurm.task_point, session, points, i)
  if not tok then
    -- the point's file says why, or collect would only see a task that ended without one
    local q = session.manifest.points[i]
    if q then
      local r = results.failure{ name = q.name, status = "error", message = p, config = q.config }
      write_result(out .. "/" .. q.file, finish_result(r, { name = q.name, vary = q.vary, resolved = q.config,
                                                            config_hash = q.config_hash }, sw.name,
                                                       (slurm.task_placement(sw.host))))
    end
    error(p, 3)
  end
  local cfg = prepare(sw, p, k)
  local placement, threads = slurm.task_placement(sw.host)
  local r
  if slurm.point_tasks(p.resolved).ntasks > 1 then
    -- an N-task point: this process is one of the ranks srun started, so the point runs here
    -- (a child would not be the launcher's rank); rank 0's result, which carries every rank's
    -- peaks, is the point's. Slurm's time limit, not the sweep's timeout, bounds it.
    if threads then dp.threads(threads) end
    r = run_here(sw.run, cfg, p.vary)
    local rok, rank = pcall(dp.dist.rank)
    if not rok then rank = math.tointeger(tonumber(os.getenv("SLURM_PROCID") or "")) or 0 end
    if rank ~= 0 then error(sweep.TASK_DONE, 0) end
  else
    r = dp.isolate(sw.run, cfg, p.vary, { timeout = sw.timeout, threads = threads })
  end
  r = finish_result(r, p, sw.name, placement)
  -- a repeated point's run goes to its own file; the task that finds every run there writes the
  -- point's (each task writes its run before it looks, so the last one to end sees them all)
  write_task_result(n > 1 and repeats_of.run_file(out, p.name, k) or p.file, r, p)
  sw.say(string.format("[%d/%d] %s%s: %s", i, #points, p.name, n > 1 and string.format(" run %d/%d", k, n) or "",
                       describe(r)))
  if n > 1 then
    local runs = repeats_of.kept(out, p.name, n, p.config_hash, false)
    runs[k] = r
    if repeats_of.have(runs, n) == n then
      local all = repeats_of.combine(runs, n)
      write_task_result(p.file, all, p)
      sw.say(string.format("%s: %s", p.name, describe(all)))
    end
  end
  error(sweep.TASK_DONE, 0)
end

-- What a rerun keeps (resume): each point's earlier result (prior[i]) or the runs a repeated point
-- has done; returns prior and the number of runs left. Refuses files run with another configuration.
local function find_prior(sw, points)
  local prior, stale, to_run = {}, {}, 0
  for i, p in ipairs(points) do
    p.file = sw.out .. "/" .. p.name .. ".json"
    p.repeats = sw.repeats
    if sw.resume then
      local why
      prior[i], why = done_before(p, sw.retry_failed)
      if why then stale[#stale + 1] = string.format("point %s: %s", p.name, why) end
    end
    if not prior[i] then
      -- the runs a repeated point has done already (each kept in its own file)
      p.runs = sw.repeats > 1 and sw.resume and repeats_of.kept(sw.out, p.name, sw.repeats, p.config_hash, sw.retry_failed) or {}
      to_run = to_run + sw.repeats - repeats_of.have(p.runs, sw.repeats)
    end
  end
  if #stale > 0 then
    error(string.format("dpprof.sweep: %s holds results run with another configuration, which this sweep will not "
                        .. "reuse: %s%s. To start afresh give another out, remove %s, or pass resume=false to run "
                        .. "every point again", sw.out, stale[1],
                        #stale > 1 and string.format(" (and %d more point%s)", #stale - 1, #stale > 2 and "s" or "") or "",
                        sw.out), 3)
  end
  return prior, to_run
end

-- The progress of a local sweep: each point's tag, the runs done and their time, for the ETA.
local function new_progress(sw, points, to_run)
  local width = #tostring(#points)
  return { points = points, to_run = to_run, ran = 0, ran_time = 0, start = dp.clock(),
           tag = function(i) return string.format("[%" .. width .. "d/%d] %s", i, #points, points[i].name) end }
end

-- A repeated point's runs are all in: its file, from them, then one line.
local function complete(sw, pg, i)
  local p = pg.points[i]
  local r = repeats_of.combine(p.runs, sw.repeats)
  local wok, werr = write_result(p.file, r)
  if not wok then error(write_failure(p, r, werr, pg.points, sw.out, p.file), 0) end
  sw.say(string.format("%s: %s", pg.tag(i), describe(r)))
  p.result = r
end

-- A job's child has ended (run k of point i): its file is written at once, then one progress line;
-- a repeated point's own file once its last run is in.
local function finished(sw, pg, job, r, took, placement)
  local i, k, repeats = job.point, job.run, sw.repeats
  local p = pg.points[i]
  r = finish_result(r, p, sw.name, placement)
  local file = repeats > 1 and repeats_of.run_file(sw.out, p.name, k) or p.file
  local wok, werr = write_result(file, r)
  if not wok then error(write_failure(p, r, werr, pg.points, sw.out, file), 0) end
  pg.ran, pg.ran_time = pg.ran + 1, pg.ran_time + took
  local left = pg.to_run - pg.ran
  sw.say(string.format("%s%s: %s (%s) | elapsed %s, ETA %s", pg.tag(i),
                       repeats > 1 and string.format(" run %d/%d", k, repeats) or "", describe(r), format_duration(took),
                       format_duration(dp.clock() - pg.start),
                       left > 0 and format_duration(pg.ran_time / pg.ran * left / (sw.plan and sw.plan.slots or 1))
                       or "done"))
  if repeats == 1 then
    p.result = r
    return
  end
  p.runs[k] = r
  if repeats_of.have(p.runs, repeats) == repeats then complete(sw, pg, i) end
end

-- The jobs left ({point =, run =}): points done before are taken as they are, a repeated point's
-- kept runs are not run again.
local function jobs_of(sw, pg, prior)
  local jobs = {}
  for i, p in ipairs(pg.points) do
    if prior[i] then
      p.result = prior[i]
      p.skipped = true
      sw.say(string.format("%s: %s (done before, skipped)", pg.tag(i), prior[i].status))
    else
      local kept = repeats_of.have(p.runs, sw.repeats)
      if kept > 0 then sw.say(string.format("%s: %d of %d runs done before, kept", pg.tag(i), kept, sw.repeats)) end
      if kept == sw.repeats then complete(sw, pg, i) end
      for k = 1, sw.repeats do
        if not p.runs[k] then jobs[#jobs + 1] = { point = i, run = k } end
      end
    end
  end
  return jobs
end

-- Runs the jobs here: side by side in the parallel plan's slots, or one at a time (each in a child
-- of its own unless isolate=false).
local function run_jobs(sw, pg, jobs)
  local points, plan = pg.points, sw.plan
  if plan then
    local placements, started = {}, {}
    parallel.run(plan, jobs, function(job, slot)
      local options, placement = parallel.slot_options(plan, slot, sw.timeout)
      placement.host = sw.host
      placements[job], started[job] = placement, dp.clock()
      local p = points[job.point]
      return dp.isolate_start(sw.run, prepare(sw, p, job.run), p.vary, options)
    end, function(job, r)
      finished(sw, pg, job, r, dp.clock() - started[job], placements[job])
    end)
    return
  end
  for _, job in ipairs(jobs) do
    local p = points[job.point]
    local cfg = prepare(sw, p, job.run)
    local t0 = dp.clock()
    local r
    if sw.isolate then
      r = dp.isolate(sw.run, cfg, p.vary, { timeout = sw.timeout })
    else
      r = run_here(sw.run, cfg, p.vary)
    end
    finished(sw, pg, job, r, dp.clock() - t0, { host = sw.host })
  end
end

-- The sweep's opening line: points, runs to run, the parallel plan, out.
local function say_start(sw, points, to_run)
  local plan, repeats = sw.plan, sw.repeats
  sw.say(string.format("sweep %s: %d point%s (%d %s%s) -> %s", sw.name, #points, #points == 1 and "" or "s", to_run,
                       repeats > 1 and string.format("run%s to run, %d per point", to_run == 1 and "" or "s", repeats)
                       or "to run",
                       plan and string.format(", %d at a time%s, %d thread%s each", plan.slots,
                                              plan.gpus and " on GPUs " .. table.concat(plan.gpus, ",") or "",
                                              plan.threads, plan.threads == 1 and "" or "s") or "", sw.out))
end

-- The end of a local sweep: the counts by status, the combined file (combined = true or a file
-- name: every point's result in one more file beside theirs) and the summary table.
local function finish_sweep(sw, points)
  local counts = {}
  for _, p in ipairs(points) do
    p.status = p.result.status
    counts[p.status] = (counts[p.status] or 0) + 1
  end
  local opts = sw.opts
  if opts.combined then
    local all = {}
    for _, p in ipairs(points) do all[p.name] = p.result end
    local file = sw.out .. "/" .. (type(opts.combined) == "string" and opts.combined or sweep.COMBINED_FILE)
    local wok, werr = write_result(file, all)
    if not wok then sw.say("dpprof.sweep: the combined results file was not written: " .. werr) end
  end
  if not opts.quiet then print_summary(sw.name, sw.out, points) end
  return { out = sw.out, name = sw.name, points = points, counts = counts }
end

function sweep.run(opts)
  local sw = sweep_options(opts)
  calls = calls + 1
  local call, session = calls, sw.session
  -- a `dpprof sweep` command for one sweep of a script passes the others over; its sweep's files
  -- are where the command says (the script's own default out may hold a timestamp)
  if session and session.call and session.call ~= call then return passed_over(sw.out, sw.name) end
  if session then session.reached = true end
  if session and session.dir then sw.out = session.dir end
  if sw.backend == "slurm" then slurm_setup(sw) end
  local points = sweep.points(sw.base, sw.vary, opts.order)
  resolve_points(sw, points)
  if sw.backend == "local" then
    local pok, planned = pcall(parallel.plan, opts.parallel, points)
    if not pok then error(planned, 2) end
    sw.plan = planned
  end
  local ok, err = dp.mkdir_p(sw.repeats > 1 and sw.out .. "/" .. repeats_of.DIR or sw.out)
  if not ok then error("dpprof.sweep: " .. err, 2) end
  check_file_names(sw, points)
  sw.host = dp.environment().hostname or "unknown"
  if session and session.mode == "task" then run_task(sw, points) end
  -- One sweep at a time in a directory: a second one would overwrite the first one's files.
  local note = string.format("pid %d on %s since %s (sweep '%s')", dp.pid(), sw.host, os.date("%Y-%m-%d %H:%M:%S"),
                             sw.name)
  local lock <close>, holder = dp.lock(sw.out .. "/" .. sweep.LOCK_FILE, note)
  if not lock then
    error(string.format("dpprof.sweep: %s is in use by another sweep: %s; wait for it to end or give another out",
                        sw.out, holder), 2)
  end
  sweep.remove_stale_temps(sw.out, sw.say)
  local prior, to_run = find_prior(sw, points)
  if sw.backend == "slurm" then
    local sok, submitted = pcall(slurm.submit, {
      out = sw.out, name = sw.name, points = points, prior = prior, call = call, options = sw.slurm,
      session = session, timeout = sw.timeout, say = sw.say, quiet = opts.quiet, repeats = sw.repeats })
    if not sok then error(submitted, 2) end
    return submitted
  end
  say_start(sw, points, to_run)
  local pg = new_progress(sw, points, to_run)
  run_jobs(sw, pg, jobs_of(sw, pg, prior))
  return finish_sweep(sw, points)
end

return sweep
