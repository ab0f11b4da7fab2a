-- test_profile.lua: profile = "ops" (per-op time and memory), memory by phase and the host's peak
-- RSS, on the CPU and on the plan device.
--   * every op of the ledger is in the profile with the ledger's calls, flops and bytes;
--   * each phase's op time is within its measured time, and covers it: on the CPU the ops are the
--     phase's work, so what is outside them (the host between calls) stays a small part;
--   * on the plan device the clock is modelled: a phase's time is exactly its ops' roofline time;
--   * the op slices of the trace lie inside their phases' slices;
--   * memory by phase: each phase's categories sum to its peak and end, the highest phase peak is
--     the run's peak, and an op's buffers are charged to it (the attention's output);
--   * profiling changes no memory figure.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local results = dp.results

local MODEL = { arch = "gpt", vocab = 256, hidden = 64, layers = 2, heads = 4, seq_len = 32, batch = 4 }

local function run(extra)
  local cfg = { model = dp.deep_copy(MODEL), method = "ghost", device = "cpu", iters = 2, warmup = 1 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  local r = dp.experiment(cfg)
  check.eq(r.status, "ok", "status (" .. tostring(r.message) .. ")")
  local ok, problems = results.validate(r)
  check.truthy(ok, "valid result: " .. table.concat(problems or {}, "; "))
  return r
end

-- The phases every run has (recompute only with activation checkpointing).
local PHASES = {}
for _, name in ipairs(results.PHASES) do
  if not results.OPTIONAL_PHASES[name] then PHASES[#PHASES + 1] = name end
end

local trace_path = os.tmpname()
local plain = run()
local r = run{ profile = "ops", trace = trace_path }

-- The profile holds the ledger, op for op.
local by_op = {}
for _, o in ipairs(r.profile.ops) do by_op[o.op] = o end
check.eq(#r.profile.ops, #r.ledger, "one profile entry per ledger op")
for _, e in ipairs(r.ledger) do
  local o = by_op[e.op]
  check.truthy(o, "ledger op " .. e.op .. " profiled")
  check.eq(o.calls, e.calls, e.op .. ": calls")
  check.eq(o.bytes, e.bytes, e.op .. ": bytes equal the ledger's")
  check.eq(o.flops, e.flops, e.op .. ": flops equal the ledger's")
  check.truthy(o.timed_calls >= 1 and o.ms > 0, e.op .. ": timed")
  check.eq(o.category, dp.ops.category(e.op), e.op .. ": category")
end
check.eq(by_op.gemm.category, "matmul", "gemm is a matmul")
check.eq(by_op.attention_fwd.category, "attention", "attention")
check.eq(by_op.layernorm_fwd.category, "norm", "layernorm")
check.eq(by_op.dp_ghost_gram.category, "per_sample_norms", "ghost's Gram")
check.eq(by_op.dp_noise.category, "noise", "noise")
check.eq(by_op.adamw_step.category, "optimizer", "optimizer")
check.truthy(r.profile.peak.flops > 0 and r.profile.peak.bandwidth > 0, "the CPU's peak is measured")
check.truthy(r.profile.peak.how:find("measured", 1, true), "and says how")
local g = by_op.gemm
check.near(g.flops_per_s, g.flops / (g.ms / 1000), 1e-12, "achieved flop/s")
check.near(g.flops_fraction, g.flops_per_s / r.profile.peak.flops, 1e-12, "fraction of the peak")

-- Phases: op time within the phase's time, and nearly all of it: 80% of the heavy phases (99%
-- is typical in a Release build), 60% under ASan+UBSan, whose instrumented host code between the
-- calls runs several times slower while OpenBLAS inside them does not (tests/CMakeLists.txt).
local COVER = os.getenv("DPPROF_TEST_SANITIZED") and 0.6 or 0.8
local total_ops = 0
for _, o in ipairs(r.profile.ops) do total_ops = total_ops + o.ms end
local in_phases = 0
for _, name in ipairs(PHASES) do
  local p = r.profile.phases[name]
  check.truthy(p, "phase " .. name .. " profiled")
  check.near(p.ms, r.timing.phases_ms[name], 1e-9, name .. ": the phase time is the timing's")
  check.truthy(p.ops_ms <= p.ms * (1 + 1e-9), name .. ": its ops take no longer than the phase")
  check.near(p.outside_ops_ms, p.ms - p.ops_ms, 1e-9, name .. ": outside = phase - ops")
  in_phases = in_phases + p.ops_ms * r.profile.iters
end
-- The coverage is wall-clock: a busy machine (CI's -j2 on two cores) can preempt the host between
-- calls, so a run below it is run again, up to twice, and the best run's coverage is held.
local function coverage(run_r)
  local worst, at = math.huge, nil
  for _, name in ipairs({ "forward", "backward", "clip" }) do
    local p = run_r.profile.phases[name]
    if p.ops_ms / p.ms < worst then worst, at = p.ops_ms / p.ms, name end
  end
  return worst, at
end
local cover, at = coverage(r)
for _ = 1, 2 do
  if cover >= COVER then break end
  local again, again_at = coverage(run{ profile = "ops" })
  if again > cover then cover, at = again, again_at end
end
check.truthy(cover >= COVER, string.format("%s: ops cover %.1f%% of the phase", at, 100 * cover))
check.truthy(total_ops >= in_phases * (1 - 1e-9), "every op time in a phase is an op's")
local o = r.profile.overhead
check.truthy(o.ns_per_call > 0 and o.ns_per_call < 1e6, "the overhead per call is measured")
check.near(o.ms_per_iter, o.ns_per_call * o.calls_per_iter * 1e-6, 1e-12, "overhead per iteration")
local calls = 0
for _, op in ipairs(r.profile.ops) do calls = calls + op.timed_calls end
check.near(o.calls_per_iter, calls / r.profile.iters, 1e-12, "calls per iteration")

-- Memory: profiling changes nothing; phases add up.
check.eq(r.memory.peak_bytes, plain.memory.peak_bytes, "profiling leaves the peak as it is")
local highest = 0
for _, name in ipairs(PHASES) do
  local p = r.memory.phases[name]
  check.truthy(p, "memory.phases." .. name)
  highest = math.max(highest, p.peak_bytes)
  check.eq(p.peak_bytes, plain.memory.phases[name].peak_bytes, name .. ": the same peak unprofiled")
end
check.eq(highest, r.memory.peak_bytes, "the highest phase peak is the run's peak")
check.truthy(r.memory.phases.backward.live_at_peak.activations > 0, "activations live in the backward")
check.truthy(r.memory.phases.optimizer.live_at_end.optimizer_states > 0, "AdamW's states after the step")
-- the attention's output (B x T x d f32) and its log-sum-exp rows are made for it
local B, T, d, H = MODEL.batch, MODEL.seq_len, MODEL.hidden, MODEL.heads
check.truthy(by_op.attention_fwd.alloc_bytes >= r.profile.iters * MODEL.layers * B * T * d * 4,
             "attention_fwd is charged its output buffers")
check.truthy(r.memory.host_peak_rss_bytes > 0, "host peak RSS")
check.eq(r.memory.host_peak_rss_since, "experiment", "the peak RSS was reset at the start")
check.truthy(H > 0, "heads")

-- The trace: op slices inside the phase slices of the same thread.
local tr = dp.json.decode(assert(dp.read_file(trace_path)))
local phases, op_slices = {}, {}
for _, e in ipairs(tr.traceEvents) do
  if e.ph == "X" and e.tid == 2 then
    if e.cat == "phase" then phases[#phases + 1] = e else op_slices[#op_slices + 1] = e end
  end
end
check.truthy(#op_slices >= calls, "an op slice per timed call")
for _, s in ipairs(op_slices) do
  for _, p in ipairs(phases) do
    local overlaps = s.ts < p.ts + p.dur and s.ts + s.dur > p.ts
    local inside = s.ts >= p.ts - 1e-3 and s.ts + s.dur <= p.ts + p.dur + 1e-3
    check.truthy(not overlaps or inside, "op slice " .. s.name .. " nests in its phase")
  end
end
os.remove(trace_path)

-- The plan device: the clock is modelled, so ops make up each phase exactly.
local pr = run{ device = "plan", device_model = { base = "h100", workspace = false }, profile = "ops" }
check.eq(pr.profile.predicted, true, "a plan profile is predicted")
for _, name in ipairs(PHASES) do
  local p = pr.profile.phases[name]
  check.near(p.ops_ms, p.ms, 1e-6, name .. ": modelled ops make up the modelled phase")
end
check.eq(pr.memory.peak_bytes, plain.memory.peak_bytes, "the plan's peak is the CPU's")
local spans = pr.timing.spans
check.near(spans[#spans].end_ms - spans[1].start_ms, pr.timing.estimate.ledger_ms + (function()
  local s = 0
  for _, sp in ipairs(spans) do if sp.iter == 0 then s = s + sp.end_ms - sp.start_ms end end
  return s
end)(), 0.05, "the spans are on the modelled device's time (warm-up + the timed iterations' ops)")
check.truthy(dp.clock() < 1e6, "the clock is real again after the run")

-- Every shipped device model, profiled, writes a result dpprof accepts, each phase's ops within its
-- time (issue 37: with h100-calibrated's gap and curves the forward's ops took longer than the
-- forward: work modelled before the phase was charged to its first call)
do
  local results = require("dpprof.results")
  local devmodel = require("dpprof.devmodel")
  local names = { "h100", "h200" }
  for _, name in ipairs(devmodel.shipped_names()) do names[#names + 1] = name end
  for _, name in ipairs(names) do
    for _, method in ipairs({ "vanilla", "ghost", "bk", "flash_clip" }) do
      local r = run{ device = "plan", device_model = name, method = method, profile = "ops" }
      local ok, why = results.validate(r)
      check.truthy(ok, string.format("%s %s: the profiled result validates: %s", name, method,
                                     type(why) == "table" and table.concat(why, "; ") or tostring(why)))
      for phase, p in pairs(r.profile.phases) do
        check.truthy(p.ops_ms <= p.ms * (1 + 1e-9) + 1e-9, string.format("%s %s %s: ops %.9g ms within the phase's %.9g",
                                                                       name, method, phase, p.ops_ms, p.ms))
      end
    end
  end
end

-- Activation checkpointing: the recomputed blocks' ops (the ledger's "recompute:" section) are
-- the profile's `recompute` phase, as their time is the timing's; the phases they ran in keep the
-- rest, on the CPU and on the plan device.
for _, device in ipairs({ "cpu", "plan" }) do
  local model = dp.deep_copy(MODEL)
  model.checkpoint = "blocks"
  local c = run{ model = model, profile = "ops", device = device }
  local rc = c.profile.phases.recompute
  check.truthy(rc and rc.ms > 0, device .. ": a recompute phase profiled")
  for _, name in ipairs({ "recompute", "backward" }) do
    local p = c.profile.phases[name]
    check.near(p.ms, c.timing.phases_ms[name], 1e-9, device .. " " .. name .. ": the phase time is the timing's")
    check.truthy(p.ops_ms <= p.ms * (1 + 1e-9) + 1e-9, device .. " " .. name .. ": its ops take no longer than it")
    if device == "plan" then check.near(p.ops_ms, p.ms, 1e-6, name .. ": modelled ops make up the modelled phase") end
  end
  local gemm
  for _, o in ipairs(c.profile.ops) do if o.op == "recompute:gemm" then gemm = o end end
  check.truthy(gemm and gemm.category == "matmul" and gemm.ms > 0, device .. ": recomputed GEMMs are matmuls, timed")
end
print("test_profile: ok")
