-- dpprof.config: an experiment's configuration, checked and completed (dp.experiment's keys:
-- lua/dpprof/experiment.lua's header says what each one means). config.check(cfg, recorded)
-- refuses unknown keys, wrong types and what dpprof.model and dpprof.dpsgd.wrap would refuse
-- (checked without a device), fills in the defaults (config.DEFAULTS: the engine's DP options,
-- dpprof.dpsgd.DEFAULTS, and an experiment's own) and returns the normalised copy a run uses and a
-- result records; config.check_recorded checks a result's recorded `config` the same way.
--
-- Also the reckonings a check and the run share: a checkpoint's model options (model_options),
-- the samples of a data spec of their own lengths (samples_of) and the data set they make
-- (size_data_set), a rank's slice of a batch (rank_batch), the physical batches (physical_batch)
-- and the wrapper's options (wrap_options). dpprof.experiment re-exports the public names
-- (experiment.config, check_recorded, model_options, wrap_options, DEFAULTS, DEFAULT_SNAPSHOTS,
-- PROFILES, DEVICES, MAX_WORLD, SAVE_FILES); its messages are the experiment's ("dpprof.experiment: ...").
--
-- It needs no device, and requires neither dpprof.experiment nor dpprof.results (which checks a
-- result's config with it): no require cycle (tests/deps/check_lua_deps.lua).
local dp = require("dpprof")
local json = dp.json
local plan = require("dpprof.plan")
local data = require("dpprof.data")
local text = require("dpprof.text")
local options = require("dpprof.options")

local config = {}

-- The keys an experiment's top level takes: the schema's experiment and device sections (dpprof.options).
local TOP_KEYS = options.keys("experiment")
for _, k in ipairs(options.keys("device")) do TOP_KEYS[#TOP_KEYS + 1] = k end
config.PROFILES = dp.results_schema.choices.profiles -- "none", "ops"
-- The devices a configuration may name (the engine's, engine/core/device.c); cuda only where this
-- dpprof was built with it.
config.DEVICES = dp.DEVICES
-- The list `from` in order, less the keys of set `without`, then the keys `plus`.
local function keys_of(from, without, plus)
  local out = {}
  for _, k in ipairs(from) do if not without[k] then out[#out + 1] = k end end
  for _, k in ipairs(plus) do out[#out + 1] = k end
  return out
end
-- A model's keys: dpprof.model's (the engine's one list), less device (an experiment's own, at
-- the top) and parts (an fsdp run's own, from distributed: experiment.lua's build_parts), plus path and weights (a
-- checkpoint's directory, and whether its weights are read) and adapter (a PEFT adapter folder for it):
-- the schema's checkpoint section.
local EXPERIMENT_OWN = { device = true, parts = true }
local MODEL_KEYS = keys_of(dp.model.KEYS, EXPERIMENT_OWN, options.keys("checkpoint"))
-- What a model read with its weights from a checkpoint may set besides the file: dpprof.model.load's
-- options (its one list), less device and parts.
local RUNTIME_KEYS = {}
for _, k in ipairs(keys_of(dp.model.LOAD_KEYS, EXPERIMENT_OWN, {})) do RUNTIME_KEYS[k] = true end
-- The dp keys: the schema's dp section less the rows an experiment sets elsewhere (method, norms
-- and clip and the run's seed at the top; expected_batch_size is model.batch: wrap_options); its
-- accountant (an experiment's own row) among them.
local DP_KEYS = options.keys("dp", { set_elsewhere = false })
-- Each optimizer's keys: the schema's optimizer rows it takes (name among them).
local OPTIMIZER_KEYS = { adamw = options.keys("optimizer", { adamw = true }), sgd = options.keys("optimizer", { sgd = true }) }
-- The data keys: dpprof.data's grammar (its one list).
local DATA_KEYS = data.KEYS
local CALLBACKS = { "model_loaded", "wrapped", "optimizer_created", "after_warmup", "before_forward",
                    "after_forward", "after_backward", "after_clip", "after_noise", "after_step", "finished" }
-- The methods by name: the engine's one list (dpprof.dpsgd.METHODS).
local METHODS = dp.dpsgd.METHODS

-- The default snapshot schedule, in order; {i} is the timed iteration (1-based).
config.DEFAULT_SNAPSHOTS = { "0_model_loaded", "1_wrapped_with_dp", "2_optimizer_created", "3_after_warmup",
                                 "iter{i}_before_forward", "iter{i}_after_forward", "iter{i}_after_backward",
                                 "iter{i}_after_step" }

-- What an experiment takes when not told. The DP options wrap also has (C, sigma, delta, Poisson
-- sampling, the seed, the accountant) are the engine's (dpprof.dpsgd.DEFAULTS); the sample rate,
-- which the engine derives from a dataset size instead, and the rest are an experiment's own.
local ENGINE = dp.dpsgd.DEFAULTS
config.DEFAULTS = {
  method = "ghost",
  optimizer = { name = "adamw", lr = 1e-4, weight_decay = 0.01 },
  dp = { max_grad_norm = ENGINE.max_grad_norm, noise_multiplier = ENGINE.noise_multiplier, sample_rate = 0.01,
         delta = ENGINE.delta, poisson = ENGINE.poisson, accountant = ENGINE.accountant, clipping = ENGINE.clipping,
         clip_fn = ENGINE.clip_fn },
  iters = 3, warmup = 2, device = "auto", seed = ENGINE.seed, snapshots = "default",
}

local function check_keys(t, valid, where)
  if type(t) ~= "table" then error(string.format("%s must be a table, got %s", where, type(t)), 4) end
  local k = dp.unknown_key(t, valid)
  if k ~= nil then
    error(string.format("%s: unknown key '%s' (valid: %s)", where, tostring(k), table.concat(valid, ", ")), 4)
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
local MODEL_INT_KEYS = options.of_type("model", { "integer" })
-- The integer rows an experiment checks itself (its top level's and dp's, less those set
-- elsewhere), each with its minimum and its name in a refusal.
local INT_ROWS = {}
for _, section in ipairs({ "experiment", "device", "dp" }) do
  for _, k in ipairs(options.of_type(section, { "integer" })) do
    local row = options.row(section, k)
    if not row.set_elsewhere then
      INT_ROWS[#INT_ROWS + 1] = { key = k, min = row.min, dp = section == "dp",
                                  where = "dpprof.experiment: " .. (section == "dp" and "dp." or "") .. k }
    end
  end
end

-- The dp.model options of model spec m: m itself, or with path, DIR/config.json's with m's keys
-- over them. Also whether the weights come from the files (path, weights ~= "random", not plan).
function config.model_options(m, device)
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

-- The first id of the samples' id lists at or past vocab: sample i, position j, the id; nil when
-- none is (or vocab is not known).
local function first_outside(lists, vocab)
  if math.type(vocab) ~= "integer" then return nil end
  for i, ids in ipairs(lists) do
    for j, id in ipairs(ids) do
      if id >= vocab then return i, j, id end
    end
  end
end
function config.samples_of(c, seq_len, dataset_size, vocab)
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
  elseif source == "dataset" then
    s = config.dataset_samples(c, spec, seq_len, vocab)
  else
    local lengths, info = data.lengths(spec, { seq_len = seq_len, dataset_size = dataset_size, seed = c.seed })
    s = { lengths = lengths, info = { source = source, samples = #lengths, cut = info.cut, longest = info.longest } }
    if source == "tokens" then -- the samples' own ids, each cut to its length by dp.batch
      s.tokens = spec.tokens
      local i, j, id = first_outside(s.tokens, vocab)
      if i then
        dp.refuse(string.format("dpprof.experiment: data.tokens[%d][%d] is %d, outside the model's vocabulary "
                                .. "[0, %d)", i, j, id, vocab))
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

-- data.dataset's samples: its records tokenized by data.tokenizer or the model's own (model.path),
-- each cut to seq_len (or refused, as too_long says); a record whose loss-carrying tokens all lie
-- past seq_len (a prompt longer than it) cannot train and is left out, counted in info.no_loss.
function config.dataset_samples(c, spec, seq_len, vocab)
  local tok = spec.tokenizer or (type(c.model) == "table" and c.model.path) or nil
  if not tok then
    dp.refuse("dpprof.experiment: data.dataset needs a tokenizer: data.tokenizer, or model.path (a checkpoint "
              .. "folder with its tokenizer.json)")
  end
  local ids, loss, info = text.samples(spec, { tokenizer = tok, progress = true })
  local t = text.tokenizer(tok)
  local bi, bj, bid = first_outside(t.vocab_size > (vocab or math.huge) and ids or {}, vocab)
  if bi then
    dp.refuse(string.format("dpprof.experiment: data.dataset '%s' line %d: token %d is id %d, outside the model's "
                            .. "vocabulary [0, %d) (the tokenizer has %d ids: is it the model's?)", spec.dataset,
                            info.lines[bi], bj, bid, vocab, t.vocab_size))
  end
  local all = {}
  for i, l in ipairs(ids) do all[i] = #l - 1 end
  local cut, longest = data.cut_to(all, seq_len, spec.too_long, function(i)
    return string.format("sample %d (data.dataset '%s' line %d)", i, spec.dataset, info.lines[i])
  end)
  local lengths, tokens, masks, no_loss = {}, {}, {}, 0
  for i, n in ipairs(all) do
    if loss[i] and not loss[i]:sub(2, n + 1):find("\1", 1, true) then
      no_loss = no_loss + 1
    else
      lengths[#lengths + 1], tokens[#tokens + 1], masks[#masks + 1] = n, ids[i], loss[i]
    end
  end
  if #lengths == 0 then
    dp.refuse(string.format("dpprof.experiment: data.dataset '%s': no record has a token carrying loss within "
                            .. "seq_len %d", spec.dataset, seq_len))
  end
  local any_mask = false
  for _, m in ipairs(masks) do any_mask = any_mask or m ~= false end
  return { lengths = lengths, tokens = tokens, loss = any_mask and masks or nil,
           info = { source = "dataset", samples = #lengths, cut = cut, longest = longest, records = info.records,
                    bad = info.bad, bad_records = info.bad_list, no_loss = no_loss, tokens = info.tokens,
                    tokenizer = tok, format = info.format } }
end

-- Samples of their own lengths make the data set: its size is theirs (a distribution draws
-- dp.dataset_size of them), and with a sample rate but no model.batch, the expected logical batch
-- is Opacus's int(q N). A sample rate that expects no sample a step is refused (every batch empty).
function config.size_data_set(c, cfg, mcfg)
  local s = config.samples_of(c, mcfg.seq_len, c.dp.dataset_size, mcfg.vocab)
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
config.MAX_WORLD = dp.dist.MAX_WORLD -- ranks a world may have (engine/dp/dpsgd_dist.h: DPSGD_MAX_WORLD)
-- The table's keys, types, strategy, sizes and rank are the engine's to check (dp.dist.check,
-- dpsgd_dist_config_check and dpsgd_dist_place), the one validator priv:distribute and
-- dp.model's `distributed` use too.
local function check_distributed(c, recorded)
  local d = c.distributed
  if d == nil then return end
  local how = recorded == true and "recorded" or recorded == "launch" and "launch" or "run"
  local ws, rank = dp.dist.check(d, tostring(c.device), how, "dpprof.experiment")
  if not ws then dp.refuse(rank) end
  d.strategy = d.strategy or "ddp" -- data parallel unless said
  d.world_size = ws
  if c.device == "plan" then d.rank = rank end
end

-- The most samples a rank holds of a fixed logical batch (the whole batch without `distributed`,
-- or with Poisson sampling, whose slices vary): rank r holds samples floor(n r / N) to
-- floor(n (r + 1) / N) - 1 of the n (the engine's slice, as Poisson batches are sliced), so
-- ceil(n / N) at most when N does not divide n.
function config.rank_batch(c, logical)
  local d = c.distributed
  if not d or c.dp.poisson then return logical end
  return (logical + d.world_size - 1) // d.world_size
end

-- The physical batches of a logical batch of `logical` samples: the batch the model is built with
-- and the wrapper's max_physical_batch_size. A rank's physical batches hold at most its slice; a
-- fixed batch never needs a physical batch above it, while a Poisson one of samples' own lengths
-- (own_lengths) may draw more than its expected size, split at max_physical_batch_size (as
-- Opacus's). The one reckoning of check_model_and_dp and the run's body.
function config.physical_batch(c, logical, own_lengths)
  local physical = c.dp.max_physical_batch_size or logical
  if c.distributed then physical = math.min(physical, config.rank_batch(c, logical)) end
  local model_batch = physical
  if not (own_lengths and c.dp.poisson) then physical = math.min(physical, logical) end
  return model_batch, physical
end

-- The options dpprof.dpsgd.wrap is given for configuration c (config.check's), of a logical batch
-- of logical_batch samples split into physical batches of at most physical_batch.
function config.wrap_options(c, logical_batch, physical_batch)
  local w = { max_grad_norm = c.dp.max_grad_norm, noise_multiplier = c.dp.noise_multiplier,
              sample_rate = c.dp.sample_rate, dataset_size = c.dp.dataset_size,
              expected_batch_size = logical_batch, max_physical_batch_size = physical_batch,
              poisson = c.dp.poisson, seed = c.seed, delta = c.dp.delta, flash_impl = c.dp.flash_impl,
              clipping = c.dp.clipping, clip_fn = c.dp.clip_fn, gamma = c.dp.gamma, bounds = c.dp.bounds,
              groups = c.dp.groups, adaptive = c.dp.adaptive }
  if c.method then w.method = c.method else w.norms, w.clip = c.norms, c.clip end
  return w
end

-- The checks dpprof.model and dpprof.dpsgd.wrap make of the model and DP options, made here without
-- a device, so a configuration that cannot run raises before anything is built (and a sweep
-- refuses it before its first point). The batch the model is built with is the physical one.
local function check_model_and_dp(c, cfg)
  local okm, mcfg = pcall(config.model_options, c.model, c.device)
  if not okm then error(dp.error_text(mcfg), 4) end
  config.size_data_set(c, cfg, mcfg)
  local logical = c.model.batch or 1
  local physical
  mcfg.batch, physical = config.physical_batch(c, logical, SAMPLES[c] ~= nil)
  local ok, err = pcall(dp.model.check, mcfg)
  if not ok then error("dpprof.experiment: " .. dp.error_text(err), 4) end
  ok, err = pcall(dp.dpsgd.check, config.wrap_options(c, logical, physical), mcfg.batch)
  if not ok then error("dpprof.experiment: " .. dp.error_text(err), 4) end
end

-- The files save = DIR writes (or removes: a LoRA model's adapter files, absent without LoRA).
config.SAVE_FILES = { "config.json", "generation_config.json", "model.safetensors", "adapter_model.safetensors",
                          "adapter_config.json" }

-- The device (known, and built in unless the config is a recorded one) and the method (a known name,
-- or norms= with clip=). Errors point at the experiment's caller, as config.check's do.
local function check_device_and_method(c, cfg, recorded)
  local known_device = false
  for _, d in ipairs(config.DEVICES) do known_device = known_device or d == c.device end
  if not known_device then
    error(string.format("dpprof.experiment: unknown device '%s' (valid: %s)", tostring(c.device),
                        table.concat(config.DEVICES, ", ")), 4)
  end
  if c.device == "cuda" and not dp.cuda_compiled and recorded ~= true then
    error("dpprof.experiment: device 'cuda': this dpprof was built without the CUDA backend (valid here: cpu, plan, "
          .. "auto)", 4)
  end
  if cfg.norms or cfg.clip then
    if cfg.method then error("dpprof.experiment: give either method or norms/clip, not both", 4) end
    if not (cfg.norms and cfg.clip) then
      error(string.format("dpprof.experiment: norms= and clip= go together (norms: %s; clip: %s), or give a method",
                          table.concat(dp.dpsgd.NORMS, ", "), table.concat(dp.dpsgd.CLIPS, ", ")), 4)
    end
    c.method = nil
  else
    local known = false
    for _, m in ipairs(METHODS) do known = known or m == c.method end
    if not known then
      error(string.format("dpprof.experiment: unknown method '%s' (valid: %s; or norms= and clip=)",
                          tostring(c.method), table.concat(METHODS, ", ")), 4)
    end
  end
end

-- dp.accountant: one of the engine's accountants.
local function check_accountant(c)
  local known = false
  for _, a in ipairs(dp.privacy.accountants) do known = known or a == c.dp.accountant end
  if not known then
    error(string.format("dpprof.experiment: dp.accountant: unknown accountant '%s' (valid: %s)", tostring(c.dp.accountant),
                        table.concat(dp.privacy.accountants, ", ")), 4)
  end
end

-- The run's hooks and outputs: callbacks are functions, the snapshot list, the profile, the trace file.
local function check_hooks_and_outputs(c)
  for k, f in pairs(c.on) do
    if type(f) ~= "function" then error(string.format("dpprof.experiment: on.%s must be a function", k), 4) end
  end
  local s = c.snapshots
  if s ~= "default" and s ~= "none" and type(s) ~= "table" then
    error("dpprof.experiment: snapshots must be \"default\", \"none\" or a list of snapshot names "
          .. "(patterns such as \"iter{i}_after_backward\" allowed)", 4)
  end
  if c.profile ~= nil and c.profile ~= "none" and c.profile ~= "ops" then
    error(string.format("dpprof.experiment: unknown profile '%s' (valid: %s)", tostring(c.profile),
                        table.concat(config.PROFILES, ", ")), 4)
  end
  if c.trace ~= nil and type(c.trace) ~= "string" then
    error("dpprof.experiment: trace must be the path of the trace file to write", 4)
  end
  if c.trace ~= nil then -- refused now, not after the run: trace="/dev/full" would replace the device
    local ok, why = dp.writable(c.trace)
    if not ok then error("dpprof.experiment: trace: " .. why, 4) end
  end
end

-- save: a directory every file of the trained model's save can be written to, refused now rather
-- than after the run.
local function check_save(c)
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
    for _, name in ipairs(exists and config.SAVE_FILES or { "" }) do
      local ok, why = dp.writable(exists and (c.save .. "/" .. name) or c.save)
      if not ok then dp.refuse("dpprof.experiment: save: " .. why) end
    end
end

-- device_model: plan runs only, a model that loads and that models the run's dtype.
local function check_device_model(c)
    if c.device ~= "plan" then
      error(string.format("dpprof.experiment: device_model applies to device=\"plan\" only (device is '%s')",
                          tostring(c.device)), 4)
    end
    local ok, err = pcall(plan.device_model, c.device_model)
    if not ok then error("dpprof.experiment: " .. tostring(err), 4) end
    local dtype = type(c.model) == "table" and c.model.dtype or "f32"
    if type(dtype) == "string" and not err.peak_flops[dtype] then
      local have = {}
      for dt in pairs(err.peak_flops) do have[#have + 1] = dt end
      table.sort(have)
      error(string.format("dpprof.experiment: device_model '%s' has no %s (it models: %s)", err.name, dtype,
                          table.concat(have, ", ")), 4)
    end
end

-- Checks cfg's keys and fills in defaults; returns the normalised copy. Raises on a bad key or value.
-- `recorded`: cfg is a result's record, checked for what any build would refuse (a result made with
-- CUDA elsewhere is valid on a CPU-only build, which cannot run it); "launch": cfg will run under a
-- launcher of its own world_size ranks, not in this process's world (dpprof.slurm's N-task points).
function config.check(cfg, recorded)
  check_keys(cfg, TOP_KEYS, "dpprof.experiment")
  local c = with_defaults(cfg, config.DEFAULTS)
  c.model = copy(cfg.model or {})
  check_keys(c.model, MODEL_KEYS, "dpprof.experiment: model")
  check_device_and_method(c, cfg, recorded)
  c.optimizer = with_defaults(cfg.optimizer, cfg.optimizer and cfg.optimizer.name and cfg.optimizer.name ~= "adamw"
                              and { name = cfg.optimizer.name, lr = 1e-4 } or config.DEFAULTS.optimizer)
  local okeys = OPTIMIZER_KEYS[c.optimizer.name]
  if not okeys then
    error(string.format("dpprof.experiment: unknown optimizer '%s' (valid: adamw, sgd)", tostring(c.optimizer.name)), 3)
  end
  check_keys(c.optimizer, okeys, "dpprof.experiment: optimizer")
  c.dp = with_defaults(cfg.dp, config.DEFAULTS.dp)
  check_keys(c.dp, DP_KEYS, "dpprof.experiment: dp")
  check_accountant(c)
  -- the integers of the top level and of dp, each at least its schema row's min
  for _, r in ipairs(INT_ROWS) do check_int(r.dp and c.dp or c, r.key, r.where, r.min) end
  if c.threads and c.threads > dp.MAX_THREADS then -- dp.threads's range, refused here: at the run it came
    -- after the plan clock was modelled, and left it so for the runs after
    error(string.format("dpprof.experiment: threads must be an integer from 1 to %d, got %d", dp.MAX_THREADS,
                        c.threads), 3)
  end
  check_int(c.model, "batch", "dpprof.experiment: model.batch", options.row("model", "batch").min)
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
  check_hooks_and_outputs(c)
  if c.save ~= nil then check_save(c) end
  if c.device_model ~= nil then check_device_model(c) end
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
-- config.check checks a script's: raises its error (method "x", layers 0, ...) for what a run
-- would have refused. JSON nulls count as absent; a checkpoint's model is checked from the fields
-- recorded, not from its directory (which the reader may not have).
function config.check_recorded(rc)
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
  return config.check(c, true)
end

return config
