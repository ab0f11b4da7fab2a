-- save_equal.lua: run under mpirun -np N (tests/distributed/CMakeLists.txt). An experiment's save = DIR in
-- a distributed run: rank 0 writes the whole model (fsdp's parts gathered first, every rank taking
-- part) and the other ranks write nothing; under ddp, zero2 and fsdp the file, loaded back with
-- dp.model.load, equals the one-process run's file to ddp_equal's bound, |dist - single| <= 1e-6 *
-- max(1, |single|) element-wise (f32). Then fsdp with bf16 (f32 masters) and LoRA (the frozen base's bf16
-- parts gathered back, the adapters' f32 masters with their bf16 copies rebuilt), against its one process;
-- and fsdp from those saved files (each rank loading its parts), against one process loading them.
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local ws, rank = dp.dist.world_size(), dp.dist.rank()
if ws < 2 then error("save_equal.lua runs under mpirun -np N with N >= 2 (got world size " .. ws .. ")") end
local BOUND = 1e-6
local MODEL = { arch = "llama", vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, seq_len = 8, batch = 8,
                tie_head = true }
local BF16_LORA = dp.deep_copy(MODEL)
BF16_LORA.dtype, BF16_LORA.lora = "bf16", { rank = 2, alpha = 4 }
local ROOT = string.format("save_equal_np%d", ws)

local function values(path)
  local m <close> = dp.model.load(path, { device = "cpu", batch = 8, seq_len = 8 })
  return check.param_values(m)
end

local function train(distributed, save, model)
  local r = dp.experiment{ model = model or MODEL, method = "ghost", iters = 2, warmup = 1, device = "cpu", threads = 1,
                           snapshots = "none", dp = { noise_multiplier = 0.5 }, distributed = distributed, seed = 5,
                           save = save }
  if r.status ~= "ok" then error(string.format("%s: %s", distributed and distributed.strategy or "single", r.message)) end
  return r
end

if rank == 0 then os.execute("rm -rf " .. ROOT); assert(dp.mkdir_p(ROOT)) end
dp.dist.barrier()
local worst = 0
-- then from the files the one-process runs wrote (model.path): each fsdp rank loads its parts alone
-- (every tensor read whole into a temporary, its part cut), the LoRA adapters too, and trains to the
-- one process's save from the same files
local FROM_FILES = { { "f32_file", { path = ROOT .. "/f32_single", batch = 8, seq_len = 8 }, { "fsdp" } },
                     { "bf16_lora_file", { path = ROOT .. "/bf16_lora_single", batch = 8, seq_len = 8, dtype = "bf16" },
                       { "fsdp" } } }
for _, case in ipairs({ { "f32", MODEL, dp.dist.STRATEGIES }, { "bf16_lora", BF16_LORA, { "fsdp" } }, FROM_FILES[1],
                        FROM_FILES[2] }) do
  local tag, model, strategies = table.unpack(case)
  -- the one process's run, on every rank alone; rank 0 keeps its file
  local single_dir = ROOT .. "/" .. tag .. "_single"
  local r = train(nil, rank == 0 and single_dir or nil, model)
  assert((r.save_dir == single_dir) == (rank == 0), "single: save_dir")
  dp.dist.barrier()
  local single, n = values(single_dir)
  assert(n > 1000, "elements " .. n)
  for _, strategy in ipairs(strategies) do
    local dir = ROOT .. "/" .. tag .. "_" .. strategy
    r = train({ strategy = strategy }, dir, model)
    -- rank 0 wrote it; the others wrote nothing and say so
    if rank == 0 then
      assert(r.save_dir == dir, strategy .. ": rank 0's save_dir " .. tostring(r.save_dir))
    else
      assert(r.save_dir == nil, strategy .. ": rank " .. rank .. " carries save_dir")
    end
    dp.dist.barrier()
    local got = values(dir)
    for name, vals in pairs(single) do
      assert(got[name] and #got[name] == #vals, tag .. " " .. strategy .. ": " .. name .. " size")
      for i, v in ipairs(vals) do
        local d = math.abs(got[name][i] - v) / math.max(1, math.abs(v))
        if d > BOUND then
          error(string.format("%s %s: %s[%d]: saved %.9g, one process %.9g (rank %d of %d)", tag, strategy, name, i,
                              got[name][i], v, rank, ws))
        end
        if d > worst then worst = d end
      end
    end
    dp.dist.barrier()
  end
end
if rank == 0 then
  print(string.format("save_equal np %d: ddp, zero2, fsdp (and fsdp bf16 + LoRA, fsdp loaded in parts from files) "
                      .. "saves equal one process's (worst %.3g)",
                      ws, worst))
  os.execute("rm -rf " .. ROOT)
end
