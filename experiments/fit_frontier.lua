-- fit_frontier.lua: the longest sequence that fits an 80 GB H100, per DP method, against model size (predicted by plan runs: seconds, no GPU).
-- Change it: dpprof run experiments/fit_frontier.lua [dtype=bf16|f32] [device_model=h100|h200|h100-calibrated] [budget_gb=G] [methods=a,b] [batch=1] [arch=gpt] [vocab=32000] [granularity=64] [out=DIR]
local dp = require("dpprof")
local presets = require("dpprof.presets")
local results = dp.results
local args = presets.args("fit_frontier.lua", { "dtype", "device_model", "budget_gb", "batch", "arch", "vocab",
                                               "granularity" },
                          { device = "plan runs only (device_model= picks the card)",
                            threads = "plan runs do no arithmetic",
                            profile = "plan runs through dpprof.fit, which times no ops" })

-- Model sizes: hidden, layers, heads (head dimension 128; 64 for the smallest), from 0.11 B to
-- 3.8 B parameters. Training holds 18 bytes a parameter under bf16 (bf16 weights and an f32
-- master copy, f32 gradients, AdamW's two f32 moments), so ~4 B is the most an 80 GB card trains.
local SIZES = {
  { hidden = 768, layers = 12, heads = 12 },
  { hidden = 1024, layers = 16, heads = 8 },
  { hidden = 1536, layers = 18, heads = 12 },
  { hidden = 2048, layers = 20, heads = 16 }, -- the large preset
  { hidden = 2560, layers = 24, heads = 20 },
  { hidden = 3072, layers = 28, heads = 24 },
  { hidden = 3584, layers = 24, heads = 28 },
}

local methods = args.methods and presets.list(args.methods) or presets.ALL_METHODS
local dtype = args.dtype or "bf16"
local device_model = args.device_model or "h100"
local out = args.out or string.format("results/fit_frontier_%s_%s", dtype, os.date("%Y%m%d_%H%M%S"))
local ok, err = dp.mkdir_p(out)
if not ok then error(err) end

local function model_of(size)
  return { arch = args.arch or "gpt", vocab = args.vocab or 32000, hidden = size.hidden, layers = size.layers,
           heads = size.heads, seq_len = 1024, batch = args.batch or 1, dtype = dtype }
end

local rows, frontier = {}, {}
local budget_line
local t0 = dp.clock()
for si, size in ipairs(SIZES) do
  local base = { model = model_of(size) }
  local f = dp.fit{ base = base, methods = methods, vary = "seq_len", device_model = device_model,
                    budget_gb = args.budget_gb, granularity = args.granularity or 64 }
  budget_line = budget_line or string.format("budget %s for the pool (%s card less %s context), reserved = peak x %.3g",
                                             dp.format_bytes(f.budget_bytes), dp.format_bytes(f.device_model.memory_bytes),
                                             dp.format_bytes(f.device_model.context_bytes),
                                             1 + f.device_model.reserve_overhead)
  -- the number of parameters, from a plan model (no memory touched)
  local m = dp.model{ arch = base.model.arch, vocab = base.model.vocab, hidden = size.hidden, layers = size.layers,
                      heads = size.heads, seq_len = 64, batch = 1, dtype = dtype, device = "plan" }
  local params = m:num_params()
  m:free()
  for _, e in ipairs(f.methods) do
    local point = { method = e.method, hidden = size.hidden, layers = size.layers, params = params,
                    largest_seq_len = e.largest or dp.json.null, first_unfit = e.first_unfit or dp.json.null,
                    peak_bytes = e.peak_bytes or dp.json.null,
                    predicted_reserved_bytes = e.predicted_reserved_bytes or dp.json.null,
                    dominant = e.dominant and e.dominant.category or dp.json.null, runs = e.runs }
    frontier[#frontier + 1] = point
    -- the plan run at the largest seq_len that fits, as an ordinary (predicted) result
    if e.largest then
      local cfg = { model = model_of(size), method = e.method, device = "plan", device_model = f.device_model,
                    iters = 1, warmup = 1, snapshots = "none" }
      cfg.model.seq_len = e.largest
      local name = string.format("method=%s,hidden=%d,layers=%d", e.method, size.hidden, size.layers)
      cfg.name = name
      local r = dp.experiment(cfg)
      r.sweep = { name = "fit_frontier", vary = { method = e.method, hidden = size.hidden, layers = size.layers,
                                                  seq_len = e.largest } }
      r.extra = { fit = point }
      results.write(out .. "/" .. name .. ".json", r)
    end
    rows[#rows + 1] = { string.format("%.2f B", params / 1e9), string.format("d=%d L=%d", size.hidden, size.layers),
                        e.method, e.largest and tostring(e.largest) or "none",
                        e.peak_bytes and dp.format_bytes(e.peak_bytes) or "-",
                        e.dominant and e.dominant.category or "-" }
  end
  io.stdout:write(string.format("[%d/%d] d=%d L=%d (%.2f B parameters): done\n", si, #SIZES, size.hidden, size.layers,
                                params / 1e9))
  io.stdout:flush()
end
local took = dp.clock() - t0

local title_model = (dp.plan.MODELS[device_model] or {}).description or device_model
if args.budget_gb then title_model = string.format("%g GiB card", args.budget_gb) end
results.write(out .. "/fit_frontier.json", {
  predicted = true, vary = "seq_len", dtype = dtype, device_model = device_model, budget_gb = args.budget_gb,
  budget = budget_line, points = dp.json.array(frontier),
})

-- The chart: one line per method, model size across, the longest sequence up (log2). Methods
-- whose frontiers coincide share one line (named "a = b = c").
local series, by_signature = {}, {}
local MARKERS = { "circle", "triangle", "square", "diamond", "cross", "circle" }
for _, method in ipairs(methods) do
  local xs, ys = {}, {}
  for _, p in ipairs(frontier) do
    if p.method == method and not dp.json.is_null(p.largest_seq_len) then
      xs[#xs + 1], ys[#ys + 1] = p.params / 1e9, p.largest_seq_len
    end
  end
  if #xs > 0 then
    local signature = table.concat(xs, ",") .. "|" .. table.concat(ys, ",")
    local s = by_signature[signature]
    if s then
      s.name = s.name .. " = " .. method
    else
      -- lines after the first are dashed, so a line drawn over an earlier one lets it show through
      s = { name = method, x = xs, y = ys, color = dp.plot.method_color(method), marker = MARKERS[#series % #MARKERS + 1],
            dashed = #series > 0 }
      series[#series + 1], by_signature[signature] = s, s
    end
  end
end
local png = dp.plot.lines{
  out = out .. "/fit_frontier.png",
  title = string.format("Longest sequence that fits, by model size (%s, %s, B=%d)", title_model, dtype, args.batch or 1),
  subtitle = "predicted by plan runs (no GPU): " .. budget_line,
  x_label = "parameters (billions)", y_label = "largest seq_len that fits (tokens)",
  x_scale = "log2", y_scale = "log2", series = series,
}

print(string.format("\nfit frontier (%s, %s): largest seq_len per method and model size, %.1f s of plan runs",
                    title_model, dtype, took))
print("  " .. budget_line)
local header = { "params", "model", "method", "largest seq_len", "peak", "dominated by" }
table.insert(rows, 1, header)
dp.print_table(rows, { false, false, false, true, true, false })
print(string.format("\nresults: %s/ (one predicted result per point at its largest seq_len, fit_frontier.json)", out))
print("chart: " .. png)
