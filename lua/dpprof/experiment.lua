-- dpprof.experiment: one experiment, measured. Builds the model, wraps it with a DP method, runs
-- warm-up and timed iterations through the DP phases, takes snapshots, and returns a result table
-- exactly as docs/results.md describes (validated by dpprof.results.validate).
--
--   dp.experiment{ name=, model={...dp.model keys...} | {path="DIR", adapter="DIR", ...},
--                  method="ghost" | norms=, clip=,
--                  optimizer={name="adamw"|"sgd", lr=, ...}, dp={max_grad_norm=, noise_multiplier=,
--                  sample_rate=, max_physical_batch_size=, delta=, poisson=, dataset_size=,
--                  flash_impl="tiles"|"strips", accountant="prv"|"rdp"|"pld"}, iters=3, warmup=2,
--                  device="auto", seed=0, snapshots="default"|"none"|{names...}, on={callbacks},
--                  memory_limit=bytes, data={file=, file_dtype=, ...}, trace=path, profile="none"|"ops", threads=n,
--                  device_model="h100"|"h200"|"h100-calibrated"|"FILE.json"|{...} (device="plan" only),
--                  distributed={strategy="ddp", world_size=N, rank=r (plan only)}, save="DIR" }
--
-- save: the trained model written to DIR as Hugging Face files (m:save) after the last step, by
-- rank 0 alone in a distributed run (fsdp's parts gathered first); the result's save_dir names it.
-- A model built without a checkpoint's weights (a shape, or weights = "random") trained on
-- documents (data with eos) is saved with that eos as its eos_token_id; a checkpoint's model keeps
-- the checkpoint's token ids.
--
-- distributed: this process is one rank of a data-parallel run (docs/lua.md "Distributed runs"):
-- model.batch is the global batch, of which the rank holds its slice; the gradients are summed
-- across the ranks in the phase `comm`. On the plan device a simulated world of world_size.
--
-- data: token windows of seq_len from a file (file=, file_dtype=; order="sequential" takes them in
-- file order, not at random offsets), synthetic ones without; or samples of their own lengths
-- (dpprof.data's grammar: lengths=, lengths_file=, length_distribution=, tokens= (the samples' ids),
-- or file= with eos=, each document a sample; pad_to=, group_by_length=, too_long=): each step's
-- drawn samples are split into physical batches of at most
-- max_physical_batch_size (Opacus's BatchMemoryManager), each padded to its longest sample with
-- pads of target -100, and the result records steps[] and data (docs/results.md).
--
-- A checkpoint as the model: model = { path = "DIR", seq_len=, batch=, lora=, dtype=, ... }. The
-- sizes come from DIR/config.json (dpprof.model.read_config); any dp.model key given beside path
-- overrides the file's by name (layers = 2 for a short study). The weights are DIR's
-- (dpprof.model.load, sharded too) unless weights = "random" (built from config.json alone, for
-- memory and time studies where values do not matter); on the plan device only config.json is
-- read, whatever weights says. With the file's weights, only runtime keys may differ from it
-- (seq_len, batch, dtype, master_weights, seed, lora, checkpoint): others change the shapes the weights have.
-- adapter = "DIR" adds a PEFT adapter folder (adapter_config.json, adapter_model.safetensors, as
-- PEFT saves it apart from its base) to path's base: its rank, alpha and targets are the model's lora.
--
-- Callbacks on={name=function(ctx, i, k) ... end}: model_loaded, wrapped, optimizer_created,
-- after_warmup and finished run once; before_forward, after_forward, after_backward, after_clip
-- (per physical batch k) and after_noise, after_step run in each timed iteration i (1-based), not
-- in warm-up. ctx has model, optimizer, priv, config, device, iter, and ctx:snapshot(name); what a
-- callback stores in ctx.extra comes back as the result's `extra`. `snapshots` keeps the default
-- schedule ("default"), drops it ("none"), or keeps the listed names or patterns.
--
-- It runs in the calling process; dp.sweep (or dp.isolate(dp.experiment, cfg)) runs it in a clean
-- child. A failure while it runs (out of memory, an engine error, a callback's error) does not
-- raise: the result has status "oom" or "error", a message, and what was measured up to the
-- failure. A bad configuration raises before anything is built: unknown keys, wrong types, and
-- what dpprof.model and dpprof.dp.wrap would refuse (checked without a device), including a
-- sample_rate x dataset_size that disagrees with the batch; what only building can tell (bf16 on
-- the CPU) raises too.
--
-- threads: the CPU backend's thread count for the run (default: dpprof.threads(), i.e.
-- OMP_NUM_THREADS or the CPU count); the count used is recorded as environment.threads, and the
-- process's own count is restored afterwards.
--
-- Timing: every phase is bracketed by dp.sync() and dp.clock(), so it is device time; an
-- iteration's time is the sum of its phases (batch creation, snapshots and callbacks excluded).
-- With model.checkpoint, the recomputation of checkpointed blocks (in the backward, and in bk's
-- clip) is the phase `recompute`, taken out of the phase it ran in.
-- Peaks are reset after warm-up, so memory.peak_bytes describes the timed iterations; the warm-up
-- peak is kept as memory.warmup_peak_bytes. The ledger is reset after warm-up too. Each phase
-- also has its own peak (memory.phases: what was live at it and at the phase's end), and the
-- process's peak resident memory since the experiment started is memory.host_peak_rss_bytes.
-- profile="ops" times every engine op of the timed iterations (lua/dpprof/ops.lua): the result's
-- `profile`, and op slices in the trace.
--
-- device="plan" (accounting only, see lua/dpprof/plan.lua): the result is marked predicted; the
-- memory figures are exact; the engine clock is modelled for the run (each op recorded advances
-- it by its roofline time on device_model, default h100, or by its calibrated time with a device
-- model file, device_model = "FILE.json": lua/dpprof/devmodel.lua), so phase times, spans, snapshots and
-- the memory timeline are on the modelled device's time; the result gains the budget view `plan`.
local dp = require("dpprof")
local json = dp.json
local results = require("dpprof.results")
local plan = require("dpprof.plan")
local ops = require("dpprof.ops")
local data = require("dpprof.data")

local experiment = {}

---------------------------------------------------------------------------------------------
-- Configuration

local TOP_KEYS = { "name", "model", "method", "norms", "clip", "optimizer", "dp", "iters", "warmup",
                   "device", "device_model", "seed", "snapshots", "on", "memory_limit", "data", "trace", "profile",
                   "threads", "distributed", "save" }
experiment.PROFILES = dp.results_schema.choices.profiles -- "none", "ops"
-- The devices a configuration may name (the engine's, engine/core/device.c); cuda only where this
-- dpprof was built with it.
experiment.DEVICES = dp.DEVICES
-- The list `from` in order, less the keys of set `without`, then the keys `plus`.
local function keys_of(from, without, plus)
  local out = {}
  for _, k in ipairs(from) do if not without[k] then out[#out + 1] = k end end
  for _, k in ipairs(plus) do out[#out + 1] = k end
  return out
end
-- A model's keys: dpprof.model's (the engine's one list), less device (an experiment's own, at
-- the top) and parts (an fsdp run's own, from distributed: build_parts), plus path and weights (a
-- checkpoint's directory, and whether its weights are read) and adapter (a PEFT adapter folder for it).
local EXPERIMENT_OWN = { device = true, parts = true }
local MODEL_KEYS = keys_of(dp.model.KEYS, EXPERIMENT_OWN, { "path", "weights", "adapter" })
-- What a model read with its weights from a checkpoint may set besides the file: dpprof.model.load's
-- options (its one list), less device and parts.
local RUNTIME_KEYS = {}
for _, k in ipairs(keys_of(dp.model.LOAD_KEYS, EXPERIMENT_OWN, {})) do RUNTIME_KEYS[k] = true end
-- The dp keys: dpprof.dp.wrap's (the engine's one list) less those an experiment deliberately sets
-- elsewhere (method, norms and clip and the run's seed at the top; expected_batch_size is
-- model.batch: wrap_options), plus the accountant its epsilon is reported by.
local DP_KEYS = keys_of(dp.dp.WRAP_KEYS, { method = true, norms = true, clip = true, seed = true,
                                           expected_batch_size = true }, { "accountant" })
local OPTIMIZER_KEYS = {
  adamw = { "name", "lr", "betas", "eps", "weight_decay" },
  sgd = { "name", "lr", "momentum", "weight_decay" },
}
-- The data keys: dpprof.data's grammar (its one list).
local DATA_KEYS = data.KEYS
local CALLBACKS = { "model_loaded", "wrapped", "optimizer_created", "after_warmup", "before_forward",
                    "after_forward", "after_backward", "after_clip", "after_noise", "after_step", "finished" }
-- The methods by name and each one's two choices: the engine's one table (dpprof.dp.METHODS, PRESETS).
local METHODS, PRESETS = dp.dp.METHODS, dp.dp.PRESETS

-- The default snapshot schedule, in order; {i} is the timed iteration (1-based).
experiment.DEFAULT_SNAPSHOTS = { "0_model_loaded", "1_wrapped_with_dp", "2_optimizer_created", "3_after_warmup",
                                 "iter{i}_before_forward", "iter{i}_after_forward", "iter{i}_after_backward",
                                 "iter{i}_after_step" }

-- What an experiment takes when not told. The DP options wrap also has (C, sigma, delta, Poisson
-- sampling, the seed, the accountant) are the engine's (dpprof.dp.DEFAULTS); the sample rate,
-- which the engine derives from a dataset size instead, and the rest are an experiment's own.
local ENGINE = dp.dp.DEFAULTS
experiment.DEFAULTS = {
  method = "ghost",
  optimizer = { name = "adamw", lr = 1e-4, weight_decay = 0.01 },
  dp = { max_grad_norm = ENGINE.max_grad_norm, noise_multiplier = ENGINE.noise_multiplier, sample_rate = 0.01,
         delta = ENGINE.delta, poisson = ENGINE.poisson, accountant = ENGINE.accountant },
  iters = 3, warmup = 2, device = "auto", seed = ENGINE.seed, snapshots = "default",
}

local function check_keys(t, valid, where)
  if type(t) ~= "table" then error(string.format("%s must be a table, got %s", where, type(t)), 4) end
  local set = {}
  for _, k in ipairs(valid) do set[k] = true end
  for k in pairs(t) do
    if not set[k] then
      error(string.format("%s: unknown key '%s' (valid: %s)", where, tostring(k), table.concat(valid, ", ")), 4)
    end
  end
end

local copy = dp.deep_copy

local function with_defaults(t, defaults)
  local out = copy(defaults)
  for k, v in pairs(t or {}) do out[k] = copy(v) end
  return out
end

-- Checks t[key] is an integer >= min, or absent; an integral float (4 * 2^20) is one and is stored
-- as an integer. A number written as a string ("3") is refused, as everywhere in dpprof.
local function check_int(t, key, where, min)
  local v = t[key]
  local i = type(v) == "number" and math.tointeger(v) or nil
  if v ~= nil and (not i or i < min) then
    -- a string "3" is shown quoted: "got 3" would not say what is wrong with it
    error(string.format("%s must be an integer >= %d, got %s", where, min,
                        type(v) == "string" and string.format("%q (a string)", v) or tostring(v)), 4)
  end
  t[key] = i
end

-- The integer keys of a model: integral floats (hidden = 2^8) stored as integers, so the
-- configuration a result echoes has the types docs/results.md gives.
local MODEL_INT_KEYS = { "vocab", "hidden", "layers", "heads", "kv_heads", "head_dim", "seq_len", "batch", "ffn",
                         "max_positions", "seed" }

-- The dp.model options of model spec m: m itself, or with path, DIR/config.json's with m's keys
-- over them. Also whether the weights come from the files (path, weights ~= "random", not plan).
function experiment.model_options(m, device)
  if m.path == nil then
    if m.weights ~= nil then error("dpprof.experiment: model.weights needs model.path (a checkpoint directory)", 0) end
    if m.adapter ~= nil then
      error("dpprof.experiment: model.adapter needs model.path (the base model's checkpoint directory)", 0)
    end
    return copy(m), false
  end
  if type(m.path) ~= "string" then error("dpprof.experiment: model.path must be a checkpoint directory (a string)", 0) end
  if m.weights ~= nil and m.weights ~= "file" and m.weights ~= "random" then
    error(string.format("dpprof.experiment: unknown model.weights '%s' (valid: file, random)", tostring(m.weights)), 0)
  end
  if m.adapter ~= nil and (type(m.adapter) ~= "string" or m.adapter == "") then
    error("dpprof.experiment: model.adapter must be a PEFT adapter directory (a string)", 0)
  end
  if m.adapter ~= nil and m.lora ~= nil then
    error("dpprof.experiment: model.lora and model.adapter: the adapter's rank, alpha and targets are its "
          .. "adapter_config.json's (drop lora)", 0)
  end
  local ok, file = pcall(dp.model.read_config, m.path, m.adapter and { adapter = m.adapter } or nil)
  if not ok then
    error("dpprof.experiment: model." .. (m.adapter and "adapter" or "path") .. ": " .. dp.error_text(file), 0)
  end
  local load = m.weights ~= "random" and device ~= "plan"
  for k, v in pairs(m) do
    if k ~= "path" and k ~= "weights" and k ~= "adapter" then
      if load and not RUNTIME_KEYS[k] and file[k] ~= v then
        error(string.format("dpprof.experiment: model.%s overrides %s/config.json, whose weights have the file's "
                            .. "shapes: give weights = \"random\" (or run on the plan device) to study it", k, m.path), 0)
      end
      file[k] = copy(v)
    end
  end
  return file, load
end

-- The samples of a data spec that gives them their own lengths (lengths, lengths_file,
-- length_distribution, tokens, or a token file with eos: each document a sample), for a model of
-- seq_len tokens: {lengths = {...}, starts = {...} (token file: each document's offset), tokens =
-- {...} (data.tokens: each sample's ids), info = the result's `data`}; nil for the fixed-length
-- windows of before (no data, or a file without eos).
-- Made once per configuration (the table is kept for its run). Bad input refuses (exit 2).
local SAMPLES = setmetatable({}, { __mode = "k" })
local function samples_of(c, seq_len, dataset_size, vocab)
  if SAMPLES[c] then return SAMPLES[c] end
  if not c.data then return nil end
  local spec, source = data.check(c.data)
  if source == nil or (source == "file" and spec.eos == nil) then return nil end
  if math.type(seq_len) ~= "integer" then
    dp.refuse("dpprof.experiment: data with samples of their own lengths needs model.seq_len (their longest)")
  end
  local s
  if source == "file" then
    local ok, docs = pcall(dp.documents, { file = spec.file, file_dtype = spec.file_dtype, eos = spec.eos,
                                                vocab = math.type(vocab) == "integer" and vocab or nil })
    if not ok then dp.refuse("dpprof.experiment: data.file: " .. dp.error_text(docs)) end
    local cut, longest = 0, 0
    for i, l in ipairs(docs.lengths) do
      longest = math.max(longest, l)
      if l > seq_len then
        if spec.too_long == "error" then
          dp.refuse(string.format("dpprof.experiment: data.file '%s': document %d (at token %d) has length %d, longer "
                                  .. "than seq_len %d (too_long = \"error\"; too_long = \"cut\" cuts it)", spec.file,
                                  i, docs.starts[i], l, seq_len))
        end
        docs.lengths[i], cut = seq_len, cut + 1
      end
    end
    s = { lengths = docs.lengths, starts = docs.starts,
          info = { source = "file", samples = #docs.lengths, cut = cut, longest = longest,
                   empty_documents = docs.empty } }
  else
    local lengths, info = data.lengths(spec, { seq_len = seq_len, dataset_size = dataset_size, seed = c.seed })
    s = { lengths = lengths, info = { source = source, samples = #lengths, cut = info.cut, longest = info.longest } }
    if source == "tokens" then -- the samples' own ids, each cut to its length by dp.batch
      s.tokens = spec.tokens
      if math.type(vocab) == "integer" then
        for i, ids in ipairs(s.tokens) do
          for j, id in ipairs(ids) do
            if id >= vocab then
              dp.refuse(string.format("dpprof.experiment: data.tokens[%d][%d] is %d, outside the model's vocabulary "
                                      .. "[0, %d)", i, j, id, vocab))
            end
          end
        end
      end
    end
  end
  s.info.pad_to, s.info.group_by_length, s.info.too_long = spec.pad_to, spec.group_by_length, spec.too_long
  -- what splitting a step needs: the padding and grouping keys alone (dpprof.data.physical_batches
  -- checks the spec it is given, which must not be the data set's every length at every step)
  s.spec = { pad_to = spec.pad_to, group_by_length = spec.group_by_length }
  SAMPLES[c] = s
  return s
end

-- Samples of their own lengths make the data set: its size is theirs (a distribution draws
-- dp.dataset_size of them), and with a sample rate but no model.batch, the expected logical batch
-- is Opacus's int(q N). A sample rate that expects no sample a step is refused (every batch empty).
local function size_data_set(c, cfg, mcfg)
  local s = samples_of(c, mcfg.seq_len, c.dp.dataset_size, mcfg.vocab)
  if not s then return end
  local n = #s.lengths
  if c.dp.dataset_size and c.dp.dataset_size ~= n then
    dp.refuse(string.format("dpprof.experiment: dp.dataset_size %d differs from the data set's %d samples (%s)",
                            c.dp.dataset_size, n, s.info.source))
  end
  c.dp.dataset_size = n
  local q_given = cfg.dp ~= nil and cfg.dp.sample_rate ~= nil
  if q_given and c.model.batch == nil then
    local expected = math.floor(c.dp.sample_rate * n)
    if expected < 1 then
      dp.refuse(string.format("dpprof.experiment: sample_rate %g over the data set's %d samples expects %g samples a "
                              .. "step, an expected batch of int(q N) = 0 (Opacus's; the noise's divisor): raise "
                              .. "sample_rate to at least %g", c.dp.sample_rate, n, c.dp.sample_rate * n, 1 / n))
    end
    c.model.batch = expected
  elseif not q_given then
    local batch = c.model.batch or 1
    if batch > n then -- the rate batch / n would pass 1: say so in the user's own terms
      dp.refuse(string.format("dpprof.experiment: the data set holds %d sample(s) (%s), fewer than the batch of %d "
                              .. "(model.batch): give a batch of at most %d, or more samples", n,
                              s.info.source == "file" and string.format("documents of data.file '%s'", c.data.file)
                              or s.info.source, batch, n))
    end
    c.dp.sample_rate = batch / n
  end
end

-- distributed = {strategy=, world_size=, rank=} (dpprof.dist.KEYS): checked and completed in place
-- (world_size: the launched world's when not given; rank: the plan device's simulated rank, 0 by
-- default). What cannot run is refused (exit 2), naming the key: an unknown strategy, one not
-- implemented yet, a world size that differs from the launched one. A fixed batch that the world
-- size does not divide is sliced unevenly, as Poisson batches are (rank_batch).
-- `recorded`: true for a result's record (the launched world is not this process's); "launch" for
-- a configuration launched elsewhere with its own world_size ranks (a Slurm sweep's N-task point):
-- checked as a run, less the comparison with this process's world.
experiment.MAX_WORLD = 1 << 20 -- ranks a world may have (lua_dp.c: DPL_MAX_WORLD)
local function check_distributed(c, recorded)
  local d = c.distributed
  if d == nil then return end
  local function refuse(fmt, ...) dp.refuse("dpprof.experiment: distributed" .. string.format(fmt, ...)) end
  if type(d) ~= "table" then refuse(" must be a table {strategy=, world_size=} (got %s)", type(d)) end
  local keys = {}
  for _, k in ipairs(dp.dist.KEYS) do keys[k] = true end
  for k in pairs(d) do
    if not keys[k] then refuse(": unknown key '%s' (valid: %s)", tostring(k), table.concat(dp.dist.KEYS, ", ")) end
  end
  d.strategy = d.strategy == nil and "ddp" or d.strategy -- data parallel unless said
  local known = false
  for _, s in ipairs(dp.dist.STRATEGIES) do known = known or s == d.strategy end
  if not known then
    refuse(".strategy: unknown strategy '%s' (valid: %s)", tostring(d.strategy), table.concat(dp.dist.STRATEGIES, ", "))
  end
  for _, k in ipairs({ "world_size", "rank" }) do
    local v = d[k]
    if v ~= nil and not (math.type(v) == "integer" or (type(v) == "number" and math.tointeger(v))) then
      refuse(".%s must be an integer, got %s", k, tostring(v))
    end
    d[k] = v and math.tointeger(v)
  end
  if d.world_size and d.world_size < 1 then refuse(".world_size must be at least 1, got %d", d.world_size) end
  if d.world_size and d.world_size > experiment.MAX_WORLD then
    refuse(".world_size %d is more ranks than dpprof models (at most %d)", d.world_size, experiment.MAX_WORLD)
  end
  if c.device ~= "plan" then
    if d.rank ~= nil and recorded ~= true then
      refuse(".rank is the launcher's on device '%s' (only a plan run names the rank it plays)", tostring(c.device))
    end
    if not recorded then
      local launched = dp.dist.world_size()
      if d.world_size and d.world_size ~= launched then
        refuse(".world_size is %d but this run was launched with %d rank(s) (run it as mpirun -np %d dpprof run "
               .. "..., or srun -n %d)", d.world_size, launched, d.world_size, d.world_size)
      end
      d.world_size = launched
    end
  end
  d.world_size = d.world_size or 1
  if c.device == "plan" then
    d.rank = d.rank or 0
    if d.rank < 0 or d.rank >= d.world_size then
      refuse(".rank %d is not a rank of a world of %d", d.rank, d.world_size)
    end
  end
end

-- The most samples a rank holds of a fixed logical batch (the whole batch without `distributed`,
-- or with Poisson sampling, whose slices vary): rank r holds samples floor(n r / N) to
-- floor(n (r + 1) / N) - 1 of the n (the engine's slice, as Poisson batches are sliced), so
-- ceil(n / N) at most when N does not divide n.
local function rank_batch(c, logical)
  local d = c.distributed
  if not d or c.dp.poisson then return logical end
  return (logical + d.world_size - 1) // d.world_size
end

-- The physical batches of a logical batch of `logical` samples: the batch the model is built with
-- and the wrapper's max_physical_batch_size. A rank's physical batches hold at most its slice; a
-- fixed batch never needs a physical batch above it, while a Poisson one of samples' own lengths
-- (own_lengths) may draw more than its expected size, split at max_physical_batch_size (as
-- Opacus's). The one reckoning of check_model_and_dp and the run's body.
local function physical_batch(c, logical, own_lengths)
  local physical = c.dp.max_physical_batch_size or logical
  if c.distributed then physical = math.min(physical, rank_batch(c, logical)) end
  local model_batch = physical
  if not (own_lengths and c.dp.poisson) then physical = math.min(physical, logical) end
  return model_batch, physical
end

-- The checks dpprof.model and dpprof.dp.wrap make of the model and DP options, made here without
-- a device, so a configuration that cannot run raises before anything is built (and a sweep
-- refuses it before its first point). The batch the model is built with is the physical one.
local function check_model_and_dp(c, cfg)
  local okm, mcfg = pcall(experiment.model_options, c.model, c.device)
  if not okm then error(dp.error_text(mcfg), 4) end
  size_data_set(c, cfg, mcfg)
  local logical = c.model.batch or 1
  local physical
  mcfg.batch, physical = physical_batch(c, logical, SAMPLES[c] ~= nil)
  local ok, err = pcall(dp.model.check, mcfg)
  if not ok then error("dpprof.experiment: " .. dp.error_text(err), 4) end
  ok, err = pcall(dp.dp.check, experiment.wrap_options(c, logical, physical), mcfg.batch)
  if not ok then error("dpprof.experiment: " .. dp.error_text(err), 4) end
end

-- Checks cfg's keys and fills in defaults; returns the normalised copy. Raises on a bad key or value.
-- `recorded`: cfg is a result's record, checked for what any build would refuse (a result made with
-- CUDA elsewhere is valid on a CPU-only build, which cannot run it); "launch": cfg will run under a
-- launcher of its own world_size ranks, not in this process's world (dpprof.slurm's N-task points).
-- The files save = DIR writes (or removes: a LoRA model's adapter files, absent without LoRA).
experiment.SAVE_FILES = { "config.json", "generation_config.json", "model.safetensors", "adapter_model.safetensors",
                          "adapter_config.json" }

function experiment.config(cfg, recorded)
  check_keys(cfg, TOP_KEYS, "dpprof.experiment")
  local c = with_defaults(cfg, experiment.DEFAULTS)
  c.model = copy(cfg.model or {})
  check_keys(c.model, MODEL_KEYS, "dpprof.experiment: model")
  local known_device = false
  for _, d in ipairs(experiment.DEVICES) do known_device = known_device or d == c.device end
  if not known_device then
    error(string.format("dpprof.experiment: unknown device '%s' (valid: %s)", tostring(c.device),
                        table.concat(experiment.DEVICES, ", ")), 3)
  end
  if c.device == "cuda" and not dp.cuda_compiled and recorded ~= true then
    error("dpprof.experiment: device 'cuda': this dpprof was built without the CUDA backend (valid here: cpu, plan, "
          .. "auto)", 3)
  end
  if cfg.norms or cfg.clip then
    if cfg.method then error("dpprof.experiment: give either method or norms/clip, not both", 3) end
    if not (cfg.norms and cfg.clip) then
      error(string.format("dpprof.experiment: norms= and clip= go together (norms: %s; clip: %s), or give a method",
                          table.concat(dp.dp.NORMS, ", "), table.concat(dp.dp.CLIPS, ", ")), 3)
    end
    c.method = nil
  else
    local known = false
    for _, m in ipairs(METHODS) do known = known or m == c.method end
    if not known then
      error(string.format("dpprof.experiment: unknown method '%s' (valid: %s; or norms= and clip=)",
                          tostring(c.method), table.concat(METHODS, ", ")), 3)
    end
  end
  c.optimizer = with_defaults(cfg.optimizer, cfg.optimizer and cfg.optimizer.name and cfg.optimizer.name ~= "adamw"
                              and { name = cfg.optimizer.name, lr = 1e-4 } or experiment.DEFAULTS.optimizer)
  local okeys = OPTIMIZER_KEYS[c.optimizer.name]
  if not okeys then
    error(string.format("dpprof.experiment: unknown optimizer '%s' (valid: adamw, sgd)", tostring(c.optimizer.name)), 3)
  end
  check_keys(c.optimizer, okeys, "dpprof.experiment: optimizer")
  c.dp = with_defaults(cfg.dp, experiment.DEFAULTS.dp)
  check_keys(c.dp, DP_KEYS, "dpprof.experiment: dp")
  local known = false
  for _, a in ipairs(dp.privacy.accountants) do known = known or a == c.dp.accountant end
  if not known then
    error(string.format("dpprof.experiment: dp.accountant: unknown accountant '%s' (valid: %s)", tostring(c.dp.accountant),
                        table.concat(dp.privacy.accountants, ", ")), 3)
  end
  check_int(c, "iters", "dpprof.experiment: iters", 1)
  check_int(c, "warmup", "dpprof.experiment: warmup", 0)
  check_int(c, "seed", "dpprof.experiment: seed", 0)
  check_int(c, "threads", "dpprof.experiment: threads", 1)
  if c.threads and c.threads > dp.MAX_THREADS then -- dp.threads's range, refused here: at the run it came
    -- after the plan clock was modelled, and left it so for the runs after
    error(string.format("dpprof.experiment: threads must be an integer from 1 to %d, got %d", dp.MAX_THREADS,
                        c.threads), 3)
  end
  check_int(c.dp, "max_physical_batch_size", "dpprof.experiment: dp.max_physical_batch_size", 1)
  check_int(c.dp, "dataset_size", "dpprof.experiment: dp.dataset_size", 1)
  check_int(c.model, "batch", "dpprof.experiment: model.batch", 1)
  check_int(c, "memory_limit", "dpprof.experiment: memory_limit", 0)
  for _, k in ipairs(MODEL_INT_KEYS) do
    local i = type(c.model[k]) == "number" and math.tointeger(c.model[k])
    if i then c.model[k] = i end
  end
  -- A dataset size without a sample rate: q is the batch over it (not the default rate, which
  -- would contradict the batch).
  if c.dp.dataset_size and (cfg.dp == nil or cfg.dp.sample_rate == nil) then
    c.dp.sample_rate = (c.model.batch or 1) / c.dp.dataset_size
  end
  if c.data then
    check_keys(c.data, DATA_KEYS, "dpprof.experiment: data")
    data.check(c.data) -- the grammar's checks: values, and one source of samples
  end
  c.on = cfg.on or {}
  check_keys(c.on, CALLBACKS, "dpprof.experiment: on")
  for k, f in pairs(c.on) do
    if type(f) ~= "function" then error(string.format("dpprof.experiment: on.%s must be a function", k), 3) end
  end
  local s = c.snapshots
  if s ~= "default" and s ~= "none" and type(s) ~= "table" then
    error("dpprof.experiment: snapshots must be \"default\", \"none\" or a list of snapshot names "
          .. "(patterns such as \"iter{i}_after_backward\" allowed)", 3)
  end
  if c.profile ~= nil and c.profile ~= "none" and c.profile ~= "ops" then
    error(string.format("dpprof.experiment: unknown profile '%s' (valid: %s)", tostring(c.profile),
                        table.concat(experiment.PROFILES, ", ")), 3)
  end
  if c.trace ~= nil and type(c.trace) ~= "string" then
    error("dpprof.experiment: trace must be the path of the trace file to write", 3)
  end
  if c.trace ~= nil then -- refused now, not after the run: trace="/dev/full" would replace the device
    local ok, why = dp.writable(c.trace)
    if not ok then error("dpprof.experiment: trace: " .. why, 3) end
  end
  if c.save ~= nil then -- the trained model's Hugging Face files: refused now, not after the run
    if type(c.save) ~= "string" or c.save == "" then
      dp.refuse("dpprof.experiment: save must be the directory to write the trained model to (a string)")
    end
    if c.device == "plan" then
      dp.refuse("dpprof.experiment: save: a plan run has no parameter values to write (give device = \"cpu\" "
                .. "or \"cuda\", or drop save)")
    end
    local exists = io.open(c.save, "r")
    if exists then exists:close() end
    -- every file the save writes or removes (engine/io/model_io.c: dp_model_save), not only the
    -- first: a model.safetensors that cannot be replaced is found now, not after the run with a new
    -- config.json already beside the old weights
    for _, name in ipairs(exists and experiment.SAVE_FILES or { "" }) do
      local ok, why = dp.writable(exists and (c.save .. "/" .. name) or c.save)
      if not ok then dp.refuse("dpprof.experiment: save: " .. why) end
    end
  end
  if c.device_model ~= nil then
    if c.device ~= "plan" then
      error(string.format("dpprof.experiment: device_model applies to device=\"plan\" only (device is '%s')",
                          tostring(c.device)), 3)
    end
    local ok, err = pcall(plan.device_model, c.device_model)
    if not ok then error("dpprof.experiment: " .. tostring(err), 3) end
    local dtype = type(c.model) == "table" and c.model.dtype or "f32"
    if type(dtype) == "string" and not err.peak_flops[dtype] then
      local have = {}
      for dt in pairs(err.peak_flops) do have[#have + 1] = dt end
      table.sort(have)
      error(string.format("dpprof.experiment: device_model '%s' has no %s (it models: %s)", err.name, dtype,
                          table.concat(have, ", ")), 3)
    end
  end
  c.name = c.name or c.method or (tostring(c.norms) .. "+" .. tostring(c.clip))
  -- `distributed` at the top or in the model (dp.model's key), once
  if c.model.distributed ~= nil and cfg.distributed ~= nil then
    dp.refuse("dpprof.experiment: distributed is given twice (at the top and in model): give it once")
  end
  c.distributed = copy(cfg.distributed or c.model.distributed)
  c.model.distributed = nil -- the experiment makes the wrapper a rank itself
  check_distributed(c, recorded)
  check_model_and_dp(c, cfg)
  return c
end

-- The configuration a result records (its `config`: the resolved model as model:config() gives it,
-- the method or "norms+clip", optimizer, dp, iters, warmup, device, seed, ...) checked as
-- experiment.config checks a script's: raises its error (method "x", layers 0, ...) for what a run
-- would have refused. JSON nulls count as absent; a checkpoint's model is checked from the fields
-- recorded, not from its directory (which the reader may not have).
function experiment.check_recorded(rc)
  if type(rc) ~= "table" then error("dpprof.experiment: config must be an object", 2) end
  local function strip(v)
    if type(v) ~= "table" or json.is_null(v) then return v end
    local out = {}
    for k, x in pairs(v) do
      if not json.is_null(x) then out[k] = strip(x) end
    end
    return out
  end
  local c = strip(rc)
  if type(c.model) == "table" then c.model.path, c.model.weights, c.model.adapter = nil, nil, nil end
  if type(c.method) == "string" and c.method:find("+", 1, true) then
    c.norms, c.clip = c.method:match("^(.-)%+(.*)$")
    c.method = nil
  end
  if c.device ~= "plan" then c.device_model = nil end -- recorded for plan runs only
  if c.method == "vanilla" and c.dp == nil then c.dp = {} end
  return experiment.config(c, true)
end

---------------------------------------------------------------------------------------------
-- The run

local Ctx = {}
Ctx.__index = Ctx

-- The key of a snapshot among the run's: its name and its exact time.
local function snapshot_key(s) return string.format("%s\0%a", s.name, s.timestamp) end

-- ctx:snapshot(name): a named memory snapshot (after synchronising the device), marked in the
-- result as the script's own (snapshots[i].custom), so timelines show it. The script's are kept
-- as a set, so marking them costs one look-up per snapshot (a list made it quadratic).
function Ctx:snapshot(name)
  local s = dp.memory.snapshot(name)
  self._custom[snapshot_key(s)] = true
  return s
end

local function release(obj)
  if type(obj) == "table" or type(obj) == "userdata" then
    local ok, free = pcall(function() return obj.free end)
    if ok and type(free) == "function" then pcall(free, obj) end
  end
end

-- Which default snapshots to take: a set of patterns and concrete names (nil: all).
local function snapshot_filter(spec)
  if spec == "default" then return function() return true end end
  if spec == "none" then return function() return false end end
  local set = {}
  for _, n in ipairs(spec) do set[n] = true end
  return function(pattern, name) return set[pattern] or set[name] end
end

local function build_optimizer(m, o)
  local opts = {}
  for k, v in pairs(o) do if k ~= "name" then opts[k] = v end end
  return dp.optim[o.name](m, opts)
end

-- The parts an fsdp run builds its model in (dpprof.model's parts = {world_size, rank}): the launched
-- world's rank, or on the plan device the simulated one; nil (whole) for any other run or one rank.
local function build_parts(c, kind)
  local d = c.distributed
  if not d or d.strategy ~= "fsdp" then return nil end
  local ws = kind == "plan" and d.world_size or dp.dist.world_size()
  local rank = kind == "plan" and d.rank or dp.dist.rank()
  if ws <= 1 then return nil end
  return { world_size = ws, rank = rank }
end

function experiment.wrap_options(c, logical_batch, physical_batch)
  local w = { max_grad_norm = c.dp.max_grad_norm, noise_multiplier = c.dp.noise_multiplier,
              sample_rate = c.dp.sample_rate, dataset_size = c.dp.dataset_size,
              expected_batch_size = logical_batch, max_physical_batch_size = physical_batch,
              poisson = c.dp.poisson, seed = c.seed, delta = c.dp.delta, flash_impl = c.dp.flash_impl }
  if c.method then w.method = c.method else w.norms, w.clip = c.norms, c.clip end
  return w
end

-- The result's privacy: epsilon at dp.delta by dp.accountant after the noisy steps taken, the
-- accountant's parameters (its defaults), and how batches were sampled (fixed ones carry the caveat).
local function accountant_params(accountant, delta)
  local d = dp.privacy.defaults
  if accountant == "prv" then return { eps_error = d.eps_error, delta_error = delta * d.delta_error_fraction } end
  if accountant == "pld" then return { value_discretization_interval = d.value_discretization_interval, pessimistic = true } end
  return { orders = "opacus_default" }
end

local last_epsilon -- privacy_of's last epsilon: {key=, ok=, e=}
local function privacy_of(priv, c)
  local s = priv:stats()
  local p = { noise_multiplier = s.noise_multiplier, sample_rate = s.sample_rate, steps = s.steps, delta = c.dp.delta,
              accountant = c.dp.accountant, accountant_params = accountant_params(c.dp.accountant, c.dp.delta),
              sampling = c.dp.poisson and "poisson" or "fixed",
              caveat = not c.dp.poisson and results.FIXED_BATCH_CAVEAT or nil }
  -- epsilon is a function of these five alone: the last one is kept (plan runs one after another,
  -- as dp.fit's and dp.risk's searches make them, ask the same one thousands of times)
  local args = { accountant = c.dp.accountant, sample_rate = s.sample_rate, noise_multiplier = s.noise_multiplier,
                 steps = s.steps, delta = c.dp.delta }
  local key = string.format("%s %a %a %s %a", tostring(args.accountant), args.sample_rate or 0 / 0,
                            args.noise_multiplier or 0 / 0, tostring(args.steps), args.delta or 0 / 0)
  local ok, e
  if last_epsilon and last_epsilon.key == key then
    ok, e = last_epsilon.ok, last_epsilon.e
  else
    ok, e = pcall(dp.privacy.epsilon, args)
    last_epsilon = { key = key, ok = ok, e = ok and { epsilon = e.epsilon } or e }
  end
  if ok then
    p.epsilon = e.epsilon == math.huge and json.null or e.epsilon -- sigma = 0: no guarantee
  else -- no step taken, no sample rate, or the accountant's grid too large: no epsilon, and why
    p.epsilon = json.null
    p.epsilon_error = (tostring(e):gsub("^[^\n]-%.lua:%d+: ", ""))
  end
  return p
end

-- The wrapper's method, norms and clip choice (priv.clip is the clip phase, so the choice is
-- priv.clip_method; a field that is not a string falls back to the configuration and presets).
local function choices(priv, c)
  local function field(k)
    local ok, v = pcall(function() return priv[k] end)
    return ok and type(v) == "string" and v or nil
  end
  local method = field("method") or c.method or (c.norms .. "+" .. c.clip)
  if method == "vanilla" then return method, nil, nil end
  local preset = PRESETS[method] or {}
  return method, field("norms") or c.norms or preset.norms, field("clip_method") or field("clip") or c.clip or preset.clip
end

local function environment(kind, info, device_model, threads, load_start)
  local env = dp.environment()
  local e = { device = kind, device_name = info.name or kind, cpu = env.cpu, cores = env.cores, threads = threads,
              git_commit = env.git_commit, dpprof_version = env.dpprof_version,
              hostname = env.hostname or "unknown", driver_version = json.null, cuda_version = json.null,
              blas = env.blas, host_load = results.host_load(load_start, dp.host_load()) }
  if kind == "cuda" then
    e.driver_version = env.nvidia_driver_version or info.cuda_driver_version or json.null
    e.cuda_version = info.cuda_version or json.null
  end
  if device_model then -- a plan run: what it models
    e.device_name = string.format("plan: %s model (%s)", device_model.name, device_model.description)
    e.device_model = device_model
  end
  return e
end

-- What one rank's result tells the combined one: {rank, peak_bytes, categories = {category:
-- peak bytes}, live_at_peak = {category: bytes live at the rank's peak}, modules = {{module, peak
-- bytes}, ...}}.
function experiment.rank_summary(r, rank)
  local cats, live, modules = {}, {}, {}
  for _, cname in ipairs(results.CATEGORIES) do
    cats[cname] = r.memory.categories[cname].peak_bytes
    live[cname] = r.memory.categories[cname].live_at_peak_bytes
  end
  for i, m in ipairs(r.memory.modules) do modules[i] = { m.module, m.peak_bytes } end
  return { rank = rank, peak_bytes = r.memory.peak_bytes, categories = cats, live_at_peak = live, modules = modules }
end

-- The ranks' summaries (experiment.rank_summary, in rank order) as a combined result's
-- distributed.ranks and distributed.largest: every rank's peaks, and the largest peak, per
-- category and per module, with the rank that holds it (the first such rank on a tie).
function experiment.combine(summaries)
  local ranks, largest = json.array(), { peak_bytes = -1, categories = {}, modules = json.array() }
  local by_module, order = {}, {}
  for i, one in ipairs(summaries) do
    ranks[i] = { rank = one.rank, peak_bytes = one.peak_bytes, categories = one.categories,
                 live_at_peak = one.live_at_peak }
    if one.peak_bytes > largest.peak_bytes then largest.peak_bytes, largest.rank = one.peak_bytes, one.rank end
    for _, cname in ipairs(results.CATEGORIES) do
      local have = largest.categories[cname]
      if not have or one.categories[cname] > have.peak_bytes then
        largest.categories[cname] = { peak_bytes = one.categories[cname], rank = one.rank }
      end
    end
    for _, m in ipairs(one.modules) do
      local have = by_module[m[1]]
      if not have then order[#order + 1] = m[1] end
      if not have or m[2] > have.peak_bytes then by_module[m[1]] = { module = m[1], peak_bytes = m[2], rank = one.rank } end
    end
  end
  for i, name in ipairs(order) do largest.modules[i] = by_module[name] end
  return ranks, largest
end

-- A distributed run's result: r.distributed = {strategy, world_size, rank}; on a launched world of
-- more than one rank every rank's peaks (total, per category, per module) are gathered, and rank 0's
-- result also carries them all (`ranks`) and the largest of each with the rank that holds it
-- (`largest`). A failed run (every rank's, after the vote that named the failed rank) gathers
-- nothing; a rank that failed inside a collective raises naming itself (the launcher stops the job).
function experiment.combine_ranks(r, d, kind, in_collective)
  local launched = kind ~= "plan"
  local rank = launched and dp.dist.rank() or d.rank or 0
  local ws = launched and dp.dist.world_size() or d.world_size
  r.distributed = { strategy = d.strategy, world_size = ws, rank = rank }
  if not launched or ws <= 1 then return end
  if in_collective then -- failed inside a collective: the others cannot be told; the launcher stops them
    error(string.format("rank %d of %d: %s", rank, ws, tostring(r.message)), 0)
  end
  if r.status ~= "ok" then return end -- every rank stopped at the same vote, naming the failed one
  local all = dp.dist.all_gather(json.encode(experiment.rank_summary(r, rank)))
  if rank ~= 0 then return end
  local summaries = {}
  for i, text in ipairs(all) do summaries[i] = json.decode(text) end
  local ranks, largest = experiment.combine(summaries)
  r.distributed.ranks, r.distributed.largest = ranks, largest
end

-- Runs the configured experiment in this process; see the header. Returns the result table.
-- A launched world's ranks must run one configuration: each rank's resolved configuration, as
-- "path = value" pairs (model.hidden = 32, dp.noise_multiplier = 1, ...), is gathered once before
-- anything is exchanged and compared with rank 0's; the first path (in sorted order) whose values
-- differ is refused on every rank, naming both values (exit 2). Left out: what a rank may hold of
-- its own without changing what it exchanges (callbacks, its trace file, threads, memory_limit).
local RANK_OWN = { on = true, trace = true, threads = true, memory_limit = true }
local function flatten_config(v, path, out)
  if type(v) == "table" then
    for k, x in pairs(v) do
      if not (path == nil and RANK_OWN[k]) then flatten_config(x, path and (path .. "." .. tostring(k)) or tostring(k), out) end
    end
  elseif math.type(v) == "integer" then out[path] = string.format("%d", v)
  elseif type(v) == "number" then out[path] = string.format("%.17g", v)
  elseif type(v) == "string" or type(v) == "boolean" then out[path] = (type(v) == "string" and "%q" or "%s"):format(v)
  else out[path] = "a " .. type(v) end -- a function's address is its own rank's
end

-- The first rank whose flattened table (flatten_config) differs from rank 0's, in rank order, and
-- the first path (sorted) where: rank (from 0), path, rank 0's value, that rank's ("none": absent).
-- Nil when every rank's agrees.
local function first_disagreement(tables)
  local ref = tables[1]
  for r = 2, #tables do
    local other, paths, seen = tables[r], {}, {}
    for _, t in ipairs({ ref, other }) do
      for k in pairs(t) do
        if not seen[k] then seen[k], paths[#paths + 1] = true, k end
      end
    end
    table.sort(paths)
    for _, k in ipairs(paths) do
      if ref[k] ~= other[k] then return r - 1, k, ref[k] or "none", other[k] or "none" end
    end
  end
end

-- Refuses (on every rank) a configuration the ranks do not share (see flatten_config); kind is the
-- device this rank resolved.
-- A file a rank names by its own path (a node-local copy of the data set, a temporary) is compared
-- by what it holds: its size and FNV-1a hash (dpprof.file_digest) in place of its name.
experiment.RANK_FILES = { "data.file", "data.lengths_file" }
function experiment.agree_ranks(c, kind)
  local mine = {}
  flatten_config(c, nil, mine)
  for _, path in ipairs(experiment.RANK_FILES) do
    if mine[path] then
      local name = path:match("[^.]+$")
      local digest, why = dp.file_digest(c.data[name])
      mine[path] = nil
      mine[path .. " (its content)"] = digest and string.format("%q", digest) or string.format("%q", "unreadable: " .. why)
    end
  end
  mine["device (as resolved)"] = string.format("%q", kind) -- "auto" is each rank's own
  local tables = {}
  for r, text in ipairs(dp.dist.all_gather(json.encode({ config = mine }))) do tables[r] = json.decode(text).config end
  local rank, path, theirs0, theirs = first_disagreement(tables)
  if rank then
    dp.refuse(string.format("dpprof.experiment: distributed: ranks disagree on %s: rank 0 has %s, rank %d has %s "
                            .. "(every rank must run the same configuration)", path, theirs0, rank, theirs))
  end
end

-- Runs one experiment (see the top of this file). In a launched world of several ranks an
-- interrupt (SIGINT: Ctrl-C through srun, scancel --signal=INT) is held back while the experiment
-- runs and voted on at the ranks' next common point (before a collective, or at the end), so that
-- no rank is stopped inside a collective the others wait in; one that arrives after the last vote
-- raises when the experiment returns, and the job is then aborted.
local run_config
-- run_config, and the hold it began (dp.memory.hold) ended whichever way it ends
local function run_held(c)
  local r = table.pack(pcall(run_config, c))
  pcall(dp.memory.end_hold)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function experiment.run(cfg_in)
  local c = experiment.config(cfg_in)
  if not (c.distributed and c.device ~= "plan" and dp.interrupts and dp.dist.world_size() > 1) then
    return run_held(c)
  end
  dp.interrupts.hold(true)
  local r = table.pack(pcall(run_held, c))
  -- an interrupt that came meanwhile raises at the next instruction (the vote's message, if it was voted)
  dp.interrupts.hold(false, not r[1] and dp.interrupts.pending() and tostring(r[2]) or nil)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function run_config(c)
  for _, api in ipairs({ "model", "batch", "free_batch", "optim", "dp" }) do
    if dp[api] == nil then error("dpprof.experiment: this dpprof has no dpprof." .. api .. " (model, optimizer and DP bindings)", 2) end
  end
  local mem = dp.memory
  -- resolves "auto" and makes the device current; a device that cannot be had is the caller's
  -- configuration problem, reported at the caller's line
  local load_start = dp.host_load() -- what else the host ran meanwhile: environment.host_load
  local dok, info = pcall(dp.device, c.device)
  if not dok then error("dpprof.experiment: " .. dp.error_text(info), 2) end
  local kind = info.kind
  if c.distributed and kind ~= "plan" and dp.dist.world_size() > 1 then experiment.agree_ranks(c, kind) end
  if c.distributed and kind == "cuda" then -- NCCL moves CUDA tensors: refused now when it is missing
    local nok, nerr = pcall(dp.dist.nccl)
    if not nok then dp.refuse("dpprof.experiment: distributed: " .. dp.error_text(nerr):gsub("^distributed: ", "")) end
  end
  -- On plan: the device model, and its fixed workspace taken before the peaks are reset (as a
  -- CUDA device holds it from its start).
  local device_model = kind == "plan" and plan.device_model(c.device_model) or nil
  if device_model then plan.prepare(device_model) end
  local dtype
  -- profile="ops": the overhead and the device's peak are measured before anything of the run
  -- (the CPU's peak takes a GEMM and a copy, whose host memory must not count in the run's RSS)
  local profiling = c.profile == "ops" and ops.start(kind, c.model.dtype or "f32", device_model) or nil
  if profiling then profiling.recomputes = (dp.model.checkpoint_parse(c.model.checkpoint) or 0) > 0 end
  local rss_since = dp.host_memory_reset_peak() and "experiment" or "process"
  -- On plan the engine clock is the modelled device's for the run (turned back at every exit).
  if device_model then
    dp.clock_model(require("dpprof.devmodel").clock_args(device_model, c.model.dtype or "f32"))
    if c.distributed then plan.link(device_model) end -- the collectives on its links
  end
  dp.sync()
  mem.clear_snapshots()
  mem.clear_events()
  -- what the script already holds (its own models and tensors, an earlier experiment's leftovers)
  -- is not the experiment's: left out of every figure and reported as memory.held_before_bytes
  -- (the workspace a device holds from its start stays in: it is every experiment's)
  mem.hold()
  if mem.stats().held_total > 0 then -- tensors nothing refers to any more are not the script's: collected first
    mem.end_hold()
    collectgarbage()
    collectgarbage()
    mem.hold()
  end
  mem.reset_peak()
  local held_before = mem.stats().held_total
  if held_before > 0 then
    io.stderr:write(string.format("dpprof.experiment: warning: %s were live before the experiment began (the script's "
                                  .. "own models or tensors); they are left out of its figures "
                                  .. "(memory.held_before_bytes)\n", dp.format_bytes(held_before)))
  end
  dp.ledger_reset()
  local initial = mem.stats().current
  if c.memory_limit then mem.set_limit(c.memory_limit) end

  local take = snapshot_filter(c.snapshots)
  local st = { iter_ms = {}, phase_ms = {}, spans = {}, phase_memory = {}, steps = {} }
  -- samples of their own lengths (nil: fixed-length windows), and the peak of the step running
  local samples = samples_of(c, c.model.seq_len, c.dp.dataset_size)
  local step_peak = 0
  local ctx = setmetatable({ config = c, extra = {}, device = kind, _custom = {} }, Ctx)
  local model, opt, priv
  local physical, logical

  local function snap(pattern, i)
    local name = i and pattern:gsub("{i}", tostring(i)) or pattern
    if take(pattern, name) then mem.snapshot(name) end
  end
  -- The script's callbacks cannot yield: a coroutine.yield in one would abandon the run with the
  -- modelled clock, per-op profiling and the thread count left as the run set them (later runs
  -- in the process then reported 0 ms steps); it is an error result naming the callback instead.
  local in_callback
  local function callback(name, i, k)
    local f = c.on[name]
    if f then
      in_callback = name
      dp.call_unyielding(f, ctx, i, k)
      in_callback = nil
    end
  end
  -- What was live at a phase's peak and at its end, in the timed iterations: the instance of the
  -- phase with the highest peak (a phase runs once per physical batch).
  local function record_phase_memory(name)
    local w, s = mem.window(), mem.stats()
    local prev = st.phase_memory[name]
    if prev and prev.peak_bytes >= w.peak then return end
    st.phase_memory[name] = { peak_bytes = w.peak, live_at_peak = w.live_at_peak, end_bytes = s.allocated,
                              live_at_end = s.current }
  end
  -- Times fn as one phase of iteration iter (0 = warm-up); adds to acc. On plan the clock is the
  -- modelled one, so the time is the roofline estimate of the ops the phase ran.
  -- Activation checkpointing: what the phase spent recomputing blocks (the model's recompute log,
  -- on the same clock) moves from the phase to `recompute`, with a span of its own for each
  -- recomputation, nested in the phase's; so does the op time of the profile (its "recompute:"
  -- ops). Memory by phase keeps the phase as bracketed, recomputation included.
  local function phase(name, iter, acc, fn)
    dp.sync()
    if iter > 0 then mem.window_reset() end
    if model then model:recompute_log() end -- empties it: what follows is this phase's
    local token = profiling and iter > 0 and ops.phase_begin(profiling)
    local t0 = dp.clock()
    fn()
    dp.sync()
    local t1 = dp.clock()
    st.spans[#st.spans + 1] = { phase = name, iter = iter, start_ms = t0 * 1000, end_ms = t1 * 1000 }
    local ms = (t1 - t0) * 1000
    local log = model and model:recompute_log() or { total_ms = 0, spans = {} }
    local recompute_ms = math.min(log.total_ms, ms)
    for _, s in ipairs(log.spans) do
      st.spans[#st.spans + 1] = { phase = "recompute", iter = iter, start_ms = s.start_ms, end_ms = s.end_ms }
    end
    acc[name] = (acc[name] or 0) + ms - recompute_ms
    acc.recompute = (acc.recompute or 0) + recompute_ms
    if iter > 0 then
      step_peak = math.max(step_peak, mem.window().peak)
      record_phase_memory(name)
      if token then ops.phase_end(profiling, name, token, ms - recompute_ms, recompute_ms) end
    end
  end

  -- Non-finite numbers end the run as an error (a NaN loss reported as ok was wrong data): every
  -- step's loss and, for DP methods, its per-sample gradient norms are checked (figures already on
  -- the host); when one is not finite, the model's tensors are searched for the first holding a
  -- NaN or an infinity, which the error names. An update that makes the weights non-finite shows
  -- in the next step's loss. Not on plan, which computes no values.
  local numeric = kind ~= "plan"
  local function nonfinite(what, value, step, i, k, search)
    local name, tkind = model:nonfinite(table.unpack(search))
    local where = i and string.format("timed iteration %d", i) or string.format("warm-up step %d", step + 1)
    local first = name and string.format("the first non-finite tensor is the %s '%s'", tkind, name)
      or string.format("no %s holds one", table.concat(search, " or "))
    local shown = value ~= value and "nan" or tostring(value) -- not "-nan" on some platforms
    error(string.format("non-finite %s (%s) in %s, physical batch %d: %s", what, shown, where, k, first), 0)
  end

  -- A launched world of several ranks: before each collective, and once at the end, every rank says
  -- whether its run failed (dp.dist.all_gather of "" or the failure, as JSON), so that a rank that
  -- failed (out of memory, an error) ends every rank's run, each result naming it, rather than
  -- leaving the others waiting in a collective. A failure inside a collective cannot be voted on:
  -- that rank raises and the launcher stops the job (combine_ranks).
  local ws_launched = c.distributed and kind ~= "plan" and dp.dist.world_size() or 1
  local peer_failure, in_collective, voted = nil, false, false
  local PEER_FAILED = setmetatable({}, { __tostring = function() return "another rank failed" end })
  -- The first vote after the build carries each rank's model as built (built_model: model:config()
  -- flattened, a checkpoint's sizes included), which must agree as the configurations did; a
  -- difference is refused on every rank (`refuse`). An interrupt (SIGINT, held back while the
  -- world runs: see dp.interrupts) is voted as a failure, so every rank stops at the same vote.
  local built_model
  local function vote(failure)
    if ws_launched <= 1 then return nil end
    if not failure and dp.interrupts and dp.interrupts.pending() then
      failure = { message = "interrupted by SIGINT", interrupted = true }
    end
    voted = voted or failure ~= nil
    local text = failure and json.encode(failure) or ""
    if not failure and built_model then text, built_model = "=" .. json.encode(built_model), nil end
    local all = dp.dist.all_gather(text)
    for i, t in ipairs(all) do
      if t ~= "" and t:sub(1, 1) ~= "=" then return i - 1, json.decode(t) end
    end
    if all[1]:sub(1, 1) == "=" then -- this vote carried the models as built
      local tables = {}
      for i, t in ipairs(all) do tables[i] = t:sub(1, 1) == "=" and json.decode(t:sub(2)) or {} end
      local rank, path, theirs0, theirs = first_disagreement(tables)
      if rank then
        return rank, { refuse = true, message = string.format("distributed: ranks disagree on the model as built, "
          .. "model.%s: rank 0 has %s, rank %d has %s (every rank must load the same model)", path, theirs0, rank,
          theirs) }
      end
    end
  end
  local function check_peers()
    local who, f = vote(nil)
    if who then
      peer_failure = { rank = who, message = f.message, oom = f.oom, refuse = f.refuse, interrupted = f.interrupted }
      error(PEER_FAILED, 0)
    end
  end
  local function collective(fn)
    in_collective = true
    fn()
    in_collective = false
  end
  -- fsdp gathers each block inside the forward, backward and clip: the ranks vote before each of
  -- them, and a failure inside one is a failure inside a collective
  local fsdp = c.distributed and c.distributed.strategy == "fsdp"
  local function sharded(fn) if fsdp then collective(fn) else fn() end end

  -- data = {file =, order = "sequential"}: the windows the steps so far took (warm-up included)
  local sequential = type(c.data) == "table" and c.data.order == "sequential"
  local windows_taken = 0
  -- One logical step: the physical batches through forward, backward and clip, then noise and the
  -- optimizer. i is the timed iteration (nil during warm-up); step counts all steps from 0.
  local function iteration(i, step)
    local acc = { forward = 0, backward = 0, clip = 0, noise = 0, optimizer = 0, recompute = 0, comm = 0 }
    local iter = i or 0
    ctx.iter, ctx.warmup = iter, i == nil
    local plan = priv:next_step()
    step_peak = 0
    -- The physical batches: fixed-length windows of the model's batch, or the drawn samples
    -- split as Opacus's BatchMemoryManager splits them (group_by_length sorting them first),
    -- each padded to its longest sample (or a multiple of pad_to).
    local physical_batches = {}
    if samples then -- a rank: its slice of the step's samples, split and padded as one process's
      local ids, lens, own = plan.samples, {}, 0
      for _, nb in ipairs(plan.physical) do own = own + nb end
      if c.distributed then ids = table.move(plan.samples, plan.first + 1, plan.first + own, 1, {}) end
      for j, id in ipairs(ids) do lens[j] = samples.lengths[id] end
      for _, pb in ipairs(data.physical_batches(lens, physical, samples.spec)) do
        local bl, at, pick = {}, {}, {}
        for j = pb.first, pb.first + pb.size - 1 do
          local id = ids[pb.order and pb.order[j] or j]
          bl[#bl + 1], pick[#pick + 1] = samples.lengths[id], id - 1
          if samples.starts then at[#at + 1] = samples.starts[id] end
          if samples.tokens then at[#at + 1] = samples.tokens[id] end
        end
        physical_batches[#physical_batches + 1] = { size = pb.size, padded = pb.padded, lengths = bl,
                                                    samples = pick, starts = samples.starts and at or nil,
                                                    tokens = samples.tokens and at or nil }
      end
    else
      -- the step's samples in order, each physical batch the next ones (a rank: its slice's), so
      -- the physical batches of a logical batch hold different samples, as one process and the
      -- ranks of a distributed run hold them alike
      local at = plan.first or 0
      for _, nb in ipairs(plan.physical) do
        physical_batches[#physical_batches + 1] = { size = nb, padded = model:config().seq_len, first = at }
        at = at + nb
      end
    end
    local windows_before = windows_taken -- a file read in order: the windows the earlier steps took
    windows_taken = windows_taken + plan.logical_size
    -- fsdp: padding physical batches after the rank's own, as many as make every rank's count the
    -- largest any rank's slice needs (each gathers every block): one ignored token each, no
    -- sample anywhere (norms, the step's record, the callbacks)
    local own_batches = #physical_batches
    for _ = 1, plan.padding or 0 do physical_batches[#physical_batches + 1] = { padding = true } end
    for k, pb in ipairs(physical_batches) do
      local batch
      local call = i and not pb.padding -- the callbacks see the rank's own batches
      if pb.padding then
        batch = nil
      elseif samples then
        batch = dp.batch{ model = model, lengths = pb.lengths, padded = pb.padded, seed = c.seed,
                          samples = not (pb.starts or pb.tokens) and pb.samples or nil, starts = pb.starts,
                          tokens = pb.tokens, file = pb.starts and c.data.file or nil,
                          file_dtype = pb.starts and c.data.file_dtype or nil }
      elseif sequential then -- row r of the step: window windows_before + r of the file in order
        batch = dp.batch{ model = model, size = pb.size, order = "sequential", first = windows_before + pb.first,
                          file = c.data.file, file_dtype = c.data.file_dtype }
      else
        batch = dp.batch{ model = model, size = pb.size, seed = c.seed, step = step, first = pb.first,
                          file = c.data and c.data.file, file_dtype = c.data and c.data.file_dtype }
      end
      local first = i and k == 1 -- the default snapshots describe the first physical batch
      if first then snap("iter{i}_before_forward", i) end
      if call then callback("before_forward", i, k) end
      local loss
      if fsdp then check_peers() end
      phase("forward", iter, acc, function()
        sharded(function() if batch then loss = priv:forward(batch) else loss = priv:forward_padding() end end)
      end)
      if numeric and not dp.is_finite(loss) then nonfinite("loss", loss, step, i, k, { "parameters", "logits" }) end
      if first then snap("iter{i}_after_forward", i) end
      if call then callback("after_forward", i, k) end
      if fsdp then check_peers() end
      phase("backward", iter, acc, function() sharded(function() priv:backward() end) end)
      if first then snap("iter{i}_after_backward", i) end
      if call then callback("after_backward", i, k) end
      local norm -- the first per-sample gradient norm that is not finite (DP methods), or nil
      if fsdp then check_peers() end
      phase("clip", iter, acc, function() sharded(function() norm = priv:clip() end) end)
      if numeric and norm then
        nonfinite("per-sample gradient norm", norm, step, i, k, { "gradients", "parameters" })
      end
      if call then callback("after_clip", i, k) end
      if batch then dp.free_batch(batch) end
    end
    if c.distributed then
      check_peers()
      phase("comm", iter, acc, function() collective(function() priv:reduce_grads() end) end)
    end
    phase("noise", iter, acc, function() priv:noise() end)
    if i then callback("after_noise", i) end
    phase("optimizer", iter, acc, function() opt:step(); opt:zero_grad() end)
    if i and (samples or c.dp.poisson) then -- what the step drew and what it cost
      local phys = json.array()
      for k = 1, own_batches do
        phys[k] = { size = physical_batches[k].size, padded = physical_batches[k].padded }
      end
      st.steps[#st.steps + 1] = { step = step, logical_size = plan.logical_size, physical = phys,
                                  peak_bytes = step_peak }
    end
    -- zero2: every rank's updated slice to every rank; fsdp: nothing to gather (the spent gradient parts released)
    if c.distributed and (c.distributed.strategy == "zero2" or c.distributed.strategy == "fsdp") then
      check_peers()
      phase("comm", iter, acc, function() collective(function() priv:gather_params() end) end)
    end
    if i then
      snap("iter{i}_after_step", i)
      callback("after_step", i)
      local total = 0
      for _, p in ipairs(results.PHASES) do total = total + acc[p] end
      st.iter_ms[#st.iter_ms + 1] = total
      st.phase_ms[#st.phase_ms + 1] = acc
    end
  end

  local warmup_peak
  local saved -- the directory the trained model was written to (save), on the rank that wrote it
  -- true while the model, optimizer and DP wrapper are being built: what fails there, other than
  -- an allocation, is the configuration's fault and raises rather than becoming a result
  local building = false
  local function body()
    building = true
    local mcfg, load = experiment.model_options(c.model, kind)
    local wrap_physical -- nil: no batch given anywhere, the model's own
    local given = c.model.batch or mcfg.batch or c.dp.max_physical_batch_size
    if given or c.distributed then mcfg.batch, wrap_physical = physical_batch(c, given or 1, samples ~= nil) end
    mcfg.device = kind
    mcfg.seed = mcfg.seed or c.seed
    -- fsdp: the model built in parts for this rank (the launched one, or the plan's simulated one),
    -- one tensor whole at a time, so that the build never holds the whole model
    local parts = build_parts(c, kind)
    mcfg.parts = parts
    if load then -- the checkpoint's weights (what model_options allowed beside them are runtime choices)
      model = dp.model.load(c.model.path, { device = kind, seq_len = mcfg.seq_len, batch = mcfg.batch,
                                            dtype = mcfg.dtype, master_weights = mcfg.master_weights,
                                            seed = mcfg.seed, lora = mcfg.lora, checkpoint = mcfg.checkpoint,
                                            parts = parts, adapter = c.model.adapter })
    else
      model = dp.model(mcfg)
    end
    dtype = model:config().dtype
    ctx.model = model
    logical = c.model.batch or model:config().batch
    building = false
    snap("0_model_loaded")
    callback("model_loaded")
    building = true
    opt = build_optimizer(model, c.optimizer)
    ctx.optimizer = opt
    physical = wrap_physical or logical
    priv = dp.dp.wrap(model, opt, experiment.wrap_options(c, logical, physical))
    if c.distributed then priv:distribute(c.distributed) end
    if ws_launched > 1 then
      local mc = model:config()
      mc.parts = nil -- fsdp: this rank's own part of the world
      built_model = {}
      flatten_config(mc, nil, built_model)
    end
    building = false
    ctx.priv = priv
    if choices(priv, c) ~= "vanilla" then
      snap("1_wrapped_with_dp")
      callback("wrapped")
    end
    snap("2_optimizer_created")
    callback("optimizer_created")
    local step = 0
    for _ = 1, c.warmup do
      iteration(nil, step)
      step = step + 1
    end
    snap("3_after_warmup")
    warmup_peak = mem.stats().peak
    mem.reset_peak()
    dp.ledger_reset()
    if profiling then ops.enable(profiling) end
    callback("after_warmup")
    for i = 1, c.iters do
      iteration(i, step)
      step = step + 1
    end
    -- fsdp: the whole model again for a finished callback to read (its gather counted in the memory);
    -- without one, the blocks stay in parts and the run's memory is training's alone
    if c.distributed and c.distributed.strategy == "fsdp" and (c.on.finished or c.save) then
      check_peers()
      collective(function() priv:unshard() end)
    end
    -- save: the trained model as Hugging Face files, written by rank 0 alone (zero2's and ddp's
    -- parameters are whole on every rank after the step, fsdp's after the gather above)
    if c.save and (not c.distributed or dp.dist.rank() == 0) then
      -- the token ids: a checkpoint's own when its weights were read (m:save copies them); a model
      -- built from a shape (or a config.json, weights = "random") knows only the eos its documents
      -- end with (data with eos), else none (null, not transformers' defaults)
      local eos = not load and type(c.data) == "table" and c.data.eos or nil
      local known = math.type(eos) == "integer" and eos < model:config().vocab -- dp.documents bounds it too
      model:save(c.save, known and { eos_token_id = eos } or nil)
      saved = c.save
    end
    callback("finished")
  end

  local threads_before = dp.threads()
  if c.threads then dp.threads(c.threads) end
  local ok, err = xpcall(body, function(e)
    local message = dp.error_text(e)
    if in_callback and (message:find("attempt to yield across a C-call boundary", 1, true)
                        or message:find("attempt to yield from outside a coroutine", 1, true)) then
      message = string.format("on.%s yielded (coroutine.yield): a callback runs inside the experiment, which "
                              .. "must run to its end; yield after dp.experiment returns", in_callback)
    end
    return { message = message, traceback = debug.traceback(message, 2), building = building }
  end)
  local threads = dp.threads()
  dp.threads(threads_before)
  local stats = mem.stats()
  if c.memory_limit then mem.set_limit(0) end
  local clock_overflowed = device_model and dp.clock_overflowed()
  if device_model then dp.clock_model(false); plan.link(nil) end
  if clock_overflowed then
    release(priv)
    release(opt)
    release(model)
    dp.refuse(string.format("dpprof.experiment: device_model '%s': its modelled times pass what the clock holds "
                            .. "(about 126 years in this run): its curves (dtypes.%s.ops.*.log10_time_s) or peaks "
                            .. "claim more time than any run takes", tostring(device_model.name),
                            tostring(c.model.dtype or "f32")))
  end
  local host = dp.host_memory()
  local op_calls = profiling and c.trace and dp.profile.calls() or nil
  local profile = nil
  if profiling then
    if ok then profile = ops.finish(profiling, dp.ledger(), c.iters) else dp.profile.enable(false) end
  end

  if ws_launched > 1 and not in_collective then -- the vote that pairs with the others' next one
    if ok then
      local who, f = vote(nil) -- every rank at its end: did one fail after the last collective?
      if who then
        ok, peer_failure = false, { rank = who, message = f.message, oom = f.oom, refuse = f.refuse,
                                    interrupted = f.interrupted }
      end
    elseif not peer_failure then
      vote({ message = err.message, oom = dp.oom_details(err.message) })
    end
  end
  if peer_failure and (peer_failure.refuse or peer_failure.interrupted) then
    release(priv)
    release(opt)
    release(model)
    if peer_failure.refuse then dp.refuse("dpprof.experiment: " .. peer_failure.message) end
    if dp.interrupts then dp.interrupts.interrupt() end -- every rank ends as the interrupted one does (exit 130)
    error(string.format("interrupted by SIGINT (rank %d of %d was interrupted; every rank stopped at the same vote)",
                        peer_failure.rank, ws_launched), 0)
  end
  local status, oom = "ok", nil
  if not ok then
    if peer_failure then -- this rank stopped because another failed: that rank's failure, named
      err = { message = string.format("rank %d of %d: %s", peer_failure.rank, ws_launched, peer_failure.message),
              traceback = nil, building = false }
      oom = peer_failure.oom
    else
      oom = dp.oom_details(err.message)
      if ws_launched > 1 then err.message = string.format("rank %d of %d: %s", dp.dist.rank(), ws_launched, err.message) end
    end
    status = oom and "oom" or "error"
  end
  if not ok and not oom and err.building then
    -- a configuration the checks above let through (callbacks run in between are the script's)
    release(priv)
    release(opt)
    release(model)
    error("dpprof.experiment: " .. err.message, 2)
  end
  local model_config
  if model then
    model_config = model:config()
    model_config.batch = logical
    model_config.device = nil
    model_config.parts = nil -- an fsdp run's own (build_parts, from distributed), as device is the run's
    model_config.seed = nil
    if model_config.lora == nil then model_config.lora = json.null end
    if c.model.path then model_config.path, model_config.weights = c.model.path, c.model.weights or "file" end
    model_config.adapter = c.model.adapter
  end
  local config = {
    model = model_config or copy(c.model), method = c.method or (c.norms .. "+" .. c.clip),
    optimizer = copy(c.optimizer), dp = copy(c.dp), iters = c.iters, warmup = c.warmup,
    device = kind, seed = c.seed, device_model = device_model and copy(c.device_model or device_model.name) or nil,
    profile = c.profile,
    threads = c.threads,
    distributed = c.distributed and copy(c.distributed) or nil, -- as checked: the world size filled in
  }
  config.dp.max_physical_batch_size = physical and logical and math.min(physical, logical) or physical
  local method, norms, clip = (c.method or (c.norms .. "+" .. c.clip)), c.norms, c.clip
  if priv then method, norms, clip = choices(priv, c) end
  local privacy
  if priv and method ~= "vanilla" then privacy = privacy_of(priv, c) end
  local ledger = dp.ledger()
  local estimate, budget
  if device_model and dtype then
    local e = plan.estimate(ledger, device_model, dtype, c.distributed and c.distributed.world_size)
    local ops = json.array()
    for i, o in ipairs(e.ops) do ops[i] = o end
    estimate = { device_model = device_model.name, method = plan.METHOD, dtype = dtype,
                 peak_flops = device_model.peak_flops[dtype] + 0.0, bandwidth = device_model.bandwidth + 0.0,
                 label = "estimate: a roofline lower bound, not a measurement", ledger_ms = e.ms, ops = ops }
    local devmodel = require("dpprof.devmodel")
    if devmodel.calibrated(device_model, dtype) then -- which model, what fell back, how well it fitted
      local cal = device_model.calibration
      estimate.method = plan.CALIBRATED_METHOD
      estimate.label = "estimate: " .. devmodel.label(device_model, dtype) .. ", not a measurement"
      estimate.model_file = cal.file
      estimate.calibration = { device = cal.device, device_name = cal.device_name, commit = cal.commit, date = cal.date,
                               gap_s = cal.dtypes[dtype].gap_s }
      estimate.fallback_ops = json.array(devmodel.fallbacks(device_model, dtype, ledger))
      local fe = json.array()
      for op, e in pairs(devmodel.fit_errors(device_model, dtype)) do
        fe[#fe + 1] = { op = op, median = e.median, worst = e.worst, runs = e.runs }
      end
      table.sort(fe, function(a, b) return a.op < b.op end)
      estimate.fit_error = fe
    end
    if ok then
      budget = plan.budget(device_model, math.max(stats.peak, warmup_peak or 0))
    end
  end
  local snaps = mem.snapshots()
  for _, s in ipairs(snaps) do -- the script's own snapshots (ctx:snapshot), for the timelines
    if ctx._custom[snapshot_key(s)] then s.custom = true end
  end
  local r = results.assemble{
    name = c.name, status = status, message = not ok and err.message or nil,
    traceback = not ok and err.traceback or nil, oom = oom, config = config,
    method = method, norms = norms, clip = clip,
    predicted = kind == "plan",
    snapshots = snaps,
    memory = { stats = stats, warmup_peak_bytes = warmup_peak, modules = mem.modules(),
               timeline = mem.timeline(results.TIMELINE_POINTS), phases = st.phase_memory,
               host_peak_rss_bytes = host.peak_rss_bytes, host_peak_rss_since = rss_since,
               held_before_bytes = held_before },
    profile = profile,
    timing = st,
    estimate = estimate,
    plan = budget,
    ledger = ledger,
    layers = priv and priv:stats().layers or {},
    steps = (samples or c.dp.poisson) and ok and st.steps or nil,
    data = samples and samples.info or nil,
    environment = environment(kind, info, device_model, threads, load_start),
    privacy = privacy,
    extra = ctx.extra,
  }
  if not ok and #st.iter_ms == 0 then
    r.timing.iter_ms = json.array() -- no timed iteration ran: no averages to report
  end
  if c.distributed then experiment.combine_ranks(r, c.distributed, kind, in_collective) end
  if saved and ok then r.save_dir = saved end
  if c.trace then
    local trace = require("dpprof.trace")
    trace.write(c.trace, r, mem.events(), { initial = initial, op_calls = op_calls })
    r.trace_file = c.trace
  end
  release(priv)
  release(opt)
  release(model)
  ctx.model, ctx.optimizer, ctx.priv = nil, nil, nil
  model, opt, priv = nil, nil, nil
  collectgarbage()
  mem.end_hold()
  return r
end

return experiment
