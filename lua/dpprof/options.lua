-- dpprof.options: every option a configuration takes, from the one schema (common/options_schema.h,
-- as dpprof.options_schema): the lists the Lua layer reads and the checks of a value by its row.
--
--   options.SECTIONS                     the sections in order ("experiment", "model", ...)
--   options.keys(section [, filter])     a section's keys in order; filter {fit = true, load = false}
--   options.row(section, key)            the option's row (nil when there is none)
--   options.of_type(section, types)      the keys whose type is one of types ({"integer"}, ...)
--   options.value_error(row, v)          nil, or why v is not a value of row ("must be ...")
--   options.sweep_keys()                 dp.sweep's vary keys by bare name -> their path
--   options.markdown()                   the docs' table of every section (docs/lua.md holds it)
--
-- It needs no device and requires no other dpprof.* module.
local dp = require("dpprof")
local schema = dp.options_schema

local options = {}

options.SECTIONS = schema.sections
options.keys = schema.keys

local by_section = {}
for _, s in ipairs(schema.sections) do by_section[s] = {} end
for _, o in ipairs(schema.options) do by_section[o.section][o.key] = o end

function options.row(section, key)
  local rows = by_section[section]
  if not rows then error(string.format("dpprof.options: unknown section '%s'", tostring(section)), 2) end
  return rows[key]
end

function options.of_type(section, types)
  local want, out = {}, {}
  for _, t in ipairs(types) do want[t] = true end
  for _, k in ipairs(schema.keys(section)) do
    if want[by_section[section][k].type] then out[#out + 1] = k end
  end
  return out
end

-- A value as a message shows it: a string quoted and named as one ("3" typed for a number).
local function shown(v)
  if type(v) == "string" then return string.format("'%s'", v) end
  return tostring(v)
end

local function range_text(o)
  if o.min and o.max then return string.format(" in %.10g .. %.10g", o.min, o.max) end
  if o.min then return string.format(" >= %.10g", o.min) end
  if o.max then return string.format(" <= %.10g", o.max) end
  return ""
end

-- The checks a value's row allows without knowing the other options: its type, its range (a
-- ZERO_DEFAULT key's 0 is had by leaving it out), its words.
function options.value_error(o, v)
  if v == nil then return nil end
  if o.type == "integer" or o.type == "number" then
    local ok = type(v) == "number" and dp.is_finite(v) and (o.type == "number" or math.tointeger(v) ~= nil)
    local lo = o.zero_default and 1 or o.min
    if not ok or (lo and v < lo) or (o.max and v > o.max) then
      local what = o.type == "integer" and "an integer" or "a finite number"
      local bounds = range_text({ min = lo, max = o.max })
      local hint = o.zero_default and v == 0 and string.format(" (leave %s= out for the default, %s)", o.key, o.default)
                   or ""
      return string.format("%s must be %s%s, got %s%s", o.key, what, bounds, shown(v), hint)
    end
  elseif o.type == "boolean" then
    if type(v) ~= "boolean" then return string.format("%s must be true or false, got %s", o.key, shown(v)) end
  elseif o.type == "word" or o.type == "string" then
    if type(v) ~= "string" then return string.format("%s must be a word, got %s", o.key, shown(v)) end
    if o.choices then
      for _, c in ipairs(o.choices) do if c == v then return nil end end
      return string.format("unknown %s '%s' (valid: %s)", o.key, v, table.concat(o.choices, ", "))
    end
  end
  return nil
end

-- dp.sweep's vary keys by bare name: every SWEEP row, {section, key} (the experiment's and the
-- device section's, keys of an experiment's top level: {key}).
function options.sweep_keys()
  local out = {}
  for _, o in ipairs(schema.options) do
    if o.sweep then
      if out[o.key] then error("dpprof.options: sweep key '" .. o.key .. "' in two sections", 0) end
      out[o.key] = (o.section == "experiment" or o.section == "device") and { o.key } or { o.section, o.key }
    end
  end
  return out
end

-- "| key | type | default | doc |" rows of every section, each under a "#### section" line.
function options.markdown()
  local lines = {}
  for _, s in ipairs(schema.sections) do
    lines[#lines + 1] = "#### " .. s
    lines[#lines + 1] = ""
    lines[#lines + 1] = "| key | type | default | what it is |"
    lines[#lines + 1] = "| --- | --- | --- | --- |"
    for _, k in ipairs(schema.keys(s)) do
      local o = by_section[s][k]
      local t = o.type .. range_text(o)
      if o.choices then t = table.concat(o.choices, " \\| ") end
      local marks = {}
      if o.required then marks[#marks + 1] = "required" end
      if o.fit then marks[#marks + 1] = "fit word" end
      if o.sweep then marks[#marks + 1] = "sweep key" end
      if o.load then marks[#marks + 1] = "with a checkpoint" end
      local doc = o.doc .. (#marks > 0 and " (" .. table.concat(marks, ", ") .. ")" or "")
      lines[#lines + 1] = string.format("| `%s` | %s | %s | %s |", k, t, o.default and ("`" .. o.default .. "`") or "",
                                        (doc:gsub("|", "\\|")))
    end
    lines[#lines + 1] = ""
  end
  return table.concat(lines, "\n")
end

return options
