-- dpprof.outdir: a sweep's out directory, as dp.sweep (dpprof.sweep) and Slurm's collect
-- (dpprof.slurm) both write it: the lock a running sweep holds there (LOCK_FILE), a point's
-- result file with what the sweep adds (finish_result) written with one retry (write_result), the
-- temporaries killed writers left (remove_stale_temps), a finished point's progress text
-- (describe) and the summary table of its points (print_summary). Its own module so that
-- dpprof.slurm, which dpprof.sweep requires, need not require dpprof.sweep back (no require
-- cycle: tests/deps/check_lua_deps.lua); dpprof.sweep re-exports every name.
local dp = require("dpprof")
local json = dp.json
local results = require("dpprof.results")
local repeats_of = require("dpprof.repeats")
local fit = require("dpprof.fit")

local outdir = {}

-- The lock file a running sweep holds in its out directory.
outdir.LOCK_FILE = ".dpprof-sweep.lock"

-- A copy without functions (what a failure result echoes as its config).
local function plain(t)
  if type(t) == "function" then return nil end
  if type(t) ~= "table" or json.is_null(t) then return t end
  local out = {}
  for k, v in pairs(t) do out[k] = plain(v) end
  return setmetatable(out, getmetatable(t))
end
outdir.plain = plain

local function peak_of(r)
  if type(r.memory) == "table" and math.type(r.memory.peak_bytes) then return r.memory.peak_bytes end
  if type(r.peak_memory_mb) == "number" then return math.floor(r.peak_memory_mb * results.MiB + 0.5) end
end

local function time_of(r)
  if type(r.timing) == "table" and type(r.timing.avg_ms) == "number" then return r.timing.avg_ms end
  if type(r.avg_time_ms) == "number" then return r.avg_time_ms end
end

local function one_line(s, n)
  s = tostring(s or ""):gsub("%s+", " ")
  if #s > n then s = s:sub(1, n - 3) .. "..." end
  return s
end

-- For a plan result that would not fit its modelled device: "does not fit h100 (...)"; else nil.
local function unfit(r, long)
  local b = r.predicted and type(r.plan) == "table" and r.plan or nil
  if not b or b.fits ~= false then return nil end
  local where = tostring(b.device_model or "the device")
  if not long or not math.type(b.predicted_reserved_bytes) or not math.type(b.budget_bytes) then
    return "does not fit " .. where
  end
  return string.format("does not fit %s (reserved %s > budget %s)", where, dp.format_bytes(b.predicted_reserved_bytes),
                       dp.format_bytes(b.budget_bytes))
end

