-- test_dist_nccl.lua: the NCCL path, on a machine with a GPU (skipped elsewhere, exit 77). No
-- launcher: world size 1 through NCCL (ncclGetUniqueId and ncclCommInitRank in this process).
--   * NCCL missing (DPPROF_NCCL naming no library): one line naming the library, DPPROF_NCCL and
--     LD_LIBRARY_PATH, exit 2 (a refused configuration), nothing written;
--   * with NCCL: distributed = {strategy = "ddp"} (and "zero2", "fsdp") on device cuda trains exactly as
--     the run without it (each parameter's sum of squares bit for bit after K steps), its
--     collectives in the ledger and the comm phase; and fsdp with bf16 (f32 masters) and LoRA, whose
--     blocks are all-gathered as bf16 (ncclBfloat16: the adapters' bf16 copies, the frozen base's parts).
-- NCCL is found by DPPROF_NCCL or the loader's path (PyPI's nvidia-nccl-cu13: site-packages/
-- nvidia/nccl/lib/libnccl.so.2).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
if not (dp.cuda_compiled and dp.cuda_available()) then
  print("skipped: the NCCL path needs a CUDA build and a GPU")
  os.exit(77)
end

local MODEL = { arch = "llama", vocab = 128, hidden = 64, layers = 2, heads = 4, kv_heads = 2, seq_len = 16, batch = 4,
                tie_head = true }
local BF16_LORA = dp.deep_copy(MODEL)
BF16_LORA.dtype, BF16_LORA.lora = "bf16", { rank = 2, alpha = 4 }
local function run(method, distributed, model)
  local sums = {}
  local r = dp.experiment{ model = model or MODEL, method = method, device = "cuda", iters = 2, warmup = 1, snapshots = "none",
                           distributed = distributed,
                           on = { finished = function(ctx)
                             for _, p in ipairs(ctx.model:params()) do sums[#sums + 1] = ctx.model:param(p.name):sumsq() end
                           end } }
  check.eq(r.status, "ok", tostring(r.message))
  return sums, r
end

-- NCCL missing: refused before training, naming what to set
local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local script = dir .. "/missing.lua"
local f = assert(io.open(script, "w"))
f:write('local dp = require("dpprof")\n',
        'dp.experiment{ model = { vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 },\n',
        '  device = "cuda", distributed = { strategy = "ddp" }, trace = "', dir, '/t.json" }\n')
f:close()
local code, out = check.sh(string.format("DPPROF_NCCL=%q %q run %q", dir .. "/no-libnccl.so.2", dp.executable, script))
check.eq(code, 2, "exit status without NCCL: " .. out)
for _, want in ipairs({ "NCCL", "no-libnccl.so.2", "DPPROF_NCCL", "LD_LIBRARY_PATH" }) do
  check.truthy(out:find(want, 1, true), "the error names " .. want .. ": " .. out)
end
check.eq(io.open(dir .. "/t.json"), nil, "nothing written")
os.execute("rm -rf " .. dir)

for _, method in ipairs({ "vanilla", "ghost", "flash_clip", "bk" }) do
  local alone = run(method, nil)
  for _, strategy in ipairs({ "ddp", "zero2", "fsdp" }) do
    local nccl, r = run(method, { strategy = strategy })
    for i = 1, #alone do
      check.eq(nccl[i], alone[i], method .. " " .. strategy .. ": world size 1 through NCCL, tensor " .. i)
    end
    local calls = 0
    for _, o in ipairs(r.ledger) do
      if o.op == (strategy == "ddp" and "comm_all_reduce" or "comm_reduce_scatter") then calls = o.calls end
    end
    check.truthy(calls > 0, method .. " " .. strategy .. ": the collectives are in the ledger")
    check.truthy(r.timing.phases_ms.comm > 0, method .. " " .. strategy .. ": the comm phase")
    print(string.format("%s %s: world size 1 through NCCL equals the run without it (%d tensors, %d %s, comm %.3f ms)",
                        method, strategy, #alone, calls, strategy == "ddp" and "all-reduces" or "reduce-scatters",
                        r.timing.phases_ms.comm))
  end
end
for _, method in ipairs({ "ghost", "bk" }) do
  local alone = run(method, nil, BF16_LORA)
  local nccl, r = run(method, { strategy = "fsdp" }, BF16_LORA)
  for i = 1, #alone do
    check.eq(nccl[i], alone[i], method .. " fsdp bf16 LoRA: world size 1 through NCCL, tensor " .. i)
  end
  local gathers = 0
  for _, o in ipairs(r.ledger) do if o.op == "comm_all_gather" then gathers = o.calls end end
  check.truthy(gathers > 0, method .. " fsdp bf16 LoRA: the all-gathers are in the ledger")
  print(string.format("%s fsdp bf16 LoRA: world size 1 through NCCL equals the run without it (%d all-gathers)", method,
                      gathers))
end
print("ok")
