-- dpprof.cli_compare: `dpprof compare` (dpprof.cli.compare), written in Lua; returns the process
-- exit status.
local dp = require("dpprof")
local results = require("dpprof.results")

local cli = {}

---------------------------------------------------------------------------------------------
-- dpprof compare BASE NEW [--memory R] [--time R|off] [--threshold R]

local COMPARE_USAGE = [[
usage: dpprof compare BASE NEW [--memory R] [--time R|off] [--threshold R]

Compares two results: two result JSON files, or two directories of them (files matched by name).
Every file is checked against the results schema (docs/results.md) when it is read. Prints peak
memory, step time, per-phase times and per-category memory side by side, epsilon with its
accountant (noting fixed batches, for which it is understated), and the configuration
keys that differ.

  --memory R      the largest allowed ratio NEW/BASE of peak memory (exact: any growth past R
                  is a regression); default 1.05 (5% growth)
  --time R        the largest allowed ratio NEW/BASE of the step time: the median of the runs
                  (repeats=N), else of the timed iterations, as the summaries report it; default
                  1.05. Measured times are judged against their spread, and only when each side
                  has at least 3 runs or iterations (fewer: "not enough repeats to judge time",
                  not a regression); a NEW whose fastest run or iteration is within BASE's slowest
                  is noise, not a regression, and is said so. Two plan results' times are modelled
                  (no noise): judged on the ratio alone. A measured and a predicted time are not
                  judged against each other. A run taken on a loaded machine is said so
  --time off      no time verdict (the times are shown): a memory-only check, e.g. in CI
  --threshold R   sets both

exit status: 0 every pair was compared (both runs ok) and none grew past its threshold; 1 peak
memory grew past --memory, step time grew past --time beyond the spread, or a pair could not be
compared (a run that is not ok, a file only in BASE); 2 bad arguments, or a file that is
unreadable or not a valid result (the file and field named)
]]

local function is_dir(path)
  return dp.list_dir(path) ~= nil
end

local function fmt_ms(v) return v and string.format("%.3f ms", v) or "-" end
local function fmt_bytes(v) return v and dp.format_bytes(v) or "-" end

local function ratio(base, new)
  if base == nil or new == nil then return nil end
  if base == 0 then return new == 0 and 1 or math.huge end
  return new / base
end

-- Flattens a configuration into "a.b.c" = value strings.
local function flatten(t, prefix, out)
  out = out or {}
  if type(t) ~= "table" or dp.json.is_null(t) then
    out[prefix] = dp.json.is_null(t) and "null" or tostring(t)
    return out
  end
  for k, v in pairs(t) do flatten(v, prefix == "" and tostring(k) or (prefix .. "." .. tostring(k)), out) end
  return out
end

