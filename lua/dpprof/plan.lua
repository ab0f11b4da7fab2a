-- dpprof.plan: device models for the `plan` backend, and what a plan run predicts with them.
--
-- A plan run (dp.experiment{device="plan", device_model=...}) does all of the allocator's
-- accounting and fills the ledger, but touches no memory and does no arithmetic. Its memory
-- figures are exact (the same bytes as on the CPU or CUDA backends: every allocation is decided
-- in device-independent code). Two things are modelled on top, and both are stated here as data:
--
--   * time: a roofline estimate. Each ledger op costs max(flops / peak_flops[dtype],
--     bytes / bandwidth); a phase costs the sum over the ops it ran (the experiment diffs the
--     ledger around each phase). It is a lower bound for a real device (no launch latency, no
--     occupancy, perfect overlap of compute and memory within an op), clearly labelled an estimate.
--     A calibrated model (a file `dpprof calibrate` wrote: lua/dpprof/devmodel.lua) times each op
--     call by its fitted curve instead, and is labelled so; the built-in h100 and h200 are rooflines
--     (and the defaults); "h100-calibrated" is the H100's calibrated model shipped as data.
--   * the budget: what a CUDA device holds besides the tagged allocations.
--       context_bytes     the CUDA context, the kernels' modules and the libraries (cuBLAS), outside
--                         the memory pool: total device memory minus what the pool may grow to
--       workspace         true: the plan device takes cuBLAS's workspace and the kernels' scratch
--                         as real tagged allocations (`workspace`, modules "cublas" and "kernels"),
--                         exactly as the CUDA backend does at start (dpprof.plan_workspace(true))
--       reserve_overhead  the pool's reserved-but-unused bytes (rounding, fragmentation), as a
--                         fraction of the allocated peak: reserved peak = allocated peak * (1 + it)
--     so budget_bytes = memory_bytes - context_bytes, and a run fits when its predicted reserved
--     peak, peak + round(peak * reserve_overhead), is at most budget_bytes.
--
--   plan.MODELS                        the built-in models (h100, h200), as data
--   plan.device_model(spec)            "h100" | "h200" | "h100-calibrated" | "FILE.json" | {base=, name=, ...overrides}
--                                      -> a checked copy ("h100-calibrated": a shipped file, dpprof.devmodel.SHIPPED)
--   plan.model_names()                 the valid model names, built-in and shipped, as one string
--   plan.prepare(model)                sets the plan device's workspace; returns its bytes
--   plan.op_ms(entry, model, dtype)    one ledger entry's time: ms, "compute" | "memory"
--   plan.estimate(ledger, model, dtype [, world_size])
--                                      -> {ms=, ops={{op, calls, flops, bytes, ms, bound}...}}
--   plan.ledger_diff(before, after)    the ledger entries a phase added (two dpprof.ledger() lists)
--   plan.split_recompute(ledger)       -> own, recomputed: the "recompute:" entries set apart
--   plan.budget(model, peak_bytes)     -> the result's `plan` object (see docs/results.md)
--   plan.describe(model)               one line naming the model and its figures
local dp = require("dpprof")
local devmodel = require("dpprof.devmodel")

local plan = {}

local MiB = 1024 * 1024
local GiB = 1024 * MiB

plan.METHOD = "roofline: sum over ops of max(flops/peak, bytes/bandwidth)"
plan.CALIBRATED_METHOD = "calibrated: sum over op calls of the device model file's curve at the call's roofline work, "
                         .. "plus the host gap; roofline for ops without a curve"

-- Measured on the lent H100 (driver 580.159.04, CUDA 13.0), 2026-11-23: a dpprof process holding
-- its CUDA context, cuBLAS handle and pool showed 659 MiB in nvidia-smi's memory.used on an
-- otherwise empty card, of which 33 MiB is the pool's workspace (a tagged allocation): the rest,
-- 626 MiB, is context and libraries outside the pool.
plan.DEFAULT_CONTEXT_BYTES = 626 * MiB
-- Measured on the same H100 over the 22 bench_dp runs that fitted (large and batched configs, f32
-- and bf16, every preset): reserved peak / allocated peak - 1 ranged from 0.0024 to 0.0125; this
-- default is the largest. The pool's fragmentation depends on the allocation pattern: the batched
-- `flat` runs, with many 1 GiB per-sample buffers, reached 0.036 when they ran out of memory. A
-- prediction whose headroom is within a few percent of the budget is therefore a margin call.
plan.DEFAULT_RESERVE_OVERHEAD = 0.0125

