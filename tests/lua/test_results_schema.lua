-- test_results_schema.lua: real small experiments on the CPU, their results checked field by
-- field against docs/results.md (dpprof.results.validate) and against what we can compute
-- independently: parameter bytes, the default snapshot names and order, iteration times as sums
-- of phase spans, epsilon from the accountant, the same bytes in a child as in this process, OOM
-- results, callbacks, configuration errors, and the Chrome trace.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local json = dp.json
local results = dp.results

-- This test needs the model, the optimizers and the DP wrapper: fail (not skip) while one is missing.
for _, api in ipairs({ "model", "batch", "free_batch", "optim", "dpsgd" }) do
  if dp[api] == nil then error("test_results_schema waits on dp." .. api .. " (the model/optim/DP Lua bindings)") end
end

local MODEL = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 4 }
local function config(extra)
  local c = { model = {}, method = "ghost", iters = 2, warmup = 1, device = "cpu",
              dp = { max_physical_batch_size = 2 } }
  for k, v in pairs(MODEL) do c.model[k] = v end
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

local function assert_valid(r, what)
  local ok, problems = results.validate(r)
  check.truthy(ok, what .. " is valid:\n  " .. table.concat(problems or {}, "\n  "))
end

-- A copy of base with change(copy) made fails validation, naming field among its problems.
local function assert_broken(base, change, field)
  local b = dp.deep_copy(base)
  change(b)
  local ok, problems = results.validate(b)
  check.truthy(not ok and table.concat(problems, "; "):find(field, 1, true), field .. ": " ..
               table.concat(problems or {}, "; "))
end

local function names(r)
  local out = {}
  for i, s in ipairs(r.snapshots) do out[i] = s.name end
  return table.concat(out, " ")
end

-- parameter bytes, independently of the experiment
local probe = dp.model{ arch = MODEL.arch, vocab = MODEL.vocab, hidden = MODEL.hidden, layers = MODEL.layers,
                        heads = MODEL.heads, seq_len = MODEL.seq_len, batch = 2, device = "cpu" }
local param_bytes = probe:num_params() * 4 -- f32
probe:free()

---------------------------------------------------------------------------------------------
-- ghost, two physical batches per step, in this process
local r = dp.experiment(config())
check.eq(r.status, "ok", "ghost run: " .. tostring(r.message))
assert_valid(r, "ghost result")
check.eq(names(r), "0_model_loaded 1_wrapped_with_dp 2_optimizer_created 3_after_warmup "
  .. "iter1_before_forward iter1_after_forward iter1_after_backward iter1_after_step "
  .. "iter2_before_forward iter2_after_forward iter2_after_backward iter2_after_step", "default snapshot schedule")
check.eq(r.snapshots[1].categories.parameters, param_bytes, "parameters at 0_model_loaded")
check.eq(r.snapshots[1].allocated_mb * results.MiB, param_bytes, "only parameters after the model loads")
check.eq(r.memory.categories.parameters.live_at_peak_bytes, param_bytes, "parameters live at the peak")
check.eq(r.breakdown.model_parameters_mb, param_bytes / results.MiB, "legacy breakdown of parameters")
-- peaks: the timed peak bounds every timed snapshot; the warm-up peak every earlier one
local timed = false
for _, s in ipairs(r.snapshots) do
  local bytes = math.floor(s.allocated_mb * results.MiB + 0.5)
  if s.name:match("^iter") then
    timed = true
    check.truthy(bytes <= r.memory.peak_bytes, s.name .. " within the timed peak")
  else
    check.truthy(bytes <= r.memory.warmup_peak_bytes, s.name .. " within the warm-up peak")
  end
end
check.truthy(timed, "timed snapshots present")
check.truthy(r.memory.peak_bytes > param_bytes, "training needs more than the parameters")
check.truthy(r.memory.categories.optimizer_states.live_at_peak_bytes == 2 * param_bytes,
             "AdamW holds two moments per parameter at the peak")