-- What a finished point says in its progress line and the summary.
local function describe(r)
  local parts = { r.status }
  local peak, ms = peak_of(r), time_of(r)
  if r.status == "oom" and type(r.oom) == "table" and math.type(r.oom.requested_bytes) then
    -- the request that failed, not the shortfall: what was free is the device's (or limit's) business
    local live = math.type(r.oom.total_live_bytes) and dp.format_bytes(r.oom.total_live_bytes) .. " live" or nil
    local limit = math.type(r.oom.limit_bytes) and r.oom.limit_bytes > 0
                  and "limit " .. dp.format_bytes(r.oom.limit_bytes) or nil
    local held = (live and limit) and (live .. ", " .. limit) or live or limit
    parts[#parts + 1] = string.format("a %s request for %s in %s did not fit%s", dp.format_bytes(r.oom.requested_bytes),
                                      tostring(r.oom.category), tostring(r.oom.module), held and " (" .. held .. ")" or "")
  elseif r.status ~= "ok" then
    parts[#parts + 1] = one_line(r.message, 100)
  end
  if r.status == "ok" and peak then parts[#parts + 1] = "peak " .. dp.format_bytes(peak) end
  if r.status == "ok" and ms then
    parts[#parts + 1] = string.format("%.1f ms/iter%s", ms, r.predicted and " (estimated)" or "")
  end
  local rep = type(r.repeats) == "table" and r.repeats.avg_ms
  if r.status == "ok" and type(rep) == "table" then
    parts[#parts + 1] = string.format("%d runs: median %.1f, %.1f-%.1f ms/iter", r.repeats.n, rep.median, rep.min, rep.max)
  end
  if r.status == "ok" then parts[#parts + 1] = unfit(r, true) end
  if r.status == "ok" then parts[#parts + 1] = results.epsilon_text(r.privacy) end
  return table.concat(parts, ", ")
end

-- The table of a sweep's points (name, out: the sweep's; points: {name=, result=, status=, skipped=})
-- printed when its points are done, by the sweep and by Slurm's collect.
local function print_summary(name, out, points)
  local rows = { { "point", "status", "peak", "ms/iter", "epsilon", "note" } }
  local fixed = false
  for _, p in ipairs(points) do
    local r = p.result or {}
    local peak, ms
    if r.status == "ok" then peak, ms = peak_of(r), time_of(r) end
    local note = p.skipped and "done before" or ""
    -- a repeated point's time is the median of its runs, their range in the note
    local spread = r.status == "ok" and type(r.repeats) == "table" and type(r.repeats.avg_ms) == "table"
                   and r.repeats.avg_ms or nil
    if spread then
      ms = spread.median
      local runs = string.format("%d runs: %.1f-%.1f ms", r.repeats.n, spread.min, spread.max)
      note = note == "" and runs or note .. "; " .. runs
    end
    if r.status == "ok" and r.predicted then
      local plan_note = unfit(r) and "plan: " .. unfit(r) .. "; time estimated" or "plan: time estimated"
      note = note == "" and plan_note or note .. "; " .. plan_note
    end
    if r.status == "oom" and type(r.oom) == "table" and math.type(r.oom.requested_bytes) then
      note = "a " .. dp.format_bytes(r.oom.requested_bytes) .. " request did not fit"
    elseif r.status and r.status ~= "ok" then
      note = one_line(r.message, 60)
    end
    local eps = "-"
    if r.status == "ok" and type(r.privacy) == "table" and not json.is_null(r.privacy) then
      local e = r.privacy.epsilon
      local value = type(e) == "number" and string.format("%.4g", e) or (r.privacy.epsilon_error and "-" or "inf")
      eps = string.format("%s (%s)%s", value,
                          tostring(r.privacy.accountant or "rdp"), r.privacy.sampling == "fixed" and "*" or "")
      fixed = fixed or r.privacy.sampling == "fixed"
    end
    rows[#rows + 1] = { p.name, tostring(r.status or p.status), peak and dp.format_bytes(peak) or "-",
                        ms and string.format("%.1f", ms) or "-", eps, note }
  end
  print(string.format("\nsweep %s: %d point%s, results in %s", name, #points, #points == 1 and "" or "s", out))
  dp.print_table(rows, { false, false, true, true, true, false })
  -- plan points beyond the card, or fitting only with checkpointing: the setting that makes them fit
  local advised = false
  for _, p in ipairs(points) do
    local r = p.result or {}
    local a = r.status == "ok" and type(r.plan) == "table" and type(r.plan.checkpoint_advice) == "table"
              and r.plan.checkpoint_advice or nil
    if a then
      if not advised then print("activation checkpointing (plan estimates):") end
      advised = true
      print(string.format("  %s: %s; %s", p.name, r.plan.fits and "fits only with checkpointing" or unfit(r),
                          fit.advice_text(a)))
    end
  end
  if fixed then print("* " .. results.FIXED_BATCH_CAVEAT) end
end

-- The result file of a point, with what the sweep adds; a result from a child that could not
-- report (crash, timeout, error outside the experiment) becomes a failure result.
local function finish_result(r, p, sweep_name, placement)
  if r.status ~= "ok" and r.schema_version == nil then
    r = results.failure{ name = p.name, status = r.status, message = r.message and dp.error_text(r.message),
                         traceback = r.traceback,
                         oom = r.oom, config = plain(p.config) }
  end
  if r.experiment == nil then r.experiment = p.name end
  r.sweep = { name = sweep_name, vary = p.vary, config = p.resolved, config_hash = p.config_hash,
              placement = placement }
  return r
end

-- Writes a point's result; on failure waits a moment and tries once more. Returns true, or
-- false and the reason.
local function write_result(file, r)
  local ok, err = pcall(results.write, file, r)
  if ok then return true end
  dp.sleep(0.2)
  ok, err = pcall(results.write, file, r)
  if ok then return true end
  return false, dp.error_text(err)
end

-- Removes the temporaries that writers killed mid-write (kill -9) left in out and out/runs: only
-- this host's whose process is gone (dpprof.remove_stale_temps); says how many, when any.
function outdir.remove_stale_temps(out, say)
  local n = 0
  for _, dir in ipairs({ out, out .. "/" .. repeats_of.DIR }) do n = n + (dp.remove_stale_temps(dir) or 0) end
  if n > 0 then
    say(string.format("%s: removed %d temporary file%s left by a writer that was killed mid-write", out, n,
                      n == 1 and "" or "s"))
  end
  return n
end

outdir.finish_result = finish_result
outdir.write_result = write_result
outdir.describe = describe
outdir.print_summary = print_summary

return outdir
