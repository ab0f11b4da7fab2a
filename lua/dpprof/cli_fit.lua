-- dpprof.cli_fit: `dpprof fit` (dpprof.cli.fit), written in Lua; returns the process exit status.
-- dpprof.cli_risk takes its model keys and its parsing of the shared keys (cli.fit_options).
local dp = require("dpprof")
local results = require("dpprof.results")
local util = require("dpprof.cli_util")
local options = require("dpprof.options")
local presets = require("dpprof.presets")
local fit = require("dpprof.fit")
local experiment = require("dpprof.experiment")

local eprint, parse_value, wrap = util.eprint, util.parse_value, util.wrap

local cli = {}

---------------------------------------------------------------------------------------------
-- dpprof fit key=value ...

local FIT_USAGE = [[
usage: dpprof fit [key=value ...]

The largest seq_len, batch or layer count that fits a memory budget, per DP method, by search
over plan runs (exact allocator accounting, no memory touched, no arithmetic: milliseconds a run,
no GPU needed). Prints one row per method: the largest value that fits, its peak, what the CUDA
pool would reserve for it, the category that dominates the peak, and the first value that does
not fit.

  vary=seq_len|batch|layers   what to search over (default seq_len)
  method=NAME[,NAME...]       @METHODS@
  budget_gb=G                 the card's memory in GiB (default: the device model's)
  device_model=h100|h200|h100-calibrated|FILE.json  the modelled device (default h100, a roofline;
                              h100-calibrated: the H100's calibrated model shipped with dpprof; FILE.json: a model
                              `dpprof calibrate` wrote, whose step times are calibrated); its budget is its memory less
                              the CUDA context; the reserved peak is the allocated one x (1 + overhead)
  context_mb=M                the CUDA context and libraries outside the pool, MiB (default: the model's)
  reserve_overhead=F          reserved-but-unused bytes as a fraction of the peak (default: the model's)
  workspace=true|false        model cuBLAS's workspace and the kernels' scratch (default true)
  lo=, hi=, granularity=      the range and step of the search (seq_len: 64 .. 1048576 by 64;
                              batch: 1 .. 65536; layers: 1 .. 1024)
  preset=large|small          the base model (default large: gpt V=32000 d=2048 L=20 H=16
                              T=16384 B=1); these override it:
  path=DIR                    instead of a preset, a Hugging Face checkpoint's config.json (only
                              that file is read: no weights needed; B=1 unless batch= is given;
                              seq_len searched up to its max_position_embeddings unless hi=)
  @MODEL_KEYS@
                              (dtype=bf16 keeps LoRA's frozen base in bf16 only)
                              sizes are integers >= 1: leave @ZERO_KEYS@ out for
                              their defaults (@ZERO_DEFAULTS@)
  lora_rank=R lora_alpha=A    LoRA adapters of rank R (alpha default R)
  lora_targets=N[,N...]       qkv, proj, fc, down or PEFT's q_proj, k_proj, v_proj, o_proj,
                              gate_proj, up_proj, down_proj (default qkv)
  physical=N                  max physical batch (micro-batching; with vary=batch, the batch is both)
  clipping=S clip_fn=F        the clipping style (@STYLES@; default flat) and function
                              (@CLIP_FNS@; default abadi): docs/lua.md, Clipping styles
  optimizer=adamw|sgd         (default adamw)
  world_size=N strategy=S     plan one rank of N data-parallel ranks (rank 0; the last rank,
                              which holds the largest slice, when N does not divide batch=): batch= is the
                              global batch, each rank holding its slice (batch / N, or
                              one sample apart where N does not divide it); without batch=,
                              N x the model's batch (each rank holds the preset's B: one
                              sample for large); vary=batch searches the global batch by N
                              (lo=, granularity= default N);
                              S: ddp (default), zero2 (gradients and optimizer states
                              sharded) or fsdp (parameters too, LoRA's frozen base included)
  checkpoint=S[,S...]         activation checkpointing settings to search with, each its own row:
                              off, blocks (every block) or N (every N-th block); default off,blocks
  out=FILE.json               also write the answer as JSON

example: dpprof fit method=ghost,flash_clip vary=seq_len budget_gb=80 dtype=bf16
         dpprof fit method=flash_clip checkpoint=off,blocks,2,4
         dpprof fit path=tests/fixtures/llama3_8b dtype=bf16 lora_rank=16 \
             lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
exit status: 0 answered; 2 bad arguments
]]

-- The model keys fit's command line takes as they are: the schema's model rows marked FIT (those
-- whose values one word can write: numbers, names, true/false), in its order; lora and checkpoint
-- come in words of their own (lora_rank=, checkpoint=off,blocks,N), and the rest keep dp.model's
-- defaults or the preset's. fit's own words are the schema's fit section (dpprof.options).
cli.FIT_MODEL_KEYS = options.keys("model", { fit = true })
local FIT_MODEL_KEYS = cli.FIT_MODEL_KEYS
local FIT_KEYS = options.keys("fit")
-- The DP keys fit's command line takes as they are (the schema's dp rows marked FIT: clipping,
-- clip_fn), into the base's dp table.
cli.FIT_DP_KEYS = options.keys("dp", { fit = true })
local FIT_DP_KEYS = cli.FIT_DP_KEYS

