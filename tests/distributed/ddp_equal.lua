-- ddp_equal.lua: run under mpirun -np N (tests/distributed/CMakeLists.txt). Every rank trains each model
-- x method alone (no `distributed`: the single-process run, in this process) and as a rank of the
-- world under each strategy (ddp, zero2, fsdp: LoRA's frozen base and bf16 sharded too); the parameters
-- after the K = warmup + iters steps must agree to reduction-order rounding: |ddp - single| <= BOUND *
-- max(1, |single|) element-wise, f32; so every rank holds the single process's parameters, and the
-- ranks agree with each other; with Poisson sampling and samples of their own lengths too (fsdp
-- padding the ranks to one count of physical batches), and with fixed batches the world size does not
-- divide (sliced unevenly, as Poisson batches are). The bf16 models hold the same bound: their GEMMs
-- read the same bf16 weights in one process and in every strategy (fsdp gathers the bf16 copies of the
-- same masters), and the gradients are f32 everywhere, so only the f32 reduction order of the gradients
-- differs; a bf16 rounding of a master that moved by that much could flip a compute weight by one bf16
-- ulp, which the runs here do not meet (worst seen: 6e-8).
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local ws, rank = dp.dist.world_size(), dp.dist.rank()
if ws < 2 then error("ddp_equal.lua runs under mpirun -np N with N >= 2 (got world size " .. ws .. ")") end
local BOUND = 1e-6
-- AdamW with eps = 1: its update lr m/(sqrt(v) + eps) is then a Lipschitz function of the gradients
-- (constant about lr/eps), so their reduction-order rounding stays rounding in the parameters,
-- while zero2 and fsdp still shard both moments. With eps = 1e-8 an element whose first moment
-- cancels (0.9 g1 + g2 near 0) amplifies a 1e-7 rounding of its gradient a thousandfold and more:
-- seen on AMD Zen 4 (OpenBLAS Cooperlake), llama vanilla element 28033 at np 4 off by 1e-6 of an
-- lr of 1e-4, with every gradient equal to rounding.
local OPT = { name = "adamw", lr = 1e-2, weight_decay = 0.01, eps = 1 }

local MODELS = {
  gpt = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8 },
  -- grouped-query attention, a tied head, LoRA on every linear and every block checkpointed
  llama = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8, batch = 8,
            tie_head = true, checkpoint = "blocks" },
  llama_lora = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8, batch = 8,
                 tie_head = true, checkpoint = "blocks", lora = { rank = 2, alpha = 4 } },
}
-- sizes no world divides (61 x 30 embeddings, 30-wide norms): zero2's parts are padded
MODELS.gpt_odd = { arch = "gpt", vocab = 61, hidden = 30, layers = 1, heads = 2, seq_len = 8, batch = 8 }
-- bf16 compute with f32 masters (the CPU's bf16 is CUDA's exact reference), LoRA's frozen base bf16
MODELS.llama_bf16 = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8,
                      batch = 8, tie_head = true, dtype = "bf16", master_weights = true, lora = { rank = 2, alpha = 4 } }
MODELS.gpt_bf16 = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8, dtype = "bf16",
                    master_weights = true, checkpoint = "blocks" } -- full fine-tuning: bf16 copies of f32 masters
