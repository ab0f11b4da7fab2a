-- test_optim.lua: dpprof.optim from scripts: AdamW's and SGD's first steps against PyTorch's
-- formulas, lazy state allocation (as the allocator sees it), errors naming the bad option,
-- the optimizer keeping its model alive, deterministic release; and m:save / dpprof.model.load.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
dp.device("cpu")

local function tiny(extra)
  local cfg = { arch = "gpt", vocab = 16, hidden = 8, layers = 1, heads = 2, seq_len = 4, batch = 2,
                seed = 5, init_std = 0.3 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return dp.model(cfg)
end

local function states_bytes()
  return dp.memory.stats().current.optimizer_states
end

local function backward(m, seed)
  local batch = dp.batch{ model = m, size = 2, seed = seed or 0 }
  m:forward(batch)
  m:backward{}
  dp.free_batch(batch)
end

-- AdamW's first step moves each weight by lr * g / (|g| + eps) after the decoupled decay
do
  local m = tiny()
  local base = states_bytes()
  local opt <close> = dp.optim.adamw(m, { lr = 0.01, betas = { 0.9, 0.99 }, eps = 1e-8, weight_decay = 0.1 })
  check.eq(opt:state_bytes(), 0, "no state before the first step")
  check.eq(states_bytes(), base, "allocator: no state before the first step")
  local cfg = opt:config()
  check.eq(cfg.name, "adamw")
  check.near(cfg.betas[2], 0.99, 1e-12, "betas[2]")

  backward(m, 1)
  local name = "transformer.h.0.mlp.c_fc.weight"
  local p0, g = m:param(name):totable(), m:grad(name):totable()
  opt:step()
  local p1 = m:param(name):totable()
  for i = 1, #p0 do
    local want = p0[i] * (1 - 0.01 * 0.1) - 0.01 * g[i] / (math.abs(g[i]) + 1e-8)
    check.near(p1[i], want, 1e-6, name .. "[" .. i .. "]")
  end
  local trainable = m:num_params(true)
  check.eq(opt:state_bytes(), 8 * trainable, "exp_avg and exp_avg_sq, f32, per trainable parameter")
  check.eq(states_bytes() - base, 8 * trainable, "allocator sees the states")
  check.eq(opt:steps(), 1)
  check.truthy(tostring(opt):find("adamw", 1, true), tostring(opt))

  opt:zero_grad()
  check.eq(m:grad(name), nil, "zero_grad sets gradients to none by default")
  backward(m, 2)
  opt:zero_grad(false)
  check.eq(m:grad(name):sumsq(), 0.0, "zero_grad(false) zeroes in place")
  opt:set_lr(0.5)
  check.eq(opt:config().lr, 0.5)
  opt:free()
  check.eq(states_bytes(), base, "free releases the states")
  check.raises(function() opt:step() end, "freed")
  opt:free() -- idempotent
  m:free()
end

-- SGD with momentum: buf = g + wd p at the first step, p -= lr buf
do
  local m = tiny()
  local opt = dp.optim.sgd(m, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 })
  backward(m, 3)
  local name = "transformer.ln_f.weight"
  local p0, g = m:param(name):totable(), m:grad(name):totable()
  opt:step()
  local p1 = m:param(name):totable()
  for i = 1, #p0 do
    check.near(p1[i], p0[i] - 0.1 * (g[i] + 0.01 * p0[i]), 1e-6, name .. "[" .. i .. "]")
  end
  check.eq(opt:state_bytes(), 4 * m:num_params(true), "one momentum buffer per parameter")
  check.eq(opt:config().momentum, 0.9)
  local plain = dp.optim.sgd(m, { lr = 0.1 })
  plain:step()
  check.eq(plain:state_bytes(), 0, "plain SGD keeps no state")
  plain:free()
  opt:free()
  m:free()
end

