-- test_plan.lua: the plan backend's figures are the CPU's, byte for byte, for every DP preset over
-- a spread of configurations (gpt/llama, LoRA, tied head, batch and sequence shapes,
-- micro-batching, Poisson sampling, SGD, norms+clip): per-category peak, current and live-at-peak,
-- the total and warm-up peaks, per-module peaks and live-at-peak, every snapshot and the ledger.
-- Then the estimate's arithmetic on a hand-made ledger, the budget view, the device-model checks,
-- the per-phase estimate against the ledger, and the time a plan run of the large model takes.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local plan = dp.plan

-- The plan device without the CUDA workspace, so that it allocates what the CPU does.
local BARE = { base = "h100", workspace = false }
local METHODS = { "vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip" }

local copy = dp.deep_copy

local CONFIGS = {
  { name = "gpt", model = { arch = "gpt", vocab = 256, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 3 } },
  { name = "llama", model = { arch = "llama", vocab = 200, hidden = 32, layers = 2, heads = 4, seq_len = 12, batch = 2 } },
  { name = "gpt lora", model = { arch = "gpt", vocab = 256, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 2,
                                 lora = { rank = 4, targets = { "qkv", "proj", "fc" } } } },
  { name = "llama lora", model = { arch = "llama", vocab = 128, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 3,
                                   lora = { rank = 2, targets = { "qkv", "down" } } } },
  { name = "gpt tied B1 T33", model = { arch = "gpt", vocab = 96, hidden = 16, layers = 1, heads = 2, seq_len = 33, batch = 1,
                                       tie_head = true } },
  { name = "llama micro-batches 2+2+1", model = { arch = "llama", vocab = 128, hidden = 32, layers = 2, heads = 2, seq_len = 10,
                                                  batch = 5 }, dp = { max_physical_batch_size = 2 } },
  { name = "gpt poisson", model = { arch = "gpt", vocab = 128, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 4 },
    dp = { poisson = true, sample_rate = 0.05, dataset_size = 80, max_physical_batch_size = 3 } },
  { name = "gpt sgd", model = { arch = "gpt", vocab = 128, hidden = 16, layers = 2, heads = 2, seq_len = 8, batch = 2 },
    optimizer = { name = "sgd", lr = 0.1, momentum = 0.9 } },
  { name = "gpt strips", model = { arch = "gpt", vocab = 128, hidden = 32, layers = 1, heads = 2, seq_len = 16,
                                   batch = 3 }, dp = { flash_impl = "strips" } },
  { name = "gpt lora strips", model = { arch = "gpt", vocab = 128, hidden = 32, layers = 1, heads = 2, seq_len = 16,
                                        batch = 3, lora = { rank = 2, targets = { "qkv", "fc" } } },
    dp = { flash_impl = "strips" } },
  -- activation checkpointing (issue 16): every block, every 2nd block with micro-batches
  { name = "gpt lora checkpoint blocks", model = { arch = "gpt", vocab = 96, hidden = 32, layers = 3, heads = 2,
                                                   seq_len = 16, batch = 3, checkpoint = "blocks",
                                                   lora = { rank = 2, targets = { "qkv", "fc", "down" } } } },
  { name = "llama checkpoint 2, micro-batches 2+1", model = { arch = "llama", vocab = 128, hidden = 32, layers = 3,
                                                             heads = 4, kv_heads = 2, seq_len = 10, batch = 3,
                                                             checkpoint = 2 }, dp = { max_physical_batch_size = 2 } },
}

local function run(cfg, method, device)
  local c = { model = copy(cfg.model), dp = copy(cfg.dp), optimizer = copy(cfg.optimizer), iters = 2, warmup = 1,
              device = device, device_model = device == "plan" and BARE or nil, name = cfg.name }
  if type(method) == "table" then c.norms, c.clip = method[1], method[2] else c.method = method end
  local r = dp.experiment(c)
  check.eq(r.status, "ok", string.format("%s %s on %s: %s", cfg.name, tostring(c.method), device, tostring(r.message)))
  local ok, problems = dp.results.validate(r)
  check.truthy(ok, string.format("%s on %s validates: %s", cfg.name, device, table.concat(problems or {}, "; ")))
  return r
end

local function by_module(r)
  local out = {}
  for _, m in ipairs(r.memory.modules) do out[m.module] = m end
  return out
