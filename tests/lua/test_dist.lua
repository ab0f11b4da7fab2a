-- test_dist.lua: training across processes without a launcher (tests/distributed/ runs the real ranks
-- under mpirun). A run no launcher started is world size 1; the `distributed` key is checked as a
-- user would be told (one line naming the key, exit 2, nothing written); a plan run plays rank r of
-- a simulated world and records every collective with the bytes on the wire.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

-- no launcher here (ctest starts this process directly)
check.eq(dp.dist.launcher(), nil, "launcher")
check.eq(dp.dist.rank(), 0, "rank")
check.eq(dp.dist.world_size(), 1, "world size")
dp.dist.barrier() -- a world of one: returns at once
check.eq(table.concat(dp.dist.STRATEGIES, ","), "ddp,zero2,fsdp", "strategies")
check.eq(table.concat(dp.dist.KEYS, ","), "strategy,world_size,rank", "keys")

local MODEL = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 }
local function refused(d, device, want)
  local model = MODEL
  if d == nil then -- given twice: in the model and at the top
    model = dp.deep_copy(MODEL)
    model.distributed, d = { strategy = "ddp" }, { strategy = "ddp" }
  end
  local ok, e = pcall(dp.experiment, { model = model, device = device or "cpu", distributed = d })
  check.eq(ok, false, "refused: " .. want)
  check.eq(type(e) == "table" and e.exit_status, 2, "exit status of: " .. tostring(e))
  check.truthy(tostring(e):find(want, 1, true), string.format("%q names %q", tostring(e), want))
