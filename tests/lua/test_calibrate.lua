-- test_calibrate.lua: calibrated device models (issue 30).
--   * a fixed file (tests/fixtures/device_model/small.json): planned times equal the hand-computed
--     sum of its curves, the gap and the roofline for an op it lacks, in the engine's clock
--     (dp.clock_op_ms), in dpprof.devmodel's Lua evaluation and in plan.estimate;
--   * a plan run with it is labelled: method, label, model_file, calibration, the ops that fell back
--     to the roofline (labelled by their bound), the fit errors; it validates; bf16 is refused;
--   * a file is validated on load: a bad, missing or wrong-typed field is refused in one line that
--     names it (devmodel.load, dp.experiment, dpprof fit);
--   * the CPU calibration of the quick set: each of its runs, planned again with the file written,
--     reproduces its own per-op measured times within the file's stated fit error;
--   * the command line: bad arguments exit 2 naming them; --quick writes a loadable file;
--     --results-only fits a profiled result and refuses one without a profile; bench_plan_time.lua runs.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local json = dp.json
local plan = dp.plan
local calibrate, devmodel = require("dpprof.calibrate"), require("dpprof.devmodel")

local here = arg[0]:match("(.*/)")
local FIXTURE = here .. "../fixtures/device_model/small.json"
local tmp = string.format("/tmp/dpprof-test-calibrate-%d", dp.pid())
assert(dp.mkdir_p(tmp))
local SMALL = { arch = "gpt", vocab = 128, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 2 }

---------------------------------------------------------------------------------------------
-- 1. The fixed file, by hand: peaks 1e12 flop/s and 1e11 B/s, gap 1 us; gemm's knots
-- (-8,-6) (-6,-5) (-4,-4); attention_fwd's one knot (-6,-5.5); no curve for layernorm_fwd.
local m = devmodel.load(FIXTURE)
check.eq(m.name, "test-small", "the fixture's name")
check.truthy(devmodel.is_model(m) and devmodel.calibrated(m, "f32") and not devmodel.calibrated(m, "bf16"),
             "calibrated in f32 only")
check.eq(plan.device_model(FIXTURE).name, "test-small", "plan.device_model reads a file")
local ledger = {
  { op = "gemm", flops = 1e6, bytes = 0, want = 1e-5 },                  -- on a knot
  { op = "gemm", flops = 1e5, bytes = 0, want = 10 ^ -5.5 },             -- between knots, in log10
  { op = "recompute:gemm", flops = 1e9, bytes = 0, want = 1e-3 },        -- above: the last rate; its op's curve
  { op = "gemm", flops = 1e2, bytes = 0, want = 1e-7 },                  -- below: the first segment's slope 0.5
  { op = "attention_fwd", flops = 1e8, bytes = 1e5, want = 1e-4 * 10 ^ 0.5 }, -- one knot: a rate through it
  { op = "layernorm_fwd", flops = 1e3, bytes = 1e6, want = 1e-5 },       -- no curve: the roofline (bytes bound)
}
local hand, engine, lua_side = 0, 0, 0
dp.clock_model(devmodel.clock_args(m, "f32"))
for _, e in ipairs(ledger) do
  hand = hand + e.want + 1e-6
  local ms, calibrated = dp.clock_op_ms(e.op, e.flops, e.bytes)
  check.near(ms, (e.want + 1e-6) * 1e3, 1e-12, "the clock's time of " .. e.op)
  check.eq(calibrated, e.op ~= "layernorm_fwd", e.op .. ": calibrated or the roofline")
  engine = engine + ms * 1e-3
  local s, cal = devmodel.op_seconds(m, "f32", e.op, e.flops, e.bytes)
  check.eq(cal, calibrated, "the Lua evaluation agrees on the curve of " .. e.op)
  lua_side = lua_side + s
end
dp.clock_model(false)
check.near(engine, hand, 1e-15, "the clock's sum is the hand-computed one")
check.near(lua_side, hand, 1e-15, "devmodel.op_seconds' sum is the hand-computed one")
local est = plan.estimate({ { op = "gemm", calls = 2, flops = 2e6, bytes = 0 },
                            { op = "layernorm_fwd", calls = 1, flops = 0, bytes = 1e6 } }, m, "f32")
check.near(est.ms, 2 * (1e-5 + 1e-6) * 1e3 + (1e-5 + 1e-6) * 1e3, 1e-12, "plan.estimate on the file")
check.eq(est.ops[1].op .. "/" .. est.ops[1].bound, "gemm/calibrated", "a calibrated op is labelled so")
check.eq(est.ops[2].op .. "/" .. est.ops[2].bound, "layernorm_fwd/memory", "the fallback keeps its roofline bound")

