-- test_shipped_models.lua: the calibrated device models shipped as data (lua/dpprof/models/, issue 30):
--   * h100-calibrated is found beside the Lua modules, loads, validates and carries its provenance;
--   * a plan run with device_model="h100-calibrated" is labelled calibrated, naming the file, the card,
--     the driver, the commit and the date, and its step differs from the roofline h100 (still the default);
--   * the name works as a base (overrides), in dpprof fit, and in scripts/bundle.sh's bundle;
--   * an unknown name is refused naming the valid ones (Lua and the command line, exit 2);
--   * CUDA's calibration set has the extra flash Gram-tile geometries, none a bench_plan_time.lua shape.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local plan = dp.plan
local devmodel = require("dpprof.devmodel")

local here = arg[0]:match("(.*/)")
local tmp = string.format("/tmp/dpprof-test-shipped-%d", dp.pid())
assert(dp.mkdir_p(tmp))

---------------------------------------------------------------------------------------------
-- 1. The shipped file: where it is, that it validates, what it says.
local names = devmodel.shipped_names()
check.eq(table.concat(names, ","), "h100-calibrated", "the shipped models")
local path = devmodel.shipped_path("h100-calibrated")
check.eq(path, dp.lua_dir .. "/dpprof/models/h100-calibrated.json", "found beside the Lua modules")
check.eq(devmodel.shipped_path("h100"), nil, "a roofline name is not a shipped file")
local m = plan.device_model("h100-calibrated")
check.truthy(devmodel.is_model(m), "a checked calibrated model")
check.eq(m.name, "h100-calibrated", "its name")
check.eq(m.calibration.file, path, "read from the shipped file")
check.eq(m.calibration.device .. "/" .. m.calibration.device_name, "cuda/NVIDIA H100 80GB HBM3", "the card")
check.eq(m.calibration.commit .. " " .. m.calibration.date, "047ed1ad1512 2026-11-27T07:05:01Z", "the commit and date")
check.eq(m.calibration.runs, 74, "the full calibration set's runs")
local prov = m.calibration.provenance
check.eq(prov.driver, "580.159.04", "the driver")
check.eq(prov.dpprof_commit, m.calibration.commit, "the provenance's commit is the file's")
check.truthy(prov.commands[2]:find("dpprof calibrate --device cuda", 1, true), "the command: " .. prov.commands[2])
for _, dt in ipairs({ "f32", "bf16" }) do
  check.truthy(devmodel.calibrated(m, dt), "calibrated in " .. dt)
  for _, op in ipairs({ "gemm", "attention_fwd", "dp_flash_gram_tile", "adamw_step" }) do
    check.truthy(m.calibration.dtypes[dt].ops[op], dt .. " has a curve for " .. op)
  end
end
-- the measured peaks, not the roofline's nominal ones
check.truthy(m.peak_flops.bf16 ~= plan.MODELS.h100.peak_flops.bf16 and m.bandwidth == 3352320000000.0,
             "the file's measured peaks: " .. m.peak_flops.bf16 .. ", " .. m.bandwidth)
check.eq(m.memory_bytes, 85017493504, "the card's memory as measured")
-- the file, decoded again, checks field by field: a wrong-typed provenance is refused naming it
local doc = dp.json.decode(dp.read_file(path))
doc.provenance.driver = 580
check.raises(function() devmodel.check(doc, "x.json") end, { "x.json", "provenance.driver", "string" },
             "a wrong-typed provenance field")
doc.provenance.driver = "580.159.04"
doc.provenance.commands = { "ok", 3 }
check.raises(function() devmodel.check(doc, "x.json") end, { "provenance.commands", "item 2" }, "a command not a string")

---------------------------------------------------------------------------------------------
-- 2. A plan run by the name: labelled calibrated with the file's provenance; the roofline h100 stays default.
local SMALL = { arch = "llama", vocab = 256, hidden = 64, layers = 2, heads = 4, seq_len = 32, batch = 2, dtype = "bf16" }
local function run(dm)
  return dp.experiment{ device = "plan", device_model = dm, model = SMALL, method = "flash_clip", iters = 1, warmup = 0,
                        snapshots = "none" }
end
local r = run("h100-calibrated")
check.eq(r.status, "ok", "plan run by name: " .. tostring(r.message))
local ok, problems = dp.results.validate(r)
check.truthy(ok, "the result validates: " .. table.concat(problems or {}, "; "))
local e = r.timing.estimate
check.eq(r.config.device_model, "h100-calibrated", "the result names the model")
check.eq(e.method, plan.CALIBRATED_METHOD, "a calibrated estimate")
check.eq(e.model_file, path, "the shipped file is named")
for _, want in ipairs({ "calibrated: " .. path, "NVIDIA H100 80GB HBM3", "driver 580.159.04", "commit 047ed1ad1512",
                        "2026-11-27T07:05:01Z" }) do
  check.truthy(e.label:find(want, 1, true), "the label says " .. want .. ": " .. e.label)
end
check.eq(e.calibration.commit .. "/" .. e.calibration.device, "047ed1ad1512/cuda", "the estimate's calibration")
local roof = run(nil) -- the default
check.eq(roof.config.device_model .. "/" .. roof.timing.estimate.device_model, "h100/h100", "the default is still the roofline h100")
check.eq(roof.timing.estimate.method, plan.METHOD, "labelled a roofline")
-- a small step on a real card is launch-bound: far above its roofline, which the calibrated model knows
check.truthy(e.ledger_ms > 5 * roof.timing.estimate.ledger_ms,
             string.format("calibrated %.4f ms vs roofline %.4f ms", e.ledger_ms, roof.timing.estimate.ledger_ms))
