-- dpprof.calibrate: `dpprof calibrate`, a device model file fitted from profiled runs.
--
--   calibrate.set(kind, quick)      the fixed calibration set: experiment configurations (profile = "ops")
--   calibrate.FLASH_SHAPES          CUDA's extra flash_clip shapes (the Gram tile's geometries)
--   calibrate.measure(cfg, clock)   runs one profiled experiment -> run {name, dtype, samples, gap_s, step_ms}
--   calibrate.gemm_run(kind, dtype, clock, quick)  the GEMM sweep (GEMM_SIZES x GEMM_ASPECTS) -> run
--   calibrate.from_result(r, name)  a result file's per-op profile as a run (one sample per op: its mean call)
--   calibrate.fit(runs, peaks)      -> dtypes {dtype = {gap_s=, ops={op = curve}}} (see devmodel.lua)
--   calibrate.model_of(dtypes, peaks) a checked model of fitted curves, before a file is written
--   calibrate.document(opts)        runs the set (and/or reads results), fits -> the file's table, the runs
--   calibrate.main(args)            the command line (exit status)
--
-- A sample is one engine op's work and its measured time: the calls timed for one ledger add
-- (engine/core/profile.h's log, grouped by the ledger's add count), with the add's flops and bytes.
-- Its roofline work on the measured peaks is w = max(flops / peak_flops[dtype], bytes / bandwidth)
-- seconds. Per dtype and op (base name: recomputed ops count as theirs), the samples are put in bins
-- a fifth of a decade of w wide; each bin's knot is log10 of its mean w and of its mean time (the
-- plan adds times up), less the calls over OUTLIER times the bin's median (preempted on a busy
-- machine), the knots made non-decreasing in time: the curve engine/core/clock.h evaluates. The fit error of an op is |planned / measured - 1| of its time in a run (the run planned again
-- with the curves; a result's ops: the curve at their mean call), its median and worst over the runs. gap_s, the host time
-- between calls, is per run (sum over phases of their time less their ops' time, less the
-- profile's own overhead) / (ledger adds per iteration), the median over the runs.
local dp = require("dpprof")
local json = dp.json
local devmodel = require("dpprof.devmodel")
local cfit = require("dpprof.calibrate_fit")
local plan = require("dpprof.plan")

local calibrate = {}

-- The fit (dpprof.calibrate_fit): its bin width and outlier cut, and the fit itself.
calibrate.BIN_DECADES = cfit.BIN_DECADES
calibrate.OUTLIER = cfit.OUTLIER
calibrate.fit = cfit.fit
calibrate.model_of = cfit.model_of

-- The fixed shapes. CPU: small enough that the full set takes about a minute on two cores; the
-- quick set (CI) is its first two shapes in f32. CUDA: from launch-bound to GEMM-bound sizes.
local SHAPES = {
  cpu = {
    { hidden = 64, heads = 2, seq_len = 32, batch = 2, vocab = 256 },
    { hidden = 128, heads = 4, seq_len = 128, batch = 2, vocab = 1024 },
    { hidden = 256, heads = 4, seq_len = 64, batch = 4, vocab = 2048 },
    { hidden = 256, heads = 8, seq_len = 256, batch = 1, vocab = 512 },
  },
  cuda = {
    { hidden = 256, heads = 4, seq_len = 128, batch = 16, vocab = 4096 },
    { hidden = 512, heads = 8, seq_len = 256, batch = 8, vocab = 8192 },
    { hidden = 1024, heads = 16, seq_len = 1024, batch = 4, vocab = 32000 },
    { hidden = 2048, heads = 16, seq_len = 512, batch = 2, vocab = 32000 },
    { hidden = 1024, heads = 8, seq_len = 4096, batch = 1, vocab = 16384 },
  },
}

-- CUDA's extra flash_clip runs, both dtypes and archs, no checkpointing. The flash Gram tile's time
-- is not a function of its roofline work alone (its efficiency depends on the tile's geometry: T and
-- the contraction d + p), and on the H100 its curve from the shapes above planned it at 2.2-2.5x its
-- measured time at bench_plan_time.lua's shapes (README, "Plan step times"); only 4 runs above fed
-- its curve (a batch of 1 takes no flash tile). These sample the tile at geometries around the
-- bench's (d=768 with a shorter T and more samples; d=1536 and d=2048 with longer T; B >= 2, every
-- layer on the Gram tile), none of them a bench shape (the bench must stay out of the calibration
-- data). Measured on the H100 with them (the shipped h100-calibrated, commit 047ed1ad1512):
-- flash_clip's median |planned/measured - 1| at the bench's shapes went from 30.9% to 6.6%.
calibrate.FLASH_SHAPES = {
  cuda = {
    { hidden = 768, heads = 12, seq_len = 384, batch = 16, vocab = 16384 },
    { hidden = 1536, heads = 12, seq_len = 1024, batch = 4, vocab = 16384 },
    { hidden = 2048, heads = 16, seq_len = 1536, batch = 2, vocab = 16384 },
  },
}

function calibrate.set(kind, quick)
  local shapes = SHAPES[kind] or SHAPES.cpu
  local dtypes = { "f32", "bf16" }
  local n_shapes, per = #shapes, 3
  if quick then dtypes, n_shapes, per = { "f32" }, 2, 3 end
  local methods = dp.dpsgd.METHODS
  local out = {}
  for _, dtype in ipairs(dtypes) do
    for ai, arch in ipairs({ "gpt", "llama" }) do
      for si = 1, n_shapes do
        local s = shapes[si]
        for j = 1, per do
          local method = methods[((si - 1 + ai - 1) * per + j - 1) % #methods + 1]
          local model = { arch = arch, layers = 2, dtype = dtype }
          for k, v in pairs(s) do model[k] = v end
          if (si + j) % 2 == 0 then model.checkpoint = "blocks" end
          out[#out + 1] = {
            name = string.format("%s_%s_d%d_T%d_B%d_%s%s", dtype, arch, s.hidden, s.seq_len, s.batch, method,
                                 model.checkpoint and "_ckpt" or ""),
            model = model, method = method, device = kind, iters = kind == "cuda" and 3 or 2, warmup = 1,
            snapshots = "none", profile = "ops", dp = { max_physical_batch_size = s.batch },
          }
        end
      end
    end
  end
  for _, dtype in ipairs(quick and {} or dtypes) do
    for _, arch in ipairs({ "gpt", "llama" }) do
      for _, s in ipairs(calibrate.FLASH_SHAPES[kind] or {}) do
        local model = { arch = arch, layers = 2, dtype = dtype }
        for k, v in pairs(s) do model[k] = v end
        out[#out + 1] = {
          name = string.format("%s_%s_d%d_T%d_B%d_flash_clip_geometry", dtype, arch, s.hidden, s.seq_len, s.batch),
          model = model, method = "flash_clip", device = kind, iters = 3, warmup = 1, snapshots = "none",
          profile = "ops", dp = { max_physical_batch_size = s.batch },
        }
      end
    end
  end
  return out
end

local median = dp.median
calibrate.median = median

-- The per-iteration host gap per ledger add of a profiled result (seconds, >= 0): the time of its
-- phases (or iter_ms, the mean CPU time of an iteration) less their ops' and the profile's own.
local function gap_of(r, iter_ms)
  local p = r.profile
  if type(p) ~= "table" or type(p.phases) ~= "table" then return nil end
  local outside = iter_ms or 0 -- the iteration's CPU time, when the ops were timed by it
  for _, ph in pairs(p.phases) do outside = outside + (iter_ms and 0 or ph.ms) - ph.ops_ms end
  outside = outside - (p.overhead and p.overhead.ms_per_iter or 0)
  local adds = 0
  for _, e in ipairs(r.ledger or {}) do adds = adds + e.calls end
  adds = adds / math.max(1, p.iters or 1)
  if adds <= 0 then return nil end
  return math.max(0, outside) * 1e-3 / adds
end

-- The samples of the profile's call log: calls with the same add count are one sample.
local function samples_of_calls(calls)
  local out, last = {}, nil
  for _, c in ipairs(calls) do
    local t = (c.end_ms - c.start_ms) * 1e-3
    if last and last.seq == c.seq then
      last.t = last.t + t
    else
      last = { op = c.base, flops = c.flops, bytes = c.bytes, t = t, n = 1, seq = c.seq }
      out[#out + 1] = last
    end
  end
  for _, s in ipairs(out) do s.seq = nil end
  return out
end

-- clock: "wall" (the engine clock) or "cpu" (the CPU backend with one thread: each call and each
-- iteration timed by the process's CPU time, which other processes on a shared machine do not
-- lengthen).
function calibrate.measure(cfg, clock)
  local samples
  local c = {}
  for k, v in pairs(cfg) do c[k] = v end
  local t0, iter_ms = 0, {}
  c.on = { finished = function() samples = samples_of_calls(dp.profile.calls()) end }
  if clock == "cpu" then
    c.on.before_forward = function(_, _, k) if k == 1 then t0 = os.clock() end end
    c.on.after_step = function() iter_ms[#iter_ms + 1] = (os.clock() - t0) * 1000 end
  end
  dp.profile.cpu_clock(clock == "cpu")
  local ok, r = pcall(dp.experiment, c)
  dp.profile.cpu_clock(false)
  if not ok then error(r, 0) end
  if r.status ~= "ok" then return nil, string.format("%s: %s", r.status, tostring(r.message)) end
  local mean
  if #iter_ms > 0 then
    mean = 0
    for _, v in ipairs(iter_ms) do mean = mean + v / #iter_ms end
  end
  return { name = cfg.name, dtype = cfg.model.dtype or "f32", samples = samples or {}, gap_s = gap_of(r, mean),
           step_ms = mean or r.timing.avg_ms, peak = r.profile.peak, cfg = cfg }
end

-- The GEMM sweep: square and 4:1 shapes in every orientation over a range of sizes, beside the
-- models' own GEMMs (which a few model shapes leave sparse). C[m,n] = A[m,k] B[k,n], each shape
-- timed REPEATS times after one untimed call.
calibrate.GEMM_SIZES = { cpu = { 16, 48, 128, 320, 640 }, cuda = { 128, 512, 1536, 4096, 8192 } }
calibrate.GEMM_ASPECTS = { { 1, 1, 1 }, { 4, 1, 1 }, { 1, 4, 1 }, { 1, 1, 4 }, { 4, 4, 1 } }
local GEMM_REPEATS = 3
function calibrate.gemm_run(kind, dtype, clock, quick)
  local sizes = calibrate.GEMM_SIZES[kind] or calibrate.GEMM_SIZES.cpu
  local samples = {}
  dp.device(kind)
  for i, s in ipairs(sizes) do
    if not (quick and i > 3) then
      for _, a in ipairs(calibrate.GEMM_ASPECTS) do
        local m, n, k = s * a[1], s * a[2], s * a[3]
        local A = dp.tensor{ shape = { m, k }, dtype = dtype, fill = 1.0, device = kind }
        local B = dp.tensor{ shape = { k, n }, dtype = dtype, fill = 1.0, device = kind }
        local C = dp.tensor{ shape = { m, n }, dtype = dtype, device = kind }
        dp.matmul(C, A, B)
        dp.sync(kind)
        dp.profile.cpu_clock(clock == "cpu")
        dp.profile.enable(true, kind)
        for _ = 1, GEMM_REPEATS do dp.matmul(C, A, B) end
        dp.sync(kind)
        dp.profile.collect(kind)
        for _, smp in ipairs(samples_of_calls(dp.profile.calls())) do
          if smp.op == "gemm" then samples[#samples + 1] = smp end
        end
        dp.profile.enable(false)
        dp.profile.cpu_clock(false)
        A:free(); B:free(); C:free()
      end
    end
  end
  return { name = "gemm sweep " .. dtype, dtype = dtype, samples = samples }
end

-- A result with a per-op profile as a run: each op's mean call is a sample standing for its calls.
function calibrate.from_result(r, name)
  local p = r.profile
  if type(p) ~= "table" or p.mode ~= "ops" or type(p.ops) ~= "table" then
    return nil, "has no per-op profile (run it with profile = \"ops\")"
  end
  if p.predicted or r.predicted then return nil, "is a plan run (predicted), not a measurement" end
  if r.status ~= "ok" then return nil, "did not run to its end (status " .. tostring(r.status) .. ")" end
  local samples = {}
  for _, o in ipairs(p.ops) do
    local n = o.timed_calls or 0
    if n > 0 and o.calls > 0 and o.ms > 0 then
      samples[#samples + 1] = { op = devmodel.base(o.op), flops = o.flops / o.calls, bytes = o.bytes / o.calls,
                                t = o.ms * 1e-3 / n, n = n }
    end
  end
  local dtype = r.config and r.config.model and r.config.model.dtype or "f32"
  return { name = name, dtype = dtype, samples = samples, gap_s = gap_of(r), step_ms = r.timing and r.timing.avg_ms,
           peak = not json.is_null(p.peak) and p.peak or nil, device = r.environment and r.environment.device }
end

-- A problem with what was given (a result file): raised as a string, remembered so that the
-- command line exits 2 for it (1 for a failure of the runs).
local refused
local function refuse(msg)
  refused = msg
  error(msg, 0)
end

local function total_memory_of(kind)
  local ok, info = pcall(dp.device, kind)
  if ok and info and info.total_memory and info.total_memory > 0 then return info.total_memory, info end
  return nil, ok and info or nil
end

-- The device's peak for each dtype the set runs (the f32 peak for a dtype the backend states none
-- for; nominal ones where it states zero) into st.peaks, how each was found into st.how.
local function set_peaks(st, set)
  local kind, peaks, how = st.kind, st.peaks, st.how
  for _, dtype in ipairs({ "f32", "bf16" }) do
    for _, cfg in ipairs(set) do
      if cfg.model.dtype == dtype and not peaks[dtype] then
        local pk, why = dp.profile.peak(dtype, kind)
        if not pk and dtype ~= "f32" then -- w is the curves' abscissa: the f32 peak serves
          local f = dp.profile.peak("f32", kind)
          if f then pk = { flops = f.flops, bandwidth = f.bandwidth, how = "the f32 peak (the backend states none for " .. dtype .. "): " .. f.how } end
        end
        if not pk then error(string.format("dpprof calibrate: no %s peak on %s: %s", dtype, kind, tostring(why)), 0) end
        if not (pk.flops > 0 and pk.bandwidth > 0) then -- the peaks only scale the curves' abscissa
          pk = { flops = pk.flops > 0 and pk.flops or 1e12, bandwidth = pk.bandwidth > 0 and pk.bandwidth or 1e11,
                 how = "nominal (the backend stated a zero peak): " .. tostring(pk.how) }
        end
        peaks[dtype], how[dtype] = { flops = pk.flops, bandwidth = pk.bandwidth }, pk.how
      end
    end
  end
end

-- Runs the calibration set (its experiments, then a GEMM sweep per dtype it ran) into st.runs.
local function run_set(st)
  local kind, opts, clock, runs, say = st.kind, st.opts, st.clock, st.runs, st.say
  local set = calibrate.set(kind, opts.quick)
  set_peaks(st, set)
  for i, cfg in ipairs(set) do
    local run, why = calibrate.measure(cfg, clock)
    if run then
      runs[#runs + 1] = run
      say(string.format("[%d/%d] %s: %d samples, step %.3f ms", i, #set, cfg.name, #run.samples, run.step_ms))
    else
      say(string.format("[%d/%d] %s: skipped (%s)", i, #set, cfg.name, why))
    end
  end
  local dtypes_run = {}
  for _, cfg in ipairs(set) do dtypes_run[cfg.model.dtype] = true end
  for _, dtype in ipairs({ "f32", "bf16" }) do
    if dtypes_run[dtype] then
      local gok, g = pcall(calibrate.gemm_run, kind, dtype, clock, opts.quick)
      if gok then
        runs[#runs + 1] = g
        say(string.format("%s: %d samples", g.name, #g.samples))
      else -- (out of device memory, say): the models' own GEMMs remain
        dp.profile.enable(false)
        dp.profile.cpu_clock(false)
        say(string.format("gemm sweep %s: skipped (%s)", dtype, dp.error_text(g):gsub("\n.*", "")))
      end
    end
  end
  st.sources[#st.sources + 1] = string.format("the %s calibration set (%d runs)", opts.quick and "quick" or "full", #runs)
end

-- Reads the result files opts.results gives into st.runs (each refused, named, when it is not a
-- profiled measurement of this device), their peaks where the set gave none.
local function read_results(st)
  local kind, runs, peaks, how, say = st.kind, st.runs, st.peaks, st.how, st.say
  for _, path in ipairs(st.opts.results or {}) do
    -- validated as dpprof compare validates it: a file whose calls, times or flops are not
    -- numbers of their kind (negative, strings, 2^63 calls) is named, field first, and not fitted
    local r, bad = dp.results.load(path)
    if not r then refuse("dpprof calibrate: " .. bad) end
    local run, why = calibrate.from_result(r, path)
    if not run then refuse(string.format("dpprof calibrate: %s %s", path, why)) end
    if run.device and run.device ~= kind then
      refuse(string.format("dpprof calibrate: %s was measured on %s, not %s (give --device %s)", path, run.device,
                           kind, run.device))
    end
    if not peaks[run.dtype] then
      if not run.peak then refuse(string.format("dpprof calibrate: %s states no device peak for %s", path, run.dtype)) end
      peaks[run.dtype], how[run.dtype] = { flops = run.peak.flops, bandwidth = run.peak.bandwidth }, run.peak.how
    end
    runs[#runs + 1] = run
    st.sources[#st.sources + 1] = path
    say(string.format("%s: %d op samples (%s)", path, #run.samples, run.dtype))
  end
end

-- The device model file's table of the fitted dtypes (docs: devmodel.lua's fields).
local function file_table(st, dtypes, bandwidth, threads)
  local kind, opts, clock, peaks, how = st.kind, st.opts, st.clock, st.peaks, st.how
  local mem, info = total_memory_of(kind)
  local env = dp.environment()
  local peak_flops, peak_how = {}, {}
  for dt, p in pairs(peaks) do
    peak_flops[dt] = p.flops + 0.0
    peak_how[dt] = how[dt] or "(not stated)"
  end
  local device_name = info and info.name or kind
  if kind == "cpu" and env.cpu then device_name = env.cpu end
  return {
    format = devmodel.FORMAT,
    name = opts.name or (kind .. "-calibrated"),
    description = string.format("%s, calibrated by dpprof calibrate (%d threads, %s clock)", device_name, threads,
                                clock == "cpu" and "CPU time" or "wall"),
    device = kind, device_name = device_name, commit = env.git_commit or dp.git_commit or "unknown",
    date = os.date("!%Y-%m-%dT%H:%M:%SZ", st.t0), threads = threads,
    memory_bytes = mem or 0, context_bytes = kind == "cuda" and plan.DEFAULT_CONTEXT_BYTES or 0,
    workspace = kind == "cuda", reserve_overhead = kind == "cuda" and plan.DEFAULT_RESERVE_OVERHEAD or 0.0,
    peak_flops = peak_flops, bandwidth = bandwidth + 0.0, peak_how = peak_how,
    time_model = "per op and dtype: time = curve(w) + gap_s, w = max(flops/peak_flops, bytes/bandwidth); "
                 .. "curve piecewise linear in log10(w) -> log10(s) (engine/core/clock.h); ops without a curve: w",
    dtypes = dtypes,
    calibration = { runs = #st.runs, clock = clock, set = opts.runs == false and "results" or (opts.quick and "quick" or "full"),
                    sources = st.sources, seconds = dp.clock() - st.clock0 },
  }
end

-- opts: device ("cpu"|"cuda"), quick, threads, name, clock ("wall"|"cpu"), results = {paths}, runs = false (results only),
-- say = function(line) for progress. Returns the file's table and the runs it fitted.
function calibrate.document(opts)
  local kind = opts.device or "cpu"
  local st = { kind = kind, opts = opts, runs = {}, sources = json.array(), t0 = os.time(), clock0 = dp.clock(),
               peaks = {}, how = {}, say = opts.say or function() end }
  local threads_before = dp.threads()
  if opts.threads then dp.threads(opts.threads) end
  -- the CPU with one thread is timed by its CPU time (a shared machine's other processes do not count)
  local clock = opts.clock or (kind == "cpu" and dp.threads() == 1 and "cpu" or "wall")
  if clock == "cpu" and (kind ~= "cpu" or dp.threads() ~= 1) then
    dp.threads(threads_before)
    refuse("dpprof calibrate: the cpu clock times one CPU thread: it needs --device cpu and --threads 1")
  end
  st.clock = clock
  local ok, err = pcall(function()
    if opts.runs ~= false then run_set(st) end
    read_results(st)
  end)
  local threads = dp.threads()
  dp.threads(threads_before)
  if not ok then error(err, 0) end
  local runs, peaks = st.runs, st.peaks
  if #runs == 0 then error("dpprof calibrate: nothing to fit (no run succeeded and no result given)", 0) end
  -- one bandwidth for the file: the dtypes' peaks measure the same memory (the largest measured)
  local bandwidth = 0
  for _, p in pairs(peaks) do bandwidth = math.max(bandwidth, p.bandwidth) end
  for _, p in pairs(peaks) do p.bandwidth = bandwidth end
  local dtypes = calibrate.fit(runs, peaks)
  return file_table(st, dtypes, bandwidth, threads), runs
end

calibrate.USAGE = [[
usage: dpprof calibrate [--device cpu|cuda] [--out FILE.json] [--quick] [--threads N] [--name NAME]
                        [--clock wall|cpu] [--results-only] [RESULTS...]

Fits a device model file for the plan's clock from profiled runs on this machine's device: a fixed,
short set of experiments (gpt and llama, f32 and bf16, every DP preset, with and without activation
checkpointing, profile = "ops"; --quick: two small shapes in f32, for CI) and a GEMM sweep, plus the per-op profiles
of any RESULTS given (result files of profiled runs on the same kind of device). Per op and dtype it
fits the time as a curve over the op's roofline work (docs/lua.md, "Calibrated device models") and
writes the file: the measured peaks, the curves, each op's fit error, the device's name, the commit
and the date. Use it with device_model=FILE.json (experiments, sweeps, dpprof fit).

  --device cpu|cuda   the device to calibrate (default cpu)
  --out FILE.json     where to write the model (default dpprof_<device>_model.json)
  --quick             the small set (seconds on a CPU)
  --threads N         the CPU backend's threads for the runs (default: the process's; use the
                      count your runs will use: the curves hold for it)
  --name NAME         the model's name (default <device>-calibrated)
  --clock wall|cpu    what times the calls: the engine's (wall) clock, or the process's CPU time
                      (cpu: one CPU thread only; the default with --device cpu --threads 1, so
                      that other processes on a shared machine do not lengthen the times)
  --results-only      fit from RESULTS alone (no runs)

exit status: 0 written; 1 the runs failed; 2 bad arguments or an unreadable result
]]

-- dpprof calibrate's arguments into opts (and the result files into results); raises the complaint
-- (a string) for a bad one.
local function main_args(args, opts, results)
  local i = 1
  local function value(flag)
    local v = args[i + 1]
    if v == nil then error(string.format("dpprof calibrate: %s needs a value", flag), 0) end
    i = i + 1
    return v
  end
  while i <= #args do
    local a = args[i]
    if a == "--help" or a == "-h" then opts.help = true
    elseif a == "--device" then opts.device = value(a)
    elseif a == "--out" then opts.out = value(a)
    elseif a == "--quick" then opts.quick = true
    elseif a == "--results-only" then opts.runs = false
    elseif a == "--name" then opts.name = value(a)
    elseif a == "--clock" then
      opts.clock = value(a)
      if opts.clock ~= "wall" and opts.clock ~= "cpu" then
        error(string.format("dpprof calibrate: --clock must be wall or cpu, got '%s'", opts.clock), 0)
      end
    elseif a == "--threads" then
      local v = value(a)
      opts.threads = math.tointeger(tonumber(v))
      if not opts.threads or opts.threads < 1 or opts.threads > dp.MAX_THREADS then
        error(string.format("dpprof calibrate: --threads must be an integer in 1..%d, got '%s'", dp.MAX_THREADS, v), 0)
      end
    elseif a:sub(1, 2) == "--" then
      error(string.format("dpprof calibrate: unknown option '%s' (valid: --device, --out, --quick, --threads, "
                          .. "--name, --clock, --results-only, --help)", a), 0)
    else
      results[#results + 1] = a
    end
    i = i + 1
  end
  if opts.device ~= "cpu" and opts.device ~= "cuda" then
    error(string.format("dpprof calibrate: --device must be cpu or cuda, got '%s'", opts.device), 0)
  end
  if opts.device == "cuda" and not dp.cuda_compiled and opts.runs ~= false then
    error("dpprof calibrate: this dpprof has no CUDA backend (--device cuda needs one)", 0)
  end
  if opts.runs == false and #results == 0 then error("dpprof calibrate: --results-only needs RESULTS", 0) end
end

-- The fitted model's table per dtype: each op's samples, knots and fit error, and the dtype's gap and
-- peaks.
local function print_fit(doc)
  local names = {}
  for dt in pairs(doc.dtypes) do names[#names + 1] = dt end
  table.sort(names)
  for _, dt in ipairs(names) do
    local d = doc.dtypes[dt]
    local rows = { { dt .. " op", "samples", "knots", "fit error median", "worst" } }
    local ops = {}
    for op in pairs(d.ops) do ops[#ops + 1] = op end
    table.sort(ops)
    for _, op in ipairs(ops) do
      local c = d.ops[op]
      rows[#rows + 1] = { op, tostring(c.samples), tostring(#c.log10_work_s),
                          string.format("%.1f%%", 100 * c.fit_error.median), string.format("%.1f%%", 100 * c.fit_error.worst) }
    end
    dp.print_table(rows, { false, true, true, true, true })
    print(string.format("  %s: host gap between calls %.3g us; peaks %.4g GFLOP/s, %.4g GB/s", dt, d.gap_s * 1e6,
                        doc.peak_flops[dt] / 1e9, doc.bandwidth / 1e9))
  end
end

-- The fitted document encoded and checked as a file read back would be; writes it to opts.out. The exit
-- status: 0, or 1 when the fit came out invalid (non-finite, say).
local function write_model(doc, opts)
  local eok, text = pcall(devmodel.encode, doc) -- a fit that came out non-finite cannot be written
  local cok, cerr = false, eok and "" or dp.error_text(text)
  if eok then cok, cerr = pcall(devmodel.check, json.decode(text), opts.out) end
  if not cok then
    io.stderr:write("dpprof calibrate: the fitted model is invalid: ", tostring(cerr), "\n")
    return 1
  end
  local f = assert(io.open(opts.out, "w"))
  f:write(text, "\n")
  f:close()
  print(string.format("dpprof calibrate: %s: %s model '%s' from %d runs in %.1f s", opts.out, doc.device, doc.name,
                      doc.calibration.runs, doc.calibration.seconds))
  return 0
end

function calibrate.main(args)
  local opts, results = { device = "cpu" }, {}
  local ok, err = pcall(main_args, args, opts, results)
  if not ok then
    io.stderr:write(tostring(err), "\n")
    return 2
  end
  if opts.help then
    io.stdout:write(calibrate.USAGE)
    return 0
  end
  opts.results = results
  opts.out = opts.out or string.format("dpprof_%s_model.json", opts.device)
  local wok, why = dp.writable(opts.out)
  if not wok then
    io.stderr:write("dpprof calibrate: --out: ", tostring(why), "\n")
    return 2
  end
  opts.say = function(line) io.stderr:write(line, "\n") end
  local dok, doc = pcall(calibrate.document, opts)
  if not dok then
    local msg = dp.error_text(doc)
    io.stderr:write(msg, "\n")
    return msg == refused and 2 or 1
  end
  local rc = write_model(doc, opts)
  if rc ~= 0 then return rc end
  print_fit(doc)
  return 0
end

return calibrate
