-- bench_model.lua: forward, backward and optimizer time and tokens/s of plain training (no DP), each config and dtype in its own process.
-- Change it: dpprof run experiments/bench_model.lua [configs=small|gpt2,large] [dtypes=f32,bf16] [arch=gpt|llama] [iters=5] [warmup=2] [device=cpu|cuda] [baseline=torch.jsonl] [out=DIR]
--            [profile=ops] [threads=N]; no methods= (plain training: vanilla only)
--
-- configs: small (V=8192 d=256 L=4 H=4 T=256 B=4, the CPU default), gpt2 (V=50257 d=768 L=12 H=12
-- T=1024 B=8) and large (V=32000 d=2048 L=20 H=16 T=16384 B=1), the GPU defaults with f32 and bf16.
-- baseline=FILE reads JSON lines from tests/baselines/torch_eager.py (PyTorch eager on the same
-- shapes, run beforehand in the same session) and adds the ratio dpprof / PyTorch per row.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_model.lua", { "configs", "dtypes", "arch", "iters", "warmup", "baseline", "timeout" },
                          { methods = "plain training without DP: vanilla only (bench_dp.lua compares the methods)" })

local CONFIGS = {
  small = { vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4 },
  gpt2 = { vocab = 50257, hidden = 768, layers = 12, heads = 12, seq_len = 1024, batch = 8 },
  large = { vocab = 32000, hidden = 2048, layers = 20, heads = 16, seq_len = 16384, batch = 1 },
}

local device = args.device or "cpu"
local on_gpu = device == "cuda"
local configs = presets.list(args.configs) or (on_gpu and { "gpt2", "large" } or { "small" })
local dtypes = presets.list(args.dtypes) or (on_gpu and { "f32", "bf16" } or { "f32" })
local arch = args.arch or "gpt"
local out = args.out or string.format("results/bench_model_%s", os.date("%Y%m%d_%H%M%S"))
for _, c in ipairs(configs) do
  if not CONFIGS[c] then error(string.format("unknown config '%s' (valid: small, gpt2, large)", tostring(c))) end
end

-- PyTorch rows keyed "config/arch/dtype"
local baseline = {}
if args.baseline then
  local f = assert(io.open(args.baseline, "r"))
  for line in f:lines() do
    if line:match("^%s*{") then
      local row = dp.json.decode(line)
      baseline[row.config .. "/" .. row.arch .. "/" .. row.dtype] = row
    end
  end
  f:close()
end

local rows = {}
for _, name in ipairs(configs) do
  local model = { arch = arch }
  for k, v in pairs(CONFIGS[name]) do model[k] = v end
  local dir = out .. "/" .. name
  local swept = dp.sweep{
    base = { model = model, method = "vanilla", device = device, iters = args.iters or 5,
             profile = args.profile, threads = args.threads,
             warmup = args.warmup or 2, snapshots = "none", optimizer = { name = "adamw", lr = 1e-4 } },
    vary = { dtype = dtypes }, out = dir, timeout = args.timeout or 900,
  }
  for _, p in ipairs(swept.points) do
    local r = p.result or {}
    local row = { config = name, arch = arch, dtype = p.vary.dtype, status = r.status,
                  tokens = model.batch * model.seq_len }
    if r.status == "ok" then
      local ph = r.timing.phases_ms
      row.forward_ms, row.backward_ms, row.optimizer_ms = ph.forward, ph.backward, ph.optimizer
      row.step_ms = r.timing.median_ms
      row.tokens_per_s = row.tokens / (row.step_ms / 1e3)
      row.peak_memory_mb = r.peak_memory_mb
      local b = baseline[name .. "/" .. arch .. "/" .. row.dtype]
      if b then
        row.torch_step_ms, row.torch_peak_memory_mb = b.step_ms, b.peak_memory_mb
        row.ratio_vs_torch = row.step_ms / b.step_ms
      end
    else
      row.message = r.message
    end
    rows[#rows + 1] = row
  end
end

local f = assert(io.open(out .. "/bench_model.json", "w"))
f:write(dp.json.encode({ benchmark = "bench_model", device = device, rows = rows }, { indent = true }), "\n")
f:close()

local function ms(v) return v and string.format("%.1f", v) or "-" end
print(string.format("\n%-6s %-5s %-5s %10s %10s %10s %10s %12s %10s %10s %8s", "config", "arch", "dtype", "fwd ms",
                    "bwd ms", "optim ms", "step ms", "tokens/s", "peak MiB", "torch ms", "ratio"))
for _, r in ipairs(rows) do
  if r.status == "ok" then
    print(string.format("%-6s %-5s %-5s %10s %10s %10s %10s %12.0f %10.0f %10s %8s", r.config, r.arch, r.dtype,
                        ms(r.forward_ms), ms(r.backward_ms), ms(r.optimizer_ms), ms(r.step_ms), r.tokens_per_s,
                        r.peak_memory_mb, ms(r.torch_step_ms),
                        r.ratio_vs_torch and string.format("%.2fx", r.ratio_vs_torch) or "-"))
  else
    print(string.format("%-6s %-5s %-5s %s: %s", r.config, r.arch, r.dtype, tostring(r.status), tostring(r.message)))
  end
end
print("results: " .. out .. "/bench_model.json")
