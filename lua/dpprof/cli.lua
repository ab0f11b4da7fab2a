-- dpprof.cli: subcommands of the dpprof binary that are written in Lua. Each takes the list of
-- its arguments and returns the process exit status.
local dp = require("dpprof")
local results = require("dpprof.results")

local cli = {}

---------------------------------------------------------------------------------------------
-- dpprof compare BASE NEW [--threshold R]

local COMPARE_USAGE = [[
usage: dpprof compare BASE NEW [--threshold R]

Compares two results: two result JSON files, or two directories of them (files matched by name).
Prints peak memory, step time, per-phase times and per-category memory side by side, and the
configuration keys that differ.

  --threshold R   the largest allowed ratio NEW/BASE of peak memory and of step time (avg_ms);
                  default 1.05 (5% growth)

exit status: 0 no regression; 1 peak memory or step time grew past R, or a run that was ok
in BASE is not in NEW; 2 bad arguments or unreadable/invalid files
]]

local function eprint(...)
  io.stderr:write(table.concat({ ... }, ""), "\n")
end

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

local function peak_bytes(r)
  if type(r.memory) == "table" and math.type(r.memory.peak_bytes) then return r.memory.peak_bytes end
  if type(r.peak_memory_mb) == "number" then return r.peak_memory_mb * results.MiB end
end

local function step_ms(r)
  if type(r.timing) == "table" and type(r.timing.avg_ms) == "number" then return r.timing.avg_ms end
  if type(r.avg_time_ms) == "number" then return r.avg_time_ms end
end