-- bf16 without masters: the trainable parameters bf16 too (fsdp's parts bf16, gathered as they are)
MODELS.gpt_bf16_only = { arch = "gpt", vocab = 61, hidden = 30, layers = 1, heads = 2, seq_len = 8, batch = 8,
                         dtype = "bf16", master_weights = false }
local ORDER = { "gpt", "llama", "llama_lora", "gpt_odd", "llama_bf16", "gpt_bf16", "gpt_bf16_only" }

local function params_of(model) -- every parameter's numbers, one list
  local out = {}
  for _, flat in ipairs(select(3, check.param_values(model))) do table.move(flat, 1, #flat, #out + 1, out) end
  return out
end

-- Also returns the samples this process held in its last step (the per-sample norms after its last
-- clip; 0 when it held none; nil for vanilla, which has no norms).
local function train(model, method, distributed, dpo, seed, data)
  local vals, held
  local r = dp.experiment{ model = model, method = method, iters = 2, warmup = 1, device = "cpu", threads = 1,
                           optimizer = OPT,
                           snapshots = "none", dp = dpo or { noise_multiplier = 0.5 }, distributed = distributed,
                           seed = seed, data = data,
                           on = { before_forward = function(_, _, k) if k == 1 then held = nil end end,
                                  after_clip = function(ctx) held = ctx.priv:stats().norms and #ctx.priv:stats().norms end,
                                  finished = function(ctx) vals = params_of(ctx.model) end } }
  if r.status ~= "ok" then error(string.format("%s %s: %s", method, distributed and "ddp" or "single", r.message)) end
  return vals, r, method ~= "vanilla" and (held or 0) or nil
end

-- an untied head (lm_head): fsdp gathers it with the final norm, reduce-scatters their gradients after
-- the head's backward (vanilla, twopass) and the embeddings' after the backward
MODELS.llama_untied = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8,
                        batch = 8, tie_head = false }
ORDER[#ORDER + 1] = "llama_untied"

-- Poisson sampling: seed 3 draws logical batches of 6, 7 and 8 of the 64 samples (at most the
-- model's batch, so the single process holds each in one physical batch); 7 splits unevenly.
local POISSON = { noise_multiplier = 0.5, poisson = true, dataset_size = 64 }
local CASES = {}
for _, name in ipairs(ORDER) do
  for _, method in ipairs(dp.dpsgd.METHODS) do CASES[#CASES + 1] = { name, method } end
end
CASES[#CASES + 1] = { "gpt", "ghost", POISSON, 3 }
-- physical batches of 2: a rank's slice (np 2: 4 samples) in two, whose per-block parts fsdp sums; the
-- one process takes the same samples in physical batches of 2 (each the step's next samples)
for _, method in ipairs({ "vanilla", "ghost", "bk", "flash_clip", "flat" }) do
  CASES[#CASES + 1] = { "llama", method, { noise_multiplier = 0.5, max_physical_batch_size = 2 } }
end
CASES[#CASES + 1] = { "llama", "bk", POISSON, 3 }

-- fsdp with Poisson: every rank runs as many physical batches as the rank with the most (padding
-- ones after its own). Seed 7 draws 7, 5 and 9 of the 64 samples, in physical batches of 2: a
-- world of 2 holds 5 as 2 + 3 samples (1 and 2 physical batches), a world of 4 holds 9 as
-- 2 + 2 + 2 + 3 (1, 1, 1 and 2). MODELS.gpt_b2 with seed 3 draws 1, 4 and 0 of 16 samples: in a
-- step of 1 the slice of rank 0 is empty (and of ranks 0 to 2 at np 4), and a step of 0 has none.
local UNEVEN = { noise_multiplier = 0.5, poisson = true, dataset_size = 64, max_physical_batch_size = 2 }
MODELS.gpt_b2 = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 2 }
local SPARSE = { noise_multiplier = 0.5, poisson = true, dataset_size = 16 }
for _, method in ipairs({ "vanilla", "ghost", "bk", "flat" }) do
  CASES[#CASES + 1] = { "gpt", method, UNEVEN, 7 }
  CASES[#CASES + 1] = { "gpt_b2", method, SPARSE, 3 }
end
CASES[#CASES + 1] = { "llama", "flash_clip", UNEVEN, 7 } -- checkpointed blocks recomputed in the padding too
-- clipping styles (issue 40): bk's books by each tensor's group, fsdp forming and reduce-scattering
-- them block by block; twopass's forming backward (checkpointed blocks recomputed in it) under every
-- strategy; automatic clipping on LoRA's adapters; named groups on GPT's untied positions and tokens
CASES[#CASES + 1] = { "llama", "flash_clip", { noise_multiplier = 0.5, clipping = "per_block" } }
-- adaptive clipping: the unclipped count summed across the ranks, every rank's bound one process's
CASES[#CASES + 1] = { "gpt", "bk", { noise_multiplier = 0.5, poisson = true, dataset_size = 64, max_grad_norm = 0.5,
                                     adaptive = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.5,
                                                  max_clipbound = 10, min_clipbound = 0.01, unclipped_num_std = 1 } },
                      3 }
CASES[#CASES + 1] = { "llama", "ghost", { noise_multiplier = 0.5, clipping = "per_block", max_physical_batch_size = 2 } }
CASES[#CASES + 1] = { "llama_lora", "bk", { noise_multiplier = 0.5, clipping = "per_layer", clip_fn = "automatic" } }
CASES[#CASES + 1] = { "gpt", "mixed_ghost", { noise_multiplier = 0.5, clipping = "groups",
                                              groups = { { name = "tokens", patterns = "transformer.wte.*", max_grad_norm = 0.5 },
                                                         { name = "rest", patterns = { "transformer.wpe.*", "transformer.h.*",
                                                                                        "transformer.ln_f.*", "lm_head.*" } } } } }
-- what those draws are, asserted (the cases above test what they say they do)
local function slices(n) -- each rank's share of n samples
  local out = {}
  for r = 0, ws - 1 do out[r + 1] = n * (r + 1) // ws - n * r // ws end
  return out
end
local uneven, empty = false, false
for k = 0, 2 do
  local s = slices(#dp.dpsgd.poisson_draw(7, k, 8 / 64, 64))
  uneven = uneven or #dp.dpsgd.split(s[1], 2) ~= #dp.dpsgd.split(s[#s], 2)
  local e = slices(#dp.dpsgd.poisson_draw(3, k, 2 / 16, 16))
  empty = empty or (e[1] == 0 and e[#e] > 0)
end
assert(uneven and empty, "the Poisson draws no longer make uneven or empty slices: pick other seeds")

-- samples of their own lengths (a padded physical batch each, as one process pads) under every
-- strategy: a fixed batch (each rank its slice of the step's samples) and Poisson (a rank's slice
-- of the draw, fsdp padding the physical batch counts), with lengths grouped and padded to multiples of 2
local LENGTHS = {}
for j = 1, 64 do LENGTHS[j] = (j * 5) % 8 + 1 end
local OWN = { lengths = LENGTHS, pad_to = 2, group_by_length = true }
CASES[#CASES + 1] = { "gpt", "ghost", { noise_multiplier = 0.5, max_physical_batch_size = 2 }, nil, nil, OWN }
CASES[#CASES + 1] = { "gpt", "bk", { noise_multiplier = 0.5, poisson = true, max_physical_batch_size = 2 }, 7, nil, OWN }
CASES[#CASES + 1] = { "llama", "vanilla", { noise_multiplier = 0.5, poisson = true, max_physical_batch_size = 2 }, 7,
                      nil, OWN }
-- a token file whose documents (ended by eos 0) are the samples: this rank's own copy of it
local DOCS = os.tmpname()
do
  local bytes = {}
  for j = 1, 32 do
    for t = 1, (j * 3) % 7 + 1 do bytes[#bytes + 1] = string.pack("<I2", (j * 7 + t) % 63 + 1) end
    bytes[#bytes + 1] = string.pack("<I2", 0)
  end
  assert(dp.write_file(DOCS, table.concat(bytes)))
end
CASES[#CASES + 1] = { "gpt", "flash_clip", { noise_multiplier = 0.5, poisson = true, max_physical_batch_size = 2 }, 7,
                      nil, { file = DOCS, eos = 0 } }
CASES[#CASES + 1] = { "llama", "ghost", { noise_multiplier = 0.5, max_physical_batch_size = 2 }, nil, nil,
                      { file = DOCS, eos = 0 } }

-- a fixed batch the world size does not divide (issue 38.8): sliced as Poisson batches are, rank r
-- holding samples floor(n r / N) .. floor(n (r + 1) / N) - 1 (np 2: 2 + 3 of 5, 1 + 2 of 3; np 4:
-- 1 + 1 + 1 + 2 of 5, 0 + 1 + 1 + 1 of 3, rank 0's slice empty), fsdp padding the physical batch
-- counts; windows, the samples' own ids (data.tokens) and a token file read in order
MODELS.gpt_b5 = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 5 }
MODELS.gpt_b3 = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 3 }
for _, method in ipairs({ "vanilla", "ghost", "bk", "flat", "flash_clip" }) do
  CASES[#CASES + 1] = { "gpt_b5", method }
end
CASES[#CASES + 1] = { "gpt_b5", "ghost", { noise_multiplier = 0.5, max_physical_batch_size = 2 } }
CASES[#CASES + 1] = { "gpt_b3", "vanilla" }
CASES[#CASES + 1] = { "gpt_b3", "bk" }
local TOKENS = {}
for j = 1, 16 do
  local ids = {}
  for t = 1, (j * 3) % 8 + 2 do ids[t] = (j * 11 + t * 5) % 64 end -- 2 to 9 ids: 1 to 8 positions
  TOKENS[j] = ids
end
CASES[#CASES + 1] = { "gpt_b5", "ghost", { noise_multiplier = 0.5, max_physical_batch_size = 2 }, nil, nil,
                      { tokens = TOKENS, pad_to = 2 } }
local SEQ = os.tmpname()
do
  local bytes = {}
  for t = 1, 60 do bytes[t] = string.pack("<I2", (t * 13) % 64) end -- 7 windows of 8: wrapping within the run
  assert(dp.write_file(SEQ, table.concat(bytes)))
end
CASES[#CASES + 1] = { "gpt_b5", "flat", { noise_multiplier = 0.5, max_physical_batch_size = 2 }, nil, nil,
                      { file = SEQ, order = "sequential" } }
do -- the slices are uneven (and at np 4 one is empty), as the cases above say
  local s5, s3 = slices(5), slices(3)
  assert(s5[1] ~= s5[#s5] and s3[1] ~= s3[#s3], "batches of 5 and 3 are not sliced unevenly")
end

local worst = 0
for _, case in ipairs(CASES) do
  do
    local name, method, dpo, seed, base, data = table.unpack(case)
    local single, rs = train(MODELS[name], method, base and { strategy = base } or nil, dpo, seed, data)
    for _, strategy in ipairs(base and { "zero2", "fsdp" } or { "ddp", "zero2", "fsdp" }) do
      local ddp, r, held = train(MODELS[name], method, { strategy = strategy }, dpo, seed, data)
      if not (dpo and dpo.poisson) and held then -- a fixed batch: this rank held its slice
        local want = slices(MODELS[name].batch)[rank + 1]
        if held ~= want then
          error(string.format("%s %s %s: rank %d held %d samples, its slice is %d", name, method, strategy, rank, held,
                              want))
        end
      end
      assert(#single == #ddp and #single > 0, "parameter counts differ")
      assert(r.timing.phases_ms.comm > 0, "no time in the comm phase")
      -- the accountant counts what one process counts (a padding batch is no sample, no step)
      local pd, ps = type(r.privacy) == "table" and r.privacy or {}, type(rs.privacy) == "table" and rs.privacy or {}
      assert(pd.epsilon == ps.epsilon and pd.steps == ps.steps, "epsilon or steps differ")
      local samples = data and (data.lengths and #data.lengths or data.tokens and #data.tokens or data.eos and 32)
      assert(not samples or (r.data and r.data.samples == samples), "the run did not take the data's samples")
      for i = 1, #single do
        local d = math.abs(ddp[i] - single[i]) / math.max(1, math.abs(single[i]))
        if d > BOUND then
          error(string.format("%s %s: parameter element %d: %s %.9g, single process %.9g (rank %d of %d)", name, method,
                              i, strategy, ddp[i], single[i], rank, ws))
        end
        worst = math.max(worst, d)
      end
    end
  end
end
os.remove(DOCS)
os.remove(SEQ)
dp.dist.barrier()
print(string.format("rank %d of %d: every model x method equal to one process, worst relative difference %.3g (bound %g)",
                    rank, ws, worst, BOUND))
