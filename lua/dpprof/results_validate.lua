-- dpprof.results_validate: checks a decoded results document against docs/results.md: the schema's
-- fields (common/results_schema.h, as dpprof.results_schema), walked in its order, each present one
-- checked for its type, sign and choices and each required one for its presence; then, after each
-- top-level field, the invariants that tie fields together (dpprof.results_invariants).
local dp = require("dpprof")
local json = dp.json
local base = require("dpprof.results_base")
local invariants = require("dpprof.results_invariants")

local type_name, is_array, member = base.type_name, base.is_array, base.member

local validate = {}

-- The value lists a field's `choices` names: the schema's own and the engine's.
local CHOICES = {
  statuses = base.STATUSES, phases = base.PHASES, samplings = dp.results_schema.choices.samplings,
  bounds = dp.results_schema.choices.bounds, profiles = dp.results_schema.choices.profiles,
  op_categories = dp.results_schema.choices.op_categories, rss_since = dp.results_schema.choices.rss_since,
  formulations = dp.dpsgd.FORMULATIONS, accountants = dp.privacy.accountants,
  flash_impls = dp.dpsgd.FLASH_IMPLS, styles = dp.dpsgd.STYLES, clip_fns = dp.dpsgd.CLIP_FNS,
}
-- The key sets of the placeholders: {category} and {phase} (every one required but the optional
-- phases).
local KEYS = { ["{category}"] = base.CATEGORIES, ["{phase}"] = base.PHASES }
local OPTIONAL_KEYS = { ["{phase}"] = base.OPTIONAL_PHASES }

local V = {}
V.__index = V
for k, f in pairs(invariants.methods) do V[k] = f end

-- A task that Slurm stopped for its memory (OUT_OF_MEMORY) has no allocation to describe: its
-- result is an oom without the `oom` record.
local function slurm_oom(r)
  local sw = type(r) == "table" and r.sweep
  local pl = type(sw) == "table" and sw.placement
  local sl = type(pl) == "table" and pl.slurm
  return type(sl) == "table" and sl.state == "OUT_OF_MEMORY"
end

local function new_validator(r)
  local status = type(r) == "table" and r.status or nil
  return setmetatable({ problems = {}, said = {}, ok = status == "ok", oom = status == "oom" and not slurm_oom(r),
                        predicted = type(r) == "table" and r.predicted == true }, V)
end

function V:fail(path, fmt, ...)
  local line = path .. ": " .. string.format(fmt, ...)
  if self.said[line] then return end -- one line per problem, however many keys of it were asked for
  self.said[line] = true
  self.problems[#self.problems + 1] = line
end

local KIND = { scalar = "number, string or boolean" }
local function kind_text(f)
  local k = KIND[f.type] or f.type
  return f.nullable and k .. " or null" or k
end

local TYPE_OK = {
  string = function(v) return type(v) == "string" end,
  integer = function(v) return math.type(v) == "integer" end,
  number = function(v) return type(v) == "number" end,
  boolean = function(v) return type(v) == "boolean" end,
  object = function(v) return type(v) == "table" and not json.is_null(v) end,
  array = function(v) return type(v) == "table" and not json.is_null(v) end,
  scalar = function(v) local t = type(v) return t == "number" or t == "string" or t == "boolean" end,
  any = function() return true end,
}

function V:required(f)
  local w = f.when
  if w == "always" or w == "parent" then return true end
  if w == "ok" then return self.ok end
  if w == "failed" then return not self.ok end
  if w == "oom" then return self.oom end
  if w == "predicted" then return self.ok and self.predicted end
  return false
end

local function join(path, key) return path == "" and key or path .. "." .. key end

-- The keys of t as strings, sorted (so problems come in the same order every time).
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- Checks value v of node at path; returns false when v has the wrong type or value.
function V:check(node, v, path)
  local f = node.field
  if v == nil then
    if self:required(f) then self:fail(path, "missing (%s expected)", kind_text(f)) end
    return true
  end
  if f.nullable and json.is_null(v) then return true end
  if not TYPE_OK[f.type](v) then
    self:fail(path, "%s expected, got %s", kind_text(f), type_name(v))
    return false
  end
  if type(v) == "number" then
    if not dp.is_finite(v) then
      self:fail(path, "not a finite number")
      return false
    end
    if f.nonneg and v < 0 then
      self:fail(path, "negative (%s)", tostring(v))
      return false
    end
  end
  if f.choices and not member(CHOICES[f.choices], v) then
    self:fail(path, "'%s' (valid: %s)", tostring(v), table.concat(CHOICES[f.choices], ", "))
    return false
  end
  if f.type == "array" then
    if not is_array(v) then
      self:fail(path, "array expected, got an object")
      return false
    end
    local item = node.children["[]"]
    for i, x in ipairs(item and v or {}) do
      -- of an array of numbers, only the first wrong one is reported
      if not self:check(item, x, path .. "[" .. i .. "]") and item.field.type ~= "object" then break end
    end
  elseif f.type == "object" then
    self:children(node, v, path)
  end
  return true
end

-- Checks the described children of object t (node's) at path.
function V:children(node, t, path)
  for _, child in ipairs(node.order) do
    local key = child.key
    local names = KEYS[key]
    if names then
      local optional = OPTIONAL_KEYS[key] or {}
      for _, k in ipairs(names) do
        if not (optional[k] and t[k] == nil) then self:check(child, t[k], join(path, k)) end
      end
      for _, k in ipairs(sorted_keys(t)) do
        if not member(names, k) then
          self:fail(join(path, k), "unknown %s (valid: %s)", key:sub(2, -2), table.concat(names, ", "))
        end
      end
    elseif key == "*" then
      for _, k in ipairs(sorted_keys(t)) do self:check(child, t[k], join(path, k)) end
    else
      self:check(child, t[key], join(path, key))
    end
  end
end

-- Checks every field of r the schema describes (docs/base.md) and the invariants between
-- them. An ok result must have them all; a failed one must have status, message (and oom for
-- status "oom"), and whatever else it carries must be right. Returns true, or false and the list
-- of problems (one line each, naming the field). It never raises, whatever the document holds.
function validate.validate(r)
  if type(r) ~= "table" then return false, { "(top): object expected, got " .. type_name(r) } end
  local v = new_validator(r)
  for _, node in ipairs(base.SCHEMA.tree.order) do
    v:check(node, r[node.key], node.key)
    local after = invariants.after[node.key]
    if after then after(v, r) end
  end
  if #v.problems > 0 then return false, v.problems end
  return true
end

return validate
