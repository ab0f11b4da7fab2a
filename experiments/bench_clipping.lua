-- bench_clipping.lua: what each clipping style costs against vanilla, per DP method, measured in the same run (each point in its own process): step time and peak memory as ratios to vanilla's, with the extra memory by category (issue 40).
-- Change it: dpprof run experiments/bench_clipping.lua [methods=a,b] [clipping=flat,per_layer,per_block]
--            [iters=3] [warmup=1] [rounds=1] [device=cpu|cuda|plan] [arch=gpt|llama] [timeout=900] [threads=N]
--            [out=DIR]
-- rounds=N runs the whole sweep N times, vanilla first in each: a row's step ratio is the median over
-- the rounds of its step over that round's vanilla step (min and max beside it), which a machine whose
-- speed drifts between points moves far less than one round's.
--
-- The bench shape is bench_dp.lua's small (V=8192 d=256 L=4 H=4 T=256 B=4). Targets on the CPU (issue 40):
-- ghost with per_layer at most 1.15x vanilla's step (its block-local groups are formed at each block's end: no
-- second backward), flat with per_block at most 1.10x vanilla's peak (no whole per-sample gradient). The BLAS
-- kernel that ran is printed and recorded (openblas_get_corename): a time from a generic kernel is not believed.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_clipping.lua", { "clipping", "iters", "warmup", "arch", "timeout", "rounds" })

local SHAPE = { vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4 }
local TARGETS = { { method = "ghost", clipping = "per_layer", time = 1.15 },
                  { method = "flat", clipping = "per_block", memory = 1.10 } }

local device = args.device or "cpu"
local methods = presets.methods{ methods = args.methods, all = true }
local clippings = presets.list(args.clipping) or { "flat", "per_layer", "per_block" }
for _, c in ipairs(clippings) do
  if not dp.contains(dp.dpsgd.STYLES, c) or c == "groups" then
    dp.refuse(string.format("bench_clipping.lua: unknown clipping '%s' (valid here: flat, per_layer, per_block)",
                            tostring(c)))
  end
end
local out = args.out or string.format("results/bench_clipping_%s", os.date("%Y%m%d_%H%M%S"))
local model = { arch = args.arch or "gpt" }
for k, v in pairs(SHAPE) do model[k] = v end

-- every method under every style (vanilla clips nothing: its flat point is the baseline)
if methods[1] ~= "vanilla" then table.insert(methods, 1, "vanilla") end
local rounds = tonumber(args.rounds or 1)
if not rounds or rounds < 1 or rounds ~= math.floor(rounds) then
  dp.refuse(string.format("bench_clipping.lua: rounds must be an integer >= 1 (got '%s')", tostring(args.rounds)))
end
local sweeps = {}
for k = 1, rounds do
  sweeps[k] = dp.sweep{
    name = "bench_clipping", out = rounds > 1 and string.format("%s/round%d", out, k) or out,
    timeout = args.timeout or 900,
    base = { model = model, device = device, iters = args.iters or 3, warmup = args.warmup or 1, threads = args.threads,
             snapshots = "none", dp = { max_physical_batch_size = model.batch } },
    vary = { method = methods, clipping = clippings },
  }
end
local function baseline(swept)
  for _, p in ipairs(swept.points) do
    if p.vary.method == "vanilla" and p.vary.clipping == "flat" and p.result.status == "ok" then return p.result end
  end
end
local bases = {} -- each round's vanilla
for k = 1, rounds do bases[k] = baseline(sweeps[k]) end
local base = bases[1]
local rows, checks = {}, {}
for i, sp in ipairs(sweeps[1].points) do
  local p, r = sp.vary, sp.result
  if p.method == "vanilla" and p.clipping ~= "flat" then goto next end -- the same run as flat's
  local row = { method = p.method, clipping = p.clipping, status = r.status, message = r.message }
  if r.status == "ok" then presets.against(row, r, base) end
  if rounds > 1 and row.time_ratio then -- each round's step against its own vanilla's
    local ratios, steps = {}, {}
    for k = 1, rounds do
      local rk, bk = sweeps[k].points[i].result, bases[k]
      if rk.status == "ok" and bk then
        ratios[#ratios + 1] = rk.timing.median_ms / bk.timing.median_ms
        steps[#steps + 1] = rk.timing.median_ms
      end
    end
    table.sort(ratios)
    table.sort(steps)
    row.time_ratio, row.time_ratio_min, row.time_ratio_max = ratios[(#ratios + 1) // 2], ratios[1], ratios[#ratios]
    row.step_ms, row.rounds = steps[(#steps + 1) // 2], #ratios
  end
  rows[#rows + 1] = row
  for _, t in ipairs(TARGETS) do
    if t.method == p.method and t.clipping == p.clipping and row.time_ratio then
      local ratio, want = t.time and row.time_ratio or row.memory_ratio, t.time or t.memory
      local why = "" -- a step target below the method's own arithmetic needs a faster FLOP rate than vanilla's
      if t.time and ratio > want and row.flops_ratio and row.flops_ratio > want then
        why = string.format(" (its arithmetic alone, the ledger's flops, is %.3fx vanilla's)", row.flops_ratio)
      end
      checks[#checks + 1] = string.format("%s %s: %s %.3fx vanilla (target %.2fx) %s%s", p.method, p.clipping,
                                          t.time and "step" or "peak", ratio, want,
                                          t.time and device == "plan" and "(a roofline estimate: measure it)" or
                                            (ratio <= want and "met" or "MISSED"), why)
    end
  end
  ::next::
end
local blas = base and base.environment.blas or dp.environment().blas or {}
local f = assert(io.open(out .. "/bench_clipping.json", "w"))
f:write(dp.json.encode({ benchmark = "bench_clipping", device = device, shape = SHAPE, blas = blas, rounds = rounds,
                        rows = rows, targets = checks }, { indent = true }), "\n")
f:close()

local function mib(b) return b and string.format("%.1f", b / 2 ^ 20) or "-" end
print(string.format("\nBLAS: %s %s, kernel %s%s", tostring(blas.library), tostring(blas.version), tostring(blas.core),
                    blas.generic and " (generic: times not to be believed)" or ""))
print(string.format("%-12s %-10s %10s %7s %7s %10s %7s", "method", "clipping", "step ms", "x van", "flop x", "peak MiB",
                    "x van"))
local function x(v) return v and string.format("%.3f", v) or "-" end
for _, r in ipairs(rows) do
  if r.status == "ok" then
    print(string.format("%-12s %-10s %10.1f %7s %7s %10s %7s%s", r.method, r.clipping, r.step_ms, x(r.time_ratio),
                        x(r.flops_ratio), mib(r.peak_bytes), x(r.memory_ratio),
                        r.time_ratio_min and string.format("   step x %.3f-%.3f over %d rounds", r.time_ratio_min,
                                                           r.time_ratio_max, r.rounds) or ""))
  else
    print(string.format("%-12s %-10s %s: %s", r.method, r.clipping, tostring(r.status), tostring(r.message):sub(1, 100)))
  end
end
for _, c in ipairs(checks) do print(c) end
print("results: " .. out .. "/bench_clipping.json")
