-- dpprof.options: every option a configuration takes, from the one schema (common/options_schema.h,
-- as dpprof.options_schema): the lists and rows the Lua layer reads.
--
--   options.SECTIONS                     the sections in order ("experiment", "model", ...)
--   options.keys(section [, filter])     a section's keys in order; filter {fit = true, load = false}
--   options.row(section, key)            the option's row (nil when there is none)
--   options.of_type(section, types)      the keys whose type is one of types ({"integer"}, ...)
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

local function range_text(o)
  if o.min and o.max then return string.format(" in %.10g .. %.10g", o.min, o.max) end
  if o.min then return string.format(" >= %.10g", o.min) end
  if o.max then return string.format(" <= %.10g", o.max) end
  return ""
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
