-- bench_cpu.lua: dpprof on the CPU against PyTorch eager and Opacus on the same shapes, as ratios, in one sitting.
-- Change it: dpprof run experiments/bench_cpu.lua [archs=gpt,llama] [methods=vanilla,flat,...] [threads=1,2]
--            [rounds=3] [iters=8] [warmup=2] [torch="python3 tests/baselines/torch_cpu.py" | baseline=FILE]
--            [timeout=900] [out=DIR]
--
-- The shape is the issue's: V=8192 d=256 L=4 H=4 T=256 B=4, untied head (Llama: ffn 704), f32,
-- AdamW, `iters` timed steps after `warmup`. Each dpprof point runs in its own process with
-- threads=N. torch=CMD runs the baseline generator (tests/baselines/torch_cpu.py: PyTorch eager,
-- Opacus hooks and ghost) once per round and thread count, alternating with dpprof's points (the
-- order flips every round), so both see the same load; baseline=FILE reads its JSON lines from an
-- earlier run instead. Every figure is the median over the rounds of each run's median step.
-- Prints, and writes beside bench_cpu.json as bench_cpu.md, the table of docs/performance.md ready to paste.
-- Of the common keys it takes threads= (a list: each count is timed), methods= (or method=) and out=;
-- not device= (the CPU against PyTorch on the CPU) nor profile= (per-op timing would add its cost to the
-- steps compared).
--
-- Targets (issue 18; a benchmark, not a test): vanilla <= 1.0x PyTorch eager's step time for gpt
-- and llama; every DP preset <= 1.3x dpprof vanilla. twopass presets (ghost, mixed_ghost) run a
-- second backward by construction, as Opacus's ghost clipping does.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local args = presets.args("bench_cpu.lua", { "archs", "rounds", "iters", "warmup", "torch", "baseline", "timeout" },
                          { device = "it times the CPU against PyTorch on the CPU",
                            profile = "per-op timing would add its own cost to the steps it compares" })

local SHAPE = { vocab = 8192, hidden = 256, layers = 4, heads = 4, seq_len = 256, batch = 4, tie_head = false }
local TORCH_MODES = { "eager", "opacus_hooks", "opacus_ghost" }
local VANILLA_VS_TORCH, DP_VS_VANILLA = 1.0, 1.3

local archs = presets.list(args.archs) or { "gpt", "llama" }
local methods = presets.list(args.methods) or presets.ALL_METHODS
if methods[1] ~= "vanilla" then table.insert(methods, 1, "vanilla") end -- the ratios need it
local threads = presets.list(args.threads) or { 1, 2 }
local rounds, iters, warmup = args.rounds or 3, args.iters or 8, args.warmup or 2
local out = args.out or string.format("results/bench_cpu_%s", os.date("%Y%m%d_%H%M%S"))
if args.torch and args.baseline then error("bench_cpu.lua: give torch=CMD or baseline=FILE, not both", 0) end
for _, a in ipairs(archs) do
  if a ~= "gpt" and a ~= "llama" then error(string.format("bench_cpu.lua: unknown arch '%s' (valid: gpt, llama)", a), 0) end
end
for _, n in ipairs(threads) do
  if math.type(n) ~= "integer" or n < 1 then
    error(string.format("bench_cpu.lua: threads must be integers >= 1, got '%s'", tostring(n)), 0)
  end
end
assert(dp.mkdir_p(out))

local function model_of(arch)
  local m = { arch = arch }
  for k, v in pairs(SHAPE) do m[k] = v end
  if arch == "llama" then m.ffn, m.tie_head = 704, nil end
  return m
end

-- samples[key] = list of one median per round; key "dpprof/<arch>/<threads>/<method>" or "torch/<arch>/<threads>/<mode>"
local samples, noise, runs = {}, {}, {}
local function add(key, v, tbl)
  tbl = tbl or samples
  tbl[key] = tbl[key] or {}
  table.insert(tbl[key], v)
end

local function run_dpprof(arch, n)
  for _, method in ipairs(methods) do
    local cfg = { model = model_of(arch), method = method, device = "cpu", threads = n, iters = iters, warmup = warmup,
                  snapshots = "none", optimizer = { name = "adamw", lr = 1e-4, weight_decay = 0.01 },
                  dp = { max_grad_norm = 1.0, noise_multiplier = 1.0, sample_rate = 0.01,
                         max_physical_batch_size = SHAPE.batch } }
    local r = dp.isolate(dp.experiment, cfg, { timeout = args.timeout or 900 })
    local key = string.format("dpprof/%s/%d/%s", arch, n, method)
    if r.status == "ok" then
      add(key, r.timing.median_ms)
      add(key, r.timing.phases_ms.noise, noise)
      io.write(string.format("  dpprof %-5s threads %d %-12s %8.1f ms\n", arch, n, method, r.timing.median_ms))
    else
      io.write(string.format("  dpprof %-5s threads %d %-12s %s: %s\n", arch, n, method, tostring(r.status),
                             tostring(r.message):sub(1, 160)))
    end
    runs[#runs + 1] = { what = key, status = r.status, step_ms = r.timing and r.timing.median_ms,
                        phases_ms = r.timing and r.timing.phases_ms, environment = r.environment }
  end
