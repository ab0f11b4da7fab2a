-- dpprof.sweep_points: a sweep's points, the cartesian product of its vary lists (dpprof.sweep's
-- header says how they are named and ordered), and where each vary key lands in an experiment's
-- configuration. dpprof.sweep re-exports KEYS, safe_name, point_name and points.
local dp = require("dpprof")
local options = require("dpprof.options")

local points = {}

-- Where each vary key lands in the experiment configuration: the schema's SWEEP rows by their bare
-- names (dpprof.options), and two it names otherwise (lora_rank, optimizer: its name). Keys not
-- listed here may be given as dotted paths ("model.hidden", "dp.noise_multiplier").
points.KEYS = options.sweep_keys()
points.KEYS.lora_rank = { "model", "lora", "rank" }
points.KEYS.optimizer = { "optimizer", "name" }

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

local deep_copy = dp.deep_copy

local function format_value(v)
  if math.type(v) == "integer" then return string.format("%d", v) end
  if math.type(v) == "float" then return string.format("%g", v) end
  return tostring(v)
end

-- s made safe as a file name inside out: characters other than letters, digits and _.+=,-
-- become "_", and so does a leading "." (no hidden files, no ".."), so a name never leaves out.
function points.safe_name(s)
  return (tostring(s):gsub("[^%w_.+=,%-]", "_"):gsub("^%.", "_"))
end

-- The point's name: "key=value,key=value" in key order, made safe as a file name.
function points.point_name(keys, vary)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. format_value(vary[k]) end
  return points.safe_name(table.concat(parts, ","))
end

local function path_of(key)
  if points.KEYS[key] then return points.KEYS[key] end
  if key:find(".", 1, true) then
    local p = {}
    for part in key:gmatch("[^.]+") do p[#p + 1] = part end
    return p
  end
  error(string.format("dpprof.sweep: unknown vary key '%s' (valid: %s, or a dotted path such as "
                      .. "\"model.hidden\")", key, table.concat(sorted_keys(points.KEYS), ", ")), 4)
end

-- Sets value at the path of key in cfg. lora_rank = 0 means no LoRA; a method replaces norms/clip.
local function apply(cfg, key, value)
  if key == "lora_rank" then
    cfg.model = cfg.model or {}
    if value == 0 then cfg.model.lora = nil return end
    local lora = deep_copy(cfg.model.lora) or {}
    lora.rank = value
    cfg.model.lora = lora
    return
  end
  if key == "method" then cfg.norms, cfg.clip = nil, nil end
  if key == "norms" or key == "clip" then cfg.method = nil end
  local path = path_of(key)
  local t = cfg
  for i = 1, #path - 1 do
    if type(t[path[i]]) ~= "table" then t[path[i]] = {} end
    t = t[path[i]]
  end
  t[path[#path]] = value
end

-- The points of the product, in order: {name=, vary={key=value}, config=}.
function points.points(base, vary, order)
  local keys = order and { table.unpack(order) } or sorted_keys(vary)
  local seen = {}
  for _, k in ipairs(keys) do
    if vary[k] == nil then error(string.format("dpprof.sweep: order names '%s', which vary does not have", k), 3) end
    seen[k] = true
  end
  for k, values in pairs(vary) do
    if type(k) ~= "string" then error("dpprof.sweep: vary keys must be names (strings)", 3) end
    if not seen[k] then error(string.format("dpprof.sweep: order does not name vary key '%s'", k), 3) end
    if type(values) ~= "table" or #values == 0 then
      error(string.format("dpprof.sweep: vary.%s must be a non-empty list of values", k), 3)
    end
    for i, v in ipairs(values) do
      local t = type(v)
      if t ~= "number" and t ~= "string" and t ~= "boolean" then
        error(string.format("dpprof.sweep: vary.%s[%d] must be a number, string or boolean (got %s)", k, i, t), 3)
      end
    end
    path_of(k)
  end
  local list = {}
  local function rec(i, current)
    if i > #keys then
      local cfg = deep_copy(base)
      local v = {}
      for _, k in ipairs(keys) do
        apply(cfg, k, current[k])
        v[k] = current[k]
      end
      local name = #keys > 0 and points.point_name(keys, v) or points.safe_name(base.name or "run")
      list[#list + 1] = { name = name, vary = v, config = cfg }
      return
    end
    for _, value in ipairs(vary[keys[i]]) do
      current[keys[i]] = value
      rec(i + 1, current)
    end
  end
  rec(1, {})
  local names = {}
  for _, p in ipairs(list) do
    if names[p.name] then error(string.format("dpprof.sweep: two points are both named '%s'", p.name), 3) end
    names[p.name] = true
  end
  return list
end

return points
