-- test_llama3_plan.lua: Llama-3.1-8B + LoRA planned from its config.json alone
-- (tests/fixtures/llama3_8b: public shapes, no weights), and the plan held to a CPU run.
--
-- 1. The plan of the 8B config with LoRA r = 16 on all seven linears in bf16: `parameters` is
--    exactly 2 bytes per base weight (bf16 only: no f32 master) plus 4 + 2 per adapter parameter
--    (its f32 master and the bf16 copy its GEMMs read); `gradients` exactly 4 per adapter
--    parameter and `optimizer_states` 8 (AdamW's m and v), none for the frozen base.
-- 2. The same checkpoint scaled down by name (hidden, layers, heads, vocab, ...; weights =
--    "random") on the plan device and on the CPU, bf16 LoRA and f32, under several DP methods:
--    every category's and every module's peak and live-at-peak bytes equal, byte for byte.
-- 3. Llama-3.1-70B + LoRA r = 16 in bf16 on 8 x H100 under fsdp (tests/fixtures/llama3_70b), seq_len
--    64: each rank builds its model in parts (one tensor whole at a time), so the planned peak
--    (plan.peak_bytes, the larger of training's and the warm-up's, the build's included) is
--    training's, about 18.6 GiB, not the whole model (131.9 GiB when it was built whole first);
--    without warm-up steps the warm-up's peak is exactly the build's: the largest over the tensors
--    of the parts made so far + the tensor whole.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local DIR = arg[0]:match("(.*/)") .. "../fixtures/llama3_8b"
local ALL = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" }

-- 1. the 8B plan
local file = dp.model.read_config(DIR)
check.eq(file.hidden, 4096)
check.eq(file.kv_heads, 8, "grouped-query attention: 8 key/value heads")
check.eq(file.rope_scaling.rope_type, "llama3")
local V, d, L, H, Hkv, F = file.vocab, file.hidden, file.layers, file.heads, file.kv_heads, file.ffn
local hd = d // H
local base = V * d + L * (d * H * hd + 2 * d * Hkv * hd + H * hd * d + 3 * d * F + 2 * d) + d + V * d
check.eq(base, 8030261248, "Llama-3.1-8B's parameter count")
local r = 16
local adapters = L * r * ((d + H * hd) + 2 * (d + Hkv * hd) + (H * hd + d) + 2 * (d + F) + (F + d))
local res = dp.experiment{ model = { path = DIR, seq_len = 512, batch = 1, dtype = "bf16",
                                     lora = { rank = r, alpha = 32, targets = ALL } },
                           method = "flash_clip", device = "plan", iters = 1, warmup = 1 }
check.eq(res.status, "ok", tostring(res.message))
local cat = res.memory.categories
print(string.format("8B + LoRA r=16 bf16 plan: parameters %d bytes = 2 x %d base + (4 + 2) x %d adapter",
                    cat.parameters.peak_bytes, base, adapters))
check.eq(cat.parameters.peak_bytes, 2 * base + (4 + 2) * adapters, "parameters: bf16 base + f32 adapters + bf16 copies")
check.eq(cat.gradients.peak_bytes, 4 * adapters, "gradients: the adapters' only")
check.eq(cat.optimizer_states.peak_bytes, 8 * adapters, "AdamW states: the adapters' only")
check.eq(res.config.model.path, DIR)
check.eq(res.config.model.kv_heads, 8)
-- f32 masters for everything would be 3x: what the issue measured before
check.truthy(cat.parameters.peak_bytes < 0.35 * (6 * base), "not f32 masters plus bf16 copies")

-- dpprof.model.load on the plan device: config.json alone (the 8B's weights are not here)
do
  local pm8 <close> = dp.model.load(DIR, { device = "plan", seq_len = 1024, dtype = "bf16" })
  check.eq(pm8:num_params(), base + 0, "the 8B from config.json alone")
end
-- elsewhere the weights are needed: refused before the model is allocated
check.raises(function() dp.model.load(DIR, { device = "cpu", seq_len = 16 }) end, { "no weights" })
check.eq(dp.memory.stats("cpu").allocated, 0, "nothing allocated for the refused load")

-- 2. plan against CPU, byte for byte
local function run(device, method, over)
  local model = { path = DIR, hidden = 64, layers = 2, heads = 4, kv_heads = 2, ffn = 96, vocab = 128,
                  seq_len = 40, batch = 3, weights = "random" }
  for k, v in pairs(over) do model[k] = v end
  local cfg = { model = model, method = method, device = device, iters = 1, warmup = 1,
                dp = { max_physical_batch_size = 2 }, snapshots = "none" }
  if device == "plan" then cfg.device_model = { base = "h100", workspace = false } end
  local out = dp.experiment(cfg)
  check.eq(out.status, "ok", device .. " " .. method .. ": " .. tostring(out.message))
  return out
end
local cases = { { dtype = "bf16", lora = { rank = 4, targets = ALL } }, { dtype = "f32" },
                { dtype = "bf16", lora = { rank = 2, targets = { "q_proj", "v_proj" } }, master_weights = false } }
for _, over in ipairs(cases) do
  for _, method in ipairs({ "vanilla", "flat", "ghost", "bk", "flash_clip" }) do
    local p, c = run("plan", method, over), run("cpu", method, over)
    local what = string.format("%s %s%s", method, over.dtype, over.lora and " LoRA" or "")
    for name, e in pairs(c.memory.categories) do
      check.eq(p.memory.categories[name].peak_bytes, e.peak_bytes, what .. " " .. name .. " peak")
      check.eq(p.memory.categories[name].live_at_peak_bytes, e.live_at_peak_bytes, what .. " " .. name .. " at peak")
    end
    check.eq(#p.memory.modules, #c.memory.modules, what .. " modules")
    local pm = {}
    for _, m in ipairs(p.memory.modules) do pm[m.module] = m end
    for _, m in ipairs(c.memory.modules) do
      local q = pm[m.module] or {}
      check.eq(q.peak_bytes, m.peak_bytes, what .. " module " .. m.module .. " peak")
      check.eq(q.live_at_peak_bytes, m.live_at_peak_bytes, what .. " module " .. m.module .. " at peak")
    end
    check.eq(p.memory.peak_bytes, c.memory.peak_bytes, what .. " peak")
  end
end

-- dp.fit on the checkpoint: config.json alone; seq_len searched up to its 131072 positions
local f = dp.fit{ base = { model = { path = DIR, batch = 1, dtype = "bf16", lora = { rank = r, targets = ALL } } },
                  method = "flash_clip", budget_gb = 80 }
check.eq(f.hi, 131072, "the search stops at max_position_embeddings")
local e = f.by_method.flash_clip
check.truthy(e.largest and e.largest >= 1024 and e.first_unfit == e.largest + 64,
             "largest " .. tostring(e.largest) .. ", first unfit " .. tostring(e.first_unfit))

-- a checkpoint's weights have its shapes: overriding a size needs weights = "random" (or plan)
check.raises(function()
  dp.experiment{ model = { path = arg[0]:match("(.*/)") .. "../fixtures/hf/llama3", seq_len = 16, layers = 1 },
                 device = "cpu" }
end, { "model.layers overrides", "weights = \"random\"" })
check.raises(function() dp.experiment{ model = { path = DIR, seq_len = 16, weights = "zeros" }, device = "plan" } end,
             { "unknown model.weights 'zeros' (valid: file, random)" })
check.raises(function() dp.experiment{ model = { path = "/nonexistent/ckpt", seq_len = 16 }, device = "plan" } end,
             { "model.path", "config.json" })
print("test_llama3_plan.lua: all checks passed")

-- 3. the 70B under fsdp: built in parts
do
  local DIR70 = arg[0]:match("(.*/)") .. "../fixtures/llama3_70b"
  local function plan70(warmup, device_model)
    local out = dp.experiment{ model = { path = DIR70, dtype = "bf16", master_weights = true, batch = 8, seq_len = 64,
                                         lora = { rank = 16, alpha = 16 }, checkpoint = "blocks" },
                               method = "ghost", device = "plan", device_model = device_model or "h100", iters = 1,
                               warmup = warmup,
                               snapshots = "none", dp = {}, distributed = { strategy = "fsdp", world_size = 8, rank = 3 } }
    check.eq(out.status, "ok", "70B fsdp: " .. tostring(out.message))
    return out
  end
  local parts, largest, build = 0, 0, 0
  do -- closed before the runs: the plan device would count it
    local m <close> = dp.model.load(DIR70, { device = "plan", seq_len = 64, batch = 1, dtype = "bf16",
                                             lora = { rank = 16, alpha = 16 } })
    for _, p in ipairs(m:params()) do
      local size = p.trainable and 4 or 2 -- the adapters' f32 masters, the frozen base bf16
      parts = parts + (p.numel + 7) // 8 * size
      largest = math.max(largest, p.numel * size)
      build = math.max(build, parts + p.numel * size)
    end
  end
  local res70 = plan70(1)
  local gib = 2 ^ 30
  print(string.format("70B + LoRA fsdp 8 ranks, seq_len 64: plan.peak %.2f GiB, training %.2f GiB, warm-up %.2f GiB "
                      .. "(parts %.2f GiB + largest tensor %.2f GiB)", res70.plan.peak_bytes / gib,
                      res70.memory.peak_bytes / gib, res70.memory.warmup_peak_bytes / gib, parts / gib, largest / gib))
  check.eq(res70.plan.peak_bytes, res70.memory.peak_bytes, "70B fsdp: the planned peak is training's")
  check.truthy(res70.plan.peak_bytes > 18 * gib and res70.plan.peak_bytes < 19.5 * gib, "70B fsdp: about 18.6 GiB")
  check.truthy(res70.memory.warmup_peak_bytes <= parts + largest + res70.memory.peak_bytes, "warm-up bounded")
  -- (without the cuBLAS and kernels workspace, which the device holds from the start)
  check.eq(plan70(0, { base = "h100", workspace = false }).memory.warmup_peak_bytes, build, "70B fsdp: the build's peak, the parts + one tensor whole")
end