-- The fit words whose values are numbers, and those that are true/false: the command line's types,
-- the schema's. The ranges are dp.fit's, dp.model's and the device model's checks (each names its
-- key), but for two the command line adds: context_mb (turned into bytes here) is a number of
-- MiB >= 0, and a size whose dp.model default is 0 ("the same as heads", ...: ZERO_DEFAULT) is had
-- by leaving the key out, so 0 typed for it is refused.
local FIT_NUMBER_KEYS, FIT_BOOLEAN_KEYS, FIT_ZERO_IS_DEFAULT = {}, {}, {}
for _, section in ipairs({ { "fit", FIT_KEYS }, { "model", FIT_MODEL_KEYS } }) do
  for _, k in ipairs(section[2]) do
    local o = options.row(section[1], k)
    if o.type == "integer" or o.type == "number" then FIT_NUMBER_KEYS[#FIT_NUMBER_KEYS + 1] = k end
    if o.type == "boolean" then FIT_BOOLEAN_KEYS[#FIT_BOOLEAN_KEYS + 1] = k end
    if o.zero_default then FIT_ZERO_IS_DEFAULT[k] = o.default end
  end
end

-- FIT_USAGE with the method choices from the engine's list (dpprof.dpsgd.METHODS).
function cli.fit_usage()
  local words = {}
  for _, m in ipairs(dp.dpsgd.METHODS) do words[#words + 1] = m .. "," end
  for w in string.format("or norms+clip (default: all %d presets); methods= is the same", #dp.dpsgd.METHODS):gmatch("%S+") do
    words[#words + 1] = w
  end
  local text = wrap(words, 30, 102)
  -- the model's fit words and the sizes left to their defaults: the schema's
  local keys, zero, defaults = {}, {}, {}
  for _, k in ipairs(FIT_MODEL_KEYS) do
    keys[#keys + 1] = k .. "="
    if FIT_ZERO_IS_DEFAULT[k] then zero[#zero + 1], defaults[#defaults + 1] = k .. "=", FIT_ZERO_IS_DEFAULT[k] end
  end
  local fill = { METHODS = text, MODEL_KEYS = wrap(keys, 2, 102), ZERO_KEYS = table.concat(zero, ", "),
                 ZERO_DEFAULTS = table.concat(defaults, ", "), STYLES = table.concat(dp.dpsgd.STYLES, ", "),
                 CLIP_FNS = table.concat(dp.dpsgd.CLIP_FNS, ", ") }
  return (FIT_USAGE:gsub("@([%u_]+)@", function(name) return fill[name] end))
end


-- nil, or the message for a value of the wrong type (a number key given a word, NaN or infinity;
-- a boolean key given anything but true or false; context_mb < 0; 0 for a size left to its default).
local function fit_value_error(kv)
  for _, k in ipairs(FIT_NUMBER_KEYS) do
    local v = kv[k]
    if v ~= nil and not dp.is_finite(v) then
      return string.format("%s must be a finite number, got '%s'", k, tostring(v))
    end
  end
  for _, k in ipairs(FIT_BOOLEAN_KEYS) do
    if kv[k] ~= nil and type(kv[k]) ~= "boolean" then
      return string.format("%s must be true or false, got '%s'", k, tostring(kv[k]))
    end
  end
  if kv.context_mb and kv.context_mb < 0 then
    return string.format("context_mb must be a number of MiB >= 0, got %s", tostring(kv.context_mb))
  end
  for _, k in ipairs(FIT_NUMBER_KEYS) do
    local default = FIT_ZERO_IS_DEFAULT[k]
    if default and kv[k] == 0 then
      return string.format("%s must be an integer >= 1, got 0 (leave %s= out for the default, %s)", k, k, default)
    end
  end
  return nil
end


-- Parses key=value arguments into the options of dp.fit; returns opts, out (or nil, message).
local function fit_options(args)
  local kv = {}
  local valid = {}
  for _, k in ipairs(FIT_KEYS) do valid[k] = true end
  for _, k in ipairs(FIT_MODEL_KEYS) do valid[k] = true end
  for _, k in ipairs(FIT_DP_KEYS) do valid[k] = true end
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value (see dpprof fit --help)", a) end
    if not valid[k] then
      local all = {}
      for _, x in ipairs(FIT_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(FIT_MODEL_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(FIT_DP_KEYS) do all[#all + 1] = x end
      return nil, string.format("unknown key '%s' (valid: %s)", k, table.concat(all, ", "))
    end
    kv[k] = parse_value(v)
  end
  local bad = fit_value_error(kv)
  if bad then return nil, bad end
  local model = {}
  if kv.path ~= nil then
    if kv.preset ~= nil then return nil, "give preset= or path=, not both" end
    model = { path = tostring(kv.path), batch = 1 }
  else
    local pname = kv.preset or "large"
    local p = presets.MODELS[pname]
    if not p then return nil, string.format("unknown preset '%s' (valid: large, small)", tostring(pname)) end
    for k, v in pairs(p.model) do model[k] = v end
  end
  for _, k in ipairs(FIT_MODEL_KEYS) do if kv[k] ~= nil then model[k] = kv[k] end end
  if kv.lora_rank ~= nil then -- 0 and the like go to dp.model, which refuses them
    model.lora = { rank = kv.lora_rank, alpha = kv.lora_alpha }
    if kv.lora_targets ~= nil then
      model.lora.targets = {}
      for t in tostring(kv.lora_targets):gmatch("[^,]+") do model.lora.targets[#model.lora.targets + 1] = t end
    end
  elseif kv.lora_alpha ~= nil or kv.lora_targets ~= nil then
    return nil, "lora_alpha= and lora_targets= need lora_rank="
  end
  local base = { model = model, dp = { max_physical_batch_size = kv.physical } }
  for _, k in ipairs(FIT_DP_KEYS) do base.dp[k] = kv[k] end
  local lo, granularity, batch_defaulted = kv.lo, kv.granularity, nil
  if kv.world_size ~= nil or kv.strategy ~= nil then -- each rank of a planned world (its rank 0)
    base.distributed = { strategy = kv.strategy or "ddp", world_size = kv.world_size }
    local n = math.tointeger(kv.world_size)
    if n and n >= 1 then
      if kv.vary == "batch" then -- the global batch, searched in whole samples a rank
        granularity = granularity or n
        lo = lo or granularity
        model.batch = lo -- the searched value; the base is checked with it
      elseif kv.batch == nil then -- each rank holds the model's batch (the preset's, or 1)
        batch_defaulted = model.batch or 1
        model.batch = batch_defaulted * n
      elseif math.tointeger(kv.batch) and kv.batch % n ~= 0 then
        -- a batch the world does not divide: the last rank holds the largest slice (ceil), the
        -- one whose peak decides whether the world fits
        base.distributed.rank = n - 1
      end
    end
  end
  if kv.optimizer then base.optimizer = { name = kv.optimizer } end
  local dm = kv.device_model or "h100"
  if kv.context_mb ~= nil or kv.reserve_overhead ~= nil or kv.workspace ~= nil then
    dm = { base = dm, reserve_overhead = kv.reserve_overhead, workspace = kv.workspace,
           context_bytes = kv.context_mb and math.tointeger(kv.context_mb * 1024 * 1024) or nil }
    if kv.context_mb and not dm.context_bytes then return nil, "context_mb must be a whole number of bytes in MiB" end
  end
  local methods = kv.methods or kv.method
  if methods ~= nil then
    local list = {}
    for m in tostring(methods):gmatch("[^,]+") do list[#list + 1] = m end
    methods = list
  end
  local checkpoint = { false, "blocks" } -- on and off, unless said
  if kv.checkpoint ~= nil then checkpoint = fit.checkpoint_words(kv.checkpoint) end
  return { base = base, methods = methods, vary = kv.vary, budget_gb = kv.budget_gb, device_model = dm,
           lo = lo, hi = kv.hi, granularity = granularity, checkpoint = checkpoint }, kv.out, batch_defaulted
end

-- The header of fit's answer: the model, the world when distributed, the device, the budget and
-- the search.
local function print_fit_header(opts, f, batch_defaulted)
  local m, model = f.device_model, experiment.model_options(opts.base.model, "plan")
  print(string.format("dpprof fit: the largest %s that fits, by plan runs (predicted, not measured)", f.vary))
  print(string.format("  model: %s%s V=%d d=%d L=%d H=%d%s T=%s B=%d %s%s%s", opts.base.model.path and
                      (opts.base.model.path .. ": ") or "", model.arch or "gpt", model.vocab, model.hidden,
                      model.layers, model.heads, model.kv_heads and model.kv_heads ~= model.heads and
                      string.format(" (kv %d)", model.kv_heads) or "", tostring(model.seq_len or f.vary),
                      model.batch or 1, model.dtype or "f32",
                      model.lora and string.format(", LoRA rank %d on %s", model.lora.rank,
                                                   model.lora.targets and table.concat(model.lora.targets, ",")
                                                   or "qkv (the default)") or "",
                      opts.base.dp.max_physical_batch_size and
                      string.format(", physical batch %d", opts.base.dp.max_physical_batch_size) or ""))
  local dist = opts.base.distributed
  if dist then -- what the plan runs are: one rank of the world, not the world
    local n = dist.world_size or 1
    local b = model.batch or 1
    local rank = dist.rank or 0
    local most = (b + n - 1) // n
    local held = f.vary == "batch" and string.format("each rank holds batch / %d samples (batch is the global batch)", n)
                 or b % n ~= 0 and string.format("%d sample%s on this rank, the largest slice (batch %d is the global "
                                                 .. "batch, split unevenly: %d or %d a rank)", most, most == 1 and ""
                                                 or "s", b, b // n, most)
                 or string.format("%s a rank (batch %d is the global batch%s)", b // n == 1 and "1 sample"
                                  or string.format("%d samples", b // n), b, batch_defaulted and
                                  string.format(": %d x %d, as batch= was not given", n, batch_defaulted) or "")
    print(string.format("  world: one rank (rank %d) of %d under %s, %s; the peak is that rank's", rank, n,
                        dist.strategy or "ddp", held))
  end
  local d = opts.base.dp
  if (d.clipping and d.clipping ~= "flat") or (d.clip_fn and d.clip_fn ~= "abadi") then
    print(string.format("  clipping: %s, %s", d.clipping or "flat", d.clip_fn or "abadi"))
  end
  print("  device: " .. dp.plan.describe(m))
  print(string.format("  budget: %s for the pool (%s - %s context); fits when peak x %.3g <= budget",
                      dp.format_bytes(f.budget_bytes), dp.format_bytes(m.memory_bytes), dp.format_bytes(m.context_bytes),
                      1 + m.reserve_overhead))
  print(string.format("  search: %s from %d to %d by %d", f.vary, f.lo, f.hi, f.granularity))
  print("")
end

-- The table of fit's answer: a row per method (and checkpoint setting).
local function print_fit_table(f)
  local rows = { { "method", "checkpoint", "largest " .. f.vary, "peak", "reserved", "step (est.)", "dominated by",
                   "first unfit", "its peak", "runs" } }
  for _, e in ipairs(f.methods) do
    rows[#rows + 1] = {
      e.method .. (#f.checkpoints > 1 and f.by_method[e.method] == e and " *" or ""),
      fit.checkpoint_name(e.checkpoint), e.largest and tostring(e.largest) or "none",
      e.peak_bytes and dp.format_bytes(e.peak_bytes) or "-",
      e.predicted_reserved_bytes and dp.format_bytes(e.predicted_reserved_bytes) or "-",
      dp.format_ms(e.step_ms),
      e.dominant and string.format("%s (%s)", e.dominant.category, dp.format_bytes(e.dominant.bytes)) or "-",
      e.first_unfit and tostring(e.first_unfit) or ("> " .. f.hi),
      e.first_unfit_peak_bytes and dp.format_bytes(e.first_unfit_peak_bytes) or "-",
      tostring(e.runs),
    }
  end
  dp.print_table(rows, { false, false, true, true, true, true, false, true, true, true })
  if #f.checkpoints > 1 then
    print("  * the method's answer: the largest value (on a tie, the faster estimated step); step (est.) is the "
          .. "plan's " .. (f.device_model.calibration and "calibrated" or "roofline") .. " step time at that value")
  end
end

-- dpprof fit WORDS: the largest value of the varied key that fits the budget, per method, by plan
-- runs; out= writes the answer as JSON. Returns the exit status.
function cli.fit(args)
  if util.help_asked(args) then
    io.stdout:write(cli.fit_usage())
    return 0
  end
  local opts, out, batch_defaulted = fit_options(args)
  if not opts then
    eprint("dpprof fit: ", out)
    return 2
  end
  if out then -- before the search: out=link.json would replace the link
    local ok, why = dp.writable(tostring(out))
    if not ok then
      eprint("dpprof fit: out: ", why)
      return 2
    end
  end
  local ok, f = pcall(dp.fit, opts)
  if not ok then
    local msg = tostring(f):gsub("^[^\n]-%.lua:%d+: ", "")
    eprint(msg)
    return 2
  end
  print_fit_header(opts, f, batch_defaulted)
  print_fit_table(f)
  if out then
    local doc = { vary = f.vary, budget_bytes = f.budget_bytes, device_model = f.device_model, lo = f.lo, hi = f.hi,
                  granularity = f.granularity, base = opts.base, methods = dp.json.array(f.methods), predicted = true,
                  checkpoints = dp.json.array(f.checkpoints) }
    local wok, werr = pcall(results.write, out, doc)
    if not wok then
      eprint("dpprof fit: ", tostring(werr))
      return 2
    end
    print("\nwritten: " .. out)
  end
  return 0
end

-- for dpprof.cli_risk, which reads the fit keys it shares the same way
cli.fit_options = fit_options

return cli
