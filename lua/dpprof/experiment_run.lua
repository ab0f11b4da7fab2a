-- dpprof.experiment_run: the run loop of an experiment (dpprof.experiment.run): the phases of its
-- iterations with their snapshots and callbacks, the build, the warm-up and timed iterations, the
-- save. Its start and end (device, memory, state, outcome) are dpprof.experiment_start's, a
-- launched world's votes dpprof.experiment_world's, the result dpprof.experiment_result's. The
-- state of one run is a table (`run`) its functions share: what the run's closures held.
local dp = require("dpprof")
local json = dp.json
local config = require("dpprof.config")
local results = require("dpprof.results")
local ops = require("dpprof.ops")
local data = require("dpprof.data")
local trace = require("dpprof.trace")
local result = require("dpprof.experiment_result")
local start = require("dpprof.experiment_start")
local world = require("dpprof.experiment_world")

local choices = result.choices
local release_all, build_optimizer, build_parts = start.release_all, start.build_optimizer, start.build_parts
local check_peers, collective, sharded = world.check_peers, world.collective, world.sharded

local experiment_run = {}

---------------------------------------------------------------------------------------------
-- Snapshots, callbacks and phases

local function snap(run, pattern, i)
  local name = i and pattern:gsub("{i}", tostring(i)) or pattern
  if run.take(pattern, name) then dp.memory.snapshot(name) end
end

-- The script's callbacks cannot yield: a coroutine.yield in one would abandon the run with the
-- modelled clock, per-op profiling and the thread count left as the run set them (later runs
-- in the process then reported 0 ms steps); it is an error result naming the callback instead.
local function callback(run, name, i, k)
  local f = run.c.on[name]
  if f then
    run.in_callback = name
    dp.call_unyielding(f, run.ctx, i, k)
    run.in_callback = nil
  end
end

-- What was live at a phase's peak and at its end, in the timed iterations: the instance of the
-- phase with the highest peak (a phase runs once per physical batch).
local function record_phase_memory(run, name)
  local mem = dp.memory
  local w, s = mem.window(), mem.stats()
  local prev = run.st.phase_memory[name]
  if prev and prev.peak_bytes >= w.peak then return end
  run.st.phase_memory[name] = { peak_bytes = w.peak, live_at_peak = w.live_at_peak, end_bytes = s.allocated,
                                live_at_end = s.current }
end

-- Times fn as one phase of iteration iter (0 = warm-up); adds to acc. On plan the clock is the
-- modelled one, so the time is the roofline estimate of the ops the phase ran.
-- Activation checkpointing: what the phase spent recomputing blocks (the model's recompute log,
-- on the same clock) moves from the phase to `recompute`, with a span of its own for each
-- recomputation, nested in the phase's; so does the op time of the profile (its "recompute:"
-- ops). Memory by phase keeps the phase as bracketed, recomputation included.
local function phase(run, name, iter, acc, fn)
  local mem, model, st, profiling = dp.memory, run.model, run.st, run.profiling
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
    run.step_peak = math.max(run.step_peak, mem.window().peak)
    record_phase_memory(run, name)
    if token then ops.phase_end(profiling, name, token, ms - recompute_ms, recompute_ms) end
  end
end

-- Non-finite numbers end the run as an error (a NaN loss reported as ok was wrong data): every
-- step's loss and, for DP methods, its per-sample gradient norms are checked (figures already on
-- the host); when one is not finite, the model's tensors are searched for the first holding a
-- NaN or an infinity, which the error names. An update that makes the weights non-finite shows
-- in the next step's loss. Not on plan, which computes no values.
local function nonfinite(run, what, value, step, i, k, search)
  local name, tkind = run.model:nonfinite(table.unpack(search))
  local where = i and string.format("timed iteration %d", i) or string.format("warm-up step %d", step + 1)
  local first = name and string.format("the first non-finite tensor is the %s '%s'", tkind, name)
    or string.format("no %s holds one", table.concat(search, " or "))
  local shown = value ~= value and "nan" or tostring(value) -- not "-nan" on some platforms
  error(string.format("non-finite %s (%s) in %s, physical batch %d: %s", what, shown, where, k, first), 0)
end

---------------------------------------------------------------------------------------------
-- One logical step