-- Compares one pair; prints the table and returns the list of regressions (strings).
local function compare_pair(label, base, new, threshold)
  local regressions = {}
  print(label)
  if base.status ~= "ok" or new.status ~= "ok" then
    print(string.format("  status: %s -> %s", tostring(base.status), tostring(new.status)))
    if base.status == "ok" and new.status ~= "ok" then
      regressions[#regressions + 1] = string.format("%s: ok in BASE, %s in NEW (%s)", label, tostring(new.status),
                                                    tostring(new.message))
    end
    if base.status ~= "ok" or new.status ~= "ok" then return regressions end
  end
  local rows = {}
  local function row(name, b, n, fmt, gate)
    local r = ratio(b, n)
    local flag = ""
    if gate and r and r > threshold then
      flag = string.format("  REGRESSION (> %g)", threshold)
      regressions[#regressions + 1] = string.format("%s: %s grew %.1f%% (%s -> %s), past the threshold %g",
                                                    label, name, (r - 1) * 100, fmt(b), fmt(n), threshold)
    end
    rows[#rows + 1] = { name, fmt(b), fmt(n), r and (r == math.huge and "inf" or string.format("%.3f", r)) or "-", flag }
  end
  row("peak memory", peak_bytes(base), peak_bytes(new), fmt_bytes, true)
  row("step time (avg)", step_ms(base), step_ms(new), fmt_ms, true)
  local bt, nt = base.timing or {}, new.timing or {}
  row("step time (median)", bt.median_ms, nt.median_ms, fmt_ms, false)
  local bp, np = bt.phases_ms or {}, nt.phases_ms or {}
  for _, p in ipairs(results.PHASES) do row("  " .. p, bp[p], np[p], fmt_ms, false) end
  local bm, nm = base.memory or {}, new.memory or {}
  row("reserved peak", bm.reserved_peak_bytes, nm.reserved_peak_bytes, fmt_bytes, false)
  local bc, nc = bm.categories or {}, nm.categories or {}
  for _, c in ipairs(results.CATEGORIES) do
    local b = type(bc[c]) == "table" and bc[c].live_at_peak_bytes or nil
    local n = type(nc[c]) == "table" and nc[c].live_at_peak_bytes or nil
    if (b or 0) ~= 0 or (n or 0) ~= 0 then row("  " .. c .. " at peak", b, n, fmt_bytes, false) end
  end
  local widths = { 0, 0, 0, 0 }
  for _, r in ipairs(rows) do for i = 1, 4 do widths[i] = math.max(widths[i], #r[i]) end end
  for _, r in ipairs(rows) do
    print(string.format("  %-" .. widths[1] .. "s  %" .. widths[2] .. "s  %" .. widths[3] .. "s  %" .. widths[4] .. "s%s",
                        r[1], r[2], r[3], r[4], r[5]))
  end
  local fb, fn = flatten(base.config or {}, ""), flatten(new.config or {}, "")
  local keys, seen = {}, {}
  for k in pairs(fb) do keys[#keys + 1], seen[k] = k, true end
  for k in pairs(fn) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if fb[k] ~= fn[k] then print(string.format("  config %s: %s -> %s", k, fb[k] or "(absent)", fn[k] or "(absent)")) end
  end
  return regressions
end

local function load(path)
  local ok, r = pcall(results.read, path)
  if not ok then return nil, tostring(r) end
  if type(r) ~= "table" then return nil, path .. ": not a results document" end
  if r.traceEvents then return nil, path .. ": a trace file, not a result" end
  local valid, problems = results.validate(r)
  if not valid and r.status == "ok" and (peak_bytes(r) == nil or step_ms(r) == nil) then
    return nil, path .. ": not a valid result: " .. problems[1]
  end
  return r
end

local function json_files(dir)
  local out = {}
  for _, name in ipairs(dp.list_dir(dir) or {}) do
    if name:match("%.json$") and not name:match("%.trace%.json$") and not name:match("^%.") then out[#out + 1] = name end
  end
  return out
end

function cli.compare(args)
  local paths, threshold = {}, 1.05
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--help" or a == "-h" then
      io.stdout:write(COMPARE_USAGE)
      return 0
    elseif a == "--threshold" or a:match("^%-%-threshold=") then
      local v = a:match("^%-%-threshold=(.*)$")
      if not v then
        i = i + 1
        v = args[i]
      end
      threshold = tonumber(v or "")
      if not threshold or threshold <= 0 then
        eprint("dpprof compare: --threshold needs a ratio > 0, e.g. 1.05 (got '", tostring(v), "')")
        return 2
      end
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      eprint("dpprof compare: unknown option '", a, "' (valid: --threshold R, --help)")
      return 2
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  if #paths ~= 2 then
    eprint("dpprof compare: expected BASE and NEW, got ", #paths, " path(s)\n", COMPARE_USAGE)
    return 2
  end
  local base_path, new_path = paths[1], paths[2]
  local pairs_ = {}
  if is_dir(base_path) ~= is_dir(new_path) then
    eprint("dpprof compare: BASE and NEW must both be files or both be directories")
    return 2
  end
  if is_dir(base_path) then
    local in_new = {}
    for _, n in ipairs(json_files(new_path)) do in_new[n] = true end
    for _, n in ipairs(json_files(base_path)) do
      if in_new[n] then
        pairs_[#pairs_ + 1] = { n, base_path .. "/" .. n, new_path .. "/" .. n }
        in_new[n] = nil
      else
        print("only in BASE: " .. n)
      end
    end
    for n in pairs(in_new) do print("only in NEW: " .. n) end
    if #pairs_ == 0 then
      eprint("dpprof compare: no result file is in both ", base_path, " and ", new_path)
      return 2
    end
  else
    pairs_[1] = { base_path .. " -> " .. new_path, base_path, new_path }
  end
  local regressions = {}
  print(string.format("dpprof compare (threshold %g)", threshold))
  for _, p in ipairs(pairs_) do
    local base, err = load(p[2])
    if not base then eprint("dpprof compare: ", err) return 2 end
    local new, err2 = load(p[3])
    if not new then eprint("dpprof compare: ", err2) return 2 end
    for _, r in ipairs(compare_pair(p[1], base, new, threshold)) do regressions[#regressions + 1] = r end
  end
  if #regressions > 0 then
    print(string.format("\n%d regression(s):", #regressions))
    for _, r in ipairs(regressions) do print("  " .. r) end
    return 1
  end
  print("\nno regression")
  return 0
end

return cli
