-- dpprof.parallel: a sweep's isolated points side by side on one machine (dp.sweep{parallel=}).
--
--   parallel.gpus() -> {ids...}, source     the GPUs this process may hand out, CUDA untouched
--   parallel.plan(spec, points) -> plan      how many points at once, and what each child gets
--   parallel.run(plan, todo, start, done)    runs them: start(point, slot) -> child handle,
--                                            done(point, result, info, slot) once each finishes
--
-- Each point still runs in a child of its own (dpprof.isolate_start, the same child as
-- dp.isolate); the parent waits for several at once and never starts CUDA. A slot is one place
-- to run: with GPUs, slot k's child sees only GPU k (CUDA_VISIBLE_DEVICES, set in the child before
-- CUDA starts); on the CPU, the parent's thread budget (OpenMP's count: the cores, or
-- OMP_NUM_THREADS) is split evenly, each child getting budget / slots threads (dpprof.threads:
-- the CPU backend's one team, OpenBLAS single-threaded inside it), so points never share a core. What a child was given is recorded with its result
-- (sweep.placement).
local dp = require("dpprof")

local parallel = {}

local function split_list(s)
  local out = {}
  for item in tostring(s):gmatch("[^,%s]+") do out[#out + 1] = item end
  return out
end

-- The GPUs this process may hand out, found without initialising CUDA (a forked child of a
-- process with CUDA could not use it): the entries of CUDA_VISIBLE_DEVICES when it is set (an
-- empty value: none), else one per entry of /proc/driver/nvidia/gpus (the NVIDIA driver's list of
-- boards), else the "GPU n:" lines of `nvidia-smi -L`. Returns the ids as strings (what a child's
-- CUDA_VISIBLE_DEVICES gets) and where they were found.
function parallel.gpus()
  local visible = os.getenv("CUDA_VISIBLE_DEVICES")
  if visible then return split_list(visible), "CUDA_VISIBLE_DEVICES" end
  local boards = dp.list_dir("/proc/driver/nvidia/gpus")
  if boards and #boards > 0 then
    local ids = {}
    for i = 1, #boards do ids[i] = tostring(i - 1) end
    return ids, "/proc/driver/nvidia/gpus"
  end
  local p = io.popen("nvidia-smi -L 2>/dev/null")
  local ids = {}
  if p then
    for line in p:lines() do
      local n = line:match("^GPU (%d+):")
      if n then ids[#ids + 1] = n end
    end
    p:close()
  end
  return ids, "nvidia-smi -L"
end

-- Whether a point runs on CUDA: its (resolved) configuration names device cuda or auto.
local function on_cuda(p)
  local c = p.resolved or p.config or {}
  return c.device == "cuda" or c.device == "auto"
end

-- How a sweep runs its points side by side. spec: nil or 1 (one at a time: nil is returned),
-- a count N, or "gpus" (one point per GPU). Returns {slots = N, threads = per child, budget =,
-- gpus = {id per slot} | nil, gpu_source =}; raises on a spec that cannot be honoured.
function parallel.plan(spec, points)
  if spec == nil then return nil end
  local want_gpus = spec == "gpus"
  if not want_gpus and (math.type(spec) ~= "integer" or spec < 1) then
    error(string.format("dpprof.sweep: parallel must be a count >= 1 or \"gpus\" (got %s)", tostring(spec)), 0)
  end
  if spec == 1 then return nil end
  local env = dp.environment()
  local budget = math.max(1, env.threads or env.cores or 1)
  local cuda = want_gpus
  for _, p in ipairs(points) do cuda = cuda or on_cuda(p) end
  local gpus, source
  if cuda then gpus, source = parallel.gpus() end
  if want_gpus and #gpus == 0 then
    error("dpprof.sweep: parallel=\"gpus\": no GPU found (" .. source .. " lists none; "
          .. "/proc/driver/nvidia/gpus and nvidia-smi -L were asked when CUDA_VISIBLE_DEVICES is unset)", 0)
  end
  local slots = want_gpus and #gpus or spec
  if gpus and #gpus == 0 then gpus = nil end -- device "auto" on a machine without a GPU: the CPU
  if gpus then
    if slots > #gpus then
      error(string.format("dpprof.sweep: parallel=%d, but %d GPU%s (%s): each point on CUDA needs a device "
                          .. "of its own; give parallel <= %d or parallel=\"gpus\"", slots, #gpus,
                          #gpus == 1 and " is" or "s are", source, #gpus), 0)
    end
    local given = {}
    for k = 1, slots do given[k] = gpus[k] end
    gpus = given
  elseif slots > budget then
    error(string.format("dpprof.sweep: parallel=%d on the CPU needs at least %d threads, and this process has %d "
                        .. "(OpenMP's count: the cores, or OMP_NUM_THREADS): points sharing cores would time "
                        .. "each other; give parallel <= %d", slots, slots, budget, budget), 0)
  end
  return { slots = slots, threads = math.max(1, budget // slots), budget = budget, gpus = gpus, gpu_source = source }
end

-- What slot k's child is given: the isolate options and the placement recorded with its result.
function parallel.slot_options(plan, k, timeout)
  local env = {}
  local placement = { slot = k, slots = plan.slots, threads = plan.threads }
  if plan.gpus then
    env.CUDA_VISIBLE_DEVICES = plan.gpus[k]
    placement.cuda_visible_devices = plan.gpus[k]
  end
  return { timeout = timeout, threads = plan.threads, env = env }, placement
end

-- Runs the points of todo (a list), at most plan.slots at once, in order. start(item, slot)
-- starts one and returns its child (dpprof.isolate_start); done(item, result, info, slot) is
-- called as each finishes, in the order they finish. An error raised by done (or an interrupt)
-- stops the children still running before it goes on.
function parallel.run(plan, todo, start, done)
  local free, running = {}, {}
  for k = plan.slots, 1, -1 do free[#free + 1] = k end
  local next_item = 1
  local ok, err = pcall(function()
    while next_item <= #todo or #running > 0 do
      while next_item <= #todo and #free > 0 do
        local slot = table.remove(free)
        local child = start(todo[next_item], slot)
        running[#running + 1] = { child = child, item = todo[next_item], slot = slot }
        next_item = next_item + 1
      end
      local children = {}
      for i, r in ipairs(running) do children[i] = r.child end
      dp.isolate_wait(children)
      local still, ended = {}, {}
      for _, r in ipairs(running) do
        if r.child:finished() then ended[#ended + 1] = r else still[#still + 1] = r end
      end
      running = still
      for _, r in ipairs(ended) do
        free[#free + 1] = r.slot
        local result, info = r.child:result()
        done(r.item, result, info, r.slot)
      end
    end
  end)
  if not ok then
    for _, r in ipairs(running) do r.child:stop() end
    error(err, 0)
  end
end

return parallel
