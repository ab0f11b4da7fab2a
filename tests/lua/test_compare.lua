-- test_compare.lua: `dpprof compare BASE NEW [--threshold R]` exit codes, run as users' CI runs
-- it: the dpprof binary on result files. 0: no regression; 1: peak memory or step time grew past
-- the threshold, or an ok run is no longer ok; 2: bad arguments or unreadable/invalid input.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local results = dp.results

local dir = string.format("/tmp/dpprof-test-compare-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. dir)
assert(dp.mkdir_p(dir))

-- A valid result from synthetic measurements (results.assemble, as an experiment builds it).
local function result(peak_bytes, iter_ms)
  local cats = {}
  for _, c in ipairs(dp.memory.categories) do cats[c] = 0 end
  local current, live = {}, {}
  for k, v in pairs(cats) do current[k], live[k] = v, v end
  current.parameters, live.parameters = 1 << 20, 1 << 20
  live.activations = peak_bytes - (1 << 20)
  local peaks = {}
  for k, v in pairs(live) do peaks[k] = v end
  local stats = { allocated = 1 << 20, peak = peak_bytes, reserved_peak = peak_bytes, current = current,
                  peaks = peaks, live_at_peak = live }
  local spans, phase_ms = {}, {}
  local t = 0
  for i, ms in ipairs(iter_ms) do
    local per = { forward = ms * 0.3, backward = ms * 0.5, clip = ms * 0.1, noise = ms * 0.05, optimizer = ms * 0.05 }
    for _, p in ipairs(results.PHASES) do
      spans[#spans + 1] = { phase = p, iter = i, start_ms = t, end_ms = t + per[p] }
      t = t + per[p]
    end
    phase_ms[i] = per
  end
  local r = results.assemble{
    name = "synthetic", config = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 16,
                                              batch = 4, dtype = "f32" },
                                   method = "ghost", optimizer = { name = "adamw", lr = 1e-4 },
                                   dp = { max_grad_norm = 1.0, noise_multiplier = 1.0, sample_rate = 0.01,
                                          max_physical_batch_size = 4, delta = 1e-5 },
                                   iters = #iter_ms, warmup = 1, device = "cpu", seed = 0 },
    method = "ghost", norms = "ghost", clip = "twopass", predicted = false,
    snapshots = { { name = "0_model_loaded", timestamp = 0.001, allocated = 1 << 20, reserved = 1 << 20,
                    categories = { parameters = 1 << 20 } } },
    memory = { stats = stats, warmup_peak_bytes = peak_bytes, modules = {},
               timeline = { t_ms = { 0.0, 1.0 }, allocated_bytes = { 1 << 20, peak_bytes },
                            reserved_bytes = { 1 << 20, peak_bytes } } },
    timing = { iter_ms = iter_ms, phase_ms = phase_ms, spans = spans },
    ledger = { { op = "matmul", calls = 4, flops = 1e6, bytes = 1e5 } },
    layers = { { module = "layers.0.attn.qkv", kind = "linear", norms = "ghost" } },
    environment = { device = "cpu", device_name = "cpu", cpu = "test", cores = 2, git_commit = "x",
                    dpprof_version = "0", hostname = "h", driver_version = dp.json.null,
                    cuda_version = dp.json.null },
    privacy = { noise_multiplier = 1.0, sample_rate = 0.01, steps = 3, delta = 1e-5, epsilon = 0.5 },
  }
  local ok, problems = results.validate(r)
  check.truthy(ok, "synthetic result valid: " .. table.concat(problems or {}, "; "))
  return r
end

local function write(name, r)
  return results.write(dir .. "/" .. name, r)
end

-- dpprof compare ARGS; returns the exit code (output kept in a file for the failure message)
local function compare(...)
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = string.format("%q", a) end
  local log = dir .. "/out.txt"
  local cmd = string.format("%q compare %s > %q 2>&1", dp.executable, table.concat(args, " "), log)
  local _, how, code = os.execute(cmd)
  check.eq(how, "exit", "compare ended by exit")
  local f = io.open(log)
  local text = f and f:read("a") or ""
  if f then f:close() end
  return code, text
end

local MiB = 1 << 20
local base = write("base.json", result(100 * MiB, { 10.0, 10.0, 10.0 }))
local same = write("same.json", result(100 * MiB, { 10.0, 10.0, 10.0 }))
local bigger = write("bigger.json", result(110 * MiB, { 10.0, 10.0, 10.0 }))   -- peak x1.10
local slower = write("slower.json", result(100 * MiB, { 11.0, 11.0, 11.0 }))   -- time x1.10
local faster = write("faster.json", result(80 * MiB, { 5.0, 5.0, 5.0 }))
local slightly = write("slightly.json", result(104 * MiB, { 10.4, 10.4, 10.4 })) -- x1.04

local code, text = compare(base, same)
check.eq(code, 0, "identical results: " .. text)
check.truthy(text:find("peak memory", 1, true) and text:find("step time", 1, true), "prints the metrics")
code, text = compare(base, bigger)
check.eq(code, 1, "peak memory +10% at the default threshold 1.05: " .. text)
check.truthy(text:find("peak memory grew 10.0%", 1, true), "names the regression: " .. text)
check.eq(compare(base, bigger, "--threshold", "1.2"), 0, "peak +10% under --threshold 1.2")
check.eq(compare("--threshold=1.2", base, bigger), 0, "--threshold=R form, before the paths")
code, text = compare(base, slower)
check.eq(code, 1, "step time +10%: " .. text)
check.truthy(text:find("step time (avg) grew", 1, true), "names the step time: " .. text)
check.eq(compare(base, faster), 0, "improvements pass")
-- a measured result against a plan prediction: said, since the times are not alike
local pr = results.read(same)
pr.predicted = true
local predicted = write("predicted.json", pr)
code, text = compare(base, predicted)
check.eq(code, 0, "same figures, one predicted: " .. text)
check.truthy(text:find("BASE is measured, NEW is predicted by the plan backend", 1, true), "says which: " .. text)
code, text = compare(predicted, base)
check.truthy(text:find("NEW is measured, BASE is predicted", 1, true), "either way round: " .. text)
code, text = compare(base, same)
check.truthy(not text:find("predicted", 1, true), "no note when both are measured: " .. text)
check.eq(compare(base, slightly), 0, "+4% is within 1.05")
check.eq(compare(base, slightly, "--threshold", "1.03"), 1, "+4% is past 1.03")

-- an ok run that no longer fits is a regression; a failure that now runs is not
local oom = results.failure{ name = "synthetic", status = "oom", message = "out of memory",
                             oom = { requested_bytes = 4096, category = "activations", module = "layers.0.attn.qkv",
                                     live_bytes = {} } }
for _, c in ipairs(dp.memory.categories) do oom.oom.live_bytes[c] = 0 end
local oom_file = write("oom.json", oom)
code, text = compare(base, oom_file)
check.eq(code, 1, "ok -> oom: " .. text)
check.truthy(text:find("ok in BASE, oom in NEW", 1, true), text)
check.eq(compare(oom_file, base), 0, "oom -> ok")

-- bad input: exit 2 with a message
code, text = compare(base)
check.eq(code, 2, "one path")
check.truthy(text:find("expected BASE and NEW", 1, true), text)
code, text = compare(base, dir .. "/missing.json")
check.eq(code, 2, "missing file")
check.truthy(text:find("missing.json", 1, true), "names the file: " .. text)
local bad = dir .. "/bad.json"
local f = assert(io.open(bad, "w"))
f:write('{"status": "ok", ')
f:close()
code, text = compare(base, bad)
check.eq(code, 2, "invalid JSON")
check.truthy(text:find("invalid JSON", 1, true), text)
local nofields = write("nofields.json", { schema_version = 1, status = "ok", experiment = "x" })
code, text = compare(base, nofields)
check.eq(code, 2, "an ok result without peak and time")
check.truthy(text:find("not a valid result", 1, true), text)
check.eq(compare(base, same, "--threshold", "zero"), 2, "threshold not a number")
check.eq(compare(base, same, "--threshold", "-1"), 2, "threshold not positive")
check.eq(compare(base, same, "--frobnicate"), 2, "unknown option")
check.eq(compare("--help"), 0, "--help")

-- directories: files matched by name, one regression fails the whole comparison
local d1, d2 = dir .. "/base_dir", dir .. "/new_dir"
assert(dp.mkdir_p(d1))
assert(dp.mkdir_p(d2))
results.write(d1 .. "/ghost.json", result(100 * MiB, { 10.0 }))
results.write(d1 .. "/flat.json", result(100 * MiB, { 10.0 }))
results.write(d2 .. "/ghost.json", result(100 * MiB, { 10.0 }))
results.write(d2 .. "/flat.json", result(100 * MiB, { 10.0 }))
check.eq(compare(d1, d2), 0, "equal directories")
results.write(d2 .. "/flat.json", result(120 * MiB, { 10.0 }))
code, text = compare(d1, d2)
check.eq(code, 1, "one file regressed: " .. text)
check.truthy(text:find("flat.json: peak memory grew", 1, true), "names the file: " .. text)
check.eq(compare(d1, base), 2, "a directory and a file")

os.execute("rm -rf " .. dir)
print("ok")
