-- dpprof.presets: what the scripts in experiments/ share: the small (CPU) and large (GPU) model
-- configurations, the method lists, reading `dpprof run SCRIPT key=value` arguments, and the
-- closing step (charts, and where the results went).
local dp = require("dpprof")

local presets = {}

-- All DP presets (the engine's list, dpprof.dp.METHODS), and the three the default comparison shows.
presets.ALL_METHODS = dp.dp.METHODS
presets.DEFAULT_METHODS = { "vanilla", "ghost", "flash_clip" }

-- small: finishes in a minute or two on 2 CPU cores; large: one long-context model for one GPU.
presets.MODELS = {
  small = { model = { arch = "gpt", vocab = 2048, hidden = 128, layers = 2, heads = 4, seq_len = 128, batch = 4 },
            device = "cpu", iters = 2, warmup = 1, seq_lens = { 64, 128, 256, 512 }, layers = { 1, 2, 4, 8 },
            timeout = 300 },
  large = { model = { arch = "gpt", vocab = 32000, hidden = 2048, layers = 20, heads = 16, seq_len = 16384, batch = 1 },
            device = "cuda", iters = 3, warmup = 2, seq_lens = { 1024, 2048, 4096, 8192, 16384 },
            layers = { 4, 8, 12, 16, 20 }, timeout = 600 },
}

-- The arguments presets.choose, presets.methods, presets.base and presets.out read.
presets.ARGS = { "preset", "arch", "vocab", "hidden", "layers", "heads", "seq_len", "batch", "dtype", "device",
                 "iters", "warmup", "timeout", "seed", "physical", "methods", "all", "out", "parallel" }

-- presets.ARGS less the given names (a sweep's own variable is not a preset override).
function presets.args_without(...)
  local drop, out = {}, {}
  for _, k in ipairs({ ... }) do drop[k] = true end
  for _, k in ipairs(presets.ARGS) do if not drop[k] then out[#out + 1] = k end end
  return out
end

-- Raises when args has a key that is in none of the given lists: a misspelt argument (method=
-- for methods=, seq_len= for seq_lens=) would otherwise be ignored without a word.
function presets.check_args(args, script, ...)
  local valid, known = {}, {}
  for _, list in ipairs({ ... }) do
    for _, k in ipairs(list) do
      if not known[k] then valid[#valid + 1], known[k] = k, true end
    end
  end
  local bad = {}
  for k in pairs(args or {}) do
    if not known[k] then bad[#bad + 1] = tostring(k) end
  end
  if #bad == 0 then return end
  table.sort(bad)
  error(string.format("%s: unknown argument%s %s (valid: %s)", script, #bad > 1 and "s" or "",
                      "'" .. table.concat(bad, "', '") .. "'", table.concat(valid, ", ")), 0)
end

-- "a,b,4" -> {"a", "b", 4}
function presets.list(s)
  if s == nil then return nil end
  if type(s) == "number" then return { s } end
  local out = {}
  for item in tostring(s):gmatch("[^,]+") do out[#out + 1] = tonumber(item) or item end
  return out
end

-- The preset named by args.preset (default small), with args overriding its model keys
-- (arch=, vocab=, hidden=, layers=, heads=, seq_len=, batch=, dtype=) and the device.
function presets.choose(args)
  local name = args.preset or "small"
  local p = presets.MODELS[name]
  if not p then error("unknown preset '" .. tostring(name) .. "' (valid: small, large)", 2) end
  local model = {}
  for k, v in pairs(p.model) do model[k] = v end
  for _, k in ipairs({ "arch", "vocab", "hidden", "layers", "heads", "seq_len", "batch", "dtype" }) do
    if args[k] ~= nil then model[k] = args[k] end
  end
  return { name = name, model = model, device = args.device or p.device, seq_lens = p.seq_lens, layers = p.layers,
           timeout = args.timeout or p.timeout, iters = args.iters or p.iters, warmup = args.warmup or p.warmup }
end

-- The methods to run (a new list): methods=a,b; all=1 for every preset; else the default three.
function presets.methods(args)
  if args.methods then return presets.list(args.methods) end
  return dp.deep_copy((args.all == 1 or args.all == true) and presets.ALL_METHODS or presets.DEFAULT_METHODS)
end

-- The experiment configuration every script starts from: the preset's model, device and
-- iterations, the physical batch; C, sigma, q, delta and the seed are dpprof.experiment's defaults.
function presets.base(p, args)
  return { model = p.model, device = p.device, iters = p.iters, warmup = p.warmup, seed = args.seed,
           dp = { max_physical_batch_size = args.physical or p.model.batch } }
end

-- The output directory: out=DIR, else results/<script>_<preset>_<timestamp>.
function presets.out(args, script)
  return args.out or string.format("results/%s_%s_%s", script, args.preset or "small", os.date("%Y%m%d_%H%M%S"))
end

-- Renders the charts of out and says where everything is. With the sweep's return value, raises
-- (exit status 1) when a point errored, crashed or timed out, so that a run in CI whose points
-- all failed does not end as a success; out-of-memory points are results, not failures.
function presets.finish(out, swept)
  if swept and swept.passed_over then return end -- `dpprof sweep` acts on another sweep of the script
  if swept and swept.slurm then
    print(string.format("results: %s/ as the Slurm tasks end; charts when the array has ended (%s)", swept.out,
                        swept.slurm.collect_job_id and "job " .. swept.slurm.collect_job_id
                        or "dpprof sweep collect " .. swept.out))
    print("follow it: dpprof sweep status " .. swept.out)
    return
  end
  local ok, err, messages = dp.plot.render_dir(out)
  for _, m in ipairs(messages or {}) do print("plot: " .. m) end
  if not ok then print("charts: not rendered: " .. tostring(err)) end
  print("results: " .. out .. "/ (one JSON per run; charts and summary.txt beside them)")
  print("again: dpprof plot " .. out .. "    compare: dpprof compare OLD.json NEW.json")
  if not swept then return end
  local failed, how = 0, {}
  for _, status in ipairs({ "error", "crashed", "timeout" }) do
    local n = swept.counts[status] or 0
    if n > 0 then failed, how[#how + 1] = failed + n, string.format("%s: %d", status, n) end
  end
  if failed > 0 then
    error(string.format("%d of %d points did not finish (%s); the sweep's table above and their JSON files say why",
                        failed, #swept.points, table.concat(how, ", ")), 0)
  end
end

return presets
