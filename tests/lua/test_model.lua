-- test_model.lua: the model from scripts: dpprof.model{...}, batches (synthetic and token files),
-- forward/backward with scales, retained and norm-only passes, parameters by Hugging Face name,
-- LoRA, the plan device, deterministic release, and errors that name the key and valid values.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

-- dpprof.model is a table (others add dpprof.model.load) that builds models when called
check.eq(type(dp.model), "table", "type(dp.model)")

local V, d, L, H, T, B = 50, 32, 2, 4, 16, 4
local cfg = { arch = "gpt", vocab = V, hidden = d, layers = L, heads = H, seq_len = T, batch = B, device = "cpu" }
local m = dp.model(cfg)
check.eq(m.device, "cpu")
check.eq(m.arch, "gpt")
check.eq(m.dtype, "f32")
check.truthy(tostring(m):find("model%(gpt, 2 layers, hidden 32"), "tostring: " .. tostring(m))

-- sizes: GPT-2's parameters, tied head counted once
local F = 4 * d
local per_block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (F * d + F) + (d * F + d)
check.eq(m:num_params(), V * d + T * d + L * per_block + 2 * d, "num_params")
check.eq(m:num_params(true), m:num_params(), "all trainable without LoRA")
local c = m:config()
check.eq(c.ffn, F, "config.ffn")
check.eq(c.max_positions, T, "config.max_positions")
check.eq(c.tie_head, true, "config.tie_head")
check.eq(c.lora, nil, "config.lora")

