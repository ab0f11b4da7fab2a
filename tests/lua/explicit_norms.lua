-- explicit_norms.lua: the per-sample gradient norms the DP tests check every method against,
-- made the plain way: each sample of a batch run through the model alone and its trainable
-- gradients summed in squares (a path that forms each gradient, sharing no per-sample norm code
-- with the methods).
local dp = require("dpprof")

-- sample i of a batch (B x T inputs and targets), as a batch of one
local function one(batch, i)
  local T = batch.inputs:shape()[2]
  local function row(t)
    local all, vals = t:totable(), {}
    for j = 1, T do vals[j] = all[(i - 1) * T + j] end
    local r = dp.tensor{ shape = { 1, T }, dtype = "i32", category = "inputs" }
    r:set(vals)
    return r
  end
  return { inputs = row(batch.inputs), targets = row(batch.targets), size = 1 }
end

-- ||grad L_i|| over the trainable tensors, from a backward of the batch of one b1 alone
local function norm(m, b1)
  m:zero_grad()
  m:forward(b1)
  m:backward{ scale = { 1 } }
  local s = 0
  for _, p in ipairs(m:params()) do
    if p.trainable then
      local g = m:grad(p.name)
      if g then s = s + g:sumsq() end
    end
  end
  m:zero_grad()
  return math.sqrt(s)
end

-- {||grad L_1||, ..., ||grad L_n||}: model m's norms for the first n samples of batch
return function(m, batch, n)
  local want = {}
  for i = 1, n do want[i] = norm(m, one(batch, i)) end
  return want
end
