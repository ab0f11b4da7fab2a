-- plan_equal.lua: run under mpirun -np N. Each rank trains on the CPU as one rank of the world
-- (ddp, then zero2, whose optimizer states must be a 1/N share of ddp's, then fsdp, whose parameters at the
-- peak, and gradients at most, must be the parts of the blocks' tensors plus one block whole and the tensors
-- outside the blocks),
-- then plans the same run on device "plan" as rank r of a simulated world of N (no launcher needed
-- for that: nothing moves). The plan's memory equals what the rank measured, byte for byte: the
-- run's peak, every category's peak and live-at-peak, every module's peak; and its collectives
-- are the rank's (ops, calls, wire bytes). Poisson sampling makes the ranks' batches differ, so
-- each rank's plan is its own (fsdp's padding physical batches included: the last case's seed 7
-- draws 7, 5 and 9 samples in physical batches of 2, slices that make different numbers of them).
-- Rank 0's combined result names the largest rank per category.
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
  { "gpt bk uneven", { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 8,
                       checkpoint = "blocks" }, "bk", { poisson = true, dataset_size = 64, max_physical_batch_size = 2 },
    7 },
  -- bk reduce-scatters each block's gradient in the clip as soon as its books are formed: a
  -- rank's slice of 8 (np 2) or 4 (np 4) in physical batches of 2, the blocks checkpointed
  { "gpt bk blocks", { arch = "gpt", vocab = 64, hidden = 32, layers = 4, heads = 2, seq_len = 8, batch = 16,
                       checkpoint = "blocks" }, "bk", { max_physical_batch_size = 2 } },
}
local BK_CASE = CASES[#CASES]
local states = {} -- optimizer states' peak per strategy, first case
local params_at_peak = {} -- parameters live at the run's peak per strategy, first case
local grads_peak = {} -- gradients' peak per strategy, first case
local bk_grads = {} -- gradients' peak per strategy, BK_CASE
for _, case in ipairs(CASES) do
 for _, strategy in ipairs({ "ddp", "zero2", "fsdp" }) do
  if strategy == "fsdp" and case[2].lora then goto next end -- fsdp: full fine-tuning only (LoRA refused)
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
    local ok, err = pcall(results.validate, r)
    if not ok then fail("%s on %s: the result does not validate: %s", name, device, tostring(err)) end
    return r
  end
  local cpu = run("cpu", { strategy = strategy })
  local plan = run("plan", { strategy = strategy, world_size = ws, rank = rank })
  if case == BK_CASE then bk_grads[strategy] = cpu.memory.categories.gradients.peak_bytes end
  if case == CASES[1] then
    states[strategy] = cpu.memory.categories.optimizer_states.peak_bytes
    params_at_peak[strategy] = cpu.memory.categories.parameters.live_at_peak_bytes
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
-- fsdp holds a block's parameters only while it passes over it: at the run's peak, fewer than ddp's whole
do -- exactly: the tensors outside the blocks whole, every block tensor's part of ceil(n / N), one block whole
  local outer, parts, block = 0, 0, {}
  for _, p in ipairs(dp.model(CASES[1][2]):params()) do
    local l = p.name:match("^transformer%.h%.(%d+)%.")
    if l then
      parts = parts + (p.numel + ws - 1) // ws
      block[l] = (block[l] or 0) + p.numel
    else
      outer = outer + p.numel
    end
  end
  local want = 4 * (outer + parts + block["0"])
  if params_at_peak.fsdp ~= want or want >= params_at_peak.ddp then
    fail("fsdp's parameters at the peak: %d bytes, want %d (ddp's whole: %d)", params_at_peak.fsdp, want,
         params_at_peak.ddp)
  end
  -- ghost's clipped backward reduce-scatters each block's gradient as soon as the block is done:
  -- never more than the parts, one block's whole and the tensors outside the blocks whole
  local whole = 4 * outer
  for _, n in pairs(block) do whole = whole + 4 * n end
  if grads_peak.fsdp > want or want >= whole then
    fail("fsdp's gradients' peak: %d bytes, at most %d (the whole: %d)", grads_peak.fsdp, want, whole)
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
-- zero2 holds this rank's slice of AdamW's two states: at most ceil(n / N) of each tensor's n
if not (states.zero2 < states.ddp and states.zero2 * ws <= states.ddp + 2 * 4 * ws * 64) then
  fail("zero2's optimizer states (%d bytes) are not a 1/%d share of ddp's (%d)", states.zero2, ws, states.ddp)
end
dp.dist.barrier()
print(string.format("rank %d of %d: the plan of this rank equals its measured memory, per category and module", rank, ws))
