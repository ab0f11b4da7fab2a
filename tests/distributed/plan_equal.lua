-- plan_equal.lua: run under mpirun -np N. Each rank trains on the CPU as one rank of the world
-- (ddp, then zero2, whose optimizer states must be a 1/N share of ddp's, then fsdp, whose parameters at the
-- peak must be every tensor's part plus one block whole, and gradients at most that and the embeddings'),
-- then plans the same run on device "plan" as rank r of a simulated world of N (no launcher needed
-- for that: nothing moves). The plan's memory equals what the rank measured, byte for byte: the
-- run's peak, every category's peak and live-at-peak, every module's peak; and its collectives
-- are the rank's (ops, calls, wire bytes). Poisson sampling makes the ranks' batches differ, so
-- each rank's plan is its own (fsdp's padding physical batches included: the last case's seed 7
-- draws 7, 5 and 9 samples in physical batches of 2, slices that make different numbers of them).
-- Rank 0's combined result names the largest rank per category. fsdp's warm-up peak, the model built
-- in parts for the rank, is bounded by the parts, the largest tensor whole and training's peak.
local dp = require("dpprof")
local results = require("dpprof.results")
local ws, rank = dp.dist.world_size(), dp.dist.rank()
if ws < 2 then error("plan_equal.lua runs under mpirun -np N with N >= 2 (got world size " .. ws .. ")") end

local function fail(fmt, ...) error(string.format("rank %d of %d: " .. fmt, rank, ws, ...), 0) end