-- parameters in Hugging Face's order, names and kinds
local ps = m:params()
check.eq(ps[1].name, "transformer.wte.weight")
check.eq(ps[1].kind, "embedding")
check.eq(ps[2].name, "transformer.wpe.weight")
check.eq(ps[5].name, "transformer.h.0.attn.c_attn.weight")
check.eq(table.concat(ps[5].shape, "x"), (3 * d) .. "x" .. d, "c_attn stored out x in")
check.eq(ps[5].hf_transposed, true, "Conv1D weights are transposed in HF files")
check.eq(ps[5].module, "layers.0.attn.qkv")
check.eq(ps[#ps].name, "transformer.ln_f.bias")

-- batches: i32 B x T under `inputs`, targets the next tokens, deterministic in (seed, step)
local b = dp.batch{ model = m, seed = 7, step = 3 }
check.eq(b.size, B)
check.eq(b.inputs.category, "inputs")
check.eq(b.inputs.dtype, "i32")
check.eq(table.concat(b.inputs:shape(), "x"), B .. "x" .. T)
local ins, tgs = b.inputs:totable(), b.targets:totable()
for i = 1, B do
  for t = 1, T - 1 do check.eq(tgs[(i - 1) * T + t], ins[(i - 1) * T + t + 1], "targets are the next tokens") end
end
for _, v in ipairs(ins) do check.truthy(v >= 0 and v < V, "token in range") end
local again = dp.batch{ model = m, seed = 7, step = 3, size = 2 }
local ins2 = again.inputs:totable()
for k = 1, 2 * T do check.eq(ins2[k], ins[k], "a sample does not depend on the batch size") end
local other = dp.batch{ model = m, seed = 7, step = 4 }
check.truthy(table.concat(other.inputs:totable(), ",") ~= table.concat(ins, ","), "another step, other tokens")
dp.free_batch(other)
dp.free_batch(other) -- idempotent
check.eq(other.inputs.alive, false)

-- forward: the mean of the per-sample losses, near ln V for a fresh model
local loss, per = m:forward(b)
check.eq(#per, B)
local mean = 0
for _, l in ipairs(per) do mean = mean + l / B end
check.near(loss, mean, 1e-6, "loss is the mean of per-sample losses")
check.near(loss, math.log(V), 0.05, "fresh model's loss")
m:backward()
local g1 = m:grad("transformer.h.0.attn.c_attn.weight")
check.eq(g1.device, "cpu")
local n1 = g1:sumsq()
check.truthy(n1 > 0, "a gradient")
-- per-sample scales: s_i = 2/B doubles the gradient of the mean loss
m:zero_grad()
check.eq(m:grad("transformer.h.0.attn.c_attn.weight"), nil, "zero_grad() sets to none")
m:forward(b)
m:backward{ scale = { 2 / B, 2 / B, 2 / B, 2 / B } }
check.near(m:grad("transformer.h.0.attn.c_attn.weight"):sumsq(), 4 * n1, 1e-4, "gradient linear in the scale")
-- zero_grad(false) keeps zeroed buffers
m:zero_grad(false)
check.eq(m:grad("transformer.h.0.attn.c_attn.weight"):sumsq(), 0.0)
m:zero_grad()

-- a retained backward, then another; a third has nothing to go back through
m:forward(b)
m:backward{ retain = true }
local st = dp.memory.stats("cpu")
check.truthy(st.current.activations > 0, "retained activations")
m:backward{}
check.near(m:grad("transformer.h.0.attn.c_attn.weight"):sumsq(), 4 * n1, 1e-4, "two backwards add up")
check.eq(dp.memory.stats("cpu").current.activations, 0, "activations freed by the last backward")
check.raises(function() m:backward{} end, { "model:backward", "forward" }, "backward without forward")

-- a norm-only pass allocates no gradient
m:zero_grad()
m:forward(b)
m:backward{ weight_grads = false }
check.eq(m:grad("transformer.wte.weight"), nil, "weight_grads = false")

-- parameters by name: a copy out, a value in
local w = m:param("transformer.ln_f.weight")
check.eq(w:get(1), 1.0, "LayerNorm gains start at 1")
w:fill(0.5)
m:set_param("transformer.ln_f.weight", w)
check.eq(m:param("transformer.ln_f.weight"):get(d), 0.5)
check.raises(function() m:param("nope") end, { "model:param", "no parameter named 'nope'" })
check.raises(function() m:set_param("transformer.ln_f.weight", dp.tensor{ shape = { 3 } }) end,
  { "model:set_param", "needs f32 with 32 elements" })

-- the batch of a forward must outlive the backward, unchanged (issue 13 item 5: the backward
-- indexes the embedding table and the logits with the ids the forward checked): while a backward
-- may still read it, writes and frees are refused; a retained backward keeps it, the last one
-- (or release_activations, or another forward) lets it go
local PINNED = { "a batch that a pending backward reads" }
local bad = {}
for i = 1, B * T do bad[i] = V + 1000 end
m:forward(b)
check.raises(function() b.targets:set(bad) end, PINNED, "targets index the logits in the loss backward")
check.raises(function() b.inputs:fill(V + 1000) end, PINNED, "inputs index wte in the embedding backward")
check.raises(function() dp.free_batch(b) end, PINNED)
m:backward{ retain = true }
check.raises(function() b.inputs:set(bad) end, PINNED, "a retained backward still needs them")
m:backward()
local saved = b.inputs:totable()
b.inputs:set(bad) -- the script's again
b.inputs:set(saved)
m:forward(b)
m:release_activations()
b.targets:set(b.targets:totable())
m:forward(b)
local b9 = dp.batch{ model = m, seed = 9 }
m:forward(b9)
b.targets:set(b.targets:totable()) -- another forward let it go
m:release_activations()
dp.free_batch(b9)
dp.free_batch(b)
check.raises(function() m:backward() end, { "model:backward", "no forward to go back through" })
check.raises(function() m:forward(b) end, { "model:forward", "batch.inputs was freed" })
check.raises(function() m:forward{ inputs = 1, targets = 2 } end, { "batch.inputs must be a tensor" })
check.raises(function() dp.batch{ model = m, size = B + 1 } end, { "dpprof.batch", "'size' (5)", "between 1 and" })
check.raises(function() dp.batch{ model = m, sizes = 1 } end, { "unknown key 'sizes'", "valid: model, size" })

-- llama with LoRA: only the adapters train
local lm = dp.model{ arch = "llama", vocab = V, hidden = d, layers = L, heads = H, seq_len = T, batch = 2,
                     ffn = 48, lora = { rank = 2, alpha = 8, targets = { "qkv", "down" } } }
local r = 2
local lora_params = L * (3 * (r * d + d * r) + (r * 48 + d * r))
check.eq(lm:num_params(true), lora_params, "trainable = adapters")
local lc = lm:config()
check.eq(lc.lora.rank, 2)
check.eq(lc.lora.alpha, 8.0)
check.eq(table.concat(lc.lora.targets, ","), "q_proj,k_proj,v_proj,down_proj", "llama's targets in PEFT's names")
check.eq(lc.tie_head, false)
local seen = {}
for _, p in ipairs(lm:params()) do seen[p.name] = p end
check.eq(seen["model.layers.0.self_attn.q_proj.lora_A.weight"].trainable, true)
check.eq(seen["model.layers.0.self_attn.q_proj.weight"].trainable, false)
check.eq(seen["model.layers.0.self_attn.q_proj.lora_B.weight"].module, "layers.0.attn.q.lora_b")
check.eq(seen["model.layers.1.mlp.down_proj.lora_A.weight"].kind, "lora_a")
check.eq(seen["model.layers.1.self_attn.o_proj.lora_A.weight"], nil, "o has no adapter")
local lb = dp.batch{ model = lm }
lm:forward(lb)
lm:backward()
check.eq(lm:grad("model.layers.0.self_attn.q_proj.weight"), nil, "frozen base weights have no gradient")
check.truthy(lm:grad("model.layers.0.self_attn.q_proj.lora_B.weight"):sumsq() > 0, "adapters do")

-- token files: windows of the file, uint16 and uint32, little-endian
local dir = os.getenv("TMPDIR") or "/tmp"
local path = string.format("%s/dpprof_test_tokens_%d.bin", dir, dp.pid and dp.pid() or 0)
local function write_tokens(fmt, ids)
  local f = assert(io.open(path, "wb"))
  for _, id in ipairs(ids) do f:write(string.pack(fmt, id)) end
  f:close()
end
local ids = {}
for i = 1, 200 do ids[i] = (i * 7) % V end
for _, kind in ipairs{ { "<I2", "uint16" }, { "<I4", "uint32" } } do
  write_tokens(kind[1], ids)
  local fb = dp.batch{ model = m, file = path, file_dtype = kind[2], seed = 1, step = 2 }
  local fi, ft = fb.inputs:totable(), fb.targets:totable()
  for i = 0, B - 1 do
    -- the window starts where the file holds the sample's first token
    local start
    for s = 1, #ids - T do
      local ok = true
      for t = 1, T do if ids[s + t - 1] ~= fi[i * T + t] then ok = false break end end
      if ok and ids[s + T] == ft[i * T + T] then start = s break end
    end
    check.truthy(start, kind[2] .. ": sample " .. i .. " is a window of the file")
  end
  dp.free_batch(fb)
end
write_tokens("<I2", { 1, 2, 3 })
check.raises(function() dp.batch{ model = m, file = path } end, { "holds 3 uint16 tokens", "seq_len + 1 = 17" })
ids[5] = V + 3
write_tokens("<I2", ids)
check.raises(function()
  for s = 0, 20 do dp.free_batch(dp.batch{ model = m, file = path, step = s }) end
end, { "token 53 at position 4", "outside the vocabulary [0, 50)" })
local f = assert(io.open(path, "wb"))
f:write("abc")
f:close()
check.raises(function() dp.batch{ model = m, file = path } end, { "3 bytes", "not a whole number of uint16 tokens" })
os.remove(path)
check.raises(function() dp.batch{ model = m, file = path } end, { "cannot open token file" })
check.raises(function() dp.batch{ model = m, file = path, file_dtype = "int8" } end,
  { "unknown file_dtype 'int8'", "valid: uint16, uint32" })

-- ids outside the vocabulary are refused before any table is read, naming the sample and the
-- position (on every device: the engine checks, copying device ids to the host)
do
  local function ids(vals)
    local t = dp.tensor{ shape = { 1, T }, dtype = "i32", category = "inputs" }
    t:set(vals)
    return t
  end
  local good, over, neg = {}, {}, {}
  for t = 1, T do good[t], over[t], neg[t] = t % V, t % V, t % V end
  over[5], neg[T] = V + 3, -1
  local b1 = { inputs = ids(over), targets = ids(good), size = 1 }
  check.raises(function() m:forward(b1) end,
    { "model forward", "inputs hold token 53 at sample 0 position 4", "outside the vocabulary [0, 50)" })
  local b2 = { inputs = ids(good), targets = ids(neg), size = 1 }
  check.raises(function() m:forward(b2) end, { "targets hold token -1 at sample 0 position 15" })
  local priv = dp.dpsgd.wrap(m, nil, { method = "flash_clip" })
  check.raises(function() priv:forward(b1) end, { "inputs hold token 53", "outside the vocabulary" })
  priv:free()
  local loss = m:forward{ inputs = ids(good), targets = ids(good), size = 1 }
  check.truthy(loss > 0, "in-range ids still run")
end

-- LoRA targets in PEFT's names (PEFT's default for llama: q_proj and v_proj), one linear each
local pm = dp.model{ arch = "llama", vocab = V, hidden = d, layers = 1, heads = H, seq_len = T, ffn = 48,
                     lora = { rank = 2, targets = { "q_proj", "v_proj" } } }
local pn = {}
for _, p in ipairs(pm:params()) do pn[p.name] = p end
check.truthy(pn["model.layers.0.self_attn.q_proj.lora_A.weight"] and pn["model.layers.0.self_attn.v_proj.lora_B.weight"],
             "q_proj and v_proj adapted")
check.eq(pn["model.layers.0.self_attn.k_proj.lora_A.weight"], nil, "k_proj not adapted")
check.eq(table.concat(pm:config().lora.targets, ","), "q_proj,v_proj")
check.eq(pm:num_params(true), 2 * (2 * d + d * 2), "two adapters of rank 2")
pm:free()
check.raises(function() dp.model{ arch = "gpt", vocab = V, hidden = d, layers = 1, heads = H, seq_len = T,
                                  lora = { rank = 2, targets = { "q_proj" } } } end,
             { "gpt's attn.c_attn computes q, k and v in one linear" })
local gm = dp.model{ arch = "gpt", vocab = V, hidden = d, layers = 1, heads = H, seq_len = T,
                     lora = { rank = 2, targets = { "c_attn", "down" } } }
check.eq(table.concat(gm:config().lora.targets, ","), "qkv,down", "gpt's targets as its groups")
gm:free()

-- Llama-3's shapes: grouped-query attention (k and v kv_heads x head_dim wide), an explicit
-- head_dim, Llama-3.1's rope scaling in transformers' keys
local g = dp.model{ arch = "llama", vocab = V, hidden = d, layers = 1, heads = 4, kv_heads = 2, head_dim = 16,
                    ffn = 48, seq_len = T, batch = 2,
                    rope_theta = 500000, rope_scaling = { rope_type = "llama3", factor = 8, low_freq_factor = 1,
                                                          high_freq_factor = 4, original_max_position_embeddings = 64 } }
local gs = {}
for _, p in ipairs(g:params()) do gs[p.name] = p end
check.eq(table.concat(gs["model.layers.0.self_attn.q_proj.weight"].shape, "x"), "64x32", "q: heads x head_dim")
check.eq(table.concat(gs["model.layers.0.self_attn.k_proj.weight"].shape, "x"), "32x32", "k: kv_heads x head_dim")
check.eq(table.concat(gs["model.layers.0.self_attn.o_proj.weight"].shape, "x"), "32x64", "o: back to hidden")
local gc = g:config()
check.eq(gc.kv_heads, 2)
check.eq(gc.head_dim, 16)
check.eq(gc.rope_scaling.rope_type, "llama3")
check.eq(gc.rope_scaling.original_max_position_embeddings, 64)
check.eq(lc.rope_scaling, nil, "the default rope has no scaling")
check.eq(lc.kv_heads, H, "kv_heads defaults to heads")
local gl = g:forward(dp.batch{ model = g })
check.truthy(gl > 0 and gl == gl, "a grouped-query llama runs: loss " .. tostring(gl))
g:backward()
g:free()

-- bf16 on the CPU: the slow exact reference of CUDA's bf16, reachable from scripts; the same
-- model's f32 loss within bf16's ~1% (tests/c/test_hf_llama3.c states the bound)
local losses = {}
for _, dt in ipairs({ "f32", "bf16" }) do
  local bm <close> = dp.model{ arch = "llama", vocab = V, hidden = d, layers = 1, heads = 4, kv_heads = 2, ffn = 48,
                               seq_len = T, batch = 2, dtype = dt, device = "cpu", seed = 3 }
  local bb = dp.batch{ model = bm, seed = 4 }
  losses[dt] = bm:forward(bb)
  bm:backward()
  check.eq(bm.dtype, dt)
end
check.truthy(math.abs(losses.bf16 - losses.f32) <= 2e-2 * losses.f32,
             string.format("bf16 loss %.6f vs f32 %.6f", losses.bf16, losses.f32))

-- configuration errors name the key and the valid values
local function bad(over, substrings)
  local t = {}
  for k, v in pairs(cfg) do t[k] = v end
  for k, v in pairs(over) do t[k] = v end
  check.raises(function() dp.model(t) end, substrings, "bad config")
end
bad({ colour = "red" }, { "dpprof.model", "unknown key 'colour'", "valid: arch, vocab" })
bad({ heads = 5 }, { "'heads' (5) must divide 'hidden' (32)" })
bad({ vocab = 0 }, { "'vocab' must be a positive integer (got 0)" })
bad({ layers = -1 }, { "'layers' must be a positive integer" })
bad({ arch = "bert" }, { "unknown arch 'bert'", "valid: gpt, llama" })
bad({ dtype = "f16" }, { "unknown dtype 'f16'", "valid: f32, bf16" })
bad({ hidden = 2.5 }, { "'hidden' must be an integer (got 2.5)" })
bad({ max_positions = 8 }, { "'max_positions' (8) must be at least 'seq_len' (16)" })
bad({ arch = "llama", heads = 32 }, { "even head dimension" })
bad({ arch = "llama", kv_heads = 3 }, { "'heads' (4) must be a multiple of 'kv_heads' (3)" })
bad({ kv_heads = 2 }, { "'kv_heads' (2) must equal 'heads' (4) for gpt" })
bad({ arch = "llama", rope_scaling = { rope_type = "dynamic", factor = 2 } },
    { "rope type 'dynamic' is not supported", "supported: default, linear, llama3, yarn" })
bad({ arch = "llama", rope_scaling = { rope_type = "llama3", factor = 8 } },
    { "'rope_scaling.original_max_position_embeddings'" })
bad({ arch = "llama", rope_scaling = { type = "linear" } }, { "unknown key 'type'", "valid: rope_type" })
bad({ lora = { rank = 2, targets = { "qkv", "ffn" } } }, { "unknown lora target 'ffn'", "valid: qkv, proj, fc, down, or PEFT's q_proj" })
bad({ lora = { rank = 0 } }, { "'lora.rank' must be an integer from 1 to 1048576 (got 0)" })
-- 2^31 is reported as itself (it read "got -2147483648", issue 26 item 11)
bad({ lora = { rank = 1 << 31 } }, { "'lora.rank' must be an integer from 1 to 1048576 (got 2147483648)" })
check.raises(function() dp.model.load("no-such-dir", { lora = { rank = 1 << 31 } }) end,
             { "dpprof.model.load: 'lora.rank' must be an integer from 1 to 1048576 (got 2147483648)" })
bad({ lora = { rank = 2, dropout = 0.1 } }, { "unknown key 'dropout'", "valid: rank, alpha, targets" })
bad({ lora = { rank = 2, alpha = -1 } }, { "'lora.alpha' must be a positive number" })
bad({ vocab = "many" }, { "'vocab' must be an integer" })
check.raises(function() dp.model{ arch = "gpt", hidden = 8, layers = 1, heads = 1, seq_len = 4 } end,
  { "'vocab' is required" })

-- the plan device: every path runs, no values (the loss reads 0), the same bytes
local pm = dp.model{ arch = "gpt", vocab = V, hidden = d, layers = L, heads = H, seq_len = T, batch = B,
                     device = "plan", dtype = "bf16" }
check.eq(pm.device, "plan")
local pb = dp.batch{ model = pm }
local pl = pm:forward(pb)
check.eq(pl, 0.0, "plan loss")
pm:backward()
check.eq(pm:param("transformer.wte.weight"):sumsq(), 0.0, "plan params read as zeros")
check.truthy(dp.memory.stats("plan").peaks.activations > 0, "plan accounts activations")

-- deterministic release
do
  local tmp <close> = dp.model(cfg)
  check.eq(tmp.alive, true)
end
m:free()
m:free()
check.eq(m.alive, false)
check.raises(function() m:forward(b) end, { "model was freed" })
check.raises(function() dp.batch{ model = m } end, { "dpprof.batch: 'model' was freed" })
check.eq(tostring(m), "model(freed)")
-- activation checkpointing: false | "blocks" | N, echoed as given; the same gradients; the
-- recompute log; anything else refused naming the valid values
do
  local cfg = { arch = "llama", vocab = 50, hidden = 16, layers = 3, heads = 4, kv_heads = 2, seq_len = 8, batch = 2,
                device = "cpu", lora = { rank = 2, targets = { "q_proj", "down_proj" } } }
  local grads = {}
  for _, ck in ipairs({ false, "blocks", 2 }) do
    cfg.checkpoint = ck
    local mm = dp.model(cfg)
    check.eq(mm:config().checkpoint, ck, "checkpoint echoed")
    local bb = dp.batch{ model = mm, seed = 3 }
    mm:forward(bb)
    mm:backward()
    local log = mm:recompute_log()
    check.eq(#log.spans, ck == false and 0 or ck == "blocks" and 3 or 2, "a recomputation per checkpointed block")
    check.truthy(ck == false and log.total_ms == 0 or log.total_ms > 0, "recompute time")
    check.eq(#mm:recompute_log().spans, 0, "reading the log empties it")
    local bits = {} -- every element, exactly (%a)
    local function flat(t) for _, v in ipairs(t) do if type(v) == "table" then flat(v) else bits[#bits + 1] = string.format("%a", v) end end end
    for _, name in ipairs({ "model.layers.2.mlp.down_proj.lora_B.weight", "model.layers.1.self_attn.q_proj.lora_B.weight" }) do
      flat(mm:grad(name):totable())
    end
    grads[#grads + 1] = table.concat(bits, " ")
    dp.free_batch(bb)
    mm:free()
  end
  for k = 2, 3 do check.eq(grads[k], grads[1], "the same gradient with checkpointing") end
  for _, bad in ipairs({ true, 0, -2, 1.5, "every" }) do
    cfg.checkpoint = bad
    check.raises(function() dp.model(cfg) end, { "'checkpoint' must be false, \"blocks\" (every block) or an integer N >= 1" })
  end
end
-- issue 26 items 3 and 7: a batch sized past the device's memory is refused before it is
-- allocated and filled (a checkpoint's 2^31 positions as seq_len grew to 5.8 GB before it was
-- killed), and so is checkpoint = N past the layers
do
  local huge <close> = dp.model{ arch = "llama", vocab = 64, hidden = 16, layers = 2, heads = 2, seq_len = 1 << 40,
                                 device = "cpu" }
  local total = dp.memory.stats("cpu").limit
  check.raises(function() dp.batch{ model = huge } end,
               { "dpprof.batch: the inputs and targets (2 x 1 x 1099511627776 i32) need 8192.000 GiB "
                 .. "(8796093022208 bytes) but the cpu device has" })
  local small <close> = dp.model{ vocab = 64, hidden = 16, layers = 2, heads = 2, seq_len = 1024, device = "cpu" }
  dp.memory.set_limit(4096, "cpu")
  check.raises(function() dp.batch{ model = small } end,
               { "need 0.000 GiB (8192 bytes) but the cpu device has 0.000 GiB (4096 bytes)" })
  dp.memory.set_limit(total, "cpu")
  dp.free_batch(dp.batch{ model = small })
  check.raises(function() dp.model{ vocab = 64, hidden = 16, layers = 2, heads = 2, seq_len = 8, checkpoint = 3,
                                    device = "cpu" } end,
               { "'checkpoint' 3 is more than the model's 2 layers (valid: false, \"blocks\" or N in 1..2" })
end
print("test_model.lua: all checks passed")
