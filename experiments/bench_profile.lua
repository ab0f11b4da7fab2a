-- bench_profile.lua: what profile = "ops" costs. The same experiment without and with per-op
-- timing, interleaved, each run in its own process; prints the median step time of each, their
-- ratio, the overhead the profile states (host ns per timed call x calls per step) and how much of
-- each phase the timed ops cover.
-- Change it: dpprof run experiments/bench_profile.lua [config=small|gpt2] [methods=ghost (or method=)] [runs=5]
--            [iters=5] [warmup=2] [device=cpu|cuda] [threads=N]
-- Takes no profile= (it runs both) and no out= (it prints its table and writes no files).
--
-- configs: small (V=8192 d=256 L=4 H=4 T=256 B=4, the CPU default) and gpt2 (V=50257 d=768 L=12
-- H=12 T=1024 B=8, the GPU default).
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_profile.lua", { "config", "runs", "iters", "warmup" },
                          { profile = "it runs every point both without and with profile=ops",
                            out = "it prints its table and writes no files" })

local CONFIGS = {
  small = { arch = "gpt", vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4 },
  gpt2 = { arch = "gpt", vocab = 50257, hidden = 768, layers = 12, heads = 12, seq_len = 1024, batch = 8 },
}
local device = args.device or "cpu"
local config = args.config or (device == "cuda" and "gpt2" or "small")
if not CONFIGS[config] then error(string.format("unknown config '%s' (valid: small, gpt2)", tostring(config))) end
local runs = args.runs or 5

local median = dp.median

local function bench(method)
  local times = { none = {}, ops = {} }
  local last
  for k = 1, runs do
    for _, profile in ipairs({ "none", "ops" }) do -- interleaved, so drift in the machine hits both
      local r = dp.isolate(dp.experiment, { model = dp.deep_copy(CONFIGS[config]), method = method,
                                            device = device, iters = args.iters or 5, warmup = args.warmup or 2,
                                            threads = args.threads, profile = profile })
      if r.status ~= "ok" then error(string.format("run %d (%s): %s", k, profile, tostring(r.message))) end
      times[profile][k] = r.timing.median_ms
      if profile == "ops" then last = r end
    end
  end
  local off, on = median(times.none), median(times.ops)
  local function list(t) local s = {} for i, v in ipairs(t) do s[i] = string.format("%.1f", v) end return table.concat(s, " ") end
  print(string.format("bench_profile: %s %s on %s, %d runs of each (median of each run's median step)", config,
                      method, last.environment.device_name, runs))
  print(string.format("  profile none  %9.3f ms/step  (runs: %s)", off, list(times.none)))
  print(string.format("  profile ops   %9.3f ms/step  (x%.4f, %+.2f%%; runs: %s)", on, on / off, (on / off - 1) * 100, list(times.ops)))
  local o = last.profile.overhead
  print(string.format("  stated overhead: %.1f ns per timed call x %.0f calls per step = %.4f ms per step (%.3f%%)",
                      o.ns_per_call, o.calls_per_iter, o.ms_per_iter, 100 * o.ms_per_iter / on))
  for _, phase in ipairs(dp.results.PHASES) do
    local p = last.profile.phases[phase]
    if p and p.ms > 0 then
      print(string.format("  %-9s %9.3f ms, ops %9.3f ms (%.2f%%), outside ops %.3f ms", phase, p.ms, p.ops_ms,
                          100 * p.ops_ms / p.ms, p.outside_ops_ms))
    end
  end
  print("  peak: " .. (last.profile.peak and last.profile.peak.how or tostring(last.profile.peak_error)))
end

for _, method in ipairs(presets.list(args.methods) or { "ghost" }) do bench(method) end
