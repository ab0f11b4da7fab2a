-- dpprof.experiment_result: what an experiment's result is assembled from, apart from the run
-- loop (dpprof.experiment_run): its privacy, the wrapper's choices, its environment, its ranks (a
-- launched world's agreement on the configuration, and the combined peaks) and the result
-- document itself. dpprof.experiment re-exports the public names (experiment.rank_summary, ...).
local dp = require("dpprof")
local json = dp.json
local results = require("dpprof.results")
local plan = require("dpprof.plan")
local devmodel = require("dpprof.devmodel")

local copy = dp.deep_copy
-- The methods' two choices each: the engine's one table (dpprof.dpsgd.PRESETS).
local PRESETS = dp.dpsgd.PRESETS

local experiment = {}

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
              blas = env.blas, host_load = load_start and results.host_load(load_start, dp.host_load()) }
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

-- For dpprof.experiment_run, which votes on the models as built and names the wrapper's choices.
experiment.choices = choices
experiment.flatten_config = flatten_config
experiment.first_disagreement = first_disagreement

---------------------------------------------------------------------------------------------
-- The result document (run: dpprof.experiment_run's state of the run that ended)

-- The key of a snapshot among the run's: its name and its exact time.
local function snapshot_key(s) return string.format("%s\0%a", s.name, s.timestamp) end
experiment.snapshot_key = snapshot_key -- for dpprof.experiment_run's ctx:snapshot

-- The model as the result records it: the built model's configuration less what is the run's
-- own (device, parts, seed); nil when no model was built.
local function recorded_model(run)
  local model, c = run.model, run.c
  if not model then return nil end
  local model_config = model:config()
  model_config.batch = run.logical
  model_config.device = nil
  model_config.parts = nil -- an fsdp run's own (build_parts, from distributed), as device is the run's
  model_config.seed = nil
  if model_config.lora == nil then model_config.lora = json.null end
  if c.model.path then model_config.path, model_config.weights = c.model.path, c.model.weights or "file" end
  model_config.adapter = c.model.adapter
  return model_config
end

-- The configuration the result records (its config).
local function recorded_config(run)
  local c, kind, device_model, physical, logical = run.c, run.kind, run.device_model, run.physical, run.logical
  local recorded = {
    model = recorded_model(run) or copy(c.model), method = c.method or (c.norms .. "+" .. c.clip),
    optimizer = copy(c.optimizer), dp = copy(c.dp), iters = c.iters, warmup = c.warmup,
    device = kind, seed = c.seed, device_model = device_model and copy(c.device_model or device_model.name) or nil,
    profile = c.profile,
    threads = c.threads,
    distributed = c.distributed and copy(c.distributed) or nil, -- as checked: the world size filled in
  }
  recorded.dp.max_physical_batch_size = physical and logical and math.min(physical, logical) or physical
  return recorded
end

-- On plan: the estimate of the ledger's ops (a roofline, or a calibrated device model's, with what
-- fell back and how well it fitted), and the budget of a run that finished; nil, nil otherwise.
local function estimate_of(run, ledger, stats, ok)
  local device_model, dtype, c = run.device_model, run.dtype, run.c
  local estimate, budget
  if device_model and dtype then
    local e = plan.estimate(ledger, device_model, dtype, c.distributed and c.distributed.world_size)
    local ops = json.array()
    for i, o in ipairs(e.ops) do ops[i] = o end
    estimate = { device_model = device_model.name, method = plan.METHOD, dtype = dtype,
                 peak_flops = device_model.peak_flops[dtype] + 0.0, bandwidth = device_model.bandwidth + 0.0,
                 label = "estimate: a roofline lower bound, not a measurement", ledger_ms = e.ms, ops = ops }
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
      budget = plan.budget(device_model, math.max(stats.peak, run.warmup_peak or 0))
    end
  end
  return estimate, budget
end

-- The result of a run that ended: o = {ok =, err =, status =, oom =, stats =, host =, profile =,
-- threads =} (dpprof.experiment_run's ending of it).
function experiment.document(run, o)
  local c, kind, priv, st, mem, samples = run.c, run.kind, run.priv, run.st, dp.memory, run.samples
  local ok, err = o.ok, o.err
  local recorded = recorded_config(run)
  local method, norms, clip = (c.method or (c.norms .. "+" .. c.clip)), c.norms, c.clip
  if priv then method, norms, clip = choices(priv, c) end
  local privacy
  if priv and method ~= "vanilla" then privacy = privacy_of(priv, c) end
  local ledger = dp.ledger()
  local estimate, budget = estimate_of(run, ledger, o.stats, ok)
  local snaps = mem.snapshots()
  for _, s in ipairs(snaps) do -- the script's own snapshots (ctx:snapshot), for the timelines
    if run.ctx._custom[snapshot_key(s)] then s.custom = true end
  end
  local r = results.assemble{
    name = c.name, status = o.status, message = not ok and err.message or nil,
    traceback = not ok and err.traceback or nil, oom = o.oom, config = recorded,
    method = method, norms = norms, clip = clip,
    predicted = kind == "plan",
    snapshots = snaps,
    memory = { stats = o.stats, warmup_peak_bytes = run.warmup_peak, modules = mem.modules(),
               timeline = mem.timeline(results.TIMELINE_POINTS), phases = st.phase_memory,
               host_peak_rss_bytes = o.host.peak_rss_bytes, host_peak_rss_since = run.rss_since,
               held_before_bytes = run.held_before },
    profile = o.profile,
    timing = st,
    estimate = estimate,
    plan = budget,
    ledger = ledger,
    layers = priv and priv:stats().layers or {},
    clipping = priv and priv:stats().clipping or nil,
    steps = (samples or c.dp.poisson) and ok and st.steps or nil,
    data = samples and samples.info or nil,
    environment = environment(kind, run.info, run.device_model, o.threads, run.load_start),
    privacy = privacy,
    extra = run.ctx.extra,
  }
  if not ok and #st.iter_ms == 0 then
    r.timing.iter_ms = json.array() -- no timed iteration ran: no averages to report
  end
  return r
end

return experiment