-- The physical batches of a step's plan (priv:next_step()): fixed-length windows of the model's
-- batch, or the drawn samples split as Opacus's BatchMemoryManager splits them (group_by_length
-- sorting them first), each padded to its longest sample (or a multiple of pad_to).
local function physical_batches_of(run, plan)
  local physical_batches, samples, c = {}, run.samples, run.c
  if samples then -- a rank: its slice of the step's samples, split and padded as one process's
    local ids, lens, own = plan.samples, {}, 0
    for _, nb in ipairs(plan.physical) do own = own + nb end
    if c.distributed then ids = table.move(plan.samples, plan.first + 1, plan.first + own, 1, {}) end
    for j, id in ipairs(ids) do lens[j] = samples.lengths[id] end
    for _, pb in ipairs(data.physical_batches(lens, run.physical, samples.spec)) do
      local bl, at, pick, masks = {}, {}, {}, {}
      for j = pb.first, pb.first + pb.size - 1 do
        local id = ids[pb.order and pb.order[j] or j]
        bl[#bl + 1], pick[#pick + 1] = samples.lengths[id], id - 1
        if samples.starts then at[#at + 1] = samples.starts[id] end
        if samples.tokens then at[#at + 1] = samples.tokens[id] end
        if samples.loss then masks[#masks + 1] = samples.loss[id] end
      end
      physical_batches[#physical_batches + 1] = { size = pb.size, padded = pb.padded, lengths = bl,
                                                  samples = pick, starts = samples.starts and at or nil,
                                                  tokens = samples.tokens and at or nil,
                                                  loss = samples.loss and masks or nil }
    end
  else
    -- the step's samples in order, each physical batch the next ones (a rank: its slice's), so
    -- the physical batches of a logical batch hold different samples, as one process and the
    -- ranks of a distributed run hold them alike
    local at = plan.first or 0
    for _, nb in ipairs(plan.physical) do
      physical_batches[#physical_batches + 1] = { size = nb, padded = run.model:config().seq_len, first = at }
      at = at + nb
    end
  end
  return physical_batches
end

-- The batch of physical batch pb (nil for an fsdp padding one); windows_before: the windows a
-- file read in order gave the earlier steps.
local function batch_of(run, pb, step, windows_before)
  local c, model, samples = run.c, run.model, run.samples
  if pb.padding then
    return nil
  elseif samples then
    return dp.batch{ model = model, lengths = pb.lengths, padded = pb.padded, seed = c.seed,
                     samples = not (pb.starts or pb.tokens) and pb.samples or nil, starts = pb.starts,
                     tokens = pb.tokens, loss = pb.loss, file = pb.starts and c.data.file or nil,
                     file_dtype = pb.starts and c.data.file_dtype or nil }
  elseif run.sequential then -- row r of the step: window windows_before + r of the file in order
    return dp.batch{ model = model, size = pb.size, order = "sequential", first = windows_before + pb.first,
                     file = c.data.file, file_dtype = c.data.file_dtype }
  end
  return dp.batch{ model = model, size = pb.size, seed = c.seed, step = step, first = pb.first,
                   file = c.data and c.data.file, file_dtype = c.data and c.data.file_dtype }
end

-- Physical batch k (pb) of a step through forward, backward and clip; acc: the step's phase times.
local function physical_step(run, pb, k, i, step, acc, windows_before)
  local priv, iter, fsdp = run.priv, i or 0, run.fsdp
  local batch = batch_of(run, pb, step, windows_before)
  local call = i and not pb.padding -- the callbacks see the rank's own batches
  local first = i and k == 1 -- the default snapshots describe the first physical batch
  if first then snap(run, "iter{i}_before_forward", i) end
  if call then callback(run, "before_forward", i, k) end
  local loss
  if fsdp then check_peers(run) end
  phase(run, "forward", iter, acc, function()
    sharded(run, function() if batch then loss = priv:forward(batch) else loss = priv:forward_padding() end end)
  end)
  if run.numeric and not dp.is_finite(loss) then nonfinite(run, "loss", loss, step, i, k, { "parameters", "logits" }) end
  if first then snap(run, "iter{i}_after_forward", i) end
  if call then callback(run, "after_forward", i, k) end
  if fsdp then check_peers(run) end
  phase(run, "backward", iter, acc, function() sharded(run, function() priv:backward() end) end)
  if first then snap(run, "iter{i}_after_backward", i) end
  if call then callback(run, "after_backward", i, k) end
  local norm -- the first per-sample gradient norm that is not finite (DP methods), or nil
  if fsdp then check_peers(run) end
  phase(run, "clip", iter, acc, function() sharded(run, function() norm = priv:clip() end) end)
  if run.numeric and norm then
    nonfinite(run, "per-sample gradient norm", norm, step, i, k, { "gradients", "parameters" })
  end
  if call then callback(run, "after_clip", i, k) end
  if batch then dp.free_batch(batch) end
end

-- What a timed step drew and what it cost (st.steps), and its phases' times.
local function record_step(run, i, step, plan, physical_batches, own_batches, acc)
  local c, st = run.c, run.st
  if run.samples or c.dp.poisson then -- what the step drew and what it cost
    local phys = json.array()
    for k = 1, own_batches do
      phys[k] = { size = physical_batches[k].size, padded = physical_batches[k].padded }
    end
    st.steps[#st.steps + 1] = { step = step, logical_size = plan.logical_size, physical = phys,
                                peak_bytes = run.step_peak }
  end
  -- zero2: every rank's updated slice to every rank; fsdp: nothing to gather (the spent gradient parts released)
  if c.distributed and (c.distributed.strategy == "zero2" or c.distributed.strategy == "fsdp") then
    check_peers(run)
    phase(run, "comm", i, acc, function() collective(run, function() run.priv:gather_params() end) end)
  end
  snap(run, "iter{i}_after_step", i)
  callback(run, "after_step", i)
  local total = 0
  for _, p in ipairs(results.PHASES) do total = total + acc[p] end
  st.iter_ms[#st.iter_ms + 1] = total
  st.phase_ms[#st.phase_ms + 1] = acc
end

-- One logical step: the physical batches through forward, backward and clip, then noise and the
-- optimizer. i is the timed iteration (nil during warm-up); step counts all steps from 0.
local function iteration(run, i, step)
  local c, priv = run.c, run.priv
  local acc = { forward = 0, backward = 0, clip = 0, noise = 0, optimizer = 0, recompute = 0, comm = 0 }
  local iter = i or 0
  run.ctx.iter, run.ctx.warmup = iter, i == nil
  local plan = priv:next_step()
  run.step_peak = 0
  local physical_batches = physical_batches_of(run, plan)
  local windows_before = run.windows_taken -- a file read in order: the windows the earlier steps took
  run.windows_taken = run.windows_taken + plan.logical_size
  -- fsdp: padding physical batches after the rank's own, as many as make every rank's count the
  -- largest any rank's slice needs (each gathers every block): one ignored token each, no
  -- sample anywhere (norms, the step's record, the callbacks)
  local own_batches = #physical_batches
  for _ = 1, plan.padding or 0 do physical_batches[#physical_batches + 1] = { padding = true } end
  for k, pb in ipairs(physical_batches) do physical_step(run, pb, k, i, step, acc, windows_before) end
  if c.distributed then
    check_peers(run)
    phase(run, "comm", iter, acc, function() collective(run, function() priv:reduce_grads() end) end)
  end
  phase(run, "noise", iter, acc, function() priv:noise() end)
  if i then callback(run, "after_noise", i) end
  phase(run, "optimizer", iter, acc, function() run.opt:step(); run.opt:zero_grad() end)
  if i then
    record_step(run, i, step, plan, physical_batches, own_batches, acc)
  elseif c.distributed and (c.distributed.strategy == "zero2" or c.distributed.strategy == "fsdp") then
    check_peers(run)
    phase(run, "comm", iter, acc, function() collective(run, function() priv:gather_params() end) end)
  end
end

---------------------------------------------------------------------------------------------
-- The body: the build, the warm-up and timed iterations, the save

-- The model as configured: built, or a checkpoint's weights loaded; and the physical batch the
-- wrapper is given (nil: no batch given anywhere, the model's own) and whether it was loaded.
local function build_model(run)
  local c, kind = run.c, run.kind
  local mcfg, load = config.model_options(c.model, kind)
  local wrap_physical -- nil: no batch given anywhere, the model's own
  local given = c.model.batch or mcfg.batch or c.dp.max_physical_batch_size
  if given or c.distributed then mcfg.batch, wrap_physical = config.physical_batch(c, given or 1, run.samples ~= nil) end
  mcfg.device = kind
  mcfg.seed = mcfg.seed or c.seed
  -- fsdp: the model built in parts for this rank (the launched one, or the plan's simulated one),
  -- one tensor whole at a time, so that the build never holds the whole model
  local parts = build_parts(c, kind)
  mcfg.parts = parts
  if load then -- the checkpoint's weights (what model_options allowed beside them are runtime choices)
    local opts = { adapter = c.model.adapter } -- and each of load's options (the schema's LOAD rows)
    for _, k in ipairs(dp.model.LOAD_KEYS) do opts[k] = mcfg[k] end
    return dp.model.load(c.model.path, opts), wrap_physical, load
  end
  return dp.model(mcfg), wrap_physical, load
end

-- The model, optimizer and DP wrapper built, with their snapshots and callbacks; returns whether
-- the model's weights were a checkpoint's.
local function build(run)
  local c, ctx = run.c, run.ctx
  run.building = true
  local model, wrap_physical, load = build_model(run)
  run.model = model
  run.dtype = model:config().dtype
  ctx.model = model
  run.logical = c.model.batch or model:config().batch
  run.building = false
  snap(run, "0_model_loaded")
  callback(run, "model_loaded")
  run.building = true
  run.opt = build_optimizer(model, c.optimizer)
  ctx.optimizer = run.opt
  run.physical = wrap_physical or run.logical
  run.priv = dp.dpsgd.wrap(model, run.opt, config.wrap_options(c, run.logical, run.physical))
  if c.distributed then run.priv:distribute(c.distributed) end
  if run.ws_launched > 1 then
    local mc = model:config()
    mc.parts = nil -- fsdp: this rank's own part of the world
    run.built_model = {}
    result.flatten_config(mc, nil, run.built_model)
  end
  run.building = false
  ctx.priv = run.priv
  if choices(run.priv, c) ~= "vanilla" then
    snap(run, "1_wrapped_with_dp")
    callback(run, "wrapped")
  end
  snap(run, "2_optimizer_created")
  callback(run, "optimizer_created")
  return load
end

-- save: the trained model as Hugging Face files, written by rank 0 alone (zero2's and ddp's
-- parameters are whole on every rank after the step, fsdp's after the gather before it)
local function save(run, load)
  local c, model = run.c, run.model
  if c.save and (not c.distributed or dp.dist.rank() == 0) then
    -- the token ids: a checkpoint's own when its weights were read (m:save copies them); a model
    -- built from a shape (or a config.json, weights = "random") knows only the eos its documents
    -- end with (data with eos), else none (null, not transformers' defaults)
    local eos = not load and type(c.data) == "table" and c.data.eos or nil
    local known = math.type(eos) == "integer" and eos < model:config().vocab -- dp.documents bounds it too
    model:save(c.save, known and { eos_token_id = eos } or nil)
    run.saved = c.save -- the directory the trained model was written to, on the rank that wrote it
  end
end

local function body(run)
  local c, mem = run.c, dp.memory
  local load = build(run)
  local step = 0
  for _ = 1, c.warmup do
    iteration(run, nil, step)
    step = step + 1
  end
  snap(run, "3_after_warmup")
  run.warmup_peak = mem.stats().peak
  mem.reset_peak()
  dp.ledger_reset()
  if run.profiling then ops.enable(run.profiling) end
  callback(run, "after_warmup")
  for i = 1, c.iters do
    iteration(run, i, step)
    step = step + 1
  end
  -- fsdp: the whole model again for a finished callback to read (its gather counted in the memory);
  -- without one, the blocks stay in parts and the run's memory is training's alone
  if c.distributed and c.distributed.strategy == "fsdp" and (c.on.finished or c.save) then
    check_peers(run)
    collective(run, function() run.priv:unshard() end)
  end
  save(run, load)
  callback(run, "finished")
end

---------------------------------------------------------------------------------------------
-- The ending

-- The body run with the configured threads; returns ok, err ({message, traceback, building}).
local function run_body(run)
  local c = run.c
  local threads_before = dp.threads()
  if c.threads then dp.threads(c.threads) end
  local ok, err = xpcall(body, function(e)
    local message = dp.error_text(e)
    local in_callback = run.in_callback
    if in_callback and (message:find("attempt to yield across a C-call boundary", 1, true)
                        or message:find("attempt to yield from outside a coroutine", 1, true)) then
      message = string.format("on.%s yielded (coroutine.yield): a callback runs inside the experiment, which "
                              .. "must run to its end; yield after dp.experiment returns", in_callback)
    end
    return { message = message, traceback = debug.traceback(message, 2), building = run.building }
  end, run)
  local threads = dp.threads()
  dp.threads(threads_before)
  return ok, err, threads
end

-- Runs configuration c (checked) in this process (dpprof.experiment.run); returns the result.
function experiment_run.run_config(c)
  local run = start.new_run(c)
  local ok, err, threads = run_body(run)
  local stats, host, op_calls, profile = start.settle(run, ok)
  ok = world.last_vote(run, ok, err)
  local status, oom
  status, oom, err = start.outcome(run, ok, err)
  local r = result.document(run, { ok = ok, err = err, status = status, oom = oom, stats = stats, host = host,
                                   profile = profile, threads = threads })
  if c.distributed then result.combine_ranks(r, c.distributed, run.kind, run.in_collective) end
  if run.saved and ok then r.save_dir = run.saved end
  if c.trace then
    trace.write(c.trace, r, dp.memory.events(), { initial = run.initial, op_calls = op_calls })
    r.trace_file = c.trace
  end
  release_all(run)
  local ctx = run.ctx
  ctx.model, ctx.optimizer, ctx.priv = nil, nil, nil
  run.model, run.opt, run.priv = nil, nil, nil
  collectgarbage()
  return r -- run_held ends the hold
end

return experiment_run
