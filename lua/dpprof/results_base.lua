-- dpprof.results_base: what every part of the results JSON (docs/results.md, schema_version 1) reads:
-- the schema's version, statuses, phases and categories, the schema as a tree, the legacy breakdown,
-- time statistics and the small value tests of a decoded document. dpprof.results re-exports the
-- constants; dpprof.results_validate and dpprof.results_invariants check a document by them.
local dp = require("dpprof")
local json = dp.json

local base = {}

-- The schema (common/results_schema.h, the one description the chart reader uses too): its
-- version, statuses and phases; the categories are the engine's.
base.SCHEMA_VERSION = dp.results_schema.version
base.MiB = 1024 * 1024
base.TIMELINE_POINTS = 4096
base.STATUSES = dp.results_schema.choices.statuses
base.PHASES = dp.results_schema.choices.phases
-- Phases a result may lack (absent: 0 ms), as a set: "recompute" (activation checkpointing, issue
-- 16) is absent from results written before it existed.
base.OPTIONAL_PHASES = {}
for _, p in ipairs(dp.results_schema.choices.optional_phases) do base.OPTIONAL_PHASES[p] = true end
-- The categories a per-op profile groups ops by, and since when a host peak RSS counts.
base.OP_CATEGORIES = dp.results_schema.choices.op_categories
base.HOST_RSS_SINCE = dp.results_schema.choices.rss_since
base.CATEGORIES = dp.memory.categories
-- Per-layer formulations of the norms pass: the engine's list (dpprof.dpsgd.FORMULATIONS).
base.NORMS_KINDS = dp.dpsgd.FORMULATIONS

-- The legacy breakdown: each field is the sum of these categories live at the peak, in the
-- engine's order (common/memory_categories.h, through dpprof.memory.CATEGORIES: each category's
-- legacy field, nil for none).
base.LEGACY_BREAKDOWN = {}
for _, c in ipairs(dp.memory.CATEGORIES) do
  if c.legacy then
    local list = base.LEGACY_BREAKDOWN[c.legacy] or {}
    list[#list + 1] = c.name
    base.LEGACY_BREAKDOWN[c.legacy] = list
  end
end
base.LEGACY_BREAKDOWN_KEYS = {} -- its keys, sorted
for k in pairs(base.LEGACY_BREAKDOWN) do base.LEGACY_BREAKDOWN_KEYS[#base.LEGACY_BREAKDOWN_KEYS + 1] = k end
table.sort(base.LEGACY_BREAKDOWN_KEYS)

-- {avg_ms, median_ms, min_ms, max_ms} over a list of times (nil for an empty list).
function base.time_stats(list)
  if #list == 0 then return nil end
  local sorted, sum = {}, 0
  for i, v in ipairs(list) do sorted[i], sum = v, sum + v end
  table.sort(sorted)
  local n = #sorted
  local median = n % 2 == 1 and sorted[(n + 1) // 2] or (sorted[n // 2] + sorted[n // 2 + 1]) / 2
  return { avg_ms = sum / n, median_ms = median, min_ms = sorted[1], max_ms = sorted[n] }
end

-- The schema as a tree: node = {field=, key=, order={children in order}, children={[key]=node}}.
local function schema_tree(fields)
  local root, by_path = { order = {}, children = {} }, {}
  by_path[""] = root
  for _, f in ipairs(fields) do
    local parent, key = f.path:match("^(.*)(%[%])$")
    if not parent then
      parent, key = f.path:match("^(.*)%.([^.]+)$")
      if not parent then parent, key = "", f.path end
    end
    local p = by_path[parent]
    if not p then error("results schema: " .. f.path .. " comes before its parent " .. parent) end
    local node = { field = f, key = key, order = {}, children = {} }
    p.order[#p.order + 1], p.children[key], by_path[f.path] = node, node, node
  end
  return root, by_path
end

base.SCHEMA = { tree = nil, by_path = nil }
base.SCHEMA.tree, base.SCHEMA.by_path = schema_tree(dp.results_schema.fields)

-- The top-level keys whose presence marks a JSON document as meant to be a result.
base.MARK_KEYS = {}
for _, f in ipairs(dp.results_schema.fields) do
  if f.marks then base.MARK_KEYS[#base.MARK_KEYS + 1] = f.path end
end

-- Value tests of a decoded document: the JSON name of a value's type; int, num (finite) and tbl give
-- the value when it has that kind, nil otherwise; is_array and member answer true or false.
function base.type_name(v)
  if json.is_null(v) then return "null" end
  if math.type(v) then return math.type(v) end
  return type(v)
end

function base.is_array(v) return type(v) == "table" and (next(v) == nil or #v > 0) end
function base.int(v) return math.type(v) == "integer" and v or nil end
function base.num(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge and v or nil end
function base.tbl(v) return type(v) == "table" and v or nil end
function base.member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- MiB of a byte count.
function base.mb(bytes) return bytes / base.MiB end

return base
