-- test_memory_categories.lua: the memory categories are declared once (common/memory_categories.h)
-- and everything else derives from that list: the engine's names (dpprof.memory.categories, from
-- core's enum), the writer's legacy breakdown (dpprof.results.LEGACY_BREAKDOWN), and each
-- category's chart component. A result with a category the list does not hold is reported by the
-- validator, by name.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local results = dp.results

local LIST = dp.memory.CATEGORIES
-- core's names, in core's order, are the list's
check.eq(#LIST, #dp.memory.categories, "one row per engine category")
for i, c in ipairs(LIST) do check.eq(c.name, dp.memory.categories[i], "category " .. i .. " named as core names it") end
check.eq(#LIST, 11, "eleven categories")

-- each category's legacy field and component, as docs/results.md states them
local EXPECTED = {
  parameters = { "model_parameters_mb", "parameters" },
  gradients = { "gradients_mb", "gradients" },
  optimizer_states = { "optimizer_states_mb", "optimizer_states" },
  activations = { "activation_hooks_mb", "activations" },
  per_sample_grads = { "norm_samples_mb", "per_sample_grads" },
  norm_samples = { "norm_samples_mb", "norm_samples" },
  temp = { "temp_matrices_mb", "temp" },
  output_grads = { "activation_hooks_mb", "output_grads" },
  inputs = { nil, "other" },
  workspace = { "temp_matrices_mb", "temp" },
  other = { nil, "other" },
}
local schema_paths = {}
for _, f in ipairs(dp.results_schema.fields) do schema_paths[f.path] = f end
for _, c in ipairs(LIST) do
  local e = EXPECTED[c.name]
  check.truthy(e ~= nil, c.name .. " is a category docs/results.md describes")
  if e then
    check.eq(c.legacy, e[1], c.name .. "'s legacy field")
    check.eq(c.component, e[2], c.name .. "'s chart component")
  end
  check.truthy(type(c.component) == "string" and #c.component > 0, c.name .. " has a component (other: explicitly)")
  if c.legacy then
    local f = schema_paths["breakdown." .. c.legacy]
    check.truthy(f and f.type == "number", c.name .. "'s legacy field is a number field of the schema's breakdown")
  end
end

-- the writer's breakdown derives from the list: every legacy field with its categories in the
-- engine's order, and nothing for inputs and other
local n = 0
for key, list in pairs(results.LEGACY_BREAKDOWN) do
  n = n + 1
  for _, name in ipairs(list) do check.eq(EXPECTED[name][1], key, name .. " in breakdown." .. key) end
end
check.eq(n, 6, "six legacy fields with categories")
check.eq(table.concat(results.LEGACY_BREAKDOWN.activation_hooks_mb, ","), "activations,output_grads", "activation hooks")
check.eq(table.concat(results.LEGACY_BREAKDOWN.norm_samples_mb, ","), "per_sample_grads,norm_samples", "norm samples")
check.eq(table.concat(results.LEGACY_BREAKDOWN.temp_matrices_mb, ","), "temp,workspace", "temp matrices")
check.eq(table.concat(results.LEGACY_BREAKDOWN_KEYS, ","), "activation_hooks_mb,gradients_mb,model_parameters_mb,"
         .. "norm_samples_mb,optimizer_states_mb,temp_matrices_mb", "the legacy keys, sorted")

-- a real result: its breakdown sums the categories the list names; a category the engine does not
-- have is reported by the validator, naming it
local r = dp.experiment{ device = "cpu", iters = 1, warmup = 0, method = "ghost",
                         model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 } }
local ok, problems = results.validate(r)
check.truthy(ok, "the result is valid: " .. table.concat(problems or {}, "; "))
local sums = {}
for _, c in ipairs(LIST) do
  if c.legacy then sums[c.legacy] = (sums[c.legacy] or 0) + r.memory.categories[c.name].live_at_peak_bytes end
end
for key, sum in pairs(sums) do check.eq(r.breakdown[key], sum / results.MiB, "breakdown." .. key) end
check.truthy(sums.model_parameters_mb > 0, "parameters live at the peak")

local bad = dp.deep_copy(r)
bad.memory.categories.kv_cache = dp.deep_copy(bad.memory.categories.other)
ok, problems = results.validate(bad)
local text = table.concat(problems or {}, "; ")
check.truthy(not ok and text:find("memory.categories.kv_cache", 1, true), "an unknown category is reported: " .. text)
bad = dp.deep_copy(r)
bad.memory.categories.inputs = nil
ok, problems = results.validate(bad)
text = table.concat(problems or {}, "; ")
check.truthy(not ok and text:find("memory.categories.inputs", 1, true), "a missing category is reported: " .. text)

print("ok")
