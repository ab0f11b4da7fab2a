-- test_compare.lua: `dpprof compare BASE NEW [--threshold R]` exit codes on result files, through
-- dpprof.cli.compare in this process (the binary itself twice, at the end). 0: every pair compared
-- and none regressed; 1: peak memory or step time grew past the threshold, an ok run is no longer
-- ok, or a pair could not be compared; 2: bad arguments, or a file that is unreadable or not a
-- valid result, named with its field (every document is validated once, when it is read).
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
    local per = { forward = ms * 0.3, backward = ms * 0.5, clip = ms * 0.1, noise = ms * 0.05, optimizer = ms * 0.05,
                  recompute = 0 }
    for _, p in ipairs(results.PHASES) do
      if not results.OPTIONAL_PHASES[p] then -- no checkpointing, one process: no recompute or comm span
        spans[#spans + 1] = { phase = p, iter = i, start_ms = t, end_ms = t + per[p] }
        t = t + per[p]
      end
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

-- dpprof compare ARGS, in this process; returns the exit status and everything it printed. It
-- must never raise, whatever the files hold.
local cli = require("dpprof.cli")
local function compare(...)
  local lines = {}
  local function add(line) lines[#lines + 1] = line end
  local ok, code = pcall(cli.compare, { ... }, { out = add, err = add })
  check.truthy(ok, "compare raised: " .. tostring(code))
  return code, table.concat(lines, "\n")
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
check.truthy(text:find("step time (median) grew", 1, true), "names the step time: " .. text)
check.eq(compare(base, faster), 0, "improvements pass")
-- a measured result against a plan prediction: said, since the times are not alike
local pr = results.read(same)
pr.predicted = true -- with what docs/results.md requires of a predicted result
pr.timing.estimate = { device_model = "h100", method = "roofline: sum over ops of max(flops/peak, bytes/bandwidth)",
                       dtype = "f32", peak_flops = 1e12, bandwidth = 1e9, ledger_ms = 30.0, label = "estimate",
                       ops = dp.json.array() }
local peak = pr.memory.peak_bytes
pr.plan = { device_model = "h100", memory_bytes = 1 << 30, context_bytes = 1 << 20, workspace = true,
            reserve_overhead = 0.0, peak_bytes = peak, budget_bytes = (1 << 30) - (1 << 20),
            predicted_reserved_bytes = peak, fits = true, headroom_bytes = (1 << 30) - (1 << 20) - peak }
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

-- an ok run that no longer fits is a regression; a pair with a failed BASE was not compared, and a
-- comparison that did not happen does not pass
local oom = results.failure{ name = "synthetic", status = "oom", message = "out of memory",
                             oom = { requested_bytes = 4096, category = "activations", module = "layers.0.attn.qkv",
                                     live_bytes = {} } }
for _, c in ipairs(dp.memory.categories) do oom.oom.live_bytes[c] = 0 end
local oom_file = write("oom.json", oom)
code, text = compare(base, oom_file)
check.eq(code, 1, "ok -> oom: " .. text)
check.truthy(text:find("ok in BASE, oom in NEW", 1, true), text)
code, text = compare(oom_file, base)
check.eq(code, 1, "oom -> ok is not a comparison: " .. text)
check.truthy(text:find("not compared: oom in BASE, ok in NEW", 1, true), text)
code, text = compare(oom_file, oom_file)
check.eq(code, 1, "oom -> oom: " .. text)

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
check.truthy(text:find("nofields.json: not a valid result: ", 1, true), text)

-- Documents that are not valid results: exit 2, the file and the field named. Two legacy files
-- (no schema_version, no status) used to print "status: nil -> nil" and pass with 5x the peak;
-- {} and [1,2,3] printed "ok in BASE, nil in NEW" and exited 1.
local function raw(name, text)
  assert(dp.write_file(dir .. "/" .. name, text))
  return dir .. "/" .. name
end
local legacy_a = raw("legacy_a.json", '{"experiment":"a","peak_memory_mb":100,"avg_time_ms":10}')
local legacy_b = raw("legacy_b.json", '{"experiment":"a","peak_memory_mb":500,"avg_time_ms":90}')
code, text = compare(legacy_a, legacy_b)
check.eq(code, 2, "legacy documents: " .. text)
check.truthy(text:find("legacy_a.json: not a valid result: schema_version: missing", 1, true), text)
local function invalid(name, doc, field)
  local path = raw(name, doc)
  local c, t = compare(base, path)
  check.eq(c, 2, name .. ": " .. t)
  check.truthy(t:find(name .. ": not a", 1, true) and t:find(field, 1, true), name .. " names " .. field .. ": " .. t)
  c, t = compare(path, base)
  check.eq(c, 2, name .. " as BASE: " .. t)
end
invalid("empty.json", "{}", "schema_version: missing")
invalid("array.json", "[1,2,3]", "the document is an array")
invalid("number.json", "42", "the document is a number")
invalid("null.json", "null", "the document is null")
-- a valid result with one field broken, as the hostile-input pass found them (each used to raise
-- in cli.lua: "attempt to index a number value", or an invalid format '%301s')
local function broken(name, edit, field)
  local r = results.read(base)
  edit(r)
  invalid(name, results.encode(r), field)
end
broken("exploded.json", function(r) r.status = "exploded" end, "status: 'exploded' (valid: ok, oom")
broken("timing5.json", function(r) r.timing = 5 end, "timing: object expected, got integer")
broken("spans0.json", function(r) r.timing.spans = dp.json.array{ 0 } end, "timing.spans[1]: object expected, got integer")
broken("frac.json", function(r) r.memory.categories.activations.live_at_peak_bytes = 1.5 end,
       "memory.categories.activations.live_at_peak_bytes: integer expected, got float")
broken("huge.json", function(r) r.peak_memory_mb = 1e300 end, "peak_memory_mb: 1e+300 differs from memory.peak_bytes")
broken("cats.json", function(r) r.memory.categories = dp.json.array{ 1, 2 } end, "memory.categories")
broken("snap.json", function(r) r.snapshots = dp.json.array{ "x", 3 } end, "snapshots[1]: object expected, got string")
broken("iters.json", function(r) r.timing.iter_ms = dp.json.array{ "1", 2 } end, "timing.iter_ms[1]")
broken("mods.json", function(r) r.memory.modules = dp.json.array{ 7, { module = "x" } } end, "memory.modules[1]")
broken("phases.json", function(r) r.timing.phases_ms = "fast" end, "timing.phases_ms: object expected, got string")
broken("nan.json", function(r) r.avg_time_ms = 0 / 0 end, "avg_time_ms: number expected, got string")
-- a configuration no run would take (issue 26: each compared as "no regression", exit 0): the
-- config is checked as dp.experiment checks a script's
broken("method_x.json", function(r) r.config.method = "x" end, "config: unknown method 'x' (valid: ")
broken("layers0.json", function(r) r.config.model.layers = 0 end,
       "config: dpprof.model: 'layers' must be a positive integer (got 0)")
broken("hidden0.json", function(r) r.config.model.hidden = 0 end,
       "config: dpprof.model: 'hidden' must be a positive integer (got 0)")
broken("clip_x.json", function(r) r.config.method = "ghost+x" end, "config: dpprof.dpsgd.wrap: unknown clip method 'x'")
-- a NUL byte in place of white space is no JSON (cJSON took it for a space)
local text_base = assert(dp.read_file(base))
local nul = raw("nul.json", (text_base:gsub("\n", "\0", 1)))
code, text = compare(base, nul)
check.eq(code, 2, "a NUL byte: " .. text)
check.truthy(text:find("nul.json: invalid JSON at line 1, column 2 (control character 0x00", 1, true), text)
-- figures far larger than any run are printed, not a crash
local big = results.read(base)
big.memory.peak_bytes = math.maxinteger
for _, c in ipairs(dp.memory.categories) do big.memory.categories[c].live_at_peak_bytes = 0 end
big.memory.categories.other.live_at_peak_bytes = math.maxinteger
big.memory.categories.other.peak_bytes = math.maxinteger
big.memory.reserved_peak_bytes = math.maxinteger
big.peak_memory_mb = math.maxinteger / MiB
big.breakdown.peak_allocated_mb = big.peak_memory_mb
for k in pairs(results.LEGACY_BREAKDOWN) do big.breakdown[k] = 0.0 end
big.memory.warmup_peak_bytes = math.maxinteger
local vok, problems = results.validate(big)
check.truthy(vok, "a huge but valid result: " .. table.concat(problems or {}, "; "))
code, text = compare(base, write("big.json", big))
check.eq(code, 1, "a huge peak is a regression: " .. text)
check.truthy(text:find("8388608.00 TiB", 1, true), "printed in full: " .. text)
check.eq(compare(write("big2.json", big), write("big3.json", big)), 0, "huge against huge")
check.eq(compare(base, same, "--threshold", "zero"), 2, "threshold not a number")
check.eq(compare(base, same, "--threshold", "-1"), 2, "threshold not positive")
check.eq(compare(base, same, "--threshold", "1e999"), 2, "threshold not finite")
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
-- a result only in BASE was not compared: exit 1; one only in NEW is noted; a JSON document that
-- is no result (no key of the schema's at its top) and a trace file are skipped, but a result
-- that is invalid stops the comparison
results.write(d2 .. "/flat.json", result(100 * MiB, { 10.0 }))
results.write(d1 .. "/bk.json", result(100 * MiB, { 10.0 }))
code, text = compare(d1, d2)
check.eq(code, 1, "bk.json only in BASE: " .. text)
check.truthy(text:find("bk.json: only in BASE, not compared", 1, true), text)
os.remove(d1 .. "/bk.json")
results.write(d2 .. "/mixed_ghost.json", result(100 * MiB, { 10.0 }))
assert(dp.write_file(d1 .. "/bench.json", '{"rows": [1, 2]}'))
assert(dp.write_file(d1 .. "/run.trace.json", '{"traceEvents": []}'))
code, text = compare(d1, d2)
check.eq(code, 0, "only in NEW, a bench file, a trace: " .. text)
check.truthy(text:find("only in NEW: mixed_ghost.json", 1, true), text)
check.truthy(text:find("skipped " .. d1 .. "/bench.json: no key of a result at its top", 1, true), text)
assert(dp.write_file(d2 .. "/ghost.json", '{"status": "ok"}'))
code, text = compare(d1, d2)
check.eq(code, 2, "an invalid result in a directory: " .. text)
check.truthy(text:find(d2 .. "/ghost.json: not a valid result: schema_version: missing", 1, true), text)

-- the binary: the exit status reaches the shell
local function binary(...)
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = string.format("%q", a) end
  return check.sh(string.format("%q compare %s", dp.executable, table.concat(args, " ")))
end
code, text = binary(base, bigger)
check.eq(code, 1, "dpprof compare, a regression: " .. text)
check.truthy(text:find("peak memory grew 10.0%", 1, true), text)
code, text = binary(base, legacy_b)
check.eq(code, 2, "dpprof compare, an invalid file: " .. text)
check.truthy(text:find("legacy_b.json: not a valid result: schema_version: missing", 1, true), text)

-- Memory and time have their own thresholds; time is judged against the measured spread (the
-- runs of repeats=N, else the iterations), memory exactly.
check.eq(compare(base, bigger, "--memory", "1.2"), 0, "--memory 1.2 lets peak +10% pass")
check.eq(compare(base, bigger, "--time", "1.2"), 1, "--time does not loosen memory")
check.eq(compare(base, slower, "--time", "1.2"), 0, "--time 1.2 lets time +10% pass")
check.eq(compare(base, slower, "--memory=1.2"), 1, "--memory does not loosen time")
check.eq(compare(base, slower, "--time", "0"), 2, "--time must be a ratio > 0")
local noisy_base = write("noisy_base.json", result(100 * MiB, { 10.0, 14.0, 12.0 }))
local noisy_new = write("noisy_new.json", result(100 * MiB, { 13.0, 13.5, 14.0 })) -- avg x1.125
code, text = compare(noisy_base, noisy_new)
check.eq(code, 0, "a slower mean inside the iterations' spread is noise: " .. text)
check.truthy(text:find("not a regression", 1, true) and text:find("within BASE's slowest", 1, true),
             "and says so: " .. text)
local apart = write("apart.json", result(100 * MiB, { 14.5, 15.0, 15.5 }))
code, text = compare(noisy_base, apart)
check.eq(code, 1, "a slower run whose fastest iteration is past BASE's slowest regressed: " .. text)
check.truthy(text:find("outside the measured spread", 1, true), "says it is outside the spread: " .. text)
-- repeated runs: their spread, not the iterations', decides
local function repeated(name, iter_ms, run_avgs)
  local r = result(100 * MiB, iter_ms)
  local runs, sorted = dp.json.array(), {}
  for k, avg in ipairs(run_avgs) do
    runs[k] = { status = "ok", avg_ms = avg, iter_ms = dp.json.array({ avg }), peak_bytes = r.memory.peak_bytes }
    sorted[k] = avg
  end
  table.sort(sorted)
  local st = results.time_stats(sorted)
  r.repeats = { n = #run_avgs, runs = runs, avg_ms = { median = st.median_ms, min = st.min_ms, max = st.max_ms },
                peak_bytes = { min = r.memory.peak_bytes, max = r.memory.peak_bytes } }
  local ok, problems = results.validate(r)
  check.truthy(ok, "repeated result valid: " .. table.concat(problems or {}, "; "))
  return write(name, r)
end
local runs_base = repeated("runs_base.json", { 10.0, 10.0 }, { 10.0, 14.0, 12.0 })
local runs_new = repeated("runs_new.json", { 13.0, 13.0 }, { 13.0, 13.5, 14.0 })
code, text = compare(runs_base, runs_new)
check.eq(code, 0, "within the runs' spread (iterations alone would not be): " .. text)
check.truthy(text:find("over 3 runs", 1, true), "names the runs: " .. text)

-- Issue 38.1/38.2: the statistic is the median (of the runs, else of the iterations), as the
-- summaries report it; a time verdict needs at least 3 runs or iterations a side; --time off
-- judges memory only; two plan results' times are modelled (judged on the ratio, without a
-- spread); a measured time is not judged against a predicted one; a loaded machine is said.
do
  local spiky = write("spiky.json", result(100 * MiB, { 10.0, 10.0, 40.0 })) -- mean x2, median x1
  code, text = compare(base, spiky)
  check.eq(code, 0, "one slow iteration moves the mean, not the median: " .. text)
  check.truthy(text:find("step time (median)", 1, true) and text:find("step time (mean)", 1, true), text)
  local two = write("two.json", result(100 * MiB, { 10.0, 10.0 }))
  local two_slow = write("two_slow.json", result(100 * MiB, { 15.0, 15.0 }))
  code, text = compare(two, two_slow)
  check.eq(code, 0, "two iterations a side cannot judge time: " .. text)
  check.truthy(text:find("not enough repeats to judge time (BASE 10.000 ms-10.000 ms over 2 iterations", 1, true),
               "says so: " .. text)
  check.truthy(not text:find("REGRESSION", 1, true), "and calls nothing a regression: " .. text)
  code, text = compare(base, slower, "--time", "off")
  check.eq(code, 0, "--time off: time is shown, not judged: " .. text)
  check.truthy(text:find("time not judged: --time off", 1, true), text)
  check.eq(compare(base, bigger, "--time", "off"), 1, "--time off still judges memory")
  check.eq(compare(base, bigger, "--time=off", "--memory", "1.2"), 0, "--time=off with --memory")
  check.eq(compare(base, slower, "--threshold", "off"), 2, "off is for --time only")
  -- two predicted results: modelled times, judged on the ratio alone, no "measured spread"
  local function predicted_of(path, name)
    local q = results.read(path)
    q.predicted = true
    q.timing.estimate = pr.timing.estimate
    q.plan = dp.deep_copy(pr.plan)
    q.plan.peak_bytes, q.plan.predicted_reserved_bytes = q.memory.peak_bytes, q.memory.peak_bytes
    q.plan.headroom_bytes = q.plan.budget_bytes - q.memory.peak_bytes
    return write(name, q)
  end
  local p_base, p_slow = predicted_of(two, "p_base.json"), predicted_of(two_slow, "p_slow.json")
  code, text = compare(p_base, p_slow)
  check.eq(code, 1, "a modelled step 50% slower regressed: " .. text)
  check.truthy(text:find("modelled step time grew 50.0%", 1, true) and text:find("modelled times: no noise", 1, true),
               text)
  check.truthy(not text:find("outside the measured spread", 1, true) and not text:find("step time spread", 1, true),
               "no measured spread for modelled times: " .. text)
  code, text = compare(base, p_slow)
  check.eq(code, 0, "a measured time is not judged against a predicted one: " .. text)
  check.truthy(text:find("not judged: a measured time against a predicted one", 1, true), text)
  -- a run taken on a loaded machine is said so
  local busy = results.read(base)
  busy.environment.host_load = { wall_s = 2.0, cpu_s = 1.9, cores = 2, others_share = 0.63, loaded = true,
                                 loadavg_start = dp.json.array{ 1.9, 1.0, 0.5 }, loadavg_end = dp.json.array{ 2.41, 1.2, 0.6 } }
  local vok, why = results.validate(busy)
  check.truthy(vok, "host_load validates: " .. table.concat(why or {}, "; "))
  code, text = compare(base, write("busy.json", busy))
  check.eq(code, 0, "the same figures: " .. text)
  check.truthy(text:find("NEW was taken on a loaded machine: other processes kept 63% of its 2 CPUs busy while it "
                         .. "ran (load average 1.90 -> 2.41)", 1, true), text)
  check.truthy(not text:find("BASE was taken", 1, true), "BASE was not: " .. text)
  busy.environment.host_load.others_share = -0.5
  check.truthy(not results.validate(busy), "a negative share is refused")
end

os.execute("rm -rf " .. dir)

print("ok")
