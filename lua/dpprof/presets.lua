-- dpprof.presets: what the scripts in experiments/ share: the small (CPU) and large (GPU) model
-- configurations, the method lists, reading `dpprof run SCRIPT key=value` arguments, and the
-- closing step (charts, and where the results went).
local dp = require("dpprof")
local options = require("dpprof.options")

local presets = {}

-- All DP presets (the engine's list, dpprof.dpsgd.METHODS), and the three the default comparison shows.
presets.ALL_METHODS = dp.dpsgd.METHODS
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

-- The model keys a script's command line overrides the preset's with: the schema's model rows
-- one word can write (dpprof.options' FIT rows, as dpprof fit takes them).
presets.MODEL_ARGS = options.keys("model", { fit = true })

-- The dp keys a script's command line sets in its experiments' dp table: the schema's dp rows
-- marked FIT (clipping=, clip_fn=: the clipping style, as dpprof fit takes them).
presets.DP_ARGS = options.keys("dp", { fit = true })

-- The arguments presets.choose, presets.methods, presets.base and presets.out read.
presets.ARGS = { "preset" }
for _, k in ipairs(presets.MODEL_ARGS) do presets.ARGS[#presets.ARGS + 1] = k end
for _, k in ipairs(presets.DP_ARGS) do presets.ARGS[#presets.ARGS + 1] = k end
for _, k in ipairs({ "device", "iters", "warmup", "timeout", "seed", "physical", "methods", "all", "out", "parallel",
                     "repeats", "profile", "threads" }) do
  presets.ARGS[#presets.ARGS + 1] = k
end

-- presets.ARGS less the given names (a sweep's own variable is not a preset override).
function presets.args_without(...)
  local drop, out = {}, {}
  for _, k in ipairs({ ... }) do drop[k] = true end
  for _, k in ipairs(presets.ARGS) do if not drop[k] then out[#out + 1] = k end end
  return out
end

-- The keys every script of experiments/ reads the same way, with what each means (a script that
-- cannot use one says so in its `--help` and in the error that refuses it):
presets.COMMON = {
  { "profile", "profile=none|ops: per-op timing of every run (dpprof.experiment's profile)" },
  { "threads", "threads=N: the CPU backend's threads for every run (dpprof.experiment's threads)" },
  { "device", "device=cpu|cuda|plan: where the runs go (a script that takes fewer, or auto, names its own)" },
  { "out", "out=DIR: the results folder" },
  { "methods", "methods=a,b (or method=a): the DP methods, of " .. table.concat(dp.dpsgd.METHODS, ", ") },
}

-- The first comment lines of a script: what `--help` prints above the keys.
local function header_of(path)
  local text = path and dp.read_file(path)
  local lines = {}
  for line in (text or ""):gmatch("[^\n]*") do
    local c = line:match("^%-%-%s?(.*)$")
    if not c then break end
    lines[#lines + 1] = c
  end
  return lines
end

-- Reads a script's arguments (dpprof.args, `dpprof run SCRIPT key=value ...`), the one place the
-- scripts of experiments/ do it: `method=` is taken as `methods=`; `--help` (or help=true) prints
-- the script's first comment lines, its keys and the common keys it takes, then exits 0; a key
-- not taken is refused naming the valid ones. own: the script's other keys (lists in it are
-- flattened: { presets.args_without("layers"), "layer_counts" }); skip: {key = why}
-- for the common keys (presets.COMMON) it does not take. Returns a new table of the arguments.
function presets.args(script, own, skip)
  skip = skip or {}
  local args = {}
  for k, v in pairs(dp.args or {}) do args[k] = v end
  local valid, known = {}, {}
  local function add(k)
    if not known[k] then valid[#valid + 1], known[k] = k, true end
  end
  for _, c in ipairs(presets.COMMON) do
    if not skip[c[1]] then add(c[1]) end
  end
  if known.methods then add("method") end
  local function add_all(list)
    for _, k in ipairs(list) do
      if type(k) == "table" then add_all(k) else add(k) end
    end
  end
  add_all(own or {})
  if args.help == true or args.help == 1 then
    local path = rawget(_G, "arg") and _G.arg[0]
    for _, line in ipairs(header_of(path)) do print(line) end
    print(string.format("\nkeys (dpprof run %s key=value ...): %s", path or script, table.concat(valid, ", ")))
    print("common keys, the same in every script of experiments/:")
    for _, c in ipairs(presets.COMMON) do
      print(string.format("  %-8s %s", c[1], skip[c[1]] and ("not taken here: " .. skip[c[1]]) or c[2]))
    end
    io.stdout:flush()
    os.exit(0, true)
  end
  if args.method ~= nil and known.method then
    if args.methods ~= nil then
      dp.refuse(string.format("%s: give method= or methods=, not both (method=%s, methods=%s)", script,
                              tostring(args.method), tostring(args.methods)))
    end
    args.methods, args.method = args.method, nil
  end
  local unknown, untaken = {}, {}
  for k in pairs(args) do
    local name = k == "method" and "methods" or k
    if skip[name] then
      untaken[#untaken + 1] = string.format("%s= is not taken here: %s", tostring(k), skip[name])
    elseif not known[k] then
      unknown[#unknown + 1] = tostring(k)
    end
  end
  if #unknown == 0 and #untaken == 0 then return args end
  table.sort(unknown)
  table.sort(untaken)
  if #unknown > 0 then
    table.insert(untaken, 1, string.format("unknown argument%s '%s'", #unknown > 1 and "s" or "",
                                           table.concat(unknown, "', '")))
  end
  dp.refuse(string.format("%s: %s (valid: %s)", script, table.concat(untaken, "; "), table.concat(valid, ", ")))
end

-- The path of a file or folder of the dpprof repository (rel, e.g. "tests/fixtures/llama3_8b"),
-- found from the running script's own location (a script in <repository>/experiments/ or at its
-- root), else beside dpprof's own Lua modules (<repository>/lua: a script copied elsewhere still
-- finds them), else in the current directory; raises naming the places it looked.
function presets.repo_path(rel)
  local tried = {}
  local function exists(path)
    tried[#tried + 1] = path
    local f = io.open(path, "r")
    if f then f:close() end
    return f ~= nil
  end
  local script = rawget(_G, "arg") and _G.arg[0]
  local dir = type(script) == "string" and (script:match("^(.*/)[^/]*$") or "./") or nil
  local roots = {}
  if dir then -- <repository>/experiments/ gives <repository>/ as the old scripts wrote it
    roots[#roots + 1] = dir:match("^(.*/)experiments/$") or (dir == "experiments/" and "") or dir .. "../"
    roots[#roots + 1] = dir
  end
  if type(dp.lua_dir) == "string" then roots[#roots + 1] = (dp.lua_dir:match("^(.*/)lua/?$") or dp.lua_dir .. "/../") end
  roots[#roots + 1] = ""
  for _, root in ipairs(roots) do
    if exists(root .. rel) then return root .. rel end
  end
  error(string.format("%s not found (looked in: %s); give its path", rel, table.concat(tried, ", ")), 0)
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
-- (presets.MODEL_ARGS: arch=, vocab=, hidden=, ..., the schema's) and the device.
function presets.choose(args)
  local name = args.preset or "small"
  local p = presets.MODELS[name]
  if not p then error("unknown preset '" .. tostring(name) .. "' (valid: small, large)", 2) end
  local model = {}
  for k, v in pairs(p.model) do model[k] = v end
  for _, k in ipairs(presets.MODEL_ARGS) do
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
-- iterations, the physical batch, profile= and threads=; C, sigma, q, delta and the seed are
-- dpprof.experiment's defaults.
function presets.base(p, args)
  local d = { max_physical_batch_size = args.physical or p.model.batch }
  for _, k in ipairs(presets.DP_ARGS) do d[k] = args[k] end -- clipping=, clip_fn=
  return { model = p.model, device = p.device, iters = p.iters, warmup = p.warmup, seed = args.seed,
           profile = args.profile, threads = args.threads, dp = d }
end

local function ledger_flops(r)
  local f = 0
  for _, e in ipairs(r.ledger or {}) do f = f + (e.flops or 0) end
  return f
end

-- A benchmark's row of an ok result r against the baseline base (vanilla, run in the same sweep):
-- step_ms and peak_bytes, and with base the ratios time_ratio, memory_ratio and flops_ratio (the
-- ledger's arithmetic over the same iterations: a time ratio below it needs a faster FLOP rate
-- than the baseline's) and extra_bytes, what r holds at its peak beyond base, by category (the
-- categories that differ).
function presets.against(row, r, base)
  row.step_ms, row.peak_bytes = r.timing.median_ms, r.memory.peak_bytes
  if not base then return row end
  row.time_ratio = row.step_ms / base.timing.median_ms
  row.memory_ratio = row.peak_bytes / base.memory.peak_bytes
  local bf = ledger_flops(base)
  if bf > 0 then row.flops_ratio = ledger_flops(r) / bf end
  row.extra_bytes = {}
  for cat, v in pairs(r.memory.categories) do
    local d = v.live_at_peak_bytes - base.memory.categories[cat].live_at_peak_bytes
    if d ~= 0 then row.extra_bytes[cat] = d end
  end
  return row
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
