-- dpprof.trace: a run as a Chrome trace-event file (opens in Perfetto and chrome://tracing).
--
--   trace.build(result, events [, {max_points=4096, initial={category=bytes}, op_calls=}]) -> {traceEvents=...}
--   trace.write(path, result, events [, opts]) -> path
--
-- result is an experiment's result table (docs/results.md); events is dpprof.memory.events()
-- from the same run (same clock as the result's spans). What the file holds:
--   tid 1 "iterations": one slice per iteration (warm-up, iter 1, ...)
--   tid 2 "phases":     forward, backward, clip, noise, optimizer slices, and with profile="ops" the
--                       op slices nested in them (op_calls: dpprof.profile.calls(), category in cat)
--   tid 3 "snapshots":  an instant event per snapshot
--   tid 4 "recompute":  activation checkpointing's recomputation of a block (inside a backward or
--                       clip slice), present when the run recomputed
--   counters "allocated" and "reserved" (bytes) and one "memory.<category>" counter per category
-- Slices on one tid never overlap (Perfetto rejects that), so iterations and phases have their own.
-- Long event logs are reduced to max_points time buckets per counter, each keeping its maximum so
-- the peak survives.
local dp = require("dpprof")
local ops = require("dpprof.ops")
local results = require("dpprof.results")
local json = dp.json

local trace = {}

local PID = 1
local TID_ITERATIONS, TID_PHASES, TID_SNAPSHOTS, TID_RECOMPUTE = 1, 2, 3, 4

local function us(ms) return ms * 1000 end

local function metadata(out, name, tid, value)
  out[#out + 1] = { ph = "M", pid = PID, tid = tid or 0, name = name, args = { name = value } }
end

-- Iteration slices: from the first span of an iteration to its last.
local function iteration_slices(out, spans)
  local by_iter, order = {}, {}
  for _, s in ipairs(spans) do
    local b = by_iter[s.iter]
    if not b then
      b = { start = s.start_ms, stop = s.end_ms }
      by_iter[s.iter] = b
      order[#order + 1] = s.iter
    end
    b.start, b.stop = math.min(b.start, s.start_ms), math.max(b.stop, s.end_ms)
  end
  for _, it in ipairs(order) do
    local b = by_iter[it]
    out[#out + 1] = { ph = "X", pid = PID, tid = TID_ITERATIONS, name = it == 0 and "warm-up" or ("iter " .. it),
                      ts = us(b.start), dur = us(b.stop - b.start), args = { iter = it } }
  end
end

-- Phase slices; a recomputation nests in the phase that ran it, so it has a thread of its own.
local function phase_slices(out, spans)
  local recomputed = false
  for _, s in ipairs(spans) do
    local own = s.phase == "recompute"
    recomputed = recomputed or own
    out[#out + 1] = { ph = "X", pid = PID, tid = own and TID_RECOMPUTE or TID_PHASES, name = s.phase, cat = "phase",
                      ts = us(s.start_ms), dur = us(s.end_ms - s.start_ms), args = { iter = s.iter } }
  end
  if recomputed then metadata(out, "thread_name", TID_RECOMPUTE, "recompute") end
end

-- Op slices (profile="ops"): on the phases' thread, where each lies inside its phase's slice.
local function op_slices(out, calls)
  for _, c in ipairs(calls or {}) do
    out[#out + 1] = { ph = "X", pid = PID, tid = TID_PHASES, name = c.op, cat = ops.category(c.op),
                      ts = us(c.start_ms), dur = us(c.end_ms - c.start_ms) }
  end
end

local function snapshot_instants(out, snapshots)
  for _, s in ipairs(snapshots or {}) do
    out[#out + 1] = { ph = "i", s = "t", pid = PID, tid = TID_SNAPSHOTS, name = s.name,
                      ts = us(s.timestamp * 1000), args = { allocated_mb = s.allocated_mb, custom = s.custom } }
  end
end

-- Counter samples: for each series, the value after each event, reduced to at most max_points
-- buckets of equal time (each bucket's maximum, stamped at the bucket's first event).
local function counters(out, events, initial, max_points)
  if #events == 0 then return end
  local t0, t1 = events[1].t_ms, events[#events].t_ms
  local width = (#events > max_points and t1 > t0) and (t1 - t0) / max_points or nil
  local live = {}
  for _, c in ipairs(dp.memory.categories) do live[c] = initial and initial[c] or 0 end
  local pending = {} -- series -> {ts, value} of the current bucket
  local bucket_of = function(t) return width and math.floor((t - t0) / width) or nil end
  local current_bucket
  local function flush()
    local names = {}
    for name in pairs(pending) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local p = pending[name]
      out[#out + 1] = { ph = "C", pid = PID, name = name, ts = us(p.ts), args = { bytes = p.value } }
    end
    pending = {}
  end
  local function sample(name, t, value)
    local p = pending[name]
    if not p then pending[name] = { ts = t, value = value }
    elseif value > p.value then p.value = value end
  end
  for _, e in ipairs(events) do
    local b = bucket_of(e.t_ms)
    if b == nil or b ~= current_bucket then flush() end
    current_bucket = b
    if live[e.category] then
      live[e.category] = math.max(0, live[e.category] + e.delta)
      sample("memory." .. e.category, e.t_ms, live[e.category])
    end
    sample("allocated", e.t_ms, e.allocated)
    sample("reserved", e.t_ms, e.reserved)
  end
  flush()
end

function trace.build(result, events, opts)
  -- not a table: none given (trace.write(path, r, dp.memory.events()) passes events' stride here)
  if type(opts) ~= "table" then opts = {} end
  local out = json.array()
  local name = result.experiment or "experiment"
  metadata(out, "process_name", 0, "dpprof " .. name)
  metadata(out, "thread_name", TID_ITERATIONS, "iterations")
  metadata(out, "thread_name", TID_PHASES, "phases")
  metadata(out, "thread_name", TID_SNAPSHOTS, "snapshots")
  local spans = result.timing and result.timing.spans or {}
  iteration_slices(out, spans)
  phase_slices(out, spans)
  op_slices(out, opts.op_calls)
  snapshot_instants(out, result.snapshots)
  counters(out, events or {}, opts.initial, opts.max_points or 4096)
  return { traceEvents = out, displayTimeUnit = "ms",
           otherData = { experiment = name, method = result.method, status = result.status } }
end

function trace.write(path, result, events, opts)
  return results.write(path, trace.build(result, events, opts))
end

return trace