end

-- Every figure of the CPU run a equals the plan run b's.
local function same(a, b, what)
  check.eq(b.predicted, true, what .. ": plan result predicted")
  check.eq(a.predicted, false, what .. ": cpu result not predicted")
  for _, k in ipairs({ "peak_bytes", "warmup_peak_bytes", "end_bytes" }) do
    check.eq(b.memory[k], a.memory[k], what .. ": memory." .. k)
  end
  for _, c in ipairs(dp.results.CATEGORIES) do
    for _, k in ipairs({ "peak_bytes", "live_at_peak_bytes", "current_bytes" }) do
      check.eq(b.memory.categories[c][k], a.memory.categories[c][k], what .. ": " .. c .. "." .. k)
    end
  end
  local am, bm = by_module(a), by_module(b)
  check.eq(#b.memory.modules, #a.memory.modules, what .. ": number of modules")
  for name, m in pairs(am) do
    check.truthy(bm[name], what .. ": module " .. name .. " in the plan")
    check.eq(bm[name].peak_bytes, m.peak_bytes, what .. ": module " .. name .. " peak")
    check.eq(bm[name].live_at_peak_bytes, m.live_at_peak_bytes, what .. ": module " .. name .. " live at peak")
  end
  check.eq(#b.snapshots, #a.snapshots, what .. ": snapshots")
  for i, s in ipairs(a.snapshots) do
    check.eq(b.snapshots[i].name, s.name, what .. ": snapshot " .. i)
    for _, c in ipairs(dp.results.CATEGORIES) do
      check.eq(b.snapshots[i].categories[c], s.categories[c], what .. ": snapshot " .. s.name .. " " .. c)
    end
  end
  check.eq(#b.ledger, #a.ledger, what .. ": ledger ops")
  for i, e in ipairs(a.ledger) do
    local f = b.ledger[i]
    check.eq(f.op, e.op, what .. ": ledger op " .. i)
    check.eq(f.calls, e.calls, what .. ": " .. e.op .. " calls")
    check.eq(f.flops, e.flops, what .. ": " .. e.op .. " flops")
    check.eq(f.bytes, e.bytes, what .. ": " .. e.op .. " bytes")
  end
  check.eq(#b.layers, #a.layers, what .. ": DP layers")
  for i, l in ipairs(a.layers) do check.eq(b.layers[i].norms, l.norms, what .. ": layer " .. l.module .. " formulation") end
end

local pairs_checked = 0
for _, cfg in ipairs(CONFIGS) do
  local methods = copy(METHODS)
  if cfg.name == "gpt" then methods[#methods + 1] = { "ghost", "bk" } end
  for _, method in ipairs(methods) do
    local label = type(method) == "table" and (method[1] .. "+" .. method[2]) or method
    local a = run(cfg, method, "cpu")
    local b = run(cfg, method, "plan")
    same(a, b, cfg.name .. " " .. label)
    check.truthy(a.memory.peak_bytes > 0, cfg.name .. " " .. label .. ": a peak")
    pairs_checked = pairs_checked + 1
  end
end
print(string.format("plan == cpu byte for byte: %d runs (%d configurations x presets)", pairs_checked, #CONFIGS))

-- The workspace a modelled CUDA device holds: two tagged allocations (cuBLAS 32 MiB, kernels
-- 1 MiB) that the peak includes, and that the bare model leaves out.
do
  local cfg = CONFIGS[1]
  local bare = run(cfg, "ghost", "plan")
  local c = { model = copy(cfg.model), method = "ghost", iters = 2, warmup = 1, device = "plan", device_model = "h100" }
  local full = dp.experiment(c)
  local ws = full.memory.categories.workspace.live_at_peak_bytes
  check.eq(ws, (32 << 20) + (1 << 20), "the modelled CUDA workspace (backend.h's sizes)")
  check.eq(full.memory.peak_bytes, bare.memory.peak_bytes + ws, "the workspace adds to the peak")
  check.eq(dp.memory.stats("plan").current.workspace, ws, "held between runs, as a CUDA device holds it")
  local mods = by_module(full)
  check.eq(mods.cublas.live_at_peak_bytes, 32 << 20, "module cublas")
  check.eq(mods.kernels.live_at_peak_bytes, 1 << 20, "module kernels")
  check.eq(full.environment.device, "plan", "environment.device")
  check.eq(full.environment.device_model.name, "h100", "environment.device_model")
  check.truthy(full.environment.device_name:find("H100", 1, true), "device_name names the model")
  check.eq(full.config.device_model, "h100", "config echoes the device model")
  dp.plan_workspace(false)
end

-- The estimate's arithmetic on a hand-made ledger and model.
do
  local m = plan.device_model{ name = "toy", memory_bytes = 1000, peak_flops = { f32 = 1e12, bf16 = 4e12 }, bandwidth = 1e9 }
  check.eq(m.context_bytes, 0, "a model without base: no context")
  check.eq(m.workspace, false, "a model without base: no workspace")
  local ledger = {
    { op = "gemm", calls = 3, flops = 2e12, bytes = 1e9 },       -- f32: 2 s compute vs 1 s memory
    { op = "gelu", calls = 2, flops = 1e9, bytes = 6.5e9 },      -- 1 ms compute vs 6.5 s memory
    { op = "copy", calls = 1, flops = 0, bytes = 2.5e8 },        -- 0.25 s memory
  }
  local e = plan.estimate(ledger, m, "f32")
  check.near(e.ms, 2000 + 6500 + 250, 1e-12, "f32 estimate (ms)")
  check.eq(e.ops[1].op, "gelu", "largest op first")
  check.eq(e.ops[1].bound, "memory", "gelu is memory bound")
  check.eq(e.ops[2].bound, "compute", "gemm is compute bound at f32")
  check.near(e.ops[2].ms, 2000, 1e-12, "gemm at f32")
  local eb = plan.estimate(ledger, m, "bf16")
  check.near(eb.ms, 1000 + 6500 + 250, 1e-12, "bf16: gemm at max(0.5 s, 1 s)")
  check.eq(eb.ops[2].bound, "memory", "gemm is memory bound at bf16 here")
  -- ledger_diff: what a phase added
  local before = { { op = "gemm", calls = 1, flops = 10, bytes = 4 }, { op = "add", calls = 2, flops = 5, bytes = 6 } }
  local after = { { op = "gemm", calls = 4, flops = 40, bytes = 16 }, { op = "add", calls = 2, flops = 5, bytes = 6 },
                  { op = "scale", calls = 1, flops = 3, bytes = 8 } }
  local d = plan.ledger_diff(before, after)
  check.eq(#d, 2, "two ops ran in between")
  check.eq(d[1].op, "gemm", "gemm")
  check.eq(d[1].calls, 3, "gemm calls added")
  check.eq(d[1].flops, 30, "gemm flops added")
  check.eq(d[1].bytes, 12, "gemm bytes added")
  check.eq(d[2].op, "scale", "a new op")
  check.eq(d[2].flops, 3, "scale flops")
  -- the budget view
  local mb = plan.device_model{ name = "b", memory_bytes = 1000, context_bytes = 100, reserve_overhead = 0.1,
                                peak_flops = { f32 = 1, bf16 = 1 }, bandwidth = 1 }
  local b = plan.budget(mb, 800)
  check.eq(b.budget_bytes, 900, "budget = memory - context")
  check.eq(b.predicted_reserved_bytes, 880, "reserved = peak x 1.1")
  check.eq(b.fits, true, "880 fits in 900")
  check.eq(b.headroom_bytes, 20, "headroom")
  local b2 = plan.budget(mb, 819)
  check.eq(b2.predicted_reserved_bytes, 901, "reserved rounds to the byte (900.9)")
  check.eq(b2.fits, false, "901 does not fit in 900")
  check.eq(b2.headroom_bytes, -1, "negative headroom")
end

-- Device models: built-ins as data, overrides, and errors naming the key and valid choices.
do
  local h = plan.device_model("h100")
  check.eq(h.memory_bytes, 81559 * 1024 * 1024, "h100 memory (MiB as nvidia-smi shows)")
  check.eq(h.peak_flops.bf16, 989.4e12, "h100 bf16 peak")
  check.eq(h.peak_flops.f32, 66.9e12, "h100 f32 peak")
  check.eq(h.bandwidth, 3.35e12, "h100 bandwidth")
  check.eq(h.workspace, true, "h100 models the workspace")
  local h2 = plan.device_model("h200")
  check.eq(h2.memory_bytes, 143771 * 1024 * 1024, "h200 memory")
  check.eq(h2.bandwidth, 4.8e12, "h200 bandwidth")
  local o = plan.device_model{ base = "h200", context_bytes = 0, peak_flops = { f32 = 1e12 } }
  check.eq(o.peak_flops.bf16, 989.4e12, "override keeps the base's other dtypes")
  check.eq(o.peak_flops.f32, 1e12, "override")
  check.eq(o.context_bytes, 0, "context override")
  check.eq(plan.MODELS.h200.peak_flops.f32, 66.9e12, "the built-in is not changed by an override")
  check.eq(plan.device_model{ base = "h100", memory_gb = 80 }.memory_bytes, 80 << 30, "memory_gb is GiB")
  check.raises(function() plan.device_model("a100x") end, { "unknown model 'a100x'", "h100, h200" })
  check.raises(function() plan.device_model{ base = "h100", bandwith = 1 } end, { "unknown key 'bandwith'", "bandwidth" })
  check.raises(function() plan.device_model{ memory_bytes = 10, peak_flops = { f32 = 1 }, bandwidth = 1 } end,
               { "peak_flops.bf16" })
  check.raises(function() plan.device_model{ base = "h100", reserve_overhead = -1 } end, { "reserve_overhead" })
  check.raises(function() plan.device_model{ base = "h100", context_bytes = 1 << 50 } end, { "context_bytes" })
  check.raises(function() dp.experiment{ model = CONFIGS[1].model, device = "cpu", device_model = "h100" } end,
               { "device_model applies to device=\"plan\"" })
  check.raises(function() dp.experiment{ model = CONFIGS[1].model, device = "plan", device_model = "tpu" } end,
               { "unknown model 'tpu'" })
end

-- The per-phase estimate adds up: with unbounded bandwidth every op is compute bound, max() is
-- linear, and the phases of the timed iterations sum to the ledger's flops / peak (batch creation
-- is outside the phases, but moves bytes only).
do
  local m = { name = "compute-only", memory_bytes = 1 << 40, peak_flops = { f32 = 1e9, bf16 = 1e9 }, bandwidth = 1e300 }
  local r = dp.experiment{ model = copy(CONFIGS[2].model), method = "ghost", iters = 2, warmup = 1, device = "plan",
                           device_model = m, snapshots = "none" }
  check.eq(r.status, "ok", "compute-only plan run")
  local flops = 0
  for _, e in ipairs(r.ledger) do flops = flops + e.flops end
  local iters_total = 0
  for _, v in ipairs(r.timing.iter_ms) do iters_total = iters_total + v end
  check.near(iters_total, flops / 1e9 * 1000, 1e-9, "sum of the phase estimates = ledger flops / peak")
  check.near(r.timing.estimate.ledger_ms, flops / 1e9 * 1000, 1e-9, "the ledger's estimate")
  check.truthy(r.timing.phases_ms.backward > r.timing.phases_ms.forward, "backward costs more than forward")
  check.eq(r.timing.estimate.method, plan.METHOD, "labelled a roofline")
  check.eq(r.plan.fits, true, "1 TiB fits a tiny model")
  -- with checkpointing, recompute is a phase of its own: the "recompute:" entries' flops / peak
  local c = copy(CONFIGS[2].model)
  c.checkpoint = "blocks"
  r = dp.experiment{ model = c, method = "ghost", iters = 2, warmup = 1, device = "plan", device_model = m,
                     snapshots = "none" }
  local recomputed, all = 0, 0
  for _, e in ipairs(r.ledger) do
    all = all + e.flops
    if e.op:find("^recompute:") then recomputed = recomputed + e.flops end
  end
  check.truthy(recomputed > 0, "the ledger holds the recomputation's flops")
  check.near(r.timing.phases_ms.recompute, recomputed / 1e9 * 1000 / 2, 1e-9, "recompute phase = its flops / peak")
  iters_total = 0
  for _, v in ipairs(r.timing.iter_ms) do iters_total = iters_total + v end
  check.near(iters_total, all / 1e9 * 1000, 1e-9, "the phases, recompute included, add up to the ledger")
  local spans = 0
  for _, sp in ipairs(r.timing.spans) do spans = spans + (sp.phase == "recompute" and 1 or 0) end
  -- 3 iterations (warm-up included) x 2 blocks x 2 backwards (ghost: twopass)
  check.eq(spans, 3 * 2 * 2, "a recompute span per block and backward")
end

-- The large model plans in well under a second (the issue's bound; asserted loosely for busy CI),
-- and its peak is exactly what the model's shapes give. The peak is at the head's backward, with
-- every activation of the forward still live. With N = B T tokens, F = 4d, s the bytes of an
-- activation (4 in f32, 2 in bf16) and P the parameters (tied head, P positions = T):
--   parameters        4P, plus in bf16 a 2-byte copy of every weight matrix: 2 (V d + 12 L d^2)
--   optimizer_states  8P (AdamW's two f32 moments)
--   activations       per block: ln_1, qkv (3d), attention (d), res_mid, ln_2, res_out (d each):
--                     8d, and fc and gelu (F each), all of s bytes, plus the f32 statistics
--                     (ln_1's and ln_2's mean and rstd, 4, and attention's log-sum-exp per head, H);
--                     then the embedding's output (N d s), ln_f's (N d s and 2N f32), the logits
--                     (N V s) and, for ghost, the loss's log-sum-exp (N f32, freed by then in flash)
--   temp              the head's input gradient (N d s); ghost also its two T x T f32 Gram matrices
--   norm_samples      ghost: one f32 per trainable tensor and sample: (2 + 12 L + 2) B
--   per_sample_grads  flash_clip: the tied head's per-sample gradient, V d f32 (B = 1)
--   inputs            ids and targets, 2 N i32;  workspace  cuBLAS's 32 MiB and 1 MiB of scratch
local function large_peak(V, d, L, H, T, B, dtype, method)
  local N, F, s = B * T, 4 * d, dtype == "bf16" and 2 or 4
  local P = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d
  local c = { parameters = 4 * P + (dtype == "bf16" and 2 * (V * d + 12 * L * d * d) or 0), optimizer_states = 8 * P,
              activations = L * N * ((8 * d + 2 * F) * s + (4 + H) * 4) + N * d * s + (N * d * s + 2 * N * 4) + N * V * s,
              temp = N * d * s, inputs = 2 * N * 4, workspace = 32 * 1024 * 1024 + 1024 * 1024 }
  if method == "ghost" then
    c.activations = c.activations + N * 4
    c.temp = c.temp + 2 * T * T * 4
    c.norm_samples = (2 + 12 * L + 2) * B * 4
  else
    c.per_sample_grads = V * d * 4
  end
  local total = 0
  for _, v in pairs(c) do total = total + v end
  return total, c
end
do
  local large = { arch = "gpt", vocab = 32000, hidden = 2048, layers = 20, heads = 16, seq_len = 16384, batch = 1 }
  for _, dtype in ipairs({ "f32", "bf16" }) do
    for _, method in ipairs({ "ghost", "flash_clip" }) do
      local model = copy(large)
      model.dtype = dtype
      local t0 = dp.clock()
      local r = dp.experiment{ model = model, method = method, iters = 3, warmup = 2, device = "plan" }
      local s = dp.clock() - t0
      check.eq(r.status, "ok", "large plan run")
      print(string.format("large config (V=32000 d=2048 L=20 H=16 T=16384 B=1) %s %s, 2 warm-up + 3 timed iterations: "
                          .. "planned in %.3f s; peak %s, estimated %.1f ms/iter on %s", dtype, method, s,
                          dp.format_bytes(r.memory.peak_bytes), r.avg_time_ms, r.plan.device_model))
      check.truthy(s < 5, string.format("a plan run of the large config takes %.3f s (bound 5 s)", s))
      local want, parts = large_peak(32000, 2048, 20, 16, 16384, 1, dtype, method)
      check.eq(r.memory.peak_bytes, want, string.format("the large %s %s peak", dtype, method))
      for _, cat in ipairs(dp.results.CATEGORIES) do
        check.eq(r.memory.categories[cat].live_at_peak_bytes, parts[cat] or 0, dtype .. " " .. method .. " " .. cat)
      end
    end
  end
end

-- mixed and bk per category, in closed form, on the large config at B = 2, T = 8192 (N = B T
-- tokens): at these shapes mixed materializes every linear layer's and the tied head's per-sample
-- gradients (B p d against ghost's 2 B T^2 (d + p): asserted from r.layers), and bk keeps them.
--   after the forward (every method)  activations A: as large_peak's, the loss's log-sum-exp kept
--   mixed's peak (the head's backward) A, the head's per-sample gradients B V d f32, temp N d s
--   after mixed's first backward      A less the logits (N V s), norm_samples (2 + 12 L + 2) B f32
--   after bk's backward               the same, and its books: per_sample_grads B (P - T d) f32 (a row
--                                     per sample of every trainable tensor but the positions) and
--                                     output_grads N d f32 (the position embedding's G, read directly)
-- With checkpoint = "blocks" the forward keeps only the blocks' inputs and the last one's output
-- ((L + 1) N d s) besides the final norm, logits and log-sum-exp; with checkpoint = k (every k-th
-- block, from the first) each checkpointed block keeps its output, the others everything.
do
  local V, d, L, H, T, B = 32000, 2048, 20, 16, 8192, 2
  local N, F, s = B * T, 4 * d, 4
  local P = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d
  local block = N * ((8 * d + 2 * F) * s + (4 + H) * 4) -- one block's activations, its output among them
  local head = (N * d * s + 2 * N * 4) + N * V * s + N * 4 -- ln_f's output and statistics, logits, lse
  -- n blocks checkpointed: the embedding's output (the first block's input), each checkpointed
  -- block's output (the next block's input: the block recomputes from what the one before it left),
  -- the other blocks' whole activations, their output among them; n = 0 is no checkpointing
  local function kept(n) return n * N * d * s + N * d * s + (L - n) * block + head end
  local A = kept(0)
  local function snapshot(r, name)
    for _, sn in ipairs(r.snapshots) do if sn.name == name then return sn.categories end end
    error("no snapshot " .. name)
  end
  local function cats_eq(got, want, what)
    for _, cat in ipairs(dp.results.CATEGORIES) do
      if cat ~= "parameters" and cat ~= "optimizer_states" and cat ~= "inputs" and cat ~= "workspace" then
        check.eq(got[cat], want[cat] or 0, what .. " " .. cat)
      end
    end
  end
  local function run(method, checkpoint)
    local model = { arch = "gpt", vocab = V, hidden = d, layers = L, heads = H, seq_len = T, batch = B,
                    checkpoint = checkpoint }
    local r = dp.experiment{ model = model, method = method, iters = 1, warmup = 1, device = "plan" }
    check.eq(r.status, "ok", method .. ": " .. tostring(r.message))
    return r
  end
  local books = { per_sample_grads = B * (P - T * d) * 4, output_grads = N * d * 4 }
  local after_bwd = { activations = A - N * V * s, norm_samples = (2 + 12 * L + 2) * B * 4 }
  for _, method in ipairs({ "mixed_ghost", "bk" }) do
    local r = run(method)
    for _, l in ipairs(r.layers) do
      if l.kind == "linear" or l.kind == "tied_head" then
        check.eq(l.norms, "materialize", method .. ": " .. l.module .. " materializes at T = 8192")
      end
    end
    cats_eq(snapshot(r, "iter1_after_forward"), { activations = A }, method .. " after the forward")
    local want = { activations = after_bwd.activations, norm_samples = after_bwd.norm_samples }
    if method == "bk" then want.per_sample_grads, want.output_grads = books.per_sample_grads, books.output_grads end
    cats_eq(snapshot(r, "iter1_after_backward"), want, method .. " after the backward")
    if method == "mixed_ghost" then
      local peak = {}
      for _, cat in ipairs(dp.results.CATEGORIES) do peak[cat] = r.memory.categories[cat].live_at_peak_bytes end
      cats_eq(peak, { activations = A, per_sample_grads = B * V * d * 4, temp = N * d * s }, "mixed's peak")
      check.eq(r.memory.peak_bytes, 4 * P + 8 * P + A + B * V * d * 4 + N * d * s + 2 * N * 4 + 33 * 1024 * 1024,
               "mixed's peak, every category")
    end
  end
  for _, method in ipairs({ "ghost", "bk" }) do
    local r = run(method, "blocks")
    cats_eq(snapshot(r, "iter1_after_forward"), { activations = kept(L) }, method .. " checkpointed: the kept inputs")
    local want = { activations = kept(L) - N * V * s, norm_samples = after_bwd.norm_samples }
    if method == "bk" then want.per_sample_grads, want.output_grads = books.per_sample_grads, books.output_grads end
    cats_eq(snapshot(r, "iter1_after_backward"), want, method .. " checkpointed, after the backward")
  end
  for _, k in ipairs({ 4, 3, L }) do -- blocks 0, 4, .., 16; 0, 3, .., 18; block 0 alone
    local r = run("ghost", k)
    cats_eq(snapshot(r, "iter1_after_forward"), { activations = kept((L + k - 1) // k) },
            "checkpoint = " .. k .. ": the kept outputs and the other blocks' activations")
  end
end

-- A plan batch makes no host tokens: the ledger has the two uploads' bytes, as a device run's, and
-- a child making a batch of 4096 x 16384 tokens grows by far less than the 768 MiB of host token
-- and staging buffers that filling them took (against a child that makes the model alone: the
-- children start from this process's pages, and sanitizer builds add their own).
do
  local function child(with_batch)
    return dp.isolate(function()
      local m = dp.model{ arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 16384,
                          batch = 4096, device = "plan" }
      dp.ledger_reset()
      local h2d
      if with_batch then
        local b = dp.batch{ model = m }
        for _, e in ipairs(dp.ledger()) do if e.op == "copy_h2d" then h2d = e end end
        dp.free_batch(b)
      end
      m:free()
      return { calls = h2d and h2d.calls, bytes = h2d and h2d.bytes }
    end)
  end
  local _, base = child(false)
  local r, info = child(true)
  check.eq(r.status, "ok", tostring(r.message))
  check.eq(r.calls, 2, "two uploads")
  check.eq(r.bytes, 2.0 * 4096 * 16384 * 4, "inputs and targets, i32")
  local grew = info.max_rss_bytes - base.max_rss_bytes
  check.truthy(grew < 128 * 1024 * 1024, "host memory a plan batch added: " .. tostring(grew))
end

-- A coroutine.yield in a plan run's callback (issue 26): it used to abandon the run with the modelled
-- clock and per-op profiling on, and later CPU runs in the process reported 0 ms steps. Now the
-- callback cannot yield: the run ends as an error result naming it, and nothing is left on.
do
  local M = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 }
  local co = coroutine.create(function()
    return dp.experiment{ model = copy(M), iters = 2, warmup = 0, device = "plan", method = "ghost", snapshots = "none",
                          profile = "ops", on = { after_step = function() coroutine.yield("abandoned") end } }
  end)
  local ok, r = coroutine.resume(co)
  check.eq(ok, true, "the coroutine ran: " .. tostring(r))
  check.eq(coroutine.status(co), "dead", "the run was not left suspended")
  check.eq(type(r) == "table" and r.status, "error", "the yield is an error result")
  check.truthy(tostring(r.message):find("on.after_step yielded (coroutine.yield)", 1, true), tostring(r.message))
  check.eq(dp.profile.enabled(), false, "per-op profiling off after the run")
  local cpu = dp.experiment{ model = copy(M), iters = 2, warmup = 0, device = "cpu", method = "ghost", snapshots = "none" }
  check.eq(cpu.status, "ok", "a CPU run after it")
  -- on the modelled clock this step took about 0.0005 ms; on the real one, far more than 0.01
  check.truthy(cpu.timing.avg_ms > 0.01, "the CPU run's step is timed on the real clock: " .. tostring(cpu.timing.avg_ms))
  -- a thread count dp.threads refuses: refused with the configuration, not after the plan run had
  -- modelled the clock (which it then left modelled)
  check.raises(function()
    dp.experiment{ model = copy(M), iters = 1, warmup = 0, device = "plan", method = "ghost", threads = 5000 }
  end, { "dpprof.experiment: threads must be an integer from 1 to 4096, got 5000" })
  cpu = dp.experiment{ model = copy(M), iters = 2, warmup = 0, device = "cpu", method = "ghost", snapshots = "none" }
  check.truthy(cpu.timing.avg_ms > 0.01, "real clock after the refusal: " .. tostring(cpu.timing.avg_ms))
  local t0 = dp.clock()
  local s = 0
  for i = 1, 200000 do s = s + i end
  check.truthy(dp.clock() > t0, "the engine clock runs again")
end

print("test_plan: ok")