---------------------------------------------------------------------------------------------
-- 2. A plan run with the file: labelled, and what fell back to the roofline listed.
local r = dp.experiment{ device = "plan", device_model = FIXTURE, model = SMALL, method = "ghost", iters = 1, warmup = 0,
                         snapshots = "none" }
check.eq(r.status, "ok", "plan run with the file: " .. tostring(r.message))
local ok, problems = dp.results.validate(r)
check.truthy(ok, "the calibrated result validates: " .. table.concat(problems or {}, "; "))
local e = r.timing.estimate
check.eq(e.method, plan.CALIBRATED_METHOD, "the estimate says it is calibrated")
check.eq(e.model_file, FIXTURE, "the file is named")
check.truthy(e.label:find("calibrated: " .. FIXTURE, 1, true), "the label names the file: " .. e.label)
check.eq(e.calibration.device_name .. "/" .. e.calibration.commit .. "/" .. e.calibration.gap_s, "test CPU/0000000/1e-06",
         "where, when and the gap")
local fell = table.concat(e.fallback_ops, ",")
check.truthy(fell:find("layernorm_fwd", 1, true) and fell:find("adamw_step", 1, true), "fallbacks listed: " .. fell)
check.truthy(not fell:find("gemm", 1, true) and not fell:find("attention_fwd,", 1, true), "curves are not fallbacks: " .. fell)
check.eq(#e.fit_error, 2, "the fit error of each op kind the file has")
check.eq(e.fit_error[2].op .. "/" .. e.fit_error[2].worst, "gemm/0.1", "the file's stated fit error")
local bounds = {}
for _, o in ipairs(e.ops) do bounds[o.op] = o.bound end
check.eq(bounds.gemm, "calibrated", "gemm's estimate is calibrated")
check.truthy(bounds.layernorm_fwd == "memory" or bounds.layernorm_fwd == "compute", "layernorm_fwd: the roofline's bound")
-- every op of the ledger costs its calls' modelled time; the iteration is their sum
local sum = 0
for _, o in ipairs(e.ops) do sum = sum + o.ms end
check.near(sum, e.ledger_ms, 1e-9, "ledger_ms is the sum of the ops' modelled time")
check.truthy(r.timing.avg_ms > 0 and r.timing.avg_ms <= e.ledger_ms + 1e-9, "the step is within the ledger's time")
local roof = dp.experiment{ device = "plan", device_model = "h100", model = SMALL, method = "ghost", iters = 1, warmup = 0,
                            snapshots = "none" }
check.truthy(roof.timing.estimate.method:find("^roofline") and roof.timing.estimate.fallback_ops == nil
             and roof.timing.estimate.model_file == nil, "a roofline estimate has none of the calibration's fields")
check.truthy(plan.describe(m):find("times calibrated", 1, true) and plan.describe(plan.device_model("h100")):find(
             "times: the roofline", 1, true), "describe says which")
local bf16 = { device = "plan", device_model = FIXTURE, model = { arch = "gpt", vocab = 128, hidden = 32, layers = 1,
               heads = 2, seq_len = 16, batch = 2, dtype = "bf16" }, iters = 1, warmup = 0 }
check.raises(function() dp.experiment(bf16) end, { "device_model 'test-small' has no bf16 (it models: f32)" },
             "a dtype the file lacks")
-- {base = FILE} with a budget of its own keeps the curves
local shrunk = plan.device_model{ base = FIXTURE, memory_gb = 1, name = "small-1g" }
check.eq(shrunk.memory_bytes .. "/" .. tostring(devmodel.calibrated(shrunk, "f32")), (1 << 30) .. "/true",
         "overrides on a file")

---------------------------------------------------------------------------------------------
-- 3. Validation: one line naming the field.
local function fixture() return json.decode(dp.read_file(FIXTURE)) end
local function ops(d) return d.dtypes.f32.ops end
local BAD = {
  { function(d) d.name = nil end, "field 'name' is missing (a printable string expected)" },
  { function(d) d.bandwidth = "fast" end, "field 'bandwidth' must be a rate in [1e3, 1e18], got \"fast\"" },
  { function(d) d.format = "v2" end, "field 'format' must be \"dpprof-device-model/1\"" },
  { function(d) d.speed = 1 end, "field 'speed' is not a device model field (valid: " },
  { function(d) d.device = "tpu" end, "field 'device' must be one of cpu, cuda" },
  { function(d) d.memory_bytes = 1.5 end, "field 'memory_bytes' must be an integer > 0" },
  { function(d) d.context_bytes = d.memory_bytes end, "field 'context_bytes' (17179869184) must be less than memory_bytes" },
  { function(d) d.workspace = "no" end, "field 'workspace' must be true or false" },
  { function(d) d.peak_flops = { f32 = -1 } end, "field 'peak_flops.f32' must be a rate in [1e3, 1e18], got -1" },
  { function(d) d.peak_flops = { f16 = 1 } end, "field 'peak_flops.f16' must be one of f32, bf16" },
  { function(d) d.peak_flops = json.object() end, "field 'peak_flops.f32' is missing (dtypes has f32)" },
  { function(d) d.dtypes = json.object() end, "field 'dtypes' must calibrate at least one dtype" },
  { function(d) d.dtypes.f16 = d.dtypes.f32 end, "field 'dtypes.f16' must be one of f32, bf16" },
  { function(d) d.dtypes.f32.gap_s = -1 end, "field 'dtypes.f32.gap_s' must be a number >= 0" },
  { function(d) d.dtypes.f32.gap_s = 2 end, "field 'dtypes.f32.gap_s' must be under 1 second" },
  { function(d) ops(d).gemm.log10_work_s = json.array({ -8, -8, -4 }) end,
    "field 'dtypes.f32.ops.gemm.log10_work_s' must be strictly increasing (item 2)" },
  { function(d) ops(d).gemm.log10_time_s = json.array({ -6, -5 }) end,
    "field 'dtypes.f32.ops.gemm.log10_time_s' must have as many items as log10_work_s (3), got 2" },
  { function(d) ops(d).gemm.log10_work_s = "fast" end, "field 'dtypes.f32.ops.gemm.log10_work_s' must be an array of 1 to 64 numbers" },
  { function(d) ops(d).gemm.log10_time_s = json.array({ -6, "x", -4 }) end,
    "field 'dtypes.f32.ops.gemm.log10_time_s' must hold finite numbers (item 2 is x)" },
  { function(d) ops(d).gemm.fit_error = nil end, "field 'dtypes.f32.ops.gemm.fit_error' is missing" },
  { function(d) ops(d).gemm.fit_error.worst = "bad" end, "field 'dtypes.f32.ops.gemm.fit_error.worst' must be a number >= 0" },
  { function(d) ops(d).gemm.samples = -1 end, "field 'dtypes.f32.ops.gemm.samples' must be an integer >= 0" },
  { function(d) ops(d)["no such op"] = ops(d).gemm end, "field 'dtypes.f32.ops.no such op' is not an op name" },
  { function(d) d.date = 20261127 end, "field 'date' must be a string, got 20261127" },
}
for i, b in ipairs(BAD) do
  local d = fixture()
  b[1](d)
  local path = string.format("%s/bad%d.json", tmp, i)
  assert(dp.write_file(path, json.encode(d)))
  local lok, err = pcall(devmodel.load, path)
  check.truthy(not lok, "bad file " .. i .. " is refused")
  err = tostring(err)
  check.truthy(err:find("dpprof: device model " .. path .. ": " .. b[2], 1, true),
               string.format("bad file %d names the field: %s (want %s)", i, err, b[2]))
  check.truthy(not err:find("\n", 1, true), "one line: " .. err)
end
assert(dp.write_file(tmp .. "/notjson.json", "{ \"format\": "))
check.raises(function() devmodel.load(tmp .. "/notjson.json") end, { "device model " .. tmp .. "/notjson.json: not valid JSON" },
             "not JSON")
check.raises(function() devmodel.load(tmp .. "/absent.json") end, { "absent.json: cannot be read" }, "no file")
check.raises(function()
  dp.experiment{ device = "plan", device_model = tmp .. "/bad2.json", model = SMALL, iters = 1, warmup = 0 }
end, { "field 'bandwidth' must be a rate in [1e3, 1e18]" }, "an experiment names the field")
local code, text = check.sh(string.format("'%s' fit device_model=%s/bad16.json preset=small 2>&1", dp.executable, tmp))
check.eq(code, 2, "dpprof fit refuses a bad file: " .. text)
check.truthy(text:find("field 'dtypes.f32.ops.gemm.log10_work_s' must be strictly increasing", 1, true), "named: " .. text)
code, text = check.sh(string.format("'%s' fit device_model=%s method=vanilla preset=small hi=256 2>&1", dp.executable, FIXTURE))
check.eq(code, 0, "dpprof fit with a file: " .. text)
check.truthy(text:find("times calibrated (" .. FIXTURE, 1, true) and text:find("calibrated step time", 1, true),
             "fit says its steps are calibrated: " .. text)

---------------------------------------------------------------------------------------------
-- 4. The CPU calibration of the quick set reproduces its own runs' op times within its stated
-- fit error: each run planned again with the written file, per op with a curve.
local doc, runs = calibrate.document{ device = "cpu", quick = true, threads = 1 }
check.eq(doc.calibration.runs, #calibrate.set("cpu", true) + 1, "every run of the quick set was measured, and the GEMM sweep")
local path = tmp .. "/cpu.json"
assert(dp.write_file(path, devmodel.encode(doc)))
local cpu = devmodel.load(path)
check.eq(cpu.calibration.device .. "/" .. cpu.calibration.threads .. "/" .. cpu.calibration.clock, "cpu/1/cpu",
         "device, threads and clock recorded (one thread: timed by its CPU time)")
check.truthy(cpu.calibration.commit ~= "" and cpu.calibration.date:match("^%d%d%d%d%-%d%d%-%d%dT"), "commit and date")
local d = cpu.calibration.dtypes.f32
for _, op in ipairs({ "gemm", "attention_fwd", "attention_bwd", "adamw_step", "dp_noise" }) do
  check.truthy(d.ops[op] and #d.ops[op].log10_work_s >= 1, "a curve for " .. op)
end
local checked = 0
for _, run in ipairs(runs) do
  if not run.cfg then goto continue end -- the GEMM sweep: no experiment to plan again
  local measured = {}
  for _, s in ipairs(run.samples) do measured[s.op] = (measured[s.op] or 0) + s.t end
  local c = dp.deep_copy(run.cfg)
  c.device, c.device_model, c.profile, c.threads = "plan", path, nil, nil
  local p = dp.experiment(c)
  check.eq(p.status, "ok", run.name .. " planned")
  local planned, calls = {}, {}
  for _, le in ipairs(dp.ledger()) do
    local b = devmodel.base(le.op)
    planned[b], calls[b] = (planned[b] or 0) + le.model_ms * 1e-3, (calls[b] or 0) + le.calls
  end
  for op, meas in pairs(measured) do
    local curve = d.ops[op]
    if curve and meas > 0 then
      local pred = planned[op] - d.gap_s * calls[op] -- the gap is host time, not the op's
      local err = math.abs(pred / meas - 1)
      check.truthy(err <= curve.fit_error.worst + 1e-6, string.format("%s: %s planned %.6g s, measured %.6g s: error "
                   .. "%.4f within the stated worst %.4f", run.name, op, pred, meas, err, curve.fit_error.worst))
      checked = checked + 1
    end
  end
  ::continue::
end
check.truthy(checked >= 200, "ops checked against their stated fit error: " .. checked)
check.eq(d.ops.gemm.fit_error.runs, #runs, "gemm's fit error is over every run (its size depends on the machine's load: not checked)")

---------------------------------------------------------------------------------------------
-- 5. The command line.
local bin = dp.executable
for _, bad in ipairs({ { "--device tpu", "--device must be cpu or cuda, got 'tpu'" },
                       { "--threads 0", "--threads must be an integer in 1.." },
                       { "--bogus", "unknown option '--bogus' (valid: --device, --out" },
                       { "--results-only", "--results-only needs RESULTS" },
                       { "--out", "--out needs a value" },
                       { "--clock gpu", "--clock must be wall or cpu, got 'gpu'" },
                       { "--clock cpu --threads 2 --quick", "the cpu clock times one CPU thread: it needs --device cpu and --threads 1" },
                       { "--out /nonexistent/dir/m.json --quick", "dpprof calibrate: --out:" } }) do
  code, text = check.sh(string.format("cd '%s' && '%s' calibrate %s 2>&1", tmp, bin, bad[1]))
  check.eq(code, 2, "calibrate " .. bad[1] .. " exits 2: " .. text)
  check.truthy(text:find(bad[2], 1, true), "calibrate " .. bad[1] .. " says why: " .. text)
end
code, text = check.sh(string.format("'%s' calibrate --help", bin))
check.truthy(code == 0 and text:find("usage: dpprof calibrate", 1, true), "--help")
code, text = check.sh(string.format("'%s' calibrate --quick --threads 1 --name ci --out %s/ci.json 2>/dev/null", bin, tmp))
check.eq(code, 0, "calibrate --quick: " .. text)
check.truthy(text:find("model 'ci' from 13 runs", 1, true) and text:find("gemm", 1, true), "its table: " .. text)
check.eq(devmodel.load(tmp .. "/ci.json").name, "ci", "the file it wrote loads")
-- experiments/bench_plan_time.lua runs with it (a smoke run: quick, one repeat; its figures are not checked)
local root = here .. "../../"
code, text = check.sh(string.format("'%s' run %sexperiments/bench_plan_time.lua quick=true repeats=1 device_model=%s/ci.json "
                                    .. "out=%s/bench 2>&1", bin, root, tmp, tmp))
check.eq(code, 0, "bench_plan_time quick: " .. text)
local bench = json.decode(assert(dp.read_file(tmp .. "/bench/bench_plan_time.json")))
check.eq(#bench.rows .. "/" .. bench.clock .. "/" .. bench.summary.all.points, "3/cpu/3", "three points, by CPU time")
for _, row in ipairs(bench.rows) do
  check.truthy(row.measured_ms > 0 and row.planned_ms > 0 and math.abs(row.ratio - row.planned_ms / row.measured_ms) < 1e-12,
               "a point planned and measured: " .. row.name)
end
code, text = check.sh(string.format("'%s' run %sexperiments/bench_plan_time.lua quick=true device_model=h100 2>&1", bin, root))
check.truthy(code == 2 and text:find("device_model must be a calibrated model file (FILE.json), got 'h100'", 1, true),
             "the bench needs a file: " .. text)
local profiled = dp.experiment{ device = "cpu", model = SMALL, method = "ghost", iters = 1, warmup = 1, profile = "ops",
                                threads = 1 }
dp.results.write(tmp .. "/profiled.json", profiled)
local unprofiled = dp.experiment{ device = "cpu", model = SMALL, method = "ghost", iters = 1, warmup = 0, threads = 1 }
dp.results.write(tmp .. "/unprofiled.json", unprofiled)
code, text = check.sh(string.format("'%s' calibrate --results-only --out %s/res.json %s/profiled.json 2>&1", bin, tmp, tmp))
check.eq(code, 0, "calibrate from a profiled result: " .. text)
local res = devmodel.load(tmp .. "/res.json")
check.truthy(res.calibration.dtypes.f32.ops.gemm ~= nil and res.calibration.runs == 1, "its curves come from the result")
code, text = check.sh(string.format("'%s' calibrate --results-only --out %s/res2.json %s/unprofiled.json 2>&1", bin, tmp, tmp))
check.eq(code, 2, "a result without a profile is refused: " .. text)
check.truthy(text:find("unprofiled.json has no per-op profile", 1, true), "says why: " .. text)

-- a mutated profiled result is validated as compare validates it, naming the file and field, never
-- fitted (issue 37: "attempt to compare number with string", negative times fitted, 2^63 calls)
for _, case in ipairs({ { "string_calls", function(o) o.calls = "12" end, "profile.ops[1].calls" },
                        { "negative_ms", function(o) o.ms = -1.5 end, "profile.ops[1].ms" },
                        { "huge_calls", function(o) o.calls = 2^63 end, "profile.ops[1].calls" },
                        { "negative_flops", function(o) o.flops = -1 end, "profile.ops[1].flops" } }) do
  local doc = dp.json.decode(dp.read_file(tmp .. "/profiled.json"))
  case[2](doc.profile.ops[1])
  local path = tmp .. "/" .. case[1] .. ".json"
  local f = assert(io.open(path, "w"))
  f:write(dp.json.encode(doc))
  f:close()
  code, text = check.sh(string.format("'%s' calibrate --results-only --out %s/mut.json %s 2>&1", bin, tmp, path))
  check.eq(code, 2, case[1] .. ": refused: " .. text)
  check.truthy(text:find(case[1] .. ".json: not a valid result: ", 1, true) and text:find(case[3], 1, true),
               case[1] .. ": names the file and the field: " .. text)
  check.truthy(not text:find("attempt to", 1, true), case[1] .. ": not a Lua error: " .. text)
  check.eq(dp.read_file(tmp .. "/mut.json"), nil, case[1] .. ": no model written")
end

-- dpprof compare says which estimate a plan result holds
dp.results.write(tmp .. "/planned.json", r)
code, text = check.sh(string.format("'%s' compare %s/profiled.json %s/planned.json 2>&1", bin, tmp, tmp))
check.truthy(text:find("NEW is predicted by the plan backend (its times are a calibrated estimate, " .. FIXTURE .. ")", 1, true),
             "compare names the calibrated model: " .. text)
os.execute("rm -rf '" .. tmp .. "'")
print("test_calibrate: ok")
