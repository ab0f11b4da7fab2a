-- ddp_equal.lua: run under mpirun -np N (tests/dist/CMakeLists.txt). Every rank trains each model
-- x method alone (no `distributed`: the single-process run, in this process) and as a rank of the
-- world under each strategy (ddp, zero2, fsdp: LoRA's frozen base and bf16 sharded too); the parameters
-- after the K = warmup + iters steps must agree to reduction-order rounding: |ddp - single| <= BOUND *
-- max(1, |single|) element-wise, f32; so every rank holds the single process's parameters, and the
-- ranks agree with each other. The bf16 models hold the same bound: their GEMMs read the same bf16
-- weights in one process and in every strategy (fsdp gathers the bf16 copies of the same masters),
-- and the gradients are f32 everywhere, so only the f32 reduction order of the gradients differs;
-- a bf16 rounding of a master that moved by that much could flip a compute weight by one bf16 ulp,
-- which the runs here do not meet (worst seen: 6e-8).
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local ws, rank = dp.dist.world_size(), dp.dist.rank()
if ws < 2 then error("ddp_equal.lua runs under mpirun -np N with N >= 2 (got world size " .. ws .. ")") end
local BOUND = 1e-6

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

local function train(model, method, distributed, dpo, seed)
  local vals
  local r = dp.experiment{ model = model, method = method, iters = 2, warmup = 1, device = "cpu", threads = 1,
                           snapshots = "none", dp = dpo or { noise_multiplier = 0.5 }, distributed = distributed,
                           seed = seed,
                           on = { finished = function(ctx) vals = params_of(ctx.model) end } }
  if r.status ~= "ok" then error(string.format("%s %s: %s", method, distributed and "ddp" or "single", r.message)) end
  return vals, r
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
  for _, method in ipairs(dp.dp.METHODS) do CASES[#CASES + 1] = { name, method } end
end
CASES[#CASES + 1] = { "gpt", "ghost", POISSON, 3 }
-- physical batches of 2: a rank's slice (np 2: 4 samples) in two, whose per-block parts fsdp sums; the
-- one process takes the same samples in physical batches of 2 (each the step's next samples)
for _, method in ipairs({ "vanilla", "ghost", "bk" }) do
  CASES[#CASES + 1] = { "llama", method, { noise_multiplier = 0.5, max_physical_batch_size = 2 } }
end
CASES[#CASES + 1] = { "llama", "bk", POISSON, 3 }

local worst = 0
for _, case in ipairs(CASES) do
  do
    local name, method, dpo, seed, base = table.unpack(case)
    local single = train(MODELS[name], method, base and { strategy = base } or nil, dpo, seed)
    for _, strategy in ipairs(base and { "zero2", "fsdp" } or { "ddp", "zero2", "fsdp" }) do
    if strategy == "fsdp" and dpo and dpo.poisson then
      goto refused
    end
    local ddp, r = train(MODELS[name], method, { strategy = strategy }, dpo, seed)
    assert(#single == #ddp and #single > 0, "parameter counts differ")
    assert(r.timing.phases_ms.comm > 0, "no time in the comm phase")
    for i = 1, #single do
      local d = math.abs(ddp[i] - single[i]) / math.max(1, math.abs(single[i]))
      if d > BOUND then
        error(string.format("%s %s: parameter element %d: %s %.9g, single process %.9g (rank %d of %d)", name, method,
                            i, strategy, ddp[i], single[i], rank, ws))
      end
      worst = math.max(worst, d)
    end
    ::refused::
    end
  end
end
dp.dist.barrier()
print(string.format("rank %d of %d: every model x method equal to one process, worst relative difference %.3g (bound %g)",
                    rank, ws, worst, BOUND))