-- timing: iterations are sums of their phases; 2 physical batches -> 3*2 + 2 spans per iteration
check.eq(#r.timing.iter_ms, 2, "timed iterations")
local per_iter, sums = {}, {}
for k, s in ipairs(r.timing.spans) do
  per_iter[s.iter] = (per_iter[s.iter] or 0) + 1
  sums[s.iter] = (sums[s.iter] or 0) + (s.end_ms - s.start_ms)
  if k > 1 then check.truthy(s.start_ms >= r.timing.spans[k - 1].end_ms, "spans in order, not overlapping") end
end
for it = 0, 2 do check.eq(per_iter[it], 8, "spans of iteration " .. it) end
for i = 1, 2 do check.near(r.timing.iter_ms[i], sums[i], 1e-9, "iter_ms[" .. i .. "] = sum of its phases") end
local first_backward
for _, s in ipairs(r.timing.spans) do
  if s.iter == 1 and s.phase == "backward" then first_backward = first_backward or s end
end
for _, s in ipairs(r.snapshots) do
  if s.name == "iter1_after_backward" then
    check.truthy(s.timestamp * 1000 >= first_backward.end_ms, "iter1_after_backward taken after the first backward")
  end
end
-- the ledger, the layers, privacy, configuration echo, environment
check.truthy(#r.ledger > 0, "ledger has ops")
local flops = 0
for _, e in ipairs(r.ledger) do flops = flops + e.flops end
check.truthy(flops > 0, "flops counted")
check.truthy(#r.layers > 0, "DP layers reported")
check.eq(r.method, "ghost")
check.eq(r.norms, "ghost")
check.eq(r.clip, "twopass")
check.eq(r.predicted, false)
check.eq(r.privacy.steps, 3, "noisy steps: warm-up + timed")
local eps = dp.privacy.epsilon{ sample_rate = 0.01, noise_multiplier = 1.0, steps = 3, delta = 1e-5 }.epsilon
check.near(r.privacy.epsilon, eps, 1e-12, "epsilon from the accountant")
check.eq(r.privacy.accountant, "prv", "PRV by default, as Opacus's PrivacyEngine")
check.eq(r.privacy.accountant_params.eps_error, 0.01, "PRV's eps_error")
check.near(r.privacy.accountant_params.delta_error, 1e-8, 1e-20, "PRV's delta_error: delta / 1000")
check.eq(r.config.dp.accountant, "prv", "the accountant echoed in the configuration")
check.eq(r.privacy.sampling, "fixed", "fixed batches by default")
check.eq(r.privacy.caveat, results.FIXED_BATCH_CAVEAT, "fixed batches carry the caveat")
check.eq(results.epsilon_text(r.privacy), string.format("epsilon %.4g at delta 1e-05 (prv; fixed batches: understated)",
                                                        eps), "the CLI's epsilon line says so")
do -- the validator holds the privacy fields to the page
  local function broken(change, field) assert_broken(r, function(b) change(b.privacy) end, field) end
  broken(function(p) p.accountant = "moments" end, "privacy.accountant: 'moments' (valid: rdp, prv, pld)")
  broken(function(p) p.caveat = nil end, "privacy.caveat: missing")
  broken(function(p) p.sampling = "poisson" end, "privacy.caveat: only for fixed batches")
  broken(function(p) p.sampling = "shuffled" end, "privacy.sampling: 'shuffled'")
  broken(function(p) p.accountant_params = nil end, "privacy.accountant_params: missing")
end
check.eq(r.config.model.batch, 4, "logical batch echoed")
check.eq(r.config.dp.max_physical_batch_size, 2, "physical batch echoed")
check.eq(r.config.model.hidden, 32)
check.eq(r.config.device, "cpu")
check.eq(r.environment.device, "cpu")
check.eq(r.environment.cores, dp.environment().cores)
check.truthy(json.is_null(r.environment.cuda_version), "no CUDA version on the CPU")
-- the JSON round trip keeps every field and type
local back = json.decode(json.encode(r, { indent = true }))
assert_valid(back, "ghost result after a JSON round trip")
check.eq(math.type(back.memory.peak_bytes), "integer", "peak_bytes stays an integer")
check.eq(math.type(back.timing.avg_ms), "float", "avg_ms stays a float")

---------------------------------------------------------------------------------------------
-- the same experiment in a child allocates the same bytes
local child = dp.isolate(dp.experiment, config(), { timeout = 120 })
check.eq(child.status, "ok", "isolated run: " .. tostring(child.message))
assert_valid(child, "isolated result")
check.eq(child.memory.peak_bytes, r.memory.peak_bytes, "same peak in a child as in this process")
check.eq(names(child), names(r), "same snapshots in a child")
for _, c in ipairs(results.CATEGORIES) do
  check.eq(child.memory.categories[c].live_at_peak_bytes, r.memory.categories[c].live_at_peak_bytes, c .. " at the peak")
end
check.truthy(child.snapshots[1].timestamp < 60, "the child's clock starts at its start")
check.eq(child.environment.threads, dp.threads(), "the child ran with the parent's thread count")

-- threads: the run's count recorded and echoed, the process's own count restored after it
local before = dp.threads()
local one = dp.experiment(config{ method = "vanilla", threads = 1, iters = 1, warmup = 0 })
assert_valid(one, "result of a 1-thread run")
check.eq(one.environment.threads, 1, "environment.threads is the run's count")
check.eq(one.config.threads, 1, "config.threads echoed")
check.eq(dp.threads(), before, "the process's thread count restored after the run")
check.raises(function() dp.experiment(config{ threads = 0 }) end, "threads must be an integer >= 1")
local bad = json.decode(json.encode(one))
bad.environment.threads = 0
check.truthy(not results.validate(bad), "environment.threads 0 refused")

---------------------------------------------------------------------------------------------
-- vanilla: no wrap snapshot, no privacy, no DP layers
local v = dp.experiment(config{ method = "vanilla" })
check.eq(v.status, "ok", "vanilla run: " .. tostring(v.message))
assert_valid(v, "vanilla result")
check.eq(names(v), "0_model_loaded 2_optimizer_created 3_after_warmup "
  .. "iter1_before_forward iter1_after_forward iter1_after_backward iter1_after_step "
  .. "iter2_before_forward iter2_after_forward iter2_after_backward iter2_after_step", "vanilla schedule")
check.truthy(json.is_null(v.privacy), "vanilla privacy is null")
check.truthy(json.is_null(v.norms) and json.is_null(v.clip), "vanilla norms and clip are null")
check.eq(#v.layers, 0, "no DP layers for vanilla")
check.eq(v.memory.categories.per_sample_grads.peak_bytes, 0, "vanilla has no per-sample gradients")

---------------------------------------------------------------------------------------------
-- Poisson sampling accounted by PLD: no caveat, the accountant's epsilon and parameters
local pl = dp.experiment(config{ dp = { max_physical_batch_size = 2, accountant = "pld", poisson = true,
                                        dataset_size = 400 } })
check.eq(pl.status, "ok", "PLD run: " .. tostring(pl.message))
assert_valid(pl, "PLD result")
check.eq(pl.privacy.accountant, "pld")
check.eq(pl.privacy.sampling, "poisson")
check.eq(pl.privacy.caveat, nil, "no caveat for Poisson sampling")
check.eq(pl.privacy.accountant_params.value_discretization_interval, 1e-4)
check.near(pl.privacy.epsilon, dp.privacy.epsilon{ accountant = "pld", sample_rate = 0.01, noise_multiplier = 1.0,
                                                   steps = pl.privacy.steps, delta = 1e-5 }.epsilon, 1e-12,
           "epsilon from the PLD accountant")
check.eq(results.epsilon_text(pl.privacy), string.format("epsilon %.4g at delta 1e-05 (pld)", pl.privacy.epsilon))

---------------------------------------------------------------------------------------------
-- callbacks and a chosen schedule
local cb = dp.experiment(config{
  snapshots = { "0_model_loaded", "iter{i}_after_step" },
  on = { after_forward = function(ctx, i, k)
           ctx:snapshot("mine_" .. i .. "_" .. k)
           ctx.extra.forwards = (ctx.extra.forwards or 0) + 1
         end },
})
check.eq(cb.status, "ok", "callback run: " .. tostring(cb.message))
assert_valid(cb, "callback result")
check.eq(names(cb), "0_model_loaded mine_1_1 mine_1_2 iter1_after_step mine_2_1 mine_2_2 iter2_after_step",
         "own snapshots in place, schedule filtered")
check.eq(cb.extra.forwards, 4, "extra from ctx.extra (2 iterations x 2 physical batches)")
local none = dp.experiment(config{ snapshots = "none", iters = 1, warmup = 0 })
check.eq(#none.snapshots, 0, "snapshots = none")
assert_valid(none, "result without snapshots")

---------------------------------------------------------------------------------------------
-- out of memory: a result with status oom and what was measured up to then
local limit = r.memory.peak_bytes // 2
local o = dp.experiment(config{ memory_limit = limit })
check.eq(o.status, "oom", "status under a memory limit")
assert_valid(o, "OOM result")
check.truthy(o.oom.requested_bytes > 0, "request recorded")
check.eq(o.oom.limit_bytes, limit, "the limit that refused it")
check.truthy(o.oom.total_live_bytes + o.oom.requested_bytes > limit, "the request did not fit")
check.truthy(o.message:find("out of memory", 1, true), o.message)
check.truthy(#o.snapshots >= 1 and o.snapshots[1].name == "0_model_loaded", "snapshots before the failure kept")
check.eq(dp.memory.stats().limit, 0, "the limit is lifted after the run")
local o2 = dp.isolate(dp.experiment, config{ memory_limit = limit })
check.eq(o2.status, "oom", "OOM in a child")
check.eq(o2.oom.requested_bytes, o.oom.requested_bytes, "same failing request in a child")

---------------------------------------------------------------------------------------------
-- configuration errors name the valid choices
check.raises(function() dp.experiment(config{ colour = 1 }) end, { "unknown key 'colour'", "iters", "warmup" })
check.raises(function() dp.experiment(config{ method = "fast" }) end, { "unknown method 'fast'", "flash_clip" })
check.raises(function() dp.experiment(config{ dp = { max_grad = 1 } }) end, { "dp: unknown key 'max_grad'", "max_grad_norm" })
check.raises(function() dp.experiment(config{ optimizer = { name = "adam" } }) end, { "unknown optimizer 'adam'", "adamw, sgd" })
check.raises(function() dp.experiment(config{ on = { after_lunch = print } }) end, { "unknown key 'after_lunch'", "after_step" })
check.raises(function() dp.experiment(config{ iters = 0 }) end, "iters must be an integer >= 1")
check.raises(function() dp.experiment(config{ dp = { accountant = "moments" } }) end,
             "dp.accountant: unknown accountant 'moments' (valid: rdp, prv, pld)")

---------------------------------------------------------------------------------------------
-- the Chrome trace
local trace_path = os.tmpname()
local tr = dp.experiment(config{ trace = trace_path })
check.eq(tr.trace_file, trace_path)
local t = results.read(trace_path)
os.remove(trace_path)
local by_tid, counters = {}, {}
for _, e in ipairs(t.traceEvents) do
  if e.ph == "X" then
    by_tid[e.tid] = by_tid[e.tid] or {}
    table.insert(by_tid[e.tid], e)
  elseif e.ph == "C" then
    counters[e.name] = math.max(counters[e.name] or 0, e.args.bytes)
  end
end
check.eq(#by_tid[1], 3, "one iteration slice per iteration (warm-up + 2)")
check.eq(#by_tid[2], 24, "one phase slice per span")
for tid, list in pairs(by_tid) do
  table.sort(list, function(a, b) return a.ts < b.ts end)
  for k = 2, #list do
    check.truthy(list[k].ts >= list[k - 1].ts + list[k - 1].dur - 1e-6, "no overlapping slices on tid " .. tid)
  end
end
check.eq(counters["memory.parameters"], param_bytes, "parameters counter")
check.truthy(counters.allocated >= tr.memory.peak_bytes, "allocated counter reaches the peak")

---------------------------------------------------------------------------------------------
-- activation checkpointing (issue 16): recompute is a phase of its own, its spans nested in the
-- backward (and bk's clip) that ran them, on a thread of their own in the trace; the iteration
-- is still the sum of its phases; the configuration echoes the setting
do
  local path = os.tmpname()
  local model = {}
  for k, v in pairs(MODEL) do model[k] = v end
  model.checkpoint = "blocks"
  for _, method in ipairs({ "ghost", "bk", "vanilla" }) do
    local c = config{ method = method, trace = path }
    c.model = model
    local rc = dp.experiment(c)
    check.eq(rc.status, "ok", "checkpointed " .. method .. ": " .. tostring(rc.message))
    assert_valid(rc, "checkpointed " .. method)
    if method == "ghost" then checkpointed = rc end
    check.eq(rc.config.model.checkpoint, "blocks", "the setting echoed")
    check.truthy(rc.timing.phases_ms.recompute > 0, method .. ": recompute time measured")
    local recomputes, outer, sums = 0, {}, {}
    for _, s in ipairs(rc.timing.spans) do
      if s.phase == "recompute" then
        recomputes = recomputes + 1
        local host = outer[#outer]
        check.truthy(host and host.iter == s.iter and s.start_ms >= host.start_ms and s.end_ms <= host.end_ms and
                     (host.phase == "backward" or (host.phase == "clip" and method ~= "vanilla")),
                     method .. ": a recomputation nests in its backward or clip")
      else
        outer[#outer + 1] = s
        sums[s.iter] = (sums[s.iter] or 0) + (s.end_ms - s.start_ms)
      end
    end
    -- 3 iterations x 2 physical batches x 2 blocks x passes: ghost recomputes in its second
    -- backward, bk in its clip, vanilla once
    check.eq(recomputes, 3 * 2 * 2 * (method == "vanilla" and 1 or 2), method .. ": recompute spans")
    for i = 1, 2 do
      check.near(rc.timing.iter_ms[i], sums[i], 1e-6, method .. ": iter_ms[" .. i .. "] = its phases, recompute moved")
    end
    local t = results.read(path)
    local slices = 0
    for _, e in ipairs(t.traceEvents) do
      if e.ph == "X" and e.name == "recompute" then
        check.eq(e.tid, 4, "recompute slices on their own thread")
        slices = slices + 1
      end
    end
    check.eq(slices, recomputes, method .. ": a trace slice per recomputation")
    local ops = 0
    for _, e in ipairs(rc.ledger) do if e.op:find("^recompute:") then ops = ops + e.flops end end
    check.truthy(ops > 0, method .. ": the recomputation's flops in the ledger")
  end
  os.remove(path)
end

-- The validator holds the units and invariants the page states, each broken once in a real
-- result: a snapshot's reserved_mb in MiB, at least its allocated_mb and at most the run's
-- reserved peak; category peaks within the total peak; the timeline's reserved over its
-- allocated; the phases within the step (their mean adds up to avg_ms, an iteration's phase spans
-- to its iter_ms, a recomputation inside its backward or clip)
do
  local broken = assert_broken
  local last = #r.snapshots
  broken(r, function(b) b.snapshots[last].reserved_mb = b.snapshots[last].reserved_mb * results.MiB end,
         "snapshots[" .. last .. "].reserved_mb: ")
  broken(r, function(b) b.snapshots[2].reserved_mb = b.snapshots[2].allocated_mb / 2 end,
         "snapshots[2].reserved_mb: ")
  check.truthy(r.snapshots[2].reserved_mb >= r.snapshots[2].allocated_mb, "a real snapshot holds reserved >= allocated")
  broken(r, function(b) b.memory.categories.activations.peak_bytes = b.memory.peak_bytes + 1 end,
         "memory.categories.activations.peak_bytes: above memory.peak_bytes")
  broken(r, function(b) b.memory.timeline.reserved_bytes[1] = b.memory.timeline.allocated_bytes[1] - 1 end,
         "memory.timeline.reserved_bytes[1]: ")
  broken(r, function(b) b.timing.phases_ms.clip = b.timing.phases_ms.clip + 1.0 end,
         "timing.phases_ms: ")
  broken(r, function(b)
    for _, s in ipairs(b.timing.spans) do if s.iter == 2 and s.phase == "noise" then s.end_ms = s.end_ms + 1.0 end end
  end, "timing.spans: iteration 2's phase spans sum to")
  broken(checkpointed, function(b)
    for _, s in ipairs(b.timing.spans) do
      if s.phase == "recompute" and s.iter == 1 then s.start_ms, s.end_ms = -2.0, -1.0; break end
    end
  end, "a recompute span outside its iteration's backward and clip")
end

-- The one schema (common/results_schema.h, dpprof.results_schema) against what is written and
-- what is validated: every field a real result carries is described (the writer cannot add one
-- the chart reader and the validator do not know), and the validator checks every described
-- field (a field of the wrong type or value is named). tests/plots/test_schema.c holds the chart
-- reader to the same table.
local fixture_root = arg[0]:match("(.*/)") .. "../fixtures/results/"
local schema = dp.results_schema
check.eq(schema.version, results.SCHEMA_VERSION, "the validator reads the schema's version")
-- a plan run (timing.estimate, plan, environment.device_model, config.dp.flash_impl) and a sweep
-- point (sweep.*), beside the CPU runs above: ghost (r), vanilla (v), Poisson/PLD (pl), callbacks
-- with extra (cb), out of memory (o) and the trace (tr)
local planned = dp.experiment(config{ method = "flash_clip", device = "plan", device_model = "h100",
                                      dp = { max_physical_batch_size = 2, flash_impl = "strips" } })
check.eq(planned.status, "ok", "plan run: " .. tostring(planned.message))
assert_valid(planned, "plan result")
-- a plan run of a checkpoint's shapes with LoRA (config.model.path, config.model.lora.rank and
-- targets: what the charts' subtitles and the summaries name, issue 38.4)
local adapted = dp.experiment{ method = "ghost", device = "plan", device_model = "h100", iters = 1, warmup = 0,
                               dp = { max_physical_batch_size = 2 },
                               model = { path = fixture_root .. "../llama3_8b", layers = 1, seq_len = 16, batch = 2,
                                         lora = { rank = 4 } } }
check.eq(adapted.status, "ok", "LoRA plan run: " .. tostring(adapted.message))
assert_valid(adapted, "LoRA plan result")
check.eq(adapted.config.model.lora.rank, 4, "config.model.lora.rank")
check.truthy(type(adapted.config.model.path) == "string", "config.model.path")
-- a plan run with a calibrated device model file (timing.estimate's model_file, calibration, fallback_ops, fit_error)
local calibrated = dp.experiment(config{ method = "ghost", device = "plan",
                                         device_model = fixture_root .. "../device_model/small.json" })
check.eq(calibrated.status, "ok", "calibrated plan run: " .. tostring(calibrated.message))
assert_valid(calibrated, "calibrated plan result")
-- a plan run beyond its card, with the checkpointing advice a sweep point gets (dpprof.fit)
local advised_cfg = config{ method = "vanilla", device = "plan",
                            device_model = { base = "h100", name = "tiny", memory_bytes = 1 << 20, context_bytes = 0 } }
local advised = dp.experiment(advised_cfg)
advised.plan.checkpoint_advice = require("dpprof.fit").checkpoint_advice(advised_cfg, advised)
check.eq(advised.plan.checkpoint_advice and advised.plan.checkpoint_advice.fits, false, "1 MiB: not even every block fits")
assert_valid(advised, "plan result with checkpointing advice")
local sweep_out = os.tmpname()
os.remove(sweep_out)
local swept = dp.sweep{ base = config{ device = "plan", iters = 1, warmup = 0 }, vary = { method = { "bk" } },
                        out = sweep_out, isolate = false, quiet = true }
local point = swept.points[1].result
assert_valid(point, "sweep point")
check.truthy(type(point.sweep) == "table" and point.sweep.config_hash, "a sweep point carries sweep")
for _, n in ipairs(dp.list_dir(sweep_out)) do os.remove(sweep_out .. "/" .. n) end
os.remove(sweep_out)
-- a point as a parallel sweep on a GPU node of a Slurm array places it (sweep.placement.*: the
-- fields lua/dpprof/parallel.lua and slurm.lua write)
local placed = dp.deep_copy(point)
placed.sweep.placement = { host = "node1", slot = 1, slots = 2, threads = 1, cuda_visible_devices = "0",
                           slurm = { job_id = "17", task_job_id = "18", node = "node1", cluster = "c",
                                     state = "COMPLETED", exit_code = "0:0", state_source = "sacct",
                                     array_task_id = 0 } }
assert_valid(placed, "a placed sweep point")
-- the per-op profile and memory by phase (profile = "ops"), and a point run twice (repeats)
local profiled = dp.experiment(config{ profile = "ops" })
check.eq(profiled.status, "ok", "profiled run: " .. tostring(profiled.message))
assert_valid(profiled, "profiled result")
local rep_out = os.tmpname()
os.remove(rep_out)
local repeated = dp.sweep{ base = config{ device = "plan", iters = 1, warmup = 0 }, vary = { method = { "bk" } },
                           out = rep_out, repeats = 2, quiet = true }.points[1].result
assert_valid(repeated, "a repeated sweep point")
check.eq(#repeated.repeats.runs, 2, "a repeated point keeps both runs")
os.execute("rm -rf '" .. rep_out .. "'")
do -- the invariants of these fields
  local broken = assert_broken
  broken(profiled, function(b) b.memory.phases.forward.live_at_peak.parameters = 0 end,
         "memory.phases.forward.live_at_peak: sums to")
  broken(profiled, function(b) b.memory.phases.forward.end_bytes = b.memory.phases.forward.peak_bytes + 1 end,
         "memory.phases.forward.end_bytes: above the phase's peak_bytes")
  broken(profiled, function(b) b.memory.phases.clip = nil; b.memory.phases.nosuch = b.memory.phases.forward end,
         "memory.phases.nosuch: unknown phase")
  broken(profiled, function(b) b.memory.host_peak_rss_since = nil end, "memory.host_peak_rss_since: missing")
  broken(profiled, function(b) b.profile.ops[1], b.profile.ops[2] = b.profile.ops[2], b.profile.ops[1] end,
         "profile.ops[2]: ops are not sorted by ms")
  broken(profiled, function(b) b.profile.phases.forward.ops_ms = b.profile.phases.forward.ms * 2 + 1 end,
         "profile.phases.forward.ops_ms: above the phase's time")
  broken(profiled, function(b) b.profile.peak = json.null end, "profile.peak_error: missing")
  broken(repeated, function(b) b.repeats.n = 3 end, "repeats.runs: has 2 runs, repeats.n is 3")
  broken(repeated, function(b) b.repeats.avg_ms.max = b.repeats.avg_ms.max + 1 end, "repeats.avg_ms.max: ")
  broken(repeated, function(b) b.repeats.avg_ms = nil end, "repeats.avg_ms: missing")
end
-- samples of their own lengths with Poisson steps: steps[] and data (issue 31)
local lengths = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 16 },
                               method = "ghost", device = "plan", iters = 3, warmup = 0, snapshots = "none",
                               dp = { poisson = true, sample_rate = 0.5, max_physical_batch_size = 2 },
                               data = { lengths = { 3, 16, 7, 9, 2, 12 }, pad_to = 4 } }
assert_valid(lengths, "a result of samples of their own lengths")
check.eq(#lengths.steps, 3, "steps[]: one per timed step")
check.eq(lengths.data.samples, 6, "data.samples")
-- a distributed run: rank 1 of a planned world of 2; `ranks` and `largest`, which rank 0 of a
-- launched world gathers (tests/distributed/plan_equal.lua), made here from two of its ranks' plans
local function rank_plan(rank)
  local d = dp.experiment(config{ device = "plan", dp = { max_physical_batch_size = 1 },
                                  distributed = { strategy = "ddp", world_size = 2, rank = rank } })
  check.eq(d.status, "ok", "distributed plan run: " .. tostring(d.message))
  check.eq(d.distributed.rank, rank, "the plan's rank")
  assert_valid(d, "distributed plan result")
  return d
end
local distributed = rank_plan(1)
do
  local experiment = require("dpprof.experiment")
  local ranks, largest = experiment.combine({ experiment.rank_summary(rank_plan(0), 0),
                                              experiment.rank_summary(distributed, 1) })
  distributed.distributed.ranks, distributed.distributed.largest = ranks, largest
  assert_valid(distributed, "a combined distributed result")
end
-- clipping styles (issue 40): named groups with automatic clipping (config.dp.groups, clip_fn,
-- gamma; clipping.gamma), and per_layer bounds by tensor name (config.dp.bounds)
local grouped = dp.experiment(config{ method = "bk", dp = { max_physical_batch_size = 2, clipping = "groups",
                                                            clip_fn = "automatic", gamma = 0.02,
                                                            groups = { { name = "all", patterns = { "*" } } } } })
check.eq(grouped.status, "ok", "groups run: " .. tostring(grouped.message))
assert_valid(grouped, "groups result")
local layered = dp.experiment(config{ method = "bk", dp = { max_physical_batch_size = 2, clipping = "per_layer",
                                                            bounds = { ["*.mlp.*"] = 0.5 } } })
check.eq(layered.status, "ok", "per_layer run: " .. tostring(layered.message))
assert_valid(layered, "per_layer result")
local adaclipped = dp.experiment(config{ method = "flash_clip", dp = { max_physical_batch_size = 2,
  adaptive = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.2, max_clipbound = 10,
               min_clipbound = 0.01, unclipped_num_std = 1 } } })
check.eq(adaclipped.status, "ok", "adaptive run: " .. tostring(adaclipped.message))
assert_valid(adaclipped, "adaptive result")
-- a data set of text (issue 41): records, bad records by line, the tokenizer (data.records, bad_records[])
local text_dir = string.format("/tmp/dpprof-test-schema-text-%d", dp.pid())
os.execute("mkdir -p " .. text_dir)
assert(dp.write_file(text_dir .. "/d.jsonl", '{"text": "In the beginning"}\nnot json\n{"prompt": "Q", "completion": " A b"}\n'))
local texted = dp.experiment{ model = { arch = "gpt", vocab = 1007, hidden = 16, layers = 1, heads = 2, seq_len = 16,
                                        batch = 2 },
                              method = "ghost", device = "plan", iters = 1, warmup = 0, snapshots = "none",
                              data = { dataset = text_dir .. "/d.jsonl",
                                       tokenizer = arg[0]:match("(.*/)") .. "../fixtures/tokenizer/llama3" } }
os.execute("rm -rf " .. text_dir)
check.eq(texted.status, "ok", "data set run: " .. tostring(texted.message))
assert_valid(texted, "a result of a data set of text")
check.eq(texted.data.bad, 1, "data.bad")
check.eq(texted.data.bad_records[1].line, 2, "data.bad_records[].line")
local documents = { ghost = r, vanilla = v, texted = texted, pld = pl, callbacks = cb, oom = o, trace = tr, plan = planned, sweep = point,
                    placed = placed, checkpointed = checkpointed, profiled = profiled, repeated = repeated,
                    advised = advised, lengths = lengths, distributed = distributed,
                    calibrated = calibrated, adapted = adapted, grouped = grouped, layered = layered,
                    adaclipped = adaclipped }

local function is_category(k) for _, c in ipairs(results.CATEGORIES) do if c == k then return true end end end
local function is_phase(k) for _, c in ipairs(results.PHASES) do if c == k then return true end end end

-- Every path of a document is described: the node for each key, or below an OPEN object.
local function undescribed(node, value, path, out)
  if type(value) ~= "table" or json.is_null(value) then return end
  local f = node.field
  if f and f.type == "any" then return end
  local is_list = #value > 0 or getmetatable(value) == getmetatable(json.array())
  for k, x in pairs(value) do
    local key, child = tostring(k), nil
    if is_list and math.type(k) == "integer" then
      child, key = node.children["[]"], path .. "[" .. k .. "]"
    else
      child = node.children[key] or (is_category(key) and node.children["{category}"])
              or (is_phase(key) and node.children["{phase}"]) or node.children["*"]
      key = path == "" and key or path .. "." .. key
    end
    if child then
      undescribed(child, x, key, out)
    elseif not (f and f.open) then
      out[#out + 1] = key
    end
  end
  return out
end
for name, doc in pairs(documents) do
  local missing = undescribed(results.SCHEMA.tree, doc, "", {})
  table.sort(missing)
  check.eq(#missing, 0, name .. " result: fields the schema does not describe: " .. table.concat(missing, ", "))
end
for _, set in ipairs({ "single", "sweep_seq", "sweep_2d", "sweep_3d" }) do
  local doc = results.read(fixture_root .. set .. "/" .. (set == "single" and "ghost.json" or
                                                             set == "sweep_seq" and "ghost_seq1024.json" or
                                                             set == "sweep_2d" and "ghost_seq1024_b1.json" or
                                                             "batch=4,lora_rank=8,max_physical_batch_size=2.json"))
  local missing = undescribed(results.SCHEMA.tree, doc, "", {})
  check.eq(#missing, 0, "fixture " .. set .. ": fields the schema does not describe: " .. table.concat(missing, ", "))
end

-- Every described field is checked: in a document holding its parent, a value of the wrong type
-- (and, for a field with choices, a value outside them) is named by the validator.
local BAD = { string = 12345, integer = 1.5, number = "x", boolean = "x", object = "x", array = "x", scalar = { 1 } }
local SAMPLE = { ["{category}"] = results.CATEGORIES[1], ["{phase}"] = results.PHASES[1], ["*"] = "x" }
-- The concrete path of a schema path (placeholders and [] at their first instance), as a list of
-- keys; nil when doc has no parent for it.
local function locate(doc, f)
  local t, shown, parts = doc, "", {}
  for part in f.path:gmatch("[^.]+") do
    local name, arrays = part:gsub("%[%]", "")
    parts[#parts + 1] = SAMPLE[name] or name
    for _ = 1, arrays do parts[#parts + 1] = 1 end
  end
  for i = 1, #parts - 1 do
    t = type(t) == "table" and not json.is_null(t) and t[parts[i]] or nil
    if t == nil then return nil end
  end
  if type(t) ~= "table" or json.is_null(t) then return nil end
  for _, k in ipairs(parts) do
    shown = math.type(k) and shown .. "[" .. k .. "]" or (shown == "" and k or shown .. "." .. k)
  end
  return t, parts[#parts], shown
end
local checked = 0
for _, f in ipairs(schema.fields) do
  if f.type ~= "any" then
    local found = false
    for _, name in ipairs({ "ghost", "plan", "oom", "sweep", "placed", "trace", "pld", "callbacks", "vanilla", "profiled",
                            "repeated", "advised", "lengths", "distributed", "calibrated", "adapted", "grouped",
                            "layered", "adaclipped", "texted" }) do
      local doc = dp.deep_copy(documents[name])
      local parent, key, shown = locate(doc, f)
      if parent then
        found = true
        for _, bad in ipairs({ BAD[f.type], f.choices and f.type == "string" and "no-such-choice" or nil }) do
          parent[key] = bad
          local ok, problems = results.validate(doc)
          local named = false
          for _, line in ipairs(problems or {}) do named = named or line:find(shown .. ":", 1, true) == 1 end
          check.truthy(not ok and named, string.format("%s = %s in the %s result is named: %s", shown, tostring(bad),
                                                      name, table.concat(problems or {}, "; ")))
        end
        checked = checked + 1
        break
      end
    end
    check.truthy(found, f.path .. ": no document holds its parent")
  end
end
check.truthy(checked >= #schema.fields - 1, "every field was tried (" .. checked .. ")")

-- recompute is the one phase a result may lack (results written before activation checkpointing
-- have none), forward is not; config.model.checkpoint is false, "blocks" or N >= 1
do
  local older = dp.deep_copy(checkpointed)
  older.timing.phases_ms.recompute = nil
  assert_valid(older, "a result without the recompute phase")
  older.timing.phases_ms.forward = nil
  local ok, problems = results.validate(older)
  check.truthy(not ok and problems[1] == "timing.phases_ms.forward: missing (number expected)",
               "a missing forward phase is named: " .. table.concat(problems or {}, "; "))
  local doc = dp.deep_copy(checkpointed)
  for _, good in ipairs({ false, "blocks", 1, 2 }) do -- the model has 2 layers
    doc.config.model.checkpoint = good
    assert_valid(doc, "checkpoint = " .. tostring(good))
  end
  doc.config.model.checkpoint = 4 -- past the layers: what dp.model refuses is no result (issue 26 item 7)
  ok, problems = results.validate(doc)
  check.truthy(not ok and problems[1]:find("'checkpoint' 4 is more than the model's 2 layers", 1, true),
               "checkpoint = 4 of 2 layers is named: " .. table.concat(problems or {}, "; "))
  for _, bad in ipairs({ "every", 0, 2.5, true }) do
    doc.config.model.checkpoint = bad
    ok, problems = results.validate(doc)
    check.truthy(not ok and problems[1] == string.format("config.model.checkpoint: 'checkpoint' must be false, "
                                                         .. "\"blocks\" (every block) or an integer N >= 1 (every "
                                                         .. "N-th block), got %s", type(bad) == "string"
                                                         and string.format("%q", bad) or tostring(bad)),
                 "checkpoint = " .. tostring(bad) .. " is named: " .. table.concat(problems or {}, "; "))
  end
end

-- The chart fixtures (tests/fixtures/results, from generate.lua) are results as this page
-- describes them, OOM points included; the malformed set breaks exactly what its tests expect.
do
  local root = fixture_root
  local n = 0
  for _, set in ipairs({ "single", "sweep_seq", "sweep_2d", "sweep_3d" }) do
    local ls = assert(io.popen("ls '" .. root .. set .. "'"))
    for name in ls:lines() do
      if name:match("%.json$") then
        local ok, problems = results.validate(results.read(root .. set .. "/" .. name))
        check.truthy(ok, string.format("fixture %s/%s validates: %s", set, name, table.concat(problems or {}, "; ")))
        n = n + 1
      end
    end
    ls:close()
  end
  check.truthy(n >= 90, "the fixtures were found (" .. n .. ")")
  local function broken(name, field)
    local ok, problems = results.validate(results.read(root .. "malformed/" .. name))
    check.eq(ok, false, "malformed/" .. name .. " fails")
    check.truthy(problems and problems[1]:find(field, 1, true) == 1, "malformed/" .. name .. " names " .. field ..
                 ": " .. tostring(problems and problems[1]))
  end
  broken("ghost.json", "memory.peak_bytes")
  broken("flash_clip.json", "memory.timeline.reserved_bytes")
  for _, name in ipairs({ "vanilla.json", "flat.json", "ghost+twopass.json" }) do
    check.truthy(results.validate(results.read(root .. "malformed/" .. name)), "malformed/" .. name .. " is itself valid")
  end
end
-- A failed run's configuration is what was asked for: a sweep's crashed or timed-out point
-- records its point's configuration, before the experiment filled in its defaults (dtype,
-- max_physical_batch_size...). Such a file used to fail validation, so `dpprof compare` refused
-- a sweep directory with a timed-out point. What is there is still checked, and an ok result
-- still needs every key.
do
  local asked = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 },
                  device = "cpu", iters = 1, warmup = 0, method = "ghost" }
  local failed = results.failure{ name = "p", status = "timeout", message = "timed out", config = asked }
  assert_valid(failed, "a timed-out point with the configuration it asked for")
  failed.config.model.seq_len = "8"
  local ok, problems = results.validate(failed)
  check.eq(ok, false, "a wrong type in a failed run's configuration is still refused")
  check.truthy(problems[1]:find("config.model.seq_len", 1, true) == 1, tostring(problems[1]))
  local good = dp.experiment(config({ iters = 1, warmup = 0 }))
  good.config.model.dtype = nil
  ok, problems = results.validate(good)
  check.eq(ok, false, "an ok result without config.model.dtype")
  check.truthy(problems[1]:find("config.model.dtype: missing", 1, true) == 1, tostring(problems[1]))
end
print("ok")