-- as a base, with an override of the budget
local b = plan.device_model{ base = "h100-calibrated", reserve_overhead = 0.05 }
check.eq(b.reserve_overhead .. "/" .. tostring(devmodel.calibrated(b, "bf16")), "0.05/true", "a base with overrides")

---------------------------------------------------------------------------------------------
-- 3. Unknown names list the valid ones; the command line.
check.raises(function() plan.device_model("h100-calibratd") end,
             { "unknown model 'h100-calibratd'", "valid: h100, h200, h100-calibrated" }, "an unknown name")
check.raises(function() plan.device_model{ base = "h300" } end, { "unknown base 'h300'", "h100-calibrated" },
             "an unknown base")
check.raises(function() dp.experiment{ device = "plan", device_model = "h100-calibratd", model = SMALL, iters = 1 } end,
             { "dpprof.experiment", "unknown model 'h100-calibratd'", "h100-calibrated" }, "dp.experiment refuses it")
local code, text = check.sh(string.format("'%s' fit device_model=h100-calibratd preset=small", dp.executable))
check.eq(code, 2, "fit with an unknown model exits 2: " .. text)
check.truthy(text:find("valid: h100, h200, h100-calibrated", 1, true), "fit names the valid ones: " .. text)
code, text = check.sh(string.format("'%s' fit device_model=h100-calibrated method=vanilla preset=small hi=256 context_mb=700",
                                    dp.executable))
check.eq(code, 0, "fit with the shipped model: " .. text)
check.truthy(text:find("calibrated", 1, true), "fit's step column is calibrated: " .. text)

---------------------------------------------------------------------------------------------
-- 4. scripts/bundle.sh carries it: the bundle's dpprof finds it by name.
local root = here .. "../.."
local build = dp.executable:match("(.*)/[^/]+$")
code, text = check.sh(string.format("sh '%s/scripts/bundle.sh' '%s' '%s/bundle'", root, build, tmp))
if code == 0 then
  check.truthy(dp.read_file(tmp .. "/bundle/lua/dpprof/models/h100-calibrated.json") == dp.read_file(path),
               "the bundle holds the shipped file")
  code, text = check.sh(string.format("'%s/bundle/dpprof' fit device_model=h100-calibrated method=vanilla preset=small hi=256",
                                      tmp))
  check.eq(code, 0, "the bundle's dpprof plans with it: " .. text)
  check.truthy(text:find("calibrated", 1, true), "calibrated in the bundle: " .. text)
else -- bundle.sh needs the charts' font installed (fonts-dejavu-core); say so, do not pass silently
  check.truthy(text:find("fonts-dejavu-core", 1, true), "bundle.sh failed for another reason: " .. text)
  io.stderr:write("test_shipped_models: bundle part skipped: " .. text)
end
---------------------------------------------------------------------------------------------
-- 5. CUDA's calibration set samples the flash Gram tile at more geometries (calibrate.FLASH_SHAPES),
-- none of them a shape of bench_plan_time.lua (read from the script: the bench stays test data).
local calibrate = require("dpprof.calibrate")
local bench = dp.read_file(root .. "/experiments/bench_plan_time.lua")
local cuda_block = bench:match("\n%s*cuda = (%b{})")
local bench_shapes = {}
for d, t, b in cuda_block:gmatch("hidden = (%d+), heads = %d+, seq_len = (%d+), batch = (%d+)") do
  bench_shapes[#bench_shapes + 1] = string.format("d%s_T%s_B%s", d, t, b)
end
check.eq(table.concat(bench_shapes, ","), "d768_T512_B8,d1536_T2048_B2", "the bench's CUDA shapes")
local set, geometry = calibrate.set("cuda", false), 0
for _, r in ipairs(set) do
  local shape = string.format("d%d_T%d_B%d", r.model.hidden, r.model.seq_len, r.model.batch)
  for _, b in ipairs(bench_shapes) do check.truthy(shape ~= b, "a bench shape in the calibration set: " .. r.name) end
  if r.name:find("_flash_clip_geometry", 1, true) then
    geometry = geometry + 1
    check.eq(r.method .. "/" .. r.profile .. "/" .. tostring(r.model.checkpoint), "flash_clip/ops/nil", r.name)
  end
end
check.eq(geometry, 2 * 2 * #calibrate.FLASH_SHAPES.cuda, "each flash shape in f32 and bf16, gpt and llama")
check.eq(#calibrate.set("cpu", false), 48, "the CPU set is unchanged")
for _, s in ipairs(calibrate.FLASH_SHAPES.cuda) do -- each one exercises the Gram tile (the cost model picks it)
  local model = { arch = "gpt", layers = 2, dtype = "bf16" }
  for k, v in pairs(s) do model[k] = v end
  local pr = dp.experiment{ device = "plan", model = model, method = "flash_clip", iters = 1, warmup = 0,
                            snapshots = "none", dp = { max_physical_batch_size = s.batch } }
  check.eq(pr.status, "ok", "plan of a flash shape: " .. tostring(pr.message))
  local calls = 0
  for _, e in ipairs(pr.ledger) do if e.op == "dp_flash_gram_tile" then calls = calls + e.calls end end
  check.truthy(calls >= 4, string.format("d%d T%d: %d Gram-tile calls", s.hidden, s.seq_len, calls))
end

check.sh("rm -rf '" .. tmp .. "'")
print("test_shipped_models: ok")