end
refused({ strategy = "x" }, nil, "distributed.strategy: unknown strategy 'x' (valid: ddp, zero2, fsdp)")
local LORA = dp.deep_copy(MODEL)
LORA.lora = { rank = 2, alpha = 4 }
-- fsdp with Poisson sampling: every rank runs as many physical batches as the rank with the most,
-- padding ones after its own (no sample anywhere), so the ranks' gathers pair. Seed 3 draws 1, 4
-- and 0 of 16 samples at a batch of 2: rank 0 of 2 holds 0, 2 and 0 of them, rank 1 holds 1, 2, 0.
do
  local B2 = dp.deep_copy(MODEL)
  B2.batch = 2
  local gathers = {}
  for rank = 0, 1 do
    local counts = {}
    local r = dp.experiment{ model = B2, method = "ghost", device = "plan", iters = 3, warmup = 0, seed = 3,
                             snapshots = "none", dp = { poisson = true, dataset_size = 16 },
                             distributed = { strategy = "fsdp", world_size = 2, rank = rank },
                             on = { after_step = function(ctx, i) counts[i] = #ctx.priv:stats().norms end } }
    check.eq(r.status, "ok", tostring(r.message))
    check.eq(table.concat(counts, ","), rank == 0 and "0,2,0" or "1,2,0", "rank " .. rank .. ": samples a step")
    local sizes = {}
    for _, st in ipairs(r.steps) do
      local own = {}
      for k, pb in ipairs(st.physical) do own[k] = pb.size end
      sizes[#sizes + 1] = st.logical_size .. ":" .. table.concat(own, "+")
    end
    check.eq(table.concat(sizes, " "), rank == 0 and "1: 4:2 0:" or "1:1 4:2 0:", "rank " .. rank .. ": the steps")
    for _, o in ipairs(r.ledger) do if o.op == "comm_all_gather" then gathers[rank + 1] = o.calls end end
  end
  check.eq(gathers[1], gathers[2], "every rank gathers as often")
  -- samples of their own lengths: each rank its slice of the step's samples, padded as one process pads
  for rank = 0, 1 do
    local r = dp.experiment{ model = B2, method = "ghost", device = "plan", iters = 2, warmup = 0, snapshots = "none",
                             data = { lengths = { 3, 8, 5, 6 } },
                             distributed = { strategy = "fsdp", world_size = 2, rank = rank } }
    check.eq(r.status, "ok", tostring(r.message))
    check.eq(r.steps[1].physical[1].padded .. "," .. r.steps[2].physical[1].padded, rank == 0 and "3,5" or "8,6",
             "rank " .. rank .. ": its samples' lengths")
  end
end
-- a padding physical batch by hand: loss 0, no sample in the statistics, and a second forward
-- before its clip is refused (the model still reads its ids)
do
  local m <close> = dp.model{ vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2, device = "cpu" }
  local priv <close> = dp.dpsgd.wrap(m, dp.optim.sgd(m, { lr = 0.1 }), { method = "bk", expected_batch_size = 2 })
  priv:next_step()
  check.eq(priv:forward_padding(), 0.0, "a padding batch's loss")
  priv:backward()
  local ok, e = pcall(priv.forward_padding, priv)
  check.eq(ok, false, "a padding forward before the clip")
  check.truthy(tostring(e):find("forward before the last backward was clipped", 1, true), tostring(e))
  priv:clip()
  check.eq(#priv:stats().norms, 0, "a padding sample is no sample")
end
local BF16 = dp.deep_copy(MODEL)
BF16.dtype = "bf16"
-- fsdp's all-gathers, planned as rank 1 of N (ghost: a forward and two backwards, the norms' and
-- the clipped one): every block at each of the three passes; the embeddings (wte, wpe) once, at
-- the forward's lookup; the final norm and the head (gpt's tied head: wte as its GEMM weight) at the
-- forward's logits and at each backward's start, three times. A bf16 model's GEMM weights (linear,
-- LoRA, the head) go on the wire as bf16 cast from their f32 master parts, the rest in their own
-- dtype (norms and biases f32 and the lookup's table f32 masters; LoRA's frozen base bf16 in a bf16
-- model, f32 in an f32 one), each padded to N ceil(n / N). A ring's (N-1)/N of each.
local function fsdp_gathers(model, N)
  local r = dp.experiment{ model = model, device = "plan", method = "ghost", iters = 1, warmup = 0,
                           distributed = { strategy = "fsdp", world_size = N, rank = 1 } }
  check.eq(r.status, "ok", tostring(r.message))
  local valid, problems = dp.results.validate(r) -- its model built in parts records no parts
  check.truthy(valid, "an fsdp result validates: " .. table.concat(problems or {}, "; "))
  local got = { calls = 0, bytes = 0 }
  for _, o in ipairs(r.ledger) do if o.op == "comm_all_gather" then got = o end end
  local spec = dp.deep_copy(model)
  spec.device = "plan"
  local m <close> = dp.model(spec)
  local tied = true
  for _, p in ipairs(m:params()) do tied = tied and p.kind ~= "head" end
  local calls, bytes = 0, 0
  for _, p in ipairs(m:params()) do
    local padded = N * ((p.numel + N - 1) // N)
    local own = model.dtype == "bf16" and not p.trainable and 2 or 4 -- the value's (the part's) dtype
    local gemm = model.dtype == "bf16" and 2 or own -- a GEMM weight's copy: bf16 in a bf16 model
    local function add(times, size) calls, bytes = calls + times, bytes + times * padded * size end
    if p.name:match("^transformer%.h%.") or p.name:match("^model%.layers%.") then
      add(3, (p.kind == "linear_w" or p.kind == "lora_a" or p.kind == "lora_b") and gemm or own)
    elseif p.kind == "embedding" or p.kind == "position" then
      add(1, own)
      if p.kind == "embedding" and tied then add(3, gemm) end
    else
      add(3, p.kind == "head" and gemm or own)
    end
  end
  check.eq(got.calls, calls, "fsdp's all-gathers a step")
  check.eq(got.bytes, (N - 1) / N * bytes, "fsdp's all-gathers' wire bytes")
  -- the op table times a collective on the link (h100's NVLink, 450 GB/s within its 8 GPUs a node),
  -- not at the memory bandwidth
  local timed
  for _, o in ipairs(r.timing.estimate.ops) do if o.op == "comm_all_gather" then timed = o end end
  check.eq(timed.bound, "link", "the all-gathers are link-bound")
  check.near(timed.ms, got.bytes / 450e9 * 1000, 1e-9, "their time: the wire bytes over NVLink")
  return got.bytes
end
local BF16_LORA = dp.deep_copy(LORA)
BF16_LORA.dtype = "bf16"
for _, N in ipairs({ 2, 4 }) do
  local f32, bf16 = fsdp_gathers(MODEL, N), fsdp_gathers(BF16, N)
  check.truthy(bf16 < f32, "bf16 gathers move fewer bytes")
  fsdp_gathers(LORA, N)
  fsdp_gathers(BF16_LORA, N)
end
refused({ strategy = "ddp", world_size = 2 }, nil, "distributed.world_size is 2 but this run was launched with 1 rank(s)")
refused({ strategy = "ddp", rank = 1 }, nil, "distributed.rank is the launcher's on device 'cpu'")
refused({ strategy = "ddp", foo = 1 }, nil, "distributed: unknown key 'foo' (valid: strategy, world_size, rank)")
do -- a fixed batch 3 ranks do not divide (4): sliced 1, 1, 2 as Poisson batches are (issue 38.8), each rank's
   -- model batch the largest slice
  local held = {}
  for rank = 0, 2 do
    local r = dp.experiment{ model = MODEL, device = "plan", iters = 1, warmup = 0, snapshots = "none", method = "ghost",
                             distributed = { strategy = "ddp", world_size = 3, rank = rank },
                             on = { after_clip = function(ctx) held[rank + 1] = #ctx.priv:stats().norms end } }
    check.eq(r.status, "ok", "world_size 3 of a batch of 4, rank " .. rank .. ": " .. tostring(r.message))
    check.eq(r.config.model.batch, MODEL.batch, "the global batch kept")
  end
  check.eq(table.concat(held, ","), "1,1,2", "the ranks' slices of 4")
end
refused({ strategy = "ddp", world_size = 2, rank = 2 }, "plan", "distributed.rank 2 is not a rank of a world of 2")
refused("ddp", nil, "distributed must be a table")

-- fsdp at world size 1 (no launcher): the blocks gathered and freed around every pass, the part
-- stepped, the model gathered for the finished callback: one process's parameters, bit for bit (with
-- physical batches of 2, to 1e-6: fsdp sums the parts of each batch, one process accumulates in the gemm)
do
  local LLAMA = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8, batch = 4,
                  tie_head = true, checkpoint = "blocks" }
  -- bf16 with f32 masters and LoRA: the frozen base's bf16 parts, the adapters' bf16 copies gathered
  local LLAMA_BF16 = dp.deep_copy(LLAMA)
  LLAMA_BF16.dtype, LLAMA_BF16.lora = "bf16", { rank = 2, alpha = 4 }
  for _, case in ipairs({ { "vanilla" }, { "ghost" }, { "bk" }, { "vanilla", 2 }, { "ghost", 2 },
                          { "ghost", nil, LLAMA_BF16 }, { "bk", nil, LLAMA_BF16 } }) do
    -- physical batches of 2: the blocks' parts summed over them, against one process's run of them
    local method, physical, model = case[1], case[2], case[3] or LLAMA
    local function run(d)
      local vals, loss
      local r = dp.experiment{ model = model, method = method, iters = 2, warmup = 1, device = "cpu", threads = 1,
                               snapshots = "none", seed = 3, distributed = d,
                               dp = physical and { max_physical_batch_size = physical } or nil,
                               on = { finished = function(ctx)
                                 vals = select(3, check.param_values(ctx.model))
                                 -- the gathered model computes as one process's (bf16: its compute copies rebuilt)
                                 local b = dp.batch{ model = ctx.model, size = 2, seed = 0, step = 0 }
                                 loss = ctx.model:forward(b)
                                 ctx.model:release_activations()
                                 dp.free_batch(b)
                               end } }
      check.eq(r.status, "ok", method .. ": " .. tostring(r.message))
      return vals, loss
    end
    local one, loss1 = run(nil)
    local fsdp, loss = run({ strategy = "fsdp" })
    if not physical then check.eq(loss, loss1, method .. ": the trained model's loss") end
    check.eq(#fsdp, #one, method .. ": tensors")
    for k = 1, #one do
      for i = 1, #one[k] do
        if math.abs(one[k][i] - fsdp[k][i]) > (physical and 1e-6 * math.max(1, math.abs(one[k][i])) or 0) then
          check.eq(fsdp[k][i], one[k][i], string.format("%s: tensor %d element %d", method, k, i))
        end
      end
    end
  end
end
-- a wrapper freed, or distributed again, without priv:unshard() leaves the model its parts, all it
-- holds of those tensors: what reads a whole refuses them by name (nothing reads storage that is
-- not there), a second fsdp wrapper takes them as they are and trains on, and ddp refuses them
do
  local m <close> = dp.model{ arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 4,
                              device = "cpu", seed = 1 }
  local opt <close> = dp.optim.sgd(m, { lr = 0.1 })
  local function wrap()
    local p = dp.dpsgd.wrap(m, opt, { method = "ghost", expected_batch_size = 4, noise_multiplier = 0 })
    p:distribute{ strategy = "fsdp" }
    return p
  end
  local function step(p)
    local b = dp.batch{ model = m, size = 4, seed = 0, step = 0 }
    p:next_step()
    p:forward(b); p:backward(); p:clip(); p:reduce_grads(); p:noise()
    opt:step()
    p:gather_params()
    dp.free_batch(b)
  end
  local priv = wrap()
  priv:distribute{ strategy = "fsdp" } -- again on the same wrapper: the parts taken as they are
  step(priv)
  priv:free()
  check.raises(function() m:param("transformer.h.0.mlp.c_fc.weight") end, "is held in parts across the ranks")
  check.eq(m:nonfinite("parameters"), nil, "the parts are read, every value finite")
  local b = dp.batch{ model = m, size = 4, seed = 0, step = 0 }
  check.raises(function() m:forward(b) end, "is held in parts")
  dp.free_batch(b)
  local again <close> = dp.dpsgd.wrap(m, dp.optim.sgd(m, { lr = 0.1 }), { method = "ghost", expected_batch_size = 4 })
  check.raises(function() again:distribute{ strategy = "ddp" } end, "the model is held in parts")
  priv = wrap()
  step(priv)
  priv:unshard()
  check.eq(m:config().parts, nil, "whole again")
  check.eq(#m:param("transformer.h.0.mlp.c_fc.weight"), 32 * 128, "a whole value again")
  priv:free()
end
-- between fsdp's passes every tensor is a part, a block's and those outside the blocks (the tied
-- embedding, the final norm) alike: reading or saving the whole is refused by name
do
  local said, tmp = {}, os.tmpname()
  local r = dp.experiment{ model = MODEL, method = "ghost", iters = 1, warmup = 0, device = "cpu", threads = 1,
                           snapshots = "none", distributed = { strategy = "fsdp" },
                           on = { after_step = function(ctx)
                             local name = "transformer.h.0.mlp.c_fc.weight"
                             said.param = select(2, pcall(ctx.model.param, ctx.model, name))
                             said.save = select(2, pcall(ctx.model.save, ctx.model, tmp .. ".d"))
                             said.wte = select(2, pcall(ctx.model.param, ctx.model, "transformer.wte.weight"))
                             said.ln_f = select(2, pcall(ctx.model.param, ctx.model, "transformer.ln_f.bias"))
                           end } }
  check.eq(r.status, "ok", tostring(r.message))
  check.truthy(tostring(said.param):find("model:param: 'transformer.h.0.mlp.c_fc.weight' is held in parts across "
                                         .. "the ranks (fsdp)", 1, true), tostring(said.param))
  check.truthy(tostring(said.save):find("is held in parts across the ranks (fsdp): gather the whole model first", 1,
                                        true), tostring(said.save))
  for _, name in ipairs({ "wte.weight", "ln_f.bias" }) do
    local e = tostring(said[name:match("^[^.]+")])
    check.truthy(e:find("model:param: 'transformer." .. name .. "' is held in parts across the ranks (fsdp): its "
                        .. "whole value exists only while a pass that reads it runs", 1, true), e)
  end
  for _, f in ipairs({ "config.json", "model.safetensors" }) do os.remove(tmp .. ".d/" .. f) end
  os.remove(tmp .. ".d")
  os.remove(tmp)
end
-- a non-finite loss under fsdp names the first non-finite tensor as one process does: the parameters
-- are read in their parts between the passes (their whole values have no storage then)
do
  local yarn = { arch = "llama", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2,
                 rope_scaling = { rope_type = "yarn", factor = 4, original_max_position_embeddings = 4,
                                  mscale = 1e30, mscale_all_dim = 1e-30 } }
  local r = dp.experiment{ model = yarn, device = "cpu", iters = 1, warmup = 1, snapshots = "none", method = "ghost",
                           threads = 1, distributed = { strategy = "fsdp" } }
  check.eq(r.status, "error", "fsdp: a NaN loss is an error")
  check.eq(r.message, "non-finite loss (nan) in warm-up step 1, physical batch 1: the first non-finite tensor is the "
           .. "activation 'logits'", "fsdp: names the logits")
end
-- the command line: exit 2 and the one line
local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local script = dir .. "/bad.lua"
local f = assert(io.open(script, "w"))
f:write('local dp = require("dpprof")\n',
        'dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 },\n',
        '  device = "cpu", trace = "', dir, '/t.json", distributed = { strategy = "ddp", world_size = 4 } }\n')
f:close()
local code, out = check.sh(string.format("%q run %q", dp.executable, script))
check.eq(code, 2, "exit status of a refused world size")
check.truthy(out:find("distributed.world_size is 4 but this run was launched with 1 rank(s)", 1, true), out)
check.eq(io.open(dir .. "/t.json"), nil, "nothing written")
os.remove(script)
os.remove(dir)

-- one process with distributed = {strategy = "ddp"}: world size 1, the same training as without
local function params(r_cfg)
  local vals = {}
  r_cfg.on = { finished = function(ctx)
    for _, p in ipairs(ctx.model:params()) do vals[#vals + 1] = ctx.model:param(p.name):sumsq() end
  end }
  local r = dp.experiment(r_cfg)
  check.eq(r.status, "ok", tostring(r.message))
  return vals, r
end
local base = { model = MODEL, device = "cpu", method = "ghost", iters = 1, warmup = 1, threads = 1, snapshots = "none" }
local alone = params(dp.deep_copy(base))
local cfg1 = dp.deep_copy(base)
cfg1.distributed = { strategy = "ddp" }
local one, r1 = params(cfg1)
for i = 1, #alone do check.eq(one[i], alone[i], "world size 1 equals no distributed key, tensor " .. i) end
check.eq(r1.timing.phases_ms.comm >= 0, true, "a comm phase")

-- dp.model{distributed = ...}: the wrapper trains as one rank (here rank 1 of a planned world
-- of 2: half the batch a step), and an experiment takes it from its model too (once)
do
  local m <close> = dp.model{ arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4,
                              device = "plan", distributed = { strategy = "ddp", world_size = 2, rank = 1 } }
  local priv <close> = dp.dpsgd.wrap(m, dp.optim.sgd(m, { lr = 0.1 }), { method = "ghost", expected_batch_size = 4 })
  local step = priv:next_step()
  check.eq(step.first, 2, "rank 1's first sample")
  check.eq(step.physical[1], 2, "its half of the batch")
  check.raises(function() dp.model{ vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8,
                                    distributed = { strategy = "x" } } end, "unknown strategy 'x'")
  -- under fsdp the model is built in parts for that rank (one tensor whole at a time), and the
  -- wrapper takes them as they are
  local before = dp.memory.stats("plan").allocated
  local fm <close> = dp.model{ arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4,
                               device = "plan", distributed = { strategy = "fsdp", world_size = 4, rank = 3 } }
  check.eq(fm:config().parts.world_size, 4, "fsdp's model built in parts: the world")
  check.eq(fm:config().parts.rank, 3, "and the rank")
  local parts = 0
  for _, p in ipairs(fm:params()) do parts = parts + 4 * ((p.numel + 3) // 4) end
  check.eq(dp.memory.stats("plan").allocated - before, parts, "only the parts are live")
  local fpriv <close> = dp.dpsgd.wrap(fm, dp.optim.sgd(fm, { lr = 0.1 }), { method = "ghost", expected_batch_size = 4 })
  check.eq(dp.memory.stats("plan").allocated - before, parts, "fsdp cut nothing again")
  fpriv:unshard() -- every tensor gathered back whole: so says the configuration
  check.eq(fm:config().parts, nil, "whole again after unshard")
  local one <close> = dp.model{ vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, device = "cpu",
                                distributed = { strategy = "fsdp" } }
  check.eq(one:config().parts, nil, "one process: whole")
  local mm = dp.deep_copy(MODEL)
  mm.distributed = { strategy = "ddp", world_size = 2, rank = 1 }
  local rm = dp.experiment{ model = mm, device = "plan", method = "ghost", iters = 1, warmup = 0 }
  check.eq(rm.status, "ok", tostring(rm.message))
  check.eq(rm.distributed.rank, 1, "the model's distributed key")
  refused(nil, "plan", "distributed is given twice")
end

-- plan: rank 1 of a simulated world of 2 records one all-reduce per trainable tensor, each
-- 2 (N-1)/N of its bytes on the wire (a ring's), and holds half the batch
local r = dp.experiment{ model = MODEL, device = "plan", method = "ghost", iters = 1, warmup = 0,
                         distributed = { strategy = "ddp", world_size = 2, rank = 1 } }
check.eq(r.status, "ok", tostring(r.message))
local numel, tensors = 0, 0
local m = dp.model{ arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 2, device = "plan" }
for _, p in ipairs(m:params()) do
  if p.trainable then numel, tensors = numel + p.numel, tensors + 1 end
end
m:free()
local comm
for _, o in ipairs(r.ledger) do if o.op == "comm_all_reduce" then comm = o end end
check.truthy(comm, "the plan run's ledger has comm_all_reduce")
check.eq(comm.calls, tensors, "one all-reduce per trainable tensor")
check.eq(comm.bytes, 2 * (2 - 1) / 2 * numel * 4, "wire bytes of a ring all-reduce over the f32 gradients")
check.eq(r.config.model.batch, 4, "the global batch is recorded")
check.eq(r.config.distributed.world_size, 2, "the configuration records distributed")
local again = require("dpprof.experiment").check_recorded(r.config) -- a result's config re-checks as a script's
check.eq(again.distributed.rank, 1, "and it survives the recorded check")

-- zero2 on the plan: a reduce-scatter per trainable tensor (its (N-1)/N on the wire) instead of
-- the all-reduce, an all-gather of the updated parameters after the optimizer, AdamW's states a
-- 1/N share of ddp's
local function planned(strategy, ws)
  local p = dp.experiment{ model = MODEL, device = "plan", method = "ghost", iters = 1, warmup = 0,
                           distributed = { strategy = strategy, world_size = ws } }
  check.eq(p.status, "ok", tostring(p.message))
  local ops = {}
  for _, o in ipairs(p.ledger) do ops[o.op] = o end
  return p, ops
end
local z, zops = planned("zero2", 2)
local d = planned("ddp", 2)
check.eq(zops.comm_all_reduce, nil, "zero2 reduce-scatters instead of all-reducing")
check.eq(zops.comm_reduce_scatter.calls, tensors, "one reduce-scatter per trainable tensor")
check.eq(zops.comm_reduce_scatter.bytes, (2 - 1) / 2 * numel * 4, "wire bytes of a ring reduce-scatter")
check.eq(zops.comm_all_gather.calls, tensors, "one all-gather per trainable tensor")
check.eq(z.memory.categories.optimizer_states.peak_bytes * 2, d.memory.categories.optimizer_states.peak_bytes,
         "zero2's AdamW states: half of ddp's on 2 ranks (every tensor here has an even size)")

-- the plan's comm phase lasts the wire bytes over the links (H100 defaults: NVLink 450 GB/s within
-- a node of 8, InfiniBand 50 GB/s beyond), nothing else running in it
local BIG = { vocab = 512, hidden = 64, layers = 2, heads = 4, seq_len = 16, batch = 16 }
for _, case in ipairs({ { 8, 450e9 }, { 16, 50e9 }, { 2, 100e9, { base = "h100", intra_node_gbps = 100 } } }) do
  local ws, bw, dm = table.unpack(case)
  local p = dp.experiment{ model = BIG, device = "plan", device_model = dm, method = "ghost", iters = 1, warmup = 0,
                           distributed = { world_size = ws } } -- strategy: ddp unless said
  check.eq(p.status, "ok", tostring(p.message))
  check.eq(p.distributed.strategy, "ddp", "the default strategy")
  local wire = 0
  for _, o in ipairs(p.ledger) do if o.op == "comm_all_reduce" then wire = o.bytes end end
  check.near(p.timing.phases_ms.comm, wire / bw * 1000, 2e-6, -- the clock counts whole ns
             "comm phase of a world of " .. ws)
end
check.raises(function() dp.plan.device_model{ base = "h100", gpus_per_node = 0 } end,
             "gpus_per_node must be an integer >= 1")
check.raises(function() dp.plan.device_model{ base = "h100", inter_node_gbps = -1 } end,
             "inter_node_gbps must be a positive number")

-- a planned world rank by rank, combined as rank 0 of a launched world combines its ranks: Poisson
-- draws give the ranks different slices (seed 3: 6, 7 and 8 of 64 samples over 3 ranks), so the
-- largest rank per category is a real choice; the combined result validates and charts
do
  local experiment = require("dpprof.experiment")
  local results = require("dpprof.results")
  local summaries, runs = {}, {}
  for rank = 0, 2 do
    local p = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8,
                                       batch = 8 }, device = "plan", method = "ghost", iters = 2, warmup = 1, seed = 3,
                             dp = { poisson = true, dataset_size = 64 },
                             distributed = { strategy = "ddp", world_size = 3, rank = rank } }
    check.eq(p.status, "ok", tostring(p.message))
    runs[rank + 1], summaries[rank + 1] = p, experiment.rank_summary(p, rank)
  end
  local ranks, largest = experiment.combine(summaries)
  local want, at = -1, nil
  for i, p in ipairs(runs) do
    local a = p.memory.categories.activations.peak_bytes
    if a > want then want, at = a, i - 1 end
  end
  check.eq(largest.categories.activations.peak_bytes, want, "the largest rank's activations")
  check.eq(largest.categories.activations.rank, at, "the rank holding them")
  check.truthy(runs[1].memory.categories.activations.peak_bytes ~= want, "the ranks differ (rank 0 holds fewer)")
  local combined = runs[1]
  combined.distributed.ranks, combined.distributed.largest = ranks, largest
  check.eq(results.validate(combined), true, "the combined result validates")
  local png = os.tmpname() .. ".png"
  results.rank_chart(combined, png)
  local f = assert(io.open(png, "rb"))
  check.eq(f:read(8), "\137PNG\r\n\26\n", "a PNG per-rank chart")
  f:close()
  os.remove(png)
  check.raises(function() results.rank_chart(runs[2], png) end, "no distributed.ranks")
end

-- world_size and strategy are sweep variables; fit plans rank 0 of a world
local sdir = os.tmpname()
os.remove(sdir)
local rs = dp.sweep{ base = { model = BIG, device = "plan", method = "ghost", iters = 1, warmup = 0 },
                     vary = { world_size = { 1, 2, 4 } }, out = sdir, quiet = true }
local peaks = {}
for i, point in ipairs(rs.points) do
  local one = point.result
  check.eq(one.status, "ok", tostring(one.message))
  check.eq(one.distributed.world_size, ({ 1, 2, 4 })[i], "the point's world size")
  peaks[i] = one.memory.categories.activations.peak_bytes
end
check.truthy(peaks[1] > peaks[2] and peaks[2] > peaks[3], "fewer samples a rank, fewer activations")
local refusal = check.raises(function()
  dp.sweep{ base = { model = BIG, device = "cpu", method = "ghost", distributed = { strategy = "ddp" } },
            vary = { seq_len = { 8, 16 } }, out = sdir .. "-cpu", quiet = true }
end, { "dpprof.sweep: point seq_len=8: distributed on device 'cpu'", "run the experiment itself under mpirun" })
check.eq(io.open(sdir .. "-cpu"), nil, "the refused sweep wrote nothing: " .. refusal)
local code2, fit_out = check.sh(string.format("%q fit world_size=4 strategy=ddp batch=8 preset=small method=ghost "
                                              .. "checkpoint=off hi=4096", dp.executable))
check.eq(code2, 0, fit_out)
check.truthy(fit_out:find("ghost", 1, true), fit_out)
local code3, fit_bad = check.sh(string.format("%q fit world_size=0 batch=8 preset=small method=ghost", dp.executable))
check.eq(code3, 2, fit_bad)
check.truthy(fit_bad:find("distributed.world_size must be at least 1, got 0", 1, true), fit_bad)
os.execute("rm -rf " .. sdir)
print("ok")
