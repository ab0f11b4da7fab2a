-- dpprof.ops: per-op measurement of an experiment (profile = "ops"), the result's `profile`.
--
--   ops.CATEGORIES             the op categories charts group by, in their order
--   ops.category(op)           the category of a ledger op name ("recompute:gemm" is gemm's)
--   ops.start(kind, dtype, device_model) -> state   measures the overhead, finds the device's
--                              peak, turns per-op timing on (after warm-up: the ledger is reset then)
--   ops.phase_begin(state)     before a phase; ops.phase_end(state, name, token, phase_ms,
--                              recompute_ms) after it (its device synchronised): reads the device
--                              timers, adds up the phase's op time; what it spent recomputing
--                              checkpointed blocks (their "recompute:" ops) goes to `recompute`
--                              (state.recomputes = true: the model checkpoints activations)
--   ops.finish(state, ledger, iters) -> the result's profile object (and turns timing off)
--
-- Every backend call is timed (engine/core/profile.h): on the CPU by the engine clock around the
-- call, on CUDA by events on the stream, on the plan device by its modelled clock (a roofline or
-- calibrated estimate, so the profile is marked predicted). A call is charged to the ledger op its caller
-- recorded last, with the tagged bytes allocated and freed since the call before ended (the
-- engine makes an op's buffers right before it). The profile's own cost is stated: the host
-- nanoseconds one timed call adds (measured with empty calls before the run) and that times the
-- calls per iteration.
local dp = require("dpprof")
local json = dp.json

local ops = {}

-- The schema's list (common/results_schema.h, DPR_OP_CATEGORIES), which the charts read too.
ops.CATEGORIES = dp.results_schema.choices.op_categories

-- The category of a ledger op name; an op recorded in a ledger section ("recompute:gemm", an
-- activation checkpoint's recomputed forward) is in its op's category. The table is the engine's
-- (engine/engine_profile.c, dp_engine_op_category), which the C embedding API reads too.
function ops.category(op)
  return dp.profile.category(op)
end

-- The peak the achieved rates are compared with: the plan model's figures, or what the backend
-- states (CPU: measured; CUDA: from the device's attributes). nil and why when unknown.
local function device_peak(kind, dtype, device_model)
  if device_model then
    return { flops = device_model.peak_flops[dtype] + 0.0, bandwidth = device_model.bandwidth + 0.0,
             how = string.format("the plan device model '%s'", device_model.name) }
  end
  return dp.profile.peak(dtype, kind)
end

function ops.start(kind, dtype, device_model)
  local peak, why = device_peak(kind, dtype, device_model)
  local state = { kind = kind, dtype = dtype, predicted = device_model ~= nil, peak = peak, peak_error = why,
                  overhead_ns = device_model and 0.0 or dp.profile.overhead_ns(kind), phases = {} }
  return state
end

-- Turns timing on (after warm-up, when the ledger has just been reset).
function ops.enable(state)
  dp.profile.enable(true, state.kind)
end

-- The measured time of the ops recorded in the ledger's "recompute" section so far, ms.
local function recompute_ops_ms()
  local ms = 0.0
  for _, e in ipairs(dp.ledger()) do
    if e.time_ms and e.op:find("^recompute:") then ms = ms + e.time_ms end
  end
  return ms
end

function ops.phase_begin(state)
  return { total = dp.profile.total_ms(), recompute = state.recomputes and recompute_ops_ms() or 0 }
end

local function add_phase(state, name, ms, ops_ms)
  local p = state.phases[name]
  if not p then
    p = { ms = 0, ops_ms = 0 }
    state.phases[name] = p
  end
  p.ms, p.ops_ms = p.ms + ms, p.ops_ms + ops_ms
end

-- phase_ms: the phase's time less its recomputation, which took recompute_ms (0 without one).
function ops.phase_end(state, name, token, phase_ms, recompute_ms)
  dp.profile.collect(state.kind)
  local recomputed = state.recomputes and recompute_ops_ms() - token.recompute or 0
  add_phase(state, name, phase_ms, dp.profile.total_ms() - token.total - recomputed)
  if (recompute_ms or 0) > 0 then add_phase(state, "recompute", recompute_ms, recomputed) end
end

local function rate(amount, ms)
  if ms <= 0 then return json.null end
  return amount / (ms / 1000)
end

local function fraction(value, peak)
  if value == json.null or not peak or peak <= 0 then return json.null end
  return value / peak
end

-- The result's profile object from the ledger of the timed iterations (entries with time_ms).
function ops.finish(state, ledger, iters)
  local dropped = dp.profile.dropped()
  dp.profile.enable(false)
  local list, n_calls = {}, 0
  for _, e in ipairs(ledger) do
    local ms = e.time_ms or 0.0
    n_calls = n_calls + (e.timed_calls or 0)
    local fps, bps = rate(e.flops, ms), rate(e.bytes, ms)
    list[#list + 1] = {
      op = e.op, category = ops.category(e.op), calls = e.calls, timed_calls = e.timed_calls or 0,
      ms = ms + 0.0, flops = e.flops, bytes = e.bytes, flops_per_s = fps, bytes_per_s = bps,
      flops_fraction = fraction(fps, state.peak and state.peak.flops),
      bandwidth_fraction = fraction(bps, state.peak and state.peak.bandwidth),
      alloc_bytes = e.alloc_bytes or 0, freed_bytes = e.freed_bytes or 0,
    }
  end
  table.sort(list, function(a, b) if a.ms ~= b.ms then return a.ms > b.ms end return a.op < b.op end)
  local phases = {}
  for name, p in pairs(state.phases) do
    phases[name] = { ms = p.ms / iters, ops_ms = p.ops_ms / iters, outside_ops_ms = math.max(0, p.ms - p.ops_ms) / iters }
  end
  local per_iter = n_calls / iters
  return {
    mode = "ops", predicted = state.predicted, iters = iters, dtype = state.dtype,
    peak = state.peak and { flops = state.peak.flops, bandwidth = state.peak.bandwidth, how = state.peak.how }
           or json.null,
    peak_error = state.peak_error,
    overhead = { ns_per_call = state.overhead_ns + 0.0, calls_per_iter = per_iter + 0.0,
                 ms_per_iter = state.overhead_ns * per_iter * 1e-6 },
    calls_dropped = dropped,
    phases = phases, ops = json.array(list),
  }
end

return ops