-- The measured spread of a result's step time: over its repeated runs (repeats.avg_ms, a sweep's
-- repeats=N), else over its timed iterations: {lo, hi, n, what}.
local function time_spread(r)
  local rep = type(r.repeats) == "table" and r.repeats or nil
  if rep and type(rep.avg_ms) == "table" and math.type(rep.n) and rep.n > 1 then
    return { lo = rep.avg_ms.min, hi = rep.avg_ms.max, n = rep.n, what = "runs" }
  end
  return { lo = r.timing.min_ms, hi = r.timing.max_ms, n = #r.timing.iter_ms, what = "iterations" }
end

-- Each side needs at least this many runs or iterations for its measured time to be judged.
cli.MIN_TIME_SAMPLES = 3

-- A result's step time as the summaries report it (plots/sweep_util.c dpplot_step_ms): the
-- median of its repeated runs, else of its timed iterations, else their mean.
local function step_ms(r)
  local rep = type(r.repeats) == "table" and r.repeats or nil
  if rep and type(rep.avg_ms) == "table" and math.type(rep.n) and rep.n > 1 and type(rep.avg_ms.median) == "number" then
    return rep.avg_ms.median
  end
  return r.timing.median_ms or r.timing.avg_ms
end

local function spread_text(s)
  return string.format("%s-%s over %d %s", fmt_ms(s.lo), fmt_ms(s.hi), s.n,
                       s.n == 1 and s.what:gsub("s$", "") or s.what)
end

-- A pair that is not both ok: its status line, and a regression (ok in BASE only) or the reason it
-- was not compared.
local function compare_status(label, base, new, say, regressions, uncompared)
  say(string.format("  status: %s -> %s", base.status, new.status))
  if base.status == "ok" then
    regressions[#regressions + 1] = string.format("%s: ok in BASE, %s in NEW (%s)", label, new.status,
                                                  (tostring(new.message):gsub("%s+", " ")))
  else
    uncompared[#uncompared + 1] = string.format("%s: not compared: %s in BASE, %s in NEW (only ok runs have "
                                                .. "figures to compare)", label, base.status, new.status)
  end
end

-- A measured result beside a predicted one: which is which, and what the prediction's times are.
local function say_predicted(base, new, say)
  local planned = base.predicted and base or new
  local est = type(planned.timing) == "table" and type(planned.timing.estimate) == "table" and planned.timing.estimate
  local how = est and type(est.method) == "string" and est.method:find("^calibrated")
              and string.format("a calibrated estimate, %s", tostring(est.model_file or est.device_model))
              or "a roofline estimate"
  say(string.format("  note: %s is measured, %s is predicted by the plan backend (its times are %s)",
                    base.predicted and "NEW" or "BASE", base.predicted and "BASE" or "NEW", how))
end

-- Judges a figure that grew past its gate's threshold (ratio r): a regression, or a note saying why
-- not (a measured time against a predicted one, too few repeats, within the measured spread).
-- gate: "memory" (exact) or "time" (against the spread). Returns the row's flag.
local function judge_growth(pc, name, b, n, fmt, gate, r)
  local threshold = pc.thresholds[gate]
  local base, new, bs, ns = pc.base, pc.new, pc.bs, pc.ns
  local grew = string.format("%s: %s grew %.1f%% (%s -> %s)", pc.label, name, (r - 1) * 100, fmt(b), fmt(n))
  local function note(flag, text)
    pc.judgements[#pc.judgements + 1] = grew .. text
    return flag
  end
  local function regressed(why)
    pc.regressions[#pc.regressions + 1] = string.format("%s, past the threshold %g%s", grew, threshold, why)
    return string.format("REGRESSION (> %g)", threshold)
  end
  if gate == "memory" then return regressed("") end
  if (base.predicted == true) ~= (new.predicted == true) then
    return note("not judged", ", not judged: a measured time against a predicted one")
  end
  if base.predicted == true then return regressed(" (modelled times: no noise to judge)") end
  if bs.n < cli.MIN_TIME_SAMPLES or ns.n < cli.MIN_TIME_SAMPLES then
    return note("not judged", string.format(", past %g but not enough repeats to judge time (BASE %s, NEW %s; at "
                                            .. "least %d a side: repeats=%d or iters=%d), not a regression", threshold,
                                            spread_text(bs), spread_text(ns), cli.MIN_TIME_SAMPLES,
                                            cli.MIN_TIME_SAMPLES, cli.MIN_TIME_SAMPLES))
  end
  if ns.lo <= bs.hi then
    return note("within the spread", string.format(", past %g but not a regression: NEW's fastest is within "
                                                   .. "BASE's slowest (BASE %s, NEW %s)", threshold, spread_text(bs),
                                                   spread_text(ns)))
  end
  return regressed(string.format(", outside the measured spread (BASE %s, NEW %s)", spread_text(bs), spread_text(ns)))
end

-- One row of the table: the figure on both sides and their ratio, judged when gate is "memory" or
-- "time" (nil or false: shown only).
local function add_row(pc, name, b, n, fmt, gate)
  local r = ratio(b, n)
  local flag = ""
  if gate and r and r > pc.thresholds[gate] then flag = judge_growth(pc, name, b, n, fmt, gate, r) end
  pc.rows[#pc.rows + 1] = { name, fmt(b), fmt(n), r and (r == math.huge and "inf" or string.format("%.3f", r)) or "-",
                            flag }
end

-- The figures of two ok results: peak memory and step time judged, phases, reserved peak and the
-- categories live at the peak shown.
local function figure_rows(pc, modelled)
  local base, new = pc.base, pc.new
  add_row(pc, "peak memory", base.memory.peak_bytes, new.memory.peak_bytes, fmt_bytes, "memory")
  add_row(pc, modelled and "modelled step time" or "step time (median)", step_ms(base), step_ms(new), fmt_ms,
          pc.thresholds.time and "time" or false)
  add_row(pc, "step time (mean)", base.timing.avg_ms, new.timing.avg_ms, fmt_ms, false)
  for _, p in ipairs(results.PHASES) do
    local b, n = base.timing.phases_ms[p], new.timing.phases_ms[p]
    if results.OPTIONAL_PHASES[p] then b, n = b or 0, n or 0 end -- absent from older results
    if not (results.OPTIONAL_PHASES[p] and b == 0 and n == 0) then add_row(pc, "  " .. p, b, n, fmt_ms, false) end
  end
  add_row(pc, "reserved peak", base.memory.reserved_peak_bytes, new.memory.reserved_peak_bytes, fmt_bytes, false)
  local bc, nc = base.memory.categories, new.memory.categories
  for _, c in ipairs(results.CATEGORIES) do
    local b, n = bc[c].live_at_peak_bytes, nc[c].live_at_peak_bytes
    if b ~= 0 or n ~= 0 then add_row(pc, "  " .. c .. " at peak", b, n, fmt_bytes, false) end
  end
end

-- The configuration keys whose values differ, sorted.
local function say_config_diff(base, new, say)
  local fb, fn = flatten(base.config or {}, ""), flatten(new.config or {}, "")
  local keys, seen = {}, {}
  for k in pairs(fb) do keys[#keys + 1], seen[k] = k, true end
  for k in pairs(fn) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if fb[k] ~= fn[k] then say(string.format("  config %s: %s -> %s", k, fb[k] or "(absent)", fn[k] or "(absent)")) end
  end
end

-- Compares one pair of valid results; prints through say and returns the regressions and the
-- reasons the pair was not compared (lists of strings). thresholds = {memory=, time=}.
local function compare_pair(label, base, new, thresholds, say)
  local regressions, uncompared = {}, {}
  say(label)
  if base.status ~= "ok" or new.status ~= "ok" then
    compare_status(label, base, new, say, regressions, uncompared)
    return regressions, uncompared
  end
  if (base.predicted == true) ~= (new.predicted == true) then say_predicted(base, new, say) end
  local pc = { label = label, base = base, new = new, thresholds = thresholds, bs = time_spread(base),
               ns = time_spread(new), rows = { { "", "BASE", "NEW", "ratio", "" } }, judgements = {},
               regressions = regressions }
  local modelled = base.predicted == true and new.predicted == true
  figure_rows(pc, modelled)
  -- padded by hand (dp.print_table): string.format widths stop at 99, and a figure can be wider
  dp.print_table(pc.rows, { false, true, true, true, false }, say)
  if not modelled then
    say(string.format("  step time spread: BASE %s, NEW %s", spread_text(pc.bs), spread_text(pc.ns)))
  end
  for _, j in ipairs(pc.judgements) do say("  note: " .. j) end
  for _, side in ipairs({ { base, "BASE" }, { new, "NEW" } }) do
    local note = side[1].predicted ~= true and results.load_note(side[1], side[2])
    if note then say("  note: " .. note) end
  end
  local be, ne = results.epsilon_text(base.privacy), results.epsilon_text(new.privacy)
  if be or ne then say(string.format("  privacy: %s -> %s", be or "-", ne or "-")) end
  say_config_diff(base, new, say)
  return regressions, uncompared
end


local function json_files(dir)
  local out = {}
  for _, name in ipairs(dp.list_dir(dir) or {}) do
    if name:match("%.json$") and not name:match("%.trace%.json$") and not name:match("^%.") then out[#out + 1] = name end
  end
  return out
end

-- dpprof compare's arguments: the two paths and the thresholds ({memory=, time= (false: off)}), or
-- nil and the exit status (0 after --help, 2 after a complaint).
local function compare_args(args, say, complain)
  local paths, thresholds = {}, { memory = 1.05, time = 1.05 }
  local i = 1
  while i <= #args do
    local a = args[i]
    local opt, inline = a:match("^%-%-(%a+)=(.*)$")
    opt = opt or a:match("^%-%-(%a+)$")
    if a == "--help" or a == "-h" then
      say((COMPARE_USAGE:gsub("\n$", "")))
      return nil, 0
    elseif opt == "threshold" or opt == "memory" or opt == "time" then
      local v = inline
      if not v then
        i = i + 1
        v = args[i]
      end
      local t = tonumber(v or "")
      if opt == "time" and v == "off" then
        t = false
      elseif not t or not (t > 0 and t < math.huge) then
        complain(string.format("dpprof compare: --%s needs a finite ratio > 0, e.g. 1.05%s (got '%s')", opt,
                               opt == "time" and ", or off" or "", tostring(v)))
        return nil, 2
      end
      if opt ~= "time" then thresholds.memory = t end
      if opt ~= "memory" then thresholds.time = t end
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      complain("dpprof compare: unknown option '" .. a .. "' (valid: --memory R, --time R|off, --threshold R, --help)")
      return nil, 2
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  if #paths ~= 2 then
    complain("dpprof compare: expected BASE and NEW, got " .. #paths .. " path(s)\n" .. COMPARE_USAGE)
    return nil, 2
  end
  return paths, thresholds
end

-- The pairs of two directories: {name, base file, new file} for each result file in both (every
-- document loaded by get first); files only in BASE go to uncompared, only in NEW to notes. nil and
-- the complaint when a document is unreadable or no file is in both.
local function directory_pairs(base_path, new_path, get, loaded, notes, uncompared)
  local base_files, new_files = json_files(base_path), json_files(new_path)
  for _, side in ipairs({ { base_path, base_files }, { new_path, new_files } }) do
    for _, n in ipairs(side[2]) do
      local ok, why = get(side[1] .. "/" .. n, true)
      if not ok then return nil, "dpprof compare: " .. why end
    end
  end
  local pairs_, in_new = {}, {}
  for _, n in ipairs(new_files) do if loaded[new_path .. "/" .. n] then in_new[n] = true end end
  for _, n in ipairs(base_files) do
    if loaded[base_path .. "/" .. n] then
      if in_new[n] then
        pairs_[#pairs_ + 1] = { n, base_path .. "/" .. n, new_path .. "/" .. n }
        in_new[n] = nil
      else
        uncompared[#uncompared + 1] = n .. ": only in BASE, not compared"
      end
    end
  end
  local only_new = {}
  for n in pairs(in_new) do only_new[#only_new + 1] = n end
  table.sort(only_new)
  for _, n in ipairs(only_new) do notes[#notes + 1] = "only in NEW: " .. n end
  if #pairs_ == 0 then return nil, "dpprof compare: no result file is in both " .. base_path .. " and " .. new_path end
  return pairs_
end

-- The verdict: the regressions and what was not compared, each listed (exit 1), or "no regression" (0).
local function say_verdict(regressions, uncompared, say)
  if #regressions == 0 and #uncompared == 0 then
    say("\nno regression")
    return 0
  end
  if #regressions > 0 then
    say(string.format("\n%d regression(s):", #regressions))
    for _, r in ipairs(regressions) do say("  " .. r) end
  end
  if #uncompared > 0 then
    say(string.format("\n%d not compared (a comparison that did not happen is not a pass):", #uncompared))
    for _, u in ipairs(uncompared) do say("  " .. u) end
  end
  return 1
end

-- dpprof compare. io_ (optional, for tests) = {out = function(line), err = function(line)}; by
-- default lines go to stdout and stderr.
function cli.compare(args, io_)
  local say = io_ and io_.out or function(line) io.stdout:write(line, "\n") end
  local complain = io_ and io_.err or function(line) io.stderr:write(line, "\n") end
  local paths, thresholds = compare_args(args, say, complain)
  if not paths then return thresholds end
  local base_path, new_path = paths[1], paths[2]
  local pairs_, notes, uncompared = {}, {}, {}
  if is_dir(base_path) ~= is_dir(new_path) then
    complain("dpprof compare: BASE and NEW must both be files or both be directories")
    return 2
  end
  -- every document is read and checked once, before anything is compared
  local loaded = {}
  local function get(path, listed)
    local r, why = results.load(path, listed)
    if r == nil then return nil, why end
    if r == false then notes[#notes + 1] = string.format("skipped %s: %s", path, why) end
    loaded[path] = r
    return true
  end
  if is_dir(base_path) then
    local why
    pairs_, why = directory_pairs(base_path, new_path, get, loaded, notes, uncompared)
    if not pairs_ then complain(why) return 2 end
  else
    for _, path in ipairs({ base_path, new_path }) do
      local ok, why = get(path, false)
      if not ok then complain("dpprof compare: " .. why) return 2 end
    end
    pairs_[1] = { base_path .. " -> " .. new_path, base_path, new_path }
  end
  local regressions = {}
  say(string.format("dpprof compare (memory threshold %g, exact; %s)", thresholds.memory,
                    thresholds.time and string.format("time threshold %g on the median step, against the measured "
                                                      .. "spread of at least %d runs or iterations a side",
                                                      thresholds.time, cli.MIN_TIME_SAMPLES)
                    or "time not judged: --time off"))
  for _, n in ipairs(notes) do say(n) end
  for _, p in ipairs(pairs_) do
    local reg, unc = compare_pair(p[1], loaded[p[2]], loaded[p[3]], thresholds, say)
    for _, r in ipairs(reg) do regressions[#regressions + 1] = r end
    for _, u in ipairs(unc) do uncompared[#uncompared + 1] = u end
  end
  return say_verdict(regressions, uncompared, say)
end

return cli
