-- dpprof.repeats: a sweep point run N times (dp.sweep{repeats = N}), each run one more job of the
-- sweep: one after another, side by side with parallel = N, or one more task of a Slurm array.
--
--   repeats.jobs(indices, n) -> {{point = i, run = k}, ...}   the runs of the points listed
--   repeats.task(t, n) -> point, run                          Slurm array task t's point and run
--   repeats.run_file(out, name, k) -> path                    where run k of a point is kept
--   repeats.combine(runs, n) -> result                        the point's file from its n runs
--
-- Each run's result is written at once to <out>/runs/<point>.run<k>.json (a full result, sweep
-- fields and placement included; the charts read only the top of out), so a sweep stopped half
-- way, a resumed one and the tasks of a Slurm array each keep the runs done. The point's own file
-- is written when its last run ends: the first ok run's result (else the first run's) with
-- `repeats` = {n, runs = every run's record, avg_ms = {median, min, max} over the ok runs,
-- peak_bytes = {min, max}} (docs/results.md, "Repeats").
local dp = require("dpprof")
local json = dp.json
local results = require("dpprof.results")

local repeats = {}

-- The folder of out that holds the runs of repeated points.
repeats.DIR = "runs"

-- Checks a sweep's repeats option; returns the count.
function repeats.count(n)
  n = n or 1
  if math.type(n) ~= "integer" or n < 1 then
    error("dpprof.sweep: repeats must be an integer >= 1 (runs of each point), got " .. tostring(n), 0)
  end
  return n
end

function repeats.run_file(out, name, k)
  return string.format("%s/%s/%s.run%d.json", out, repeats.DIR, name, k)
end

-- The name of run k's file (what must fit the file system's name limit).
function repeats.run_name(name, k) return string.format("%s.run%d.json", name, k) end

function repeats.jobs(indices, n)
  local jobs = {}
  for _, i in ipairs(indices) do
    for k = 1, n do jobs[#jobs + 1] = { point = i, run = k } end
  end
  return jobs
end

-- Array task t (0-based) of a sweep with n runs per point: its point (1-based) and run.
function repeats.task(t, n) return t // n + 1, t % n + 1 end

-- The array task (0-based) of run k of point i (1-based).
function repeats.task_of(i, k, n) return (i - 1) * n + (k - 1) end

-- What each run keeps in the point's `repeats.runs`.
local function run_record(r)
  local t = type(r.timing) == "table" and r.timing or {}
  local m = type(r.memory) == "table" and r.memory or {}
  local sw = type(r.sweep) == "table" and r.sweep or {}
  local message = r.status ~= "ok" and type(r.message) == "string" and r.message:match("^[^\n]*") or nil
  return { status = r.status, message = message, avg_ms = t.avg_ms, median_ms = t.median_ms, min_ms = t.min_ms,
           max_ms = t.max_ms, iter_ms = t.iter_ms, phases_ms = t.phases_ms, peak_bytes = m.peak_bytes,
           host_peak_rss_bytes = m.host_peak_rss_bytes, placement = sw.placement }
end

-- runs: the results of runs 1..n of one point (each finished by the sweep: sweep fields set).
function repeats.combine(runs, n)
  local records, first_ok = json.array(), nil
  local times, peaks = {}, {}
  for k = 1, n do
    local r = runs[k]
    if r.status == "ok" then
      first_ok = first_ok or r
      if type(r.timing) == "table" and type(r.timing.avg_ms) == "number" then times[#times + 1] = r.timing.avg_ms end
      if type(r.memory) == "table" and math.type(r.memory.peak_bytes) then peaks[#peaks + 1] = r.memory.peak_bytes end
    end
    records[k] = run_record(r)
  end
  local r = dp.deep_copy(first_ok or runs[1])
  local rep = { n = n, runs = records }
  local st = results.time_stats(times)
  if st then rep.avg_ms = { median = st.median_ms, min = st.min_ms, max = st.max_ms } end
  if #peaks > 0 then
    table.sort(peaks)
    rep.peak_bytes = { min = peaks[1], max = peaks[#peaks] }
  end
  r.repeats = rep
  return r
end

-- The runs a point keeps from its run files: {[k] = result} for each run whose file holds a
-- result run with config_hash, of status ok or oom (any status with retry_failed = false).
function repeats.kept(out, name, n, config_hash, retry_failed)
  local kept = {}
  for k = 1, n do
    local text = dp.read_file(repeats.run_file(out, name, k))
    local ok, r = false, nil
    if text then ok, r = pcall(json.decode, text) end
    if ok and type(r) == "table" and type(r.sweep) == "table" and r.sweep.config_hash == config_hash
       and type(r.status) == "string" and (r.status == "ok" or r.status == "oom" or not retry_failed) then
      kept[k] = r
    end
  end
  return kept
end

-- How many of runs 1..n are in runs.
function repeats.have(runs, n)
  local c = 0
  for k = 1, n do if runs[k] then c = c + 1 end end
  return c
end

return repeats