local CASES = {
  { "gpt ghost", { arch = "gpt", vocab = 64, hidden = 32, layers = 4, heads = 2, seq_len = 8, batch = 8 }, "ghost" },
  { "llama lora bk", { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8,
                       batch = 8, tie_head = true, checkpoint = "blocks", lora = { rank = 2, alpha = 4 } }, "bk" },
  { "gpt flat", { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8 }, "flat" },
  -- bf16 with f32 masters: fsdp's parts f32, its gathered GEMM weights the bf16 copies
  { "gpt bf16 ghost", { arch = "gpt", vocab = 64, hidden = 32, layers = 3, heads = 2, seq_len = 8, batch = 8,
                        dtype = "bf16", master_weights = true }, "ghost" },
  -- LoRA in bf16: the frozen base's parts and gathers bf16, the adapters' parts f32
  { "llama bf16 lora ghost", { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2,
                               seq_len = 8, batch = 8, dtype = "bf16", lora = { rank = 2, alpha = 4 } }, "ghost" },
  { "gpt bk uneven", { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8,
                       checkpoint = "blocks" }, "bk", { poisson = true, dataset_size = 64, max_physical_batch_size = 2 },
    7 },
  -- clipping styles (issue 40): n_groups x B factors, bk's books by group, twopass's forming backward
  { "llama lora bk per_block", { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2,
                                 seq_len = 8, batch = 8, tie_head = true, checkpoint = "blocks",
                                 lora = { rank = 2, alpha = 4 } }, "bk",
    { poisson = true, dataset_size = 64, clipping = "per_block" } },
  { "gpt ghost per_layer", { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8 },
    "ghost", { poisson = true, dataset_size = 64, clipping = "per_layer", clip_fn = "automatic" } },
  -- bk reduce-scatters each block's gradient in the clip as soon as its books are formed: a
  -- rank's slice of 8 (np 2) or 4 (np 4) in physical batches of 2, the blocks checkpointed
  { "gpt bk blocks", { arch = "gpt", vocab = 64, hidden = 32, layers = 4, heads = 2, seq_len = 8, batch = 16,
                       checkpoint = "blocks" }, "bk", { max_physical_batch_size = 2 } },
}
local BK_CASE = CASES[#CASES]
local states = {} -- optimizer states' peak per strategy, first case
local params_at_peak = {} -- parameters live at the run's peak per case and strategy
local grads_peak = {} -- gradients' peak per strategy, first case
local bk_grads = {} -- gradients' peak per strategy, BK_CASE
local forming_grads = {} -- gradients' peak per strategy, twopass forming per group ("gpt ghost per_layer")
local warmups = {} -- fsdp's {warm-up peak, training peak} per case, measured
for _, case in ipairs(CASES) do
 for _, strategy in ipairs({ "ddp", "zero2", "fsdp" }) do
  local name, model, method = case[1] .. " " .. strategy, case[2], case[3]
  -- the plan without the CUDA workspace, which a CPU rank does not hold
  local function run(device, distributed)
    local r = dp.experiment{ model = model, method = method, iters = 2, warmup = 1, device = device,
                             device_model = device == "plan" and { base = "h100", name = "cpu-rank", workspace = false }
                               or nil, threads = device == "cpu" and 1 or nil,
                             snapshots = "none", seed = case[5] or 3,
                             dp = case[4] or { poisson = true, dataset_size = 64 },
                             distributed = distributed }
    if r.status ~= "ok" then fail("%s on %s: %s", name, device, r.message) end
    local ok, problems = results.validate(r) -- false and the problems (it raises nothing)
    if not ok then fail("%s on %s: the result does not validate: %s", name, device, table.concat(problems, "; ")) end
    return r
  end
  local cpu = run("cpu", { strategy = strategy })
  local plan = run("plan", { strategy = strategy, world_size = ws, rank = rank })
  if strategy == "fsdp" then warmups[case[1]] = { cpu.memory.warmup_peak_bytes, cpu.memory.peak_bytes } end
  params_at_peak[case[1]] = params_at_peak[case[1]] or {}
  params_at_peak[case[1]][strategy] = cpu.memory.categories.parameters.live_at_peak_bytes
  if case == BK_CASE then bk_grads[strategy] = cpu.memory.categories.gradients.peak_bytes end
  if case[1] == "gpt ghost per_layer" then forming_grads[strategy] = cpu.memory.categories.gradients.peak_bytes end
  if case == CASES[1] then
    states[strategy] = cpu.memory.categories.optimizer_states.peak_bytes
    grads_peak[strategy] = cpu.memory.categories.gradients.peak_bytes
  end
  local function same(a, b, what) if a ~= b then fail("%s: %s: plan %s, measured %s", name, what, b, a) end end
  same(cpu.memory.peak_bytes, plan.memory.peak_bytes, "peak bytes")
  for _, c in ipairs(results.CATEGORIES) do
    same(cpu.memory.categories[c].peak_bytes, plan.memory.categories[c].peak_bytes, c .. " peak")
    same(cpu.memory.categories[c].live_at_peak_bytes, plan.memory.categories[c].live_at_peak_bytes, c .. " at peak")
  end
  same(#cpu.memory.modules, #plan.memory.modules, "modules")
  for i, m in ipairs(cpu.memory.modules) do
    same(m.module, plan.memory.modules[i].module, "module " .. i)
    same(m.peak_bytes, plan.memory.modules[i].peak_bytes, m.module .. " peak")
  end
  local function comm(r)
    local out = {}
    for _, o in ipairs(r.ledger) do if o.op:find("^comm_") then out[#out + 1] = o.op .. " " .. o.calls .. " " .. o.bytes end end
    return table.concat(out, "; ")
  end
  if comm(cpu) == "" then fail("%s: no collective in the measured ledger", name) end
  same(comm(cpu), comm(plan), "collectives")
  same(plan.distributed.rank, rank, "the plan's rank")
  if rank == 0 then
    local largest = cpu.distributed.largest
    if not largest or #cpu.distributed.ranks ~= ws then fail("%s: rank 0's result lacks the ranks", name) end
    for _, c in ipairs(results.CATEGORIES) do
      local max, at = -1, nil
      for _, one in ipairs(cpu.distributed.ranks) do
        if one.categories[c] > max then max, at = one.categories[c], one.rank end
      end
      same(largest.categories[c].peak_bytes, max, c .. ": the largest rank's peak")
      same(largest.categories[c].rank, at, c .. ": the rank holding it")
    end
    for _, one in ipairs(cpu.distributed.ranks) do -- what was live at each rank's peak makes it up
      local sum = 0
      for _, c in ipairs(results.CATEGORIES) do sum = sum + one.live_at_peak[c] end
      same(sum, one.peak_bytes, "rank " .. one.rank .. "'s live at peak")
    end
    local png = os.tmpname() .. ".png"
    results.rank_chart(cpu, png)
    local f = io.open(png, "rb")
    if not f or f:read(4) ~= "\137PNG" then fail("%s: no per-rank chart", name) end
    f:close()
    os.remove(png)
  end
  ::next::
 end
end
-- fsdp holds a tensor whole only while a pass reads it: at the run's peak, fewer than ddp's whole;
-- exactly: every tensor's part of ceil(n / N) in its own dtype (f32 masters; a frozen base bf16 in a
-- bf16 model), and whole one block gathered in the dtype its pass reads (a bf16 model's GEMM weights
-- their bf16 copies, without the masters): the run's peak is in a block's pass. The block is larger
-- than the other sets gathered at once, the embeddings (wte, wpe) and the head's (the final norm and
-- the head, or the tied wte), which case 1 asserts.
local function fsdp_params(model)
  local spec = dp.deep_copy(model)
  spec.device = "plan"
  local m <close> = dp.model(spec)
  local bf16, tied = model.dtype == "bf16", true
  for _, p in ipairs(m:params()) do tied = tied and p.kind ~= "head" end
  local parts, sets, whole, grads, embeddings = 0, { embeddings = 0, head = 0 }, 0, 0, 0
  for _, p in ipairs(m:params()) do
    local size = bf16 and (not p.trainable or model.master_weights == false) and 2 or 4
    local copy = bf16 and size == 4 and (p.kind == "linear_w" or p.kind == "lora_a" or p.kind == "lora_b"
                                         or p.kind == "head" or (p.kind == "embedding" and tied))
    local set = p.name:match("^transformer%.h%.(%d+)%.") or p.name:match("^model%.layers%.(%d+)%.")
      or ((p.kind == "embedding" or p.kind == "position") and "embeddings" or "head")
    parts = parts + (p.numel + ws - 1) // ws * size
    -- the embedding lookup reads the value; the GEMMs read the bf16 copy where there is one
    sets[set] = (sets[set] or 0) + p.numel * (copy and set ~= "embeddings" and 2 or size)
    if p.kind == "embedding" and tied then sets.head = sets.head + p.numel * (copy and 2 or size) end
    whole = whole + p.numel * (size + (copy and 2 or 0))
    if p.trainable then
      grads = grads + 4 * p.numel
      if set == "embeddings" then embeddings = embeddings + 4 * p.numel end
    end
  end
  return parts + sets["0"], sets, whole, grads, embeddings
end
for i, case in ipairs(CASES) do
  local got = params_at_peak[case[1]]
  local want, sets = fsdp_params(case[2])
  -- (two blocks' parts are one block at N = 2: fewer than ddp's whole where the blocks are more, case 1's 4)
  if got.fsdp ~= want or want > got.ddp or (i == 1 and want >= got.ddp) then
    fail("%s: fsdp's parameters at the peak: %d bytes, want %d (ddp's whole: %d)", case[1], got.fsdp, want, got.ddp)
  end
  if i == 1 then
    if sets["0"] <= sets.embeddings or sets["0"] <= sets.head then
      fail("%s: block 0 (%d bytes) is not the largest set gathered at once (embeddings %d, head %d)", case[1],
           sets["0"], sets.embeddings, sets.head)
    end
    -- ghost's clipped backward reduce-scatters each block's gradient, and the head's set's, as soon as
    -- the pass over it is done, and the embeddings' at its end: never more than the parts, one block's
    -- whole and the embeddings' whole
    local _, _, _, all, embeddings = fsdp_params(case[2])
    local bound = want + embeddings
    if grads_peak.fsdp > bound or bound >= all then
      fail("fsdp's gradients' peak: %d bytes, at most %d (the whole: %d)", grads_peak.fsdp, bound, all)
    end
    print(string.format("rank %d of %d: %s: fsdp's parameters at the peak %d bytes (ddp's %d), gradients' peak %d "
                        .. "(bound %d)", rank, ws, case[1], got.fsdp, got.ddp, grads_peak.fsdp, bound))
  end
end
-- bk under fsdp: from the second physical batch on, the step's parts of every block and the tensors
-- outside the blocks (whole until the reduce-scatter after the last clip) are live while one block's
-- gradient is whole; the reduce-scatter of a block's tensor j (in the model's order) adds its new
-- part, ceil(n_j / N), before the whole is released, the block's earlier tensors' wholes gone by then
do
  local outer, parts, block, order = 0, 0, {}, {}
  for _, p in ipairs(dp.model(BK_CASE[2]):params()) do
    local l = p.name:match("^transformer%.h%.(%d+)%.")
    if l then
      parts = parts + (p.numel + ws - 1) // ws
      block[l] = (block[l] or 0) + p.numel
      if l == "0" then order[#order + 1] = p.numel end
    else
      outer = outer + p.numel
    end
  end
  local transient, before = 0, 0
  for _, n in ipairs(order) do
    transient = math.max(transient, (n + ws - 1) // ws - before)
    before = before + n
  end
  local want = 4 * (outer + parts + block["0"] + transient)
  if bk_grads.fsdp ~= want then
    fail("bk under fsdp: the gradients' peak is %d bytes, want %d: the tensors outside the blocks %d, the parts %d, "
         .. "one block whole %d, one part in flight %d (ddp's whole: %d)", bk_grads.fsdp, want, 4 * outer, 4 * parts,
         4 * block["0"], 4 * transient, bk_grads.ddp)
  end
end
-- twopass's forming backward under fsdp reduce-scatters each block's gradient as the model's own
-- backward does: never the whole model's gradient at once, as ddp holds it
if not (forming_grads.fsdp < forming_grads.ddp) then
  fail("twopass per_layer under fsdp: the gradients' peak is %d bytes, not below ddp's whole %d: its forming backward "
       .. "did not reduce-scatter block by block", forming_grads.fsdp, forming_grads.ddp)
end
-- fsdp builds each rank's model in parts (dpprof.model's parts): one tensor whole at a time, its part
-- cut and the whole freed before the next is made, never the whole model. Without warm-up steps the
-- warm-up's peak is the build's, exactly the largest over the tensors, in the model's order, of the
-- parts made so far (its own included) + the tensor whole; with them it is at most the parts, the
-- largest tensor whole and what training holds. (A build of the whole model, then cut, holds it all.)
for _, case in ipairs(CASES) do
  local spec = dp.deep_copy(case[2])
  spec.device = "plan"
  local parts, largest, build = 0, 0, 0
  do -- closed before the runs below, whose plan device would count it
    local m <close> = dp.model(spec)
    local bf16 = spec.dtype == "bf16"
    for _, p in ipairs(m:params()) do
      local size = bf16 and (not p.trainable or spec.master_weights == false) and 2 or 4
      parts = parts + (p.numel + ws - 1) // ws * size
      largest = math.max(largest, p.numel * size)
      build = math.max(build, parts + p.numel * size)
    end
  end
  local warm, training = warmups[case[1]][1], warmups[case[1]][2]
  if warm > parts + largest + training then
    fail("%s fsdp: the warm-up peak is %d bytes, more than the parts %d + the largest tensor %d + training's peak %d",
         case[1], warm, parts, largest, training)
  end
  for _, device in ipairs({ "cpu", "plan" }) do
    local r = dp.experiment{ model = case[2], method = case[3], iters = 1, warmup = 0, device = device,
                             device_model = device == "plan" and { base = "h100", name = "cpu-rank", workspace = false }
                               or nil, threads = device == "cpu" and 1 or nil, snapshots = "none", seed = case[5] or 3,
                             dp = case[4] or { poisson = true, dataset_size = 64 },
                             distributed = device == "plan" and { strategy = "fsdp", world_size = ws, rank = rank }
                               or { strategy = "fsdp" } }
    if r.status ~= "ok" then fail("%s fsdp without warm-up on %s: %s", case[1], device, r.message) end
    if r.memory.warmup_peak_bytes ~= build then
      fail("%s fsdp on %s: the build's peak is %d bytes, want %d (the parts %d, the largest tensor %d)", case[1],
           device, r.memory.warmup_peak_bytes, build, parts, largest)
    end
  end
end
-- zero2 holds this rank's slice of AdamW's two states: at most ceil(n / N) of each tensor's n
if not (states.zero2 < states.ddp and states.zero2 * ws <= states.ddp + 2 * 4 * ws * 64) then
  fail("zero2's optimizer states (%d bytes) are not a 1/%d share of ddp's (%d)", states.zero2, ws, states.ddp)
end
dp.dist.barrier()
print(string.format("rank %d of %d: the plan of this rank equals its measured memory, per category and module", rank, ws))
