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
-- what dpprof.model and dpprof.dpsgd.wrap would refuse (checked without a device), including a
-- sample_rate x dataset_size that disagrees with the batch; what only building can tell (bf16 on
-- the CPU) raises too. The configuration's keys, defaults and checks are dpprof.config's
-- (lua/dpprof/config.lua); experiment.config is its config.check.
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
local config = require("dpprof.config")
local results = require("dpprof.results")
local plan = require("dpprof.plan")
local ops = require("dpprof.ops")
local data = require("dpprof.data")

local experiment = {}

-- The configuration (its keys, defaults and checks) is dpprof.config's; its public names stay
-- reachable here, where scripts and the other modules have always found them.
experiment.config = config.check
experiment.check_recorded = config.check_recorded
experiment.model_options = config.model_options
experiment.wrap_options = config.wrap_options
experiment.DEFAULTS = config.DEFAULTS
experiment.DEFAULT_SNAPSHOTS = config.DEFAULT_SNAPSHOTS
experiment.PROFILES = config.PROFILES
experiment.DEVICES = config.DEVICES
experiment.MAX_WORLD = config.MAX_WORLD
experiment.SAVE_FILES = config.SAVE_FILES

local copy = dp.deep_copy
-- The methods' two choices each: the engine's one table (dpprof.dpsgd.PRESETS).
local PRESETS = dp.dpsgd.PRESETS

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
  local c = config.check(cfg_in)
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
  for _, api in ipairs({ "model", "batch", "free_batch", "optim", "dpsgd" }) do
    if dp[api] == nil then error("dpprof.experiment: this dpprof has no dpprof." .. api .. " (model, optimizer and DP bindings)", 2) end
  end
  local mem = dp.memory
  -- resolves "auto" and makes the device current; a device that cannot be had is the caller's
  -- configuration problem, reported at the caller's line
  local dok, info = pcall(dp.device, c.device)
  if not dok then error("dpprof.experiment: " .. dp.error_text(info), 2) end
  local kind = info.kind
  -- what else the host ran meanwhile (environment.host_load): not for a plan run, whose times
  -- are modelled (and which dp.fit and dp.risk make by the thousand)
  local load_start = kind ~= "plan" and dp.host_load() or nil
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
  if mem.stats().held_total > 0 then -- tensors nothing refers to any more are not the script's: freed, they leave it
    collectgarbage()
    collectgarbage()
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
  local samples = config.samples_of(c, c.model.seq_len, c.dp.dataset_size)
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
    local mcfg, load = config.model_options(c.model, kind)
    local wrap_physical -- nil: no batch given anywhere, the model's own
    local given = c.model.batch or mcfg.batch or c.dp.max_physical_batch_size
    if given or c.distributed then mcfg.batch, wrap_physical = config.physical_batch(c, given or 1, samples ~= nil) end
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
    priv = dp.dpsgd.wrap(model, opt, config.wrap_options(c, logical, physical))
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
  local recorded = {
    model = model_config or copy(c.model), method = c.method or (c.norms .. "+" .. c.clip),
    optimizer = copy(c.optimizer), dp = copy(c.dp), iters = c.iters, warmup = c.warmup,
    device = kind, seed = c.seed, device_model = device_model and copy(c.device_model or device_model.name) or nil,
    profile = c.profile,
    threads = c.threads,
    distributed = c.distributed and copy(c.distributed) or nil, -- as checked: the world size filled in
  }
  recorded.dp.max_physical_batch_size = physical and logical and math.min(physical, logical) or physical
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
    traceback = not ok and err.traceback or nil, oom = oom, config = recorded,
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
  return r -- run_held ends the hold
end

return experiment
