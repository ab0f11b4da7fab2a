-- test_tensor.lua: the tensor userdata from scripts: construction, fields, methods, metamethods,
-- deterministic release, and errors that name the argument and the valid choices.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
dp.device("cpu")

local t = dp.tensor{ shape = { 2, 3 }, dtype = "f32", category = "activations", module = "layers.0.mlp" }
check.eq(#t, 6, "#t")
check.eq(t.dtype, "f32")
check.eq(t.device, "cpu")
check.eq(t.category, "activations")
check.eq(t.module, "layers.0.mlp")
check.eq(t.bytes, 24)
check.eq(t:size(2), 3)
check.eq(table.concat(t:shape(), "x"), "2x3")
check.truthy(tostring(t):find("f32%[2x3%] cpu activations layers.0.mlp"), "tostring: " .. tostring(t))

t:set{ 1, 2, 3, 4, 5, 6 }
check.eq(t:get(5), 5.0)
check.eq(t:sumsq(), 91.0)
local u = dp.tensor{ shape = { 2, 3 }, fill = 1 }
t:add(u):scale(2):axpy(-1, u) -- (t + 1) * 2 - 1
check.eq(table.concat(t:totable(), ","), "3.0,5.0,7.0,9.0,11.0,13.0")

-- matmul: (2x3) @ (3x2)
local a = dp.tensor{ shape = { 2, 3 } }:set{ 1, 2, 3, 4, 5, 6 }
local b = dp.tensor{ shape = { 3, 2 } }:set{ 1, 0, 0, 1, 1, 1 }
local c = dp.tensor{ shape = { 2, 2 } }
dp.matmul(c, a, b)
check.eq(table.concat(c:totable(), ","), "4.0,5.0,10.0,11.0")
dp.matmul(c, b, a, { trans_a = true, trans_b = true }) -- b^T a^T = (ab)^T
check.eq(table.concat(c:totable(), ","), "4.0,10.0,5.0,11.0")

-- random fills are reproducible and the plan device holds no data
local r1 = dp.tensor{ shape = { 1000 } }:random{ dist = "normal", seed = 3, stream = 1 }
local r2 = dp.tensor{ shape = { 1000 } }:random{ dist = "normal", seed = 3, stream = 1 }
local v1, v2 = r1:totable(), r2:totable()
for i = 1, 1000 do check.eq(v1[i], v2[i], "same seed, same numbers") end
-- and they are normal(0, 1) draws, not a fill both sides share (all zeros would pass the above):
-- mean within 5 standard errors (1 / sqrt(n)), variance within 5 of its (sqrt(2 / (n - 1)))
local sum, sq = 0, 0
for i = 1, 1000 do sum = sum + v1[i] end
local mean = sum / 1000
for i = 1, 1000 do sq = sq + (v1[i] - mean) ^ 2 end
check.near(mean, 0, 5 / math.sqrt(1000), "normal draws: mean")
check.near(sq / 999, 1, 5 * math.sqrt(2 / 999), "normal draws: variance")
local r3 = dp.tensor{ shape = { 1000 } }:random{ dist = "normal", seed = 4, stream = 1 }:totable()
local same = 0
for i = 1, 1000 do if r3[i] == v1[i] then same = same + 1 end end
check.eq(same, 0, "another seed, other numbers")
local r0 = dp.tensor{ shape = { 8 } }:random() -- defaults: standard normal, seed 0, stream 0
check.eq(r0:get(1), dp.tensor{ shape = { 8 } }:random{ seed = 0 }:get(1), "random() takes defaults")
local p = dp.tensor{ shape = { 1 << 15, 1 << 15 }, device = "plan", category = "activations" }
check.eq(p.bytes, 4 << 30, "plan tensor of 4 GiB")
check.eq(p:sumsq(), 0.0, "plan tensors read as zeros")
p:free()

-- bf16 and i32
local h = dp.tensor{ shape = { 4 }, dtype = "bf16" }:set{ 1, 1.00390625, -2, 3.5 }
check.eq(table.concat(h:totable(), ","), "1.0,1.0,-2.0,3.5")
local ids = dp.tensor{ shape = { 3 }, dtype = "i32", category = "inputs" }:set{ 7, 8, 9 }
check.eq(ids:get(3), 9)
check.eq(math.type(ids:get(3)), "integer")

-- copies across devices (plan is a sink)
local cp = a:to("cpu", "temp")
check.eq(cp.category, "temp")
check.eq(cp:get(6), 6.0)

-- deterministic release: free(), <close>, and __gc are one idempotent release
local before = dp.memory.stats().allocated
do
  local big <close> = dp.tensor{ shape = { 1 << 20 }, category = "temp" }
  check.eq(dp.memory.stats().allocated - before, 4 << 20, "live inside the block")
end
check.eq(dp.memory.stats().allocated, before, "released by __close")
local f = dp.tensor{ shape = { 10 } }
f:free()
f:free() -- idempotent
check.eq(f.alive, false)
check.raises(function() return f:get(1) end, "freed")
check.eq(tostring(f), "tensor(freed)")
local g = dp.tensor{ shape = { 256 } }
g = nil
collectgarbage("collect")
check.eq(dp.memory.stats().allocated, before, "released by __gc")

-- errors name the problem and the valid choices
check.raises(function() dp.tensor{ shape = { 2, -3 } } end, { "shape[2]", "negative" })
check.raises(function() dp.tensor{ shape = { 2 }, dtype = "f16" } end, { "unknown dtype 'f16'", "f32, bf16, i32" })
check.raises(function() dp.tensor{ shape = { 2 }, category = "weights" } end,
  { "unknown category 'weights'", "parameters", "norm_samples" })
check.raises(function() dp.tensor{ shape = { 2 }, shap = 1 } end, { "unknown key 'shap'", "valid: shape" })
check.raises(function() dp.tensor{ shape = { 2 }, device = "tpu" } end, { "unknown device 'tpu'", "cpu, cuda, plan, auto" })
check.raises(function() dp.tensor{ shape = { 1, 2, 3, 4, 5 } } end, "at most 4")
check.raises(function() dp.matmul(c, a, a) end, "shapes do not agree")
check.raises(function() t:get(7) end, "index out of range")
check.raises(function() t:set{ 1, 2 } end, "list has 2 values")
check.raises(function() t:random{ dist = "cauchy" } end, "valid: normal, uniform")
check.raises(function() t.add(5, t) end, "dpprof.tensor expected")
print("test_tensor.lua: ok")