-- The built-in models. memory_bytes is what cudaMemGetInfo reports as total (nvidia-smi's
-- memory.total); peak_flops are dense (no sparsity) per dtype of the model: bf16 on tensor cores,
-- f32 on the CUDA cores (dpprof's f32 GEMMs are strict f32, no TF32); bandwidth is HBM's.
plan.MODELS = {
  h100 = {
    name = "h100", description = "NVIDIA H100 80GB HBM3 (SXM5)",
    memory_bytes = 81559 * MiB,
    peak_flops = { bf16 = 989.4e12, f32 = 66.9e12 },
    bandwidth = 3.35e12,
    context_bytes = plan.DEFAULT_CONTEXT_BYTES, workspace = true, reserve_overhead = plan.DEFAULT_RESERVE_OVERHEAD,
    gpus_per_node = 8, intra_node_gbps = 450, inter_node_gbps = 50,
  },
  h200 = {
    name = "h200", description = "NVIDIA H200 141GB HBM3e (SXM5)",
    memory_bytes = 143771 * MiB,
    peak_flops = { bf16 = 989.4e12, f32 = 66.9e12 },
    bandwidth = 4.8e12,
    context_bytes = plan.DEFAULT_CONTEXT_BYTES, workspace = true, reserve_overhead = plan.DEFAULT_RESERVE_OVERHEAD,
    gpus_per_node = 8, intra_node_gbps = 450, inter_node_gbps = 50,
  },
}
plan.DEFAULT_MODEL = "h100"

plan.MODEL_KEYS = { "base", "name", "description", "memory_bytes", "memory_gb", "peak_flops", "bandwidth",
                    "context_bytes", "workspace", "reserve_overhead", "gpus_per_node", "intra_node_gbps",
                    "inter_node_gbps" }
-- The links of a distributed plan run (issue 29), in GB/s (1e9 bytes/s) per direction per GPU:
-- gpus_per_node GPUs a node joined by NVLink (H100 and H200 SXM: NVLink 4, 18 links x 25 GB/s =
-- 450 GB/s), nodes by InfiniBand (NDR, 400 Gb/s = 50 GB/s, one adapter a GPU as in a DGX H100).
-- A collective lasts its wire bytes over the slowest link its ring crosses (engine/comm/comm.h).
plan.LINK_DEFAULTS = { gpus_per_node = 8, intra_node_gbps = 450, inter_node_gbps = 50 }
plan.DTYPES = { "f32", "bf16" }

local function bad(fmt, ...)
  error("dpprof.plan: device_model: " .. string.format(fmt, ...), 0)
end

local function positive(v, key)
  if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
    bad("%s must be a positive number, got %s", key, tostring(v))
  end
end

local function nonneg_int(v, key)
  if math.type(v) ~= "integer" or v < 0 then bad("%s must be an integer >= 0 (bytes), got %s", key, tostring(v)) end
end

-- The built-in (roofline) model names, then the shipped calibrated ones (dpprof.devmodel.SHIPPED), one string.
function plan.model_names()
  local out = {}
  for k in pairs(plan.MODELS) do out[#out + 1] = k end
  table.sort(out)
  for _, k in ipairs(devmodel.shipped_names()) do out[#out + 1] = k end
  return table.concat(out, ", ")
end

-- The checked, complete copy of a device model: a built-in's name, or a table of fields (all of
-- them, or base= a built-in plus the fields that differ). Raises naming the key and valid choices.
function plan.device_model(spec)
  if spec == nil then spec = plan.DEFAULT_MODEL end
  if devmodel.is_path(spec) then return devmodel.load(spec) end
  if devmodel.shipped_path(spec) then return devmodel.load(devmodel.shipped_path(spec)) end
  if devmodel.is_model(spec) then return spec end
  if type(spec) == "string" then
    if not plan.MODELS[spec] then bad("unknown model '%s' (valid: %s, or a table of fields)", spec, plan.model_names()) end
    spec = { base = spec }
  end
  if type(spec) ~= "table" then bad("a model name (%s) or a table expected, got %s", plan.model_names(), type(spec)) end
  local valid = {}
  for _, k in ipairs(plan.MODEL_KEYS) do valid[k] = true end
  for k in pairs(spec) do
    if not valid[k] then bad("unknown key '%s' (valid: %s)", tostring(k), table.concat(plan.MODEL_KEYS, ", ")) end
  end
  local m = {}
  if spec.base ~= nil then
    local b = plan.MODELS[spec.base] or (devmodel.is_path(spec.base) and devmodel.load(spec.base))
              or (devmodel.shipped_path(spec.base) and devmodel.load(devmodel.shipped_path(spec.base))) or nil
    if not b then bad("unknown base '%s' (valid: %s, or a calibrated model FILE.json)", tostring(spec.base), plan.model_names()) end
    for k, v in pairs(b) do m[k] = v end
    m.peak_flops = {}
    for k, v in pairs(b.peak_flops) do m.peak_flops[k] = v end
  else
    m.context_bytes, m.workspace, m.reserve_overhead = 0, false, 0.0
  end
  for k, v in pairs(spec) do
    if k == "peak_flops" then
      if type(v) ~= "table" then bad("peak_flops must be a table {f32=, bf16=} of flop/s") end
      m.peak_flops = m.peak_flops or {}
      for dt, f in pairs(v) do m.peak_flops[dt] = f end
    elseif k ~= "base" and k ~= "memory_gb" then
      m[k] = v
    end
  end
  if spec.memory_gb ~= nil then
    if spec.memory_bytes ~= nil then bad("give memory_bytes or memory_gb, not both") end
    positive(spec.memory_gb, "memory_gb")
    m.memory_bytes = math.floor(spec.memory_gb * GiB)
  end
  m.name = m.name or (spec.base and (spec.base .. "+custom")) or "custom"
  if type(m.name) ~= "string" or m.name == "" or m.name:find("[%z\1-\31\127]") then
    bad("name must be a printable string (no control bytes), got \"%s\"", dp.escape_controls(tostring(m.name)))
  end
  if m.description ~= nil and (type(m.description) ~= "string" or m.description:find("[%z\1-\31\127]")) then
    bad("description must be a printable string (no control bytes), got \"%s\"",
        dp.escape_controls(tostring(m.description)))
  end
  m.description = m.description or m.name
  if m.memory_bytes == nil then bad("memory_bytes (or memory_gb) is required for a model without base") end
  nonneg_int(m.memory_bytes, "memory_bytes")
  if m.memory_bytes == 0 then bad("memory_bytes must be > 0") end
  nonneg_int(m.context_bytes, "context_bytes")
  if m.context_bytes >= m.memory_bytes then bad("context_bytes (%d) leaves no room in memory_bytes (%d)", m.context_bytes, m.memory_bytes) end
  if type(m.workspace) ~= "boolean" then bad("workspace must be true or false, got %s", tostring(m.workspace)) end
  if type(m.reserve_overhead) ~= "number" or m.reserve_overhead < 0 or m.reserve_overhead ~= m.reserve_overhead then
    bad("reserve_overhead must be a fraction >= 0, got %s", tostring(m.reserve_overhead))
  end
  if type(m.peak_flops) ~= "table" then bad("peak_flops {f32=, bf16=} (flop/s per dtype) is required") end
  for _, dt in ipairs(plan.DTYPES) do -- a calibrated model has the dtypes it was calibrated in
    if not (m.calibration and m.peak_flops[dt] == nil) then positive(m.peak_flops[dt], "peak_flops." .. dt) end
  end
  for dt in pairs(m.peak_flops) do
    local known = false
    for _, d in ipairs(plan.DTYPES) do known = known or d == dt end
    if not known then bad("peak_flops.%s: unknown dtype (valid: %s)", tostring(dt), table.concat(plan.DTYPES, ", ")) end
  end
  positive(m.bandwidth, "bandwidth")
  for k, v in pairs(plan.LINK_DEFAULTS) do if m[k] == nil then m[k] = v end end
  if math.type(m.gpus_per_node) ~= "integer" or m.gpus_per_node < 1 then
    bad("gpus_per_node must be an integer >= 1, got %s", tostring(m.gpus_per_node))
  end
  positive(m.intra_node_gbps, "intra_node_gbps")
  positive(m.inter_node_gbps, "inter_node_gbps")
  if m.calibration then return devmodel.as_model(m) end
  return m
end

-- Times a plan run's collectives on model's links (dpprof.dist.link_model), or stops (model nil).
function plan.link(model)
  if not model then return dp.dist.link_model(false) end
  dp.dist.link_model{ gpus_per_node = model.gpus_per_node, intra_bytes_per_s = model.intra_node_gbps * 1e9,
                      inter_bytes_per_s = model.inter_node_gbps * 1e9, device_bytes_per_s = model.bandwidth }
end

-- Makes the plan device hold (or not) the CUDA backend's fixed workspace, as model says; returns
-- the bytes it holds for it.
function plan.prepare(model)
  dp.plan_workspace(model.workspace)
  return dp.memory.stats("plan").current.workspace
end

-- One ledger entry {flops, bytes} on model at dtype: its time in ms and what bounds it.
function plan.op_ms(entry, model, dtype)
  local peak = model.peak_flops[dtype]
  if not peak then
    error(string.format("dpprof.plan: device model '%s' has no peak_flops for dtype '%s'", model.name, tostring(dtype)), 2)
  end
  local compute, memory = entry.flops / peak, entry.bytes / model.bandwidth
  if compute >= memory then return compute * 1000, "compute" end
  return memory * 1000, "memory"
end

-- The bytes a second a collective of world_size ranks moves on model's links: NVLink's within
-- gpus_per_node, the network's beyond; nil for one rank (no collective crosses a link).
function plan.link_bytes_per_s(model, world_size)
  if not world_size or world_size <= 1 then return nil end
  return (world_size <= model.gpus_per_node and model.intra_node_gbps or model.inter_node_gbps) * 1e9
end

-- The estimate of a ledger (a list of {op, calls, flops, bytes}): the total in ms and each op's
-- share, largest first. A collective (comm_*) of a world of more than one rank costs its wire
-- bytes over the link (plan.link_bytes_per_s), bound "link", as the plan's clock times it. The roofline; with a calibrated model (devmodel.lua) for dtype, an op with a
-- curve costs its model_ms (what the modelled clock gave its calls: dpprof.ledger() of a plan run)
-- or, without one, its calls at their mean work, and is bound "calibrated".
function plan.estimate(ledger, model, dtype, world_size)
  local calibrated = devmodel.calibrated(model, dtype)
  local ops, total, link = {}, 0, plan.link_bytes_per_s(model, world_size)
  for _, e in ipairs(ledger) do
    local ms, bound = plan.op_ms(e, model, dtype)
    if link and e.op:find("^comm_") then -- its wire bytes over the link, as the modelled clock charged it
      ms, bound = e.bytes / link * 1000, "link"
    elseif calibrated then
      local calls = math.max(1, e.calls or 1)
      local s, cal = devmodel.op_seconds(model, dtype, e.op, e.flops / calls, e.bytes / calls)
      ms = e.model_ms or s * calls * 1000
      if cal then bound = "calibrated" end
    end
    ops[#ops + 1] = { op = e.op, calls = e.calls, flops = e.flops, bytes = e.bytes, ms = ms, bound = bound }
    total = total + ms
  end
  table.sort(ops, function(a, b) if a.ms ~= b.ms then return a.ms > b.ms end return a.op < b.op end)
  return { ms = total, ops = ops }
end

-- What happened between two dpprof.ledger() lists of the same run: per op, the calls, flops and
-- bytes added (ops that did not run in between are left out).
function plan.ledger_diff(before, after)
  local prior = {}
  for _, e in ipairs(before) do prior[e.op] = e end
  local out = {}
  for _, e in ipairs(after) do
    local b = prior[e.op]
    local calls = e.calls - (b and b.calls or 0)
    if calls > 0 then
      out[#out + 1] = { op = e.op, calls = calls, flops = e.flops - (b and b.flops or 0),
                        bytes = e.bytes - (b and b.bytes or 0) }
    end
  end
  return out
end

-- A ledger diff split in two: the ops an activation checkpoint's recomputation made ("recompute:"
-- entries, engine/core/ledger.h's section) and the others.
function plan.split_recompute(ledger)
  local own, recomputed = {}, {}
  for _, e in ipairs(ledger) do
    local list = e.op:find("^recompute:") and recomputed or own
    list[#list + 1] = e
  end
  return own, recomputed
end

-- The budget view of a run whose allocated peak is peak_bytes (the tagged allocations, workspace
-- included when the model takes it): the result's `plan` object.
function plan.budget(model, peak_bytes)
  local budget = model.memory_bytes - model.context_bytes
  local reserved = peak_bytes + math.floor(peak_bytes * model.reserve_overhead + 0.5)
  return {
    device_model = model.name, memory_bytes = model.memory_bytes, context_bytes = model.context_bytes,
    reserve_overhead = model.reserve_overhead + 0.0, workspace = model.workspace,
    peak_bytes = peak_bytes, budget_bytes = budget, predicted_reserved_bytes = reserved,
    fits = reserved <= budget, headroom_bytes = budget - reserved,
  }
end

-- "h100 (NVIDIA H100 80GB HBM3 (SXM5)): 79.65 GiB, context 512.00 MiB, workspace, reserve +5%, ..."
function plan.describe(model)
  local peaks = {}
  for _, dt in ipairs({ "bf16", "f32" }) do
    if model.peak_flops[dt] then peaks[#peaks + 1] = string.format("%.4g TFLOP/s %s", model.peak_flops[dt] / 1e12, dt) end
  end
  local cal = model.calibration
  return string.format("%s (%s): %s on the card, %s context, %s, reserved = allocated x %.3g, %s, %.4g TB/s%s",
                       model.name, model.description, dp.format_bytes(model.memory_bytes),
                       dp.format_bytes(model.context_bytes), model.workspace and "cuBLAS + kernels workspace"
                       or "no workspace", 1 + model.reserve_overhead, table.concat(peaks, ", "),
                       model.bandwidth / 1e12, cal and string.format("; times calibrated (%s, %s, commit %s, %s)",
                       cal.file or model.name, cal.device_name, cal.commit, cal.date) or "; times: the roofline")
end

return plan
