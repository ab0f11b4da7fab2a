-- dpprof.experiment_start: the start and the end of an experiment's run (dpprof.experiment_run):
-- the device it runs on and the memory its figures start from, the state of the run (a table its
-- functions share), and at its end what it leaves and how it ended. Its wrapper, optimizer and
-- model are freed here (release_all) whichever way the run ends.
local dp = require("dpprof")
local config = require("dpprof.config")
local plan = require("dpprof.plan")
local ops = require("dpprof.ops")
local devmodel = require("dpprof.devmodel")
local result = require("dpprof.experiment_result")

local snapshot_key = result.snapshot_key

local start = {}

local Ctx = {}
Ctx.__index = Ctx

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

-- The run's wrapper, optimizer and model freed (what is not built yet is nil).
local function release_all(run)
  release(run.priv)
  release(run.opt)
  release(run.model)
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

---------------------------------------------------------------------------------------------
-- The start: the device, and the memory the run's figures begin from

-- The device the run is on (kind, info), what else the host ran meanwhile, a launched world's
-- agreement, and on plan the device model and its clock; the per-op profile's start.
local function open_device(run)
  local c = run.c
  for _, api in ipairs({ "model", "batch", "free_batch", "optim", "dpsgd" }) do
    if dp[api] == nil then error("dpprof.experiment: this dpprof has no dpprof." .. api .. " (model, optimizer and DP bindings)", 0) end
  end
  -- resolves "auto" and makes the device current; a device that cannot be had is the caller's
  -- configuration problem, reported at the caller's line
  local dok, info = pcall(dp.device, c.device)
  if not dok then error("dpprof.experiment: " .. dp.error_text(info), 0) end
  local kind = info.kind
  run.info, run.kind = info, kind
  -- what else the host ran meanwhile (environment.host_load): not for a plan run, whose times
  -- are modelled (and which dp.fit and dp.risk make by the thousand)
  run.load_start = kind ~= "plan" and dp.host_load() or nil
  if c.distributed and kind ~= "plan" and dp.dist.world_size() > 1 then result.agree_ranks(c, kind) end
  if c.distributed and kind == "cuda" then -- NCCL moves CUDA tensors: refused now when it is missing
    local nok, nerr = pcall(dp.dist.nccl)
    if not nok then dp.refuse("dpprof.experiment: distributed: " .. dp.error_text(nerr):gsub("^distributed: ", "")) end
  end
  -- On plan: the device model, and its fixed workspace taken before the peaks are reset (as a
  -- CUDA device holds it from its start).
  local device_model = kind == "plan" and plan.device_model(c.device_model) or nil
  run.device_model = device_model
  if device_model then plan.prepare(device_model) end
  -- profile="ops": the overhead and the device's peak are measured before anything of the run
  -- (the CPU's peak takes a GEMM and a copy, whose host memory must not count in the run's RSS)
  local profiling = c.profile == "ops" and ops.start(kind, c.model.dtype or "f32", device_model) or nil
  if profiling then profiling.recomputes = (dp.model.checkpoint_parse(c.model.checkpoint) or 0) > 0 end
  run.profiling = profiling
  run.rss_since = dp.host_memory_reset_peak() and "experiment" or "process"
  -- On plan the engine clock is the modelled device's for the run (turned back at every exit).
  if device_model then
    dp.clock_model(devmodel.clock_args(device_model, c.model.dtype or "f32"))
    if c.distributed then plan.link(device_model) end -- the collectives on its links
  end
end

-- The memory the run's figures start from: what the script holds is held apart, the peaks reset.
local function begin_memory(run)
  local mem, c = dp.memory, run.c
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
  run.held_before = held_before
  dp.ledger_reset()
  run.initial = mem.stats().current
  if c.memory_limit then mem.set_limit(c.memory_limit) end
end

-- The state of a run of configuration c (checked) on the device open_device opened.
local function new_run(c)
  local run = { c = c }
  open_device(run)
  begin_memory(run)
  local kind = run.kind
  run.take = snapshot_filter(c.snapshots)
  run.st = { iter_ms = {}, phase_ms = {}, spans = {}, phase_memory = {}, steps = {} }
  -- samples of their own lengths (nil: fixed-length windows), and the peak of the step running
  run.samples = config.samples_of(c, c.model.seq_len, c.dp.dataset_size)
  run.step_peak = 0
  run.ctx = setmetatable({ config = c, extra = {}, device = kind, _custom = {} }, Ctx)
  -- Non-finite numbers are checked on every device but plan, which computes no values (nonfinite).
  run.numeric = kind ~= "plan"
  -- a launched world of several ranks votes (vote); fsdp gathers each block inside the forward,
  -- backward and clip: the ranks vote before each of them, and a failure inside one is a failure
  -- inside a collective
  run.ws_launched = c.distributed and kind ~= "plan" and dp.dist.world_size() or 1
  run.in_collective, run.voted = false, false
  run.fsdp = c.distributed and c.distributed.strategy == "fsdp"
  -- data = {file =, order = "sequential"}: the windows the steps so far took (warm-up included)
  run.sequential = type(c.data) == "table" and c.data.order == "sequential"
  run.windows_taken = 0
  -- true while the model, optimizer and DP wrapper are being built: what fails there, other than
  -- an allocation, is the configuration's fault and raises rather than becoming a result
  run.building = false
  return run
end

---------------------------------------------------------------------------------------------
-- The end

-- What the run's end leaves: its memory stats, the host's, the profile; the modelled clock and
-- the memory limit turned back (a clock that overflowed is refused).
local function settle(run, ok)
  local c, mem, device_model, profiling = run.c, dp.memory, run.device_model, run.profiling
  local stats = mem.stats()
  if c.memory_limit then mem.set_limit(0) end
  local clock_overflowed = device_model and dp.clock_overflowed()
  if device_model then dp.clock_model(false); plan.link(nil) end
  if clock_overflowed then
    release_all(run)
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
  return stats, host, op_calls, profile
end

-- The run's status ("ok", "oom", "error"), its out-of-memory details and its error, named after
-- the rank that failed; a failure while building raises (the configuration's).
local function outcome(run, ok, err)
  local ws_launched, peer_failure = run.ws_launched, run.peer_failure
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
    release_all(run)
    error("dpprof.experiment: " .. err.message, 0)
  end
  return status, oom, err
end


start.release_all, start.build_optimizer, start.build_parts = release_all, build_optimizer, build_parts
start.new_run, start.settle, start.outcome = new_run, settle, outcome

return start