end

local versions = {} -- torch and opacus, from the baseline's lines

local function take_torch_line(line)
  if not line:match("^%s*{") then return end
  local row = dp.json.decode(line)
  versions.torch, versions.opacus = row.torch or versions.torch, row.opacus or versions.opacus
  local key = string.format("torch/%s/%d/%s", row.arch, row.threads, row.mode)
  add(key, row.step_ms)
  runs[#runs + 1] = { what = key, status = "ok", step_ms = row.step_ms, torch = row.torch, opacus = row.opacus }
  io.write(string.format("  torch  %-5s threads %d %-12s %8.1f ms\n", row.arch, row.threads, row.mode, row.step_ms))
end

local function run_torch(n)
  local cmd = string.format("%s --arch %s --threads %d --iters %d --warmup %d", args.torch, table.concat(archs, ","), n,
                            iters, warmup)
  local p = assert(io.popen(cmd, "r"))
  for line in p:lines() do take_torch_line(line) end
  local ok, how, code = p:close()
  if not ok then error(string.format("bench_cpu.lua: the baseline command failed (%s %s): %s", how, code, cmd), 0) end
end

if args.baseline then
  local text = assert(dp.read_file(args.baseline))
  for line in text:gmatch("[^\n]+") do take_torch_line(line) end
end

for round = 1, rounds do
  print(string.format("round %d of %d", round, rounds))
  for _, n in ipairs(threads) do
    local torch_first = args.torch and round % 2 == 0
    if torch_first then run_torch(n) end
    for _, arch in ipairs(archs) do run_dpprof(arch, n) end
    if args.torch and not torch_first then run_torch(n) end
  end
end

local median = dp.median

local rows, checks = {}, {}
for _, arch in ipairs(archs) do
  for _, n in ipairs(threads) do
    local function dpm(m) return median(samples[string.format("dpprof/%s/%d/%s", arch, n, m)]) end
    local function tm(m) return median(samples[string.format("torch/%s/%d/%s", arch, n, m)]) end
    local van, eager = dpm("vanilla"), tm("eager")
    local row = { arch = arch, threads = n, dpprof_ms = {}, torch_ms = {}, noise_ms = {}, ratio_vs_vanilla = {} }
    for _, m in ipairs(methods) do
      row.dpprof_ms[m] = dpm(m)
      row.noise_ms[m] = median(noise[string.format("dpprof/%s/%d/%s", arch, n, m)])
      if van and dpm(m) then row.ratio_vs_vanilla[m] = dpm(m) / van end
    end
    for _, m in ipairs(TORCH_MODES) do row.torch_ms[m] = tm(m) end
    if van and eager then row.vanilla_vs_eager = van / eager end
    if eager and tm("opacus_hooks") then row.opacus_hooks_vs_eager = tm("opacus_hooks") / eager end
    if eager and tm("opacus_ghost") then row.opacus_ghost_vs_eager = tm("opacus_ghost") / eager end
    if dpm("flash_clip") and tm("opacus_ghost") then row.opacus_ghost_vs_flash_clip = tm("opacus_ghost") / dpm("flash_clip") end
    if row.vanilla_vs_eager then
      checks[#checks + 1] = string.format("%s %d thread%s: vanilla %.2fx PyTorch eager (target <= %.1fx) %s", arch, n,
        n > 1 and "s" or "", row.vanilla_vs_eager, VANILLA_VS_TORCH,
        row.vanilla_vs_eager <= VANILLA_VS_TORCH and "met" or "MISSED")
    end
    for _, m in ipairs(methods) do
      local r = row.ratio_vs_vanilla[m]
      if m ~= "vanilla" and r then
        checks[#checks + 1] = string.format("%s %d thread%s: %s %.2fx dpprof vanilla (target <= %.1fx) %s", arch, n,
          n > 1 and "s" or "", m, r, DP_VS_VANILLA, r <= DP_VS_VANILLA and "met" or "MISSED")
      end
    end
    rows[#rows + 1] = row
  end
end

local function ms(v) return v and string.format("%.0f", v) or "-" end
local function x(v) return v and string.format("%.2fx", v) or "-" end

-- The table of docs/performance.md (markdown): one row per model and thread count, step times with their ratios
-- (Opacus and dpprof vanilla against PyTorch eager, each DP preset against dpprof vanilla).
local env = dp.environment()
-- the BLAS the dpprof points ran, with its kernel (a generic one makes every CPU time several times slower)
local blas_text = env.blas and string.format("%s %s (%s kernels, chosen by %s%s)", env.blas.library, env.blas.version,
                                             env.blas.core, env.blas.chosen_by, env.blas.generic and ": GENERIC" or "")
                  or "BLAS unknown"
-- this run's command line, for the table's caption
local command = string.format("dpprof run experiments/bench_cpu.lua rounds=%d iters=%d warmup=%d threads=%s archs=%s%s%s",
  rounds, iters, warmup, table.concat(threads, ","), table.concat(archs, ","),
  args.methods and " methods=" .. table.concat(methods, ",") or "",
  args.torch and string.format(' torch="%s"', args.torch) or args.baseline and " baseline=" .. args.baseline or "")
local function markdown()
  local function cell(v, ratio) return v and (ratio and string.format("%.0f ms (%.2f×)", v, ratio) or string.format("%.0f ms", v)) or "–" end
  local head, align = { "model, threads", "PyTorch eager", "Opacus hooks", "Opacus ghost" }, { "---", "---:", "---:", "---:" }
  for _, m in ipairs(methods) do head[#head + 1], align[#align + 1] = "dpprof " .. m, "---:" end
  head[#head + 1], align[#align + 1] = "Opacus ghost / flash_clip", "---:"
  head[#head + 1], align[#align + 1] = "noise phase", "---:"
  local lines = {
    string.format("Step time, median over %d round%s of each run's median of %d steps after %d warm-up (`%s`), "
                  .. "%s, %d CPU threads on the host, %s, dpprof %s, PyTorch %s, Opacus %s. In brackets: Opacus and "
                  .. "dpprof vanilla against PyTorch eager, each DP preset against dpprof vanilla. Noise phase: "
                  .. "dpprof flash_clip's (normals for every parameter, added to the gradient).",
                  rounds, rounds > 1 and "s" or "", iters, warmup, command, env.cpu, env.cores, blas_text, env.git_commit,
                  versions.torch or "–", versions.opacus or "–"),
    "",
    "| " .. table.concat(head, " | ") .. " |",
    "| " .. table.concat(align, " | ") .. " |",
  }
  for _, r in ipairs(rows) do
    local c = { string.format("%s, %d", r.arch, r.threads), cell(r.torch_ms.eager),
                cell(r.torch_ms.opacus_hooks, r.opacus_hooks_vs_eager), cell(r.torch_ms.opacus_ghost, r.opacus_ghost_vs_eager) }
    for _, m in ipairs(methods) do
      c[#c + 1] = cell(r.dpprof_ms[m], m == "vanilla" and r.vanilla_vs_eager or r.ratio_vs_vanilla[m])
    end
    c[#c + 1] = r.opacus_ghost_vs_flash_clip and string.format("%.2f×", r.opacus_ghost_vs_flash_clip) or "–"
    c[#c + 1] = cell(r.noise_ms.flash_clip)
    lines[#lines + 1] = "| " .. table.concat(c, " | ") .. " |"
  end
  return table.concat(lines, "\n") .. "\n"
end
local table_md = markdown()
assert(dp.write_file(out .. "/bench_cpu.json", dp.json.encode({
  benchmark = "bench_cpu", shape = SHAPE, rounds = rounds, iters = iters, warmup = warmup, rows = rows, runs = runs,
  targets = checks, cpu = env.cpu, cores = env.cores, blas = env.blas, git_commit = env.git_commit, torch = versions.torch,
  opacus = versions.opacus, markdown = table_md,
}, { indent = true }) .. "\n"))
assert(dp.write_file(out .. "/bench_cpu.md", table_md))

print(string.format("\nmedian step ms over %d round%s (%d timed steps after %d warm-up each); x: dpprof vanilla = 1",
                    rounds, rounds > 1 and "s" or "", iters, warmup))
for _, r in ipairs(rows) do
  print(string.format("\n%s, %d thread%s: PyTorch eager %s ms, Opacus hooks %s ms (%s eager), Opacus ghost %s ms (%s eager)",
                      r.arch, r.threads, r.threads > 1 and "s" or "", ms(r.torch_ms.eager), ms(r.torch_ms.opacus_hooks),
                      x(r.opacus_hooks_vs_eager), ms(r.torch_ms.opacus_ghost), x(r.opacus_ghost_vs_eager)))
  print(string.format("  %-12s %9s %8s %9s", "dpprof", "step ms", "x van", "noise ms"))
  for _, m in ipairs(methods) do
    print(string.format("  %-12s %9s %8s %9s", m, ms(r.dpprof_ms[m]), x(r.ratio_vs_vanilla[m]),
                        m == "vanilla" and "-" or ms(r.noise_ms[m])))
  end
  print(string.format("  vanilla / PyTorch eager: %s; Opacus ghost / flash_clip: %s", x(r.vanilla_vs_eager),
                      x(r.opacus_ghost_vs_flash_clip)))
end
print("")
for _, c in ipairs(checks) do print(c) end
print("\nthe table of docs/performance.md (\"On the CPU against PyTorch and Opacus\"):\n")
io.write(table_md)
print("\nresults: " .. out .. "/bench_cpu.json, " .. out .. "/bench_cpu.md")
