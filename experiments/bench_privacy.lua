-- bench_privacy.lua: how long the accountants take: epsilon after 10,000 steps (the target: well under a second) and the noise-multiplier search (a few seconds), for RDP, PRV and PLD.
-- Change it: dpprof run experiments/bench_privacy.lua [accountants=rdp,prv,pld] [steps=10000] [repeats=3] [out=DIR]
--
-- epsilon rows: q in {0.001, 0.01, 0.05} x sigma in {0.6, 1, 2} at delta = 1e-5 (the grid of
-- tests/fixtures/privacy/accountants.csv), each timed `repeats` times, the fastest kept (the
-- machine's noise only ever adds). noise rows: get_noise_multiplier's search for a few targets,
-- each timed once. Prints a table and writes <out>/bench_privacy.json:
--   {benchmark, steps, repeats, rows = {{kind, accountant, sample_rate, noise_multiplier (the one
--    found, for noise rows), target_epsilon (noise rows), steps, delta, epsilon, seconds}}}
-- Seconds are wall time (dp.clock) on this machine, one thread: FFTW plans are FFTW_ESTIMATE.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local why = "it times the privacy accountants alone (no model, no training)"
local args = presets.args("bench_privacy.lua", { "accountants", "steps", "repeats" },
                          { device = why, threads = why, profile = why, methods = why })

local accountants = {}
for a in tostring(args.accountants or "rdp,prv,pld"):gmatch("[^,]+") do accountants[#accountants + 1] = a end
local steps = math.tointeger(args.steps or 10000)
local repeats = math.tointeger(args.repeats or 3)
if not steps or steps < 1 or not repeats or repeats < 1 then error("steps and repeats must be integers >= 1", 0) end
local out = args.out or string.format("results/bench_privacy_%s", os.date("%Y%m%d_%H%M%S"))
local DELTA = 1e-5

local rows, table_rows = {}, { { "kind", "accountant", "q", "target", "sigma", "steps", "epsilon", "seconds" } }
local function add(row)
  rows[#rows + 1] = row
  table_rows[#table_rows + 1] = { row.kind, row.accountant, string.format("%g", row.sample_rate),
                                  row.target_epsilon and string.format("%g", row.target_epsilon) or "-",
                                  string.format("%.6g", row.noise_multiplier), tostring(row.steps),
                                  string.format("%.6g", row.epsilon), string.format("%.3f", row.seconds) }
end

for _, a in ipairs(accountants) do
  for _, q in ipairs({ 0.001, 0.01, 0.05 }) do
    for _, sigma in ipairs({ 0.6, 1.0, 2.0 }) do
      local best, r = math.huge, nil
      for _ = 1, repeats do
        local t0 = dp.clock()
        r = dp.privacy.epsilon{ accountant = a, sample_rate = q, noise_multiplier = sigma, steps = steps, delta = DELTA }
        best = math.min(best, dp.clock() - t0)
      end
      add{ kind = "epsilon", accountant = a, sample_rate = q, noise_multiplier = sigma, steps = steps, delta = DELTA,
           epsilon = r.epsilon, seconds = best }
    end
  end
  for _, case in ipairs({ { 1.0, 0.01 }, { 8.0, 0.01 }, { 3.0, 0.05 }, { 0.5, 0.001 } }) do
    local t0 = dp.clock()
    local r = dp.privacy.noise_multiplier{ accountant = a, epsilon = case[1], sample_rate = case[2], steps = steps,
                                           delta = DELTA }
    add{ kind = "noise_multiplier", accountant = a, sample_rate = case[2], target_epsilon = case[1], steps = steps,
         delta = DELTA, noise_multiplier = r.noise_multiplier, epsilon = r.epsilon, seconds = dp.clock() - t0 }
  end
end

dp.print_table(table_rows, { false, false, true, true, true, true, true, true })
os.execute("mkdir -p '" .. out .. "'")
local f = assert(io.open(out .. "/bench_privacy.json", "w"))
f:write(dp.json.encode({ benchmark = "bench_privacy", steps = steps, repeats = repeats, rows = rows }, { indent = true }),
        "\n")
f:close()
print("results: " .. out .. "/bench_privacy.json")
