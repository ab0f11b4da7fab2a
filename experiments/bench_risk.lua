-- bench_risk.lua: how long dp.risk takes (issue 37 item 6), written to DIR/bench_risk.json.
-- Change it: dpprof run experiments/bench_risk.lua [out=DIR] [cases=readme,readme_pad1,step1e5,tiny_whole]
--
-- readme: the README's Llama-3.1-8B LoRA example (pad_to 64); readme_pad1: the same without pad_to
-- (every distinct length planned); step1e5: that model and data at 10^5 samples a step
-- (dataset_size 10^6, sample_rate 0.1, max_physical_batch_size 8); tiny_whole: a one-block model on a
-- card that holds every batch, so the safe search runs to the largest logical batch (about 100 a step).
-- Each row: the case, seconds, plan runs, the safe bound and the per-step probability.
local dp = require("dpprof")
if dp.args and dp.args.help then
  print("bench_risk.lua: how long dp.risk takes on the README's Llama-3.1-8B LoRA example (with and without\n"
        .. "pad_to), at 10^5 samples a step and with a safe search to the whole batch; writes DIR/bench_risk.json.\n"
        .. "keys (dpprof run experiments/bench_risk.lua KEY=VALUE ...): out, cases\n"
        .. "  out      out=DIR, where bench_risk.json goes (default results/bench_risk)\n"
        .. "  cases    cases=readme,readme_pad1,step1e5,tiny_whole (default: all)\n"
        .. "  profile  not taken here: dp.risk plans on the plan device, which has no per-op profile\n"
        .. "  threads  not taken here: dp.risk's plan runs use every core\n"
        .. "  device   not taken here: dp.risk plans on the plan device\n"
        .. "  methods  not taken here: each case names its method (flash_clip)")
  return
end
local args = {}
for _, a in ipairs(arg) do local k, v = a:match("^([%w_]+)=(.*)$"); if k then args[k] = v end end
local out = args.out or "results/bench_risk"
-- the fixture beside this script's repository, wherever it is run from
local REPO = (arg and arg[0] and arg[0]:match("^(.*)/experiments/[^/]*$")) or "."
local LLAMA = { path = REPO .. "/tests/fixtures/llama3_8b", dtype = "bf16", seq_len = 4096,
                lora = { rank = 16, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } } }
local DATA = { kind = "lognormal", median = 250, p99 = 2500 }
local CASES = {
  readme = { model = LLAMA, method = "flash_clip", budget_gb = 80, data = { length_distribution = DATA, pad_to = 64 },
             dataset_size = 50000, sample_rate = 0.001, steps = 10000, max_physical_batch_size = 8 },
  readme_pad1 = { model = LLAMA, method = "flash_clip", budget_gb = 80, data = { length_distribution = DATA },
                  dataset_size = 50000, sample_rate = 0.001, steps = 10000, max_physical_batch_size = 8 },
  step1e5 = { model = LLAMA, method = "flash_clip", budget_gb = 80, data = { length_distribution = DATA, pad_to = 64 },
              dataset_size = 1000000, sample_rate = 0.1, steps = 10000, max_physical_batch_size = 8 },
  tiny_whole = { model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 32 }, method = "flash_clip",
                 data = { length_distribution = { kind = "lognormal", median = 10, p99 = 30 }, pad_to = 4 },
                 dataset_size = 10000, sample_rate = 0.01, steps = 1000, max_physical_batch_size = 16,
                 device_model = { name = "roomy", memory_bytes = 1 << 34, peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 } },
}
local names = {}
for n in (args.cases or "readme,step1e5,tiny_whole,readme_pad1"):gmatch("[^,]+") do
  if not CASES[n] then dp.refuse("bench_risk.lua: unknown case '" .. n .. "' (valid: readme, readme_pad1, step1e5, tiny_whole)") end
  names[#names + 1] = n
end
local rows = dp.json.array()
for _, n in ipairs(names) do
  local o = dp.deep_copy(CASES[n])
  o.progress = true
  local t0 = dp.clock()
  local r = dp.risk(o)
  local e = r.methods[1]
  rows[#rows + 1] = { case = n, seconds = dp.clock() - t0, runs = e.runs, per_step = e.per_step,
                      safe = e.safe and e.safe.max_physical_batch_size or dp.json.null,
                      padded_lengths = r.data.padded_lengths, logical_mean = r.logical_batch.mean,
                      cores = dp.environment().threads }
  print(string.format("bench_risk: %-12s %8.2f s  %6d plan runs  safe %s  P(step) %.4g", n, rows[#rows].seconds,
                      e.runs, tostring(e.safe and e.safe.max_physical_batch_size), e.per_step))
end
assert(dp.mkdir_p(out))
assert(dp.write_file(out .. "/bench_risk.json", dp.json.encode({ kind = "dpprof.bench_risk", rows = rows }) .. "\n"))
print("written: " .. out .. "/bench_risk.json")
