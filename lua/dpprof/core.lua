-- dpprof.core: the Lua side of the dpprof module, loaded once by dpprof_openlib. It adds what is
-- easier to say in Lua than in C to the module table the C side built.
local dp = require("dpprof")

local MiB = 1024 * 1024

-- Bytes as a human-readable string with binary units ("1.50 MiB").
function dp.format_bytes(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local i, v = 1, n
  while math.abs(v) >= 1024 and i < #units do
    v, i = v / 1024, i + 1
  end
  if i == 1 then return string.format("%s B", math.tointeger(n) or string.format("%.4g", n)) end
  return string.format("%.2f %s", v, units[i])
end

-- A duration in milliseconds as people read it: "812.3 ms", "2.83 s", "47.1 min", "7.85 h"
-- (a modelled step of a large model, or a run of many steps, is not read in ms); "-" for nil.
function dp.format_ms(ms)
  if type(ms) ~= "number" or ms ~= ms then return "-" end
  local a = math.abs(ms)
  -- each unit up to where its rounding would print the next unit's one (999.96 ms is 1.00 s, not
  -- "1000.0 ms"); below 0.1 ms, three significant digits rather than "0.0 ms"
  if a > 0 and a < 0.095 then return string.format("%.3g ms", ms) end
  if a < 999.95 then return string.format("%.1f ms", ms) end
  if a < 59995 then return string.format("%.2f s", ms / 1e3) end
  if a < 3597e3 then return string.format("%.1f min", ms / 60e3) end
  return string.format("%.2f h", ms / 3600e3)
end

-- Bytes to MiB (the unit of the `*_mb` result fields).
function dp.mb(n) return n / MiB end

-- Whether x is a number that is neither NaN nor an infinity.
function dp.is_finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

-- Whether the list holds v.
function dp.contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- A key of table t not in the list valid (the first in sorted order, so a message names the same
-- one every run), or nil: the one check of an option table's keys, each caller saying it its way.
function dp.unknown_key(t, valid)
  local bad
  for k in pairs(t) do
    if not dp.contains(valid, k) and (bad == nil or tostring(k) < tostring(bad)) then bad = k end
  end
  return bad
end

-- The median of a list of numbers (the mean of the middle two for an even count); nil when empty.
-- The list is not changed.
function dp.median(list)
  if not list or #list == 0 then return nil end
  local s = table.move(list, 1, #list, 1, {})
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end

-- A deep copy of t (tables copied with their metatables; JSON nulls and other values as they are).
function dp.deep_copy(t)
  if type(t) ~= "table" or dp.json.is_null(t) then return t end
  local out = {}
  for k, v in pairs(t) do out[k] = dp.deep_copy(v) end
  return setmetatable(out, getmetatable(t))
end

-- Prints a text table: rows[1] is the header, underlined with dashes; each column is as wide as
-- its widest cell, right-aligned where right[i] is true, two spaces from the next; lines start
-- with two spaces and end without any. emit (default print) receives each line.
function dp.print_table(rows, right, emit)
  emit = emit or print
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do widths[i] = math.max(widths[i] or 0, #cell) end
  end
  for ri, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do -- padded by hand: string.format takes widths below 100 only
      local pad = string.rep(" ", widths[i] - #cell)
      cells[i] = right[i] and pad .. cell or cell .. pad
    end
    emit((("  " .. table.concat(cells, "  ")):gsub("%s+$", "")))
    if ri == 1 then
      local rule = {}
      for i, w in ipairs(widths) do rule[i] = string.rep("-", w) end
      emit("  " .. table.concat(rule, "  "))
    end
  end
end

-- Whether a chunk's short source ("/x/lua/dpprof/sweep.lua", or "...a/dpprof/sweep.lua" when Lua
-- shortened it) is one of dpprof's own Lua modules (dp.lua_dir .. "/dpprof/").
function dp.is_own_source(src)
  if type(src) ~= "string" or type(dp.lua_dir) ~= "string" then return false end
  -- The file name: what follows the last '/'. Anchored patterns only: an unanchored one
  -- ("([^/]+%.lua)$") retries from every start and costs time quadratic in a long source.
  local name = src:match("^.*/(.*)$") or src
  if #name <= 4 or name:sub(-4) ~= ".lua" then return false end
  local full = dp.lua_dir .. "/dpprof/" .. name
  if src == full then return true end
  local tail = src:match("^%.%.%.(.+)$")
  return tail ~= nil and #tail <= #full and full:sub(-#tail) == tail
end

-- An error message without the "file.lua:12: " position that says where in dpprof's own Lua code
-- a problem was noticed (an error raised by an engine binding that dpprof's Lua side called):
-- the user needs the problem, not our line. Positions in the user's scripts are kept. An error
-- object that is not a string says what it is (its __tostring, its `message` field, or its type),
-- never "table: 0x...".
function dp.error_text(e)
  if type(e) ~= "string" and type(e) ~= "number" then
    local mt = getmetatable(e)
    if type(mt) == "table" and mt.__tostring then return tostring(e) end
    if type(e) == "table" and type(e.message) == "string" then return e.message end
    return string.format("(an error object of type %s, with no message)", type(e))
  end
  local s = tostring(e)
  local src, rest = s:match("^([^\n]-%.lua):%d+: (.*)$")
  if src and dp.is_own_source(src) then return rest end
  return s
end

-- Raises a refused configuration or argument: an error object whose message is the text and whose
-- exit_status (2) is what `dpprof run` exits with, as for bad arguments on the command line.
-- s with its control bytes (and DEL) written as \ddd, for messages that quote what a user gave.
function dp.escape_controls(s)
  return (tostring(s):gsub("[%z\1-\31\127]", function(c) return string.format("\\%03d", c:byte()) end))
end

function dp.refuse(message)
  error(setmetatable({ message = message, exit_status = 2 }, { __tostring = function(e) return e.message end }), 0)
end

-- Every option a configuration takes, from the one schema (options.lua, common/options_schema.h).
dp.options = require("dpprof.options")
-- Experiments, sweeps and their results JSON (experiment.lua, sweep.lua, results.lua, trace.lua).
dp.results = require("dpprof.results")
dp.trace = require("dpprof.trace")
-- Per-op measurement (profile = "ops"): op categories and the result's profile (ops.lua).
dp.ops = require("dpprof.ops")
dp.experiment = require("dpprof.experiment").run
dp.sweep = require("dpprof.sweep").run
-- Plan-device models and predictions, and the largest config that fits (plan.lua, fit.lua).
dp.plan = require("dpprof.plan")
dp.fit = require("dpprof.fit").run
-- Samples of their own lengths: the data = {...} grammar, lengths, padding and splitting (data.lua).
dp.data = require("dpprof.data")
-- The chance that some step of a Poisson-sampled run runs out of memory, from plan runs (risk.lua).
dp.risk = require("dpprof.risk").run

-- Not the module table itself: package.loaded["dpprof.core"] stays `true`, so error messages
-- name functions through "dpprof", not "dpprof.core".
return true