-- LoRA: only the adapters get state
do
  local m = tiny{ lora = { rank = 2, alpha = 4, targets = { "qkv", "fc" } } }
  local opt = dp.optim.adamw(m, { lr = 0.01 })
  backward(m, 4)
  opt:step()
  check.truthy(m:num_params(true) < m:num_params(), "base weights frozen")
  check.eq(opt:state_bytes(), 8 * m:num_params(true), "states for the adapters only")
  opt:free()
  m:free()
end

-- errors name the option and its valid range
do
  local m = tiny()
  check.raises(function() dp.optim.adamw(m, { lr = -1 }) end, { "dpprof.optim.adamw", "lr", ">= 0" })
  check.raises(function() dp.optim.adamw(m, { betas = { 1.0, 0.999 } }) end, { "betas[1]", "[0, 1)" })
  check.raises(function() dp.optim.adamw(m, { betas = { 0.9 } }) end, { "betas", "two numbers" })
  check.raises(function() dp.optim.adamw(m, { eps = -1 }) end, { "eps" })
  check.raises(function() dp.optim.adamw(m, { momentum = 0.9 }) end, { "unknown key 'momentum'", "betas" })
  check.raises(function() dp.optim.sgd(m, { momentum = -0.1 }) end, { "dpprof.optim.sgd", "momentum" })
  check.raises(function() dp.optim.sgd(m, { weight_decay = "x" }) end, { "weight_decay", "number" })
  check.raises(function() dp.optim.sgd({}, {}) end, { "dpprof.model" })
  local opt = dp.optim.sgd(m, { lr = 0.1 })
  check.raises(function() opt:set_lr(-1) end, { "lr" })
  -- an lr that overflows the weights in one step (1e308 made them inf): refused at set_lr and at
  -- construction, the bound said (issue 26)
  check.raises(function() opt:set_lr(1e308) end, { "optimizer:set_lr: sgd: lr must be a finite number >= 0 and <= 100 (got 1e+308)" })
  check.raises(function() opt:set_lr(0 / 0) end, { "optimizer:set_lr: sgd: lr must be a finite number" })
  check.raises(function() dp.optim.adamw(m, { lr = 1e308 }) end, { "dpprof.optim.adamw: adamw: lr must be a finite number >= 0 and <= 100" })
  check.raises(function() dp.optim.sgd(m, { lr = math.huge }) end, { "lr must be a finite number >= 0 and <= 100 (got inf)" })
  opt:set_lr(100)
  check.eq(opt:config().lr, 100.0, "the bound itself is taken")
  -- a model freed under its optimizer is reported, not used
  m:free()
  check.raises(function() opt:step() end, { "model was freed" })
  check.raises(function() opt:zero_grad() end, { "model was freed" })
  opt:free()
end

-- the optimizer keeps its model alive: dropping the model's last reference is safe
do
  local opt = dp.optim.adamw(tiny(), { lr = 0.01 })
  collectgarbage()
  collectgarbage()
  opt:zero_grad()
  opt:step() -- no gradients: nothing to do, but the model must still be there
  check.eq(opt:steps(), 1)
  opt = nil
  collectgarbage()
  collectgarbage()
end

-- save and load through a checkpoint directory
do
  local m = tiny()
  local dir = os.tmpname()
  os.remove(dir)
  m:save(dir)
  local m2 = dp.model.load(dir, { seq_len = 4, batch = 2 })
  local a, b = m:param("transformer.wte.weight"):totable(), m2:param("transformer.wte.weight"):totable()
  for i = 1, #a do check.eq(a[i], b[i], "wte[" .. i .. "] after save and load") end
  check.eq(m2:config().hidden, 8)
  check.raises(function() dp.model.load(dir, { sequence = 4 }) end, { "unknown key 'sequence'", "seq_len" })
  check.raises(function() dp.model.load(dir .. "/nope") end, { "config.json" })
  check.raises(function() m:save("/nonexistent/dir/x") end, { "/nonexistent/dir/x" })
  os.remove(dir .. "/config.json")
  os.remove(dir .. "/model.safetensors")
  os.remove(dir)
  m2:free()
  m:free()
end

print("test_optim.lua: ok")
