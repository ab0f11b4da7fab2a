-- dpprof.cli: subcommands of the dpprof binary that are written in Lua. Each takes the list of
-- its arguments and returns the process exit status.
local dp = require("dpprof")
local results = require("dpprof.results")

local cli = {}

---------------------------------------------------------------------------------------------
-- dpprof compare BASE NEW [--memory R] [--time R|off] [--threshold R]

local COMPARE_USAGE = [[
usage: dpprof compare BASE NEW [--memory R] [--time R|off] [--threshold R]

Compares two results: two result JSON files, or two directories of them (files matched by name).
Every file is checked against the results schema (docs/results.md) when it is read. Prints peak
memory, step time, per-phase times and per-category memory side by side, epsilon with its
accountant (noting fixed batches, for which it is understated), and the configuration
keys that differ.

  --memory R      the largest allowed ratio NEW/BASE of peak memory (exact: any growth past R
                  is a regression); default 1.05 (5% growth)
  --time R        the largest allowed ratio NEW/BASE of the step time: the median of the runs
                  (repeats=N), else of the timed iterations, as the summaries report it; default
                  1.05. Measured times are judged against their spread, and only when each side
                  has at least 3 runs or iterations (fewer: "not enough repeats to judge time",
                  not a regression); a NEW whose fastest run or iteration is within BASE's slowest
                  is noise, not a regression, and is said so. Two plan results' times are modelled
                  (no noise): judged on the ratio alone. A measured and a predicted time are not
                  judged against each other. A run taken on a loaded machine is said so
  --time off      no time verdict (the times are shown): a memory-only check, e.g. in CI
  --threshold R   sets both

exit status: 0 every pair was compared (both runs ok) and none grew past its threshold; 1 peak
memory grew past --memory, step time grew past --time beyond the spread, or a pair could not be
compared (a run that is not ok, a file only in BASE); 2 bad arguments, or a file that is
unreadable or not a valid result (the file and field named)
]]

local function is_dir(path)
  return dp.list_dir(path) ~= nil
end

local function fmt_ms(v) return v and string.format("%.3f ms", v) or "-" end
local function fmt_bytes(v) return v and dp.format_bytes(v) or "-" end

local function ratio(base, new)
  if base == nil or new == nil then return nil end
  if base == 0 then return new == 0 and 1 or math.huge end
  return new / base
end

-- Flattens a configuration into "a.b.c" = value strings.
local function flatten(t, prefix, out)
  out = out or {}
  if type(t) ~= "table" or dp.json.is_null(t) then
    out[prefix] = dp.json.is_null(t) and "null" or tostring(t)
    return out
  end
  for k, v in pairs(t) do flatten(v, prefix == "" and tostring(k) or (prefix .. "." .. tostring(k)), out) end
  return out
end

-- The measured spread of a result's step time: over its repeated runs (repeats.avg_ms, a sweep's
-- repeats=N), else over its timed iterations: {lo, hi, n, what}.
local function time_spread(r)
  local rep = type(r.repeats) == "table" and r.repeats or nil
  if rep and type(rep.avg_ms) == "table" and math.type(rep.n) and rep.n > 1 then
    return { lo = rep.avg_ms.min, hi = rep.avg_ms.max, n = rep.n, what = "runs" }
  end
  return { lo = r.timing.min_ms, hi = r.timing.max_ms, n = #r.timing.iter_ms, what = "iterations" }
end

-- Each side needs at least this many runs or iterations for its measured time to be judged.
cli.MIN_TIME_SAMPLES = 3

-- A result's step time as the summaries report it (plots/sweep_util.c dpplot_step_ms): the
-- median of its repeated runs, else of its timed iterations, else their mean.
local function step_ms(r)
  local rep = type(r.repeats) == "table" and r.repeats or nil
  if rep and type(rep.avg_ms) == "table" and math.type(rep.n) and rep.n > 1 and type(rep.avg_ms.median) == "number" then
    return rep.avg_ms.median
  end
  return r.timing.median_ms or r.timing.avg_ms
end

local function spread_text(s)
  return string.format("%s-%s over %d %s", fmt_ms(s.lo), fmt_ms(s.hi), s.n,
                       s.n == 1 and s.what:gsub("s$", "") or s.what)
end

-- Compares one pair of valid results; prints through say and returns the regressions and the
-- reasons the pair was not compared (lists of strings). thresholds = {memory=, time=}.
local function compare_pair(label, base, new, thresholds, say)
  local regressions, uncompared = {}, {}
  say(label)
  if base.status ~= "ok" or new.status ~= "ok" then
    say(string.format("  status: %s -> %s", base.status, new.status))
    if base.status == "ok" then
      regressions[#regressions + 1] = string.format("%s: ok in BASE, %s in NEW (%s)", label, new.status,
                                                    (tostring(new.message):gsub("%s+", " ")))
    else
      uncompared[#uncompared + 1] = string.format("%s: not compared: %s in BASE, %s in NEW (only ok runs have "
                                                  .. "figures to compare)", label, base.status, new.status)
    end
    return regressions, uncompared
  end
  if (base.predicted == true) ~= (new.predicted == true) then
    local planned = base.predicted and base or new
    local est = type(planned.timing) == "table" and type(planned.timing.estimate) == "table" and planned.timing.estimate
    local how = est and type(est.method) == "string" and est.method:find("^calibrated")
                and string.format("a calibrated estimate, %s", tostring(est.model_file or est.device_model))
                or "a roofline estimate"
    say(string.format("  note: %s is measured, %s is predicted by the plan backend (its times are %s)",
                      base.predicted and "NEW" or "BASE", base.predicted and "BASE" or "NEW", how))
  end
  local rows = { { "", "BASE", "NEW", "ratio", "" } }
  local judgements = {}
  -- gate: nil (shown only), "memory" (exact) or "time" (against the measured spread)
  local bs, ns = time_spread(base), time_spread(new)
  local function row(name, b, n, fmt, gate)
    local r = ratio(b, n)
    local flag = ""
    local threshold = gate and thresholds[gate]
    if gate and r and r > threshold then
      local grew = string.format("%s: %s grew %.1f%% (%s -> %s)", label, name, (r - 1) * 100, fmt(b), fmt(n))
      local function note(f, text) flag = f; judgements[#judgements + 1] = grew .. text end
      local function regressed(why)
        flag = string.format("REGRESSION (> %g)", threshold)
        regressions[#regressions + 1] = string.format("%s, past the threshold %g%s", grew, threshold, why)
      end
      if gate == "memory" then
        regressed("")
      elseif (base.predicted == true) ~= (new.predicted == true) then
        note("not judged", ", not judged: a measured time against a predicted one")
      elseif base.predicted == true then
        regressed(" (modelled times: no noise to judge)")
      elseif bs.n < cli.MIN_TIME_SAMPLES or ns.n < cli.MIN_TIME_SAMPLES then
        note("not judged", string.format(", past %g but not enough repeats to judge time (BASE %s, NEW %s; at least %d "
                                         .. "a side: repeats=%d or iters=%d), not a regression", threshold,
                                         spread_text(bs), spread_text(ns), cli.MIN_TIME_SAMPLES, cli.MIN_TIME_SAMPLES,
                                         cli.MIN_TIME_SAMPLES))
      elseif ns.lo <= bs.hi then
        note("within the spread", string.format(", past %g but not a regression: NEW's fastest is within BASE's "
                                                .. "slowest (BASE %s, NEW %s)", threshold, spread_text(bs),
                                                spread_text(ns)))
      else
        regressed(string.format(", outside the measured spread (BASE %s, NEW %s)", spread_text(bs), spread_text(ns)))
      end
    end
    rows[#rows + 1] = { name, fmt(b), fmt(n), r and (r == math.huge and "inf" or string.format("%.3f", r)) or "-", flag }
  end
  row("peak memory", base.memory.peak_bytes, new.memory.peak_bytes, fmt_bytes, "memory")
  local modelled = base.predicted == true and new.predicted == true
  row(modelled and "modelled step time" or "step time (median)", step_ms(base), step_ms(new), fmt_ms,
      thresholds.time and "time" or false)
  row("step time (mean)", base.timing.avg_ms, new.timing.avg_ms, fmt_ms, false)
  for _, p in ipairs(results.PHASES) do
    local b, n = base.timing.phases_ms[p], new.timing.phases_ms[p]
    if results.OPTIONAL_PHASES[p] then b, n = b or 0, n or 0 end -- absent from older results
    if not (results.OPTIONAL_PHASES[p] and b == 0 and n == 0) then row("  " .. p, b, n, fmt_ms, false) end
  end
  row("reserved peak", base.memory.reserved_peak_bytes, new.memory.reserved_peak_bytes, fmt_bytes, false)
  local bc, nc = base.memory.categories, new.memory.categories
  for _, c in ipairs(results.CATEGORIES) do
    local b, n = bc[c].live_at_peak_bytes, nc[c].live_at_peak_bytes
    if b ~= 0 or n ~= 0 then row("  " .. c .. " at peak", b, n, fmt_bytes, false) end
  end
  -- padded by hand (dp.print_table): string.format widths stop at 99, and a figure can be wider
  dp.print_table(rows, { false, true, true, true, false }, say)
  if not modelled then
    say(string.format("  step time spread: BASE %s, NEW %s", spread_text(bs), spread_text(ns)))
  end
  for _, j in ipairs(judgements) do say("  note: " .. j) end
  for _, side in ipairs({ { base, "BASE" }, { new, "NEW" } }) do
    local note = side[1].predicted ~= true and results.load_note(side[1], side[2])
    if note then say("  note: " .. note) end
  end
  local be, ne = results.epsilon_text(base.privacy), results.epsilon_text(new.privacy)
  if be or ne then say(string.format("  privacy: %s -> %s", be or "-", ne or "-")) end
  local fb, fn = flatten(base.config or {}, ""), flatten(new.config or {}, "")
  local keys, seen = {}, {}
  for k in pairs(fb) do keys[#keys + 1], seen[k] = k, true end
  for k in pairs(fn) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if fb[k] ~= fn[k] then say(string.format("  config %s: %s -> %s", k, fb[k] or "(absent)", fn[k] or "(absent)")) end
  end
  return regressions, uncompared
end


local function json_files(dir)
  local out = {}
  for _, name in ipairs(dp.list_dir(dir) or {}) do
    if name:match("%.json$") and not name:match("%.trace%.json$") and not name:match("^%.") then out[#out + 1] = name end
  end
  return out
end

-- dpprof compare. io_ (optional, for tests) = {out = function(line), err = function(line)}; by
-- default lines go to stdout and stderr.
function cli.compare(args, io_)
  local say = io_ and io_.out or function(line) io.stdout:write(line, "\n") end
  local complain = io_ and io_.err or function(line) io.stderr:write(line, "\n") end
  local paths, thresholds = {}, { memory = 1.05, time = 1.05 }
  local i = 1
  while i <= #args do
    local a = args[i]
    local opt, inline = a:match("^%-%-(%a+)=(.*)$")
    opt = opt or a:match("^%-%-(%a+)$")
    if a == "--help" or a == "-h" then
      say((COMPARE_USAGE:gsub("\n$", "")))
      return 0
    elseif opt == "threshold" or opt == "memory" or opt == "time" then
      local v = inline
      if not v then
        i = i + 1
        v = args[i]
      end
      local t = tonumber(v or "")
      if opt == "time" and v == "off" then
        t = false
      elseif not t or not (t > 0 and t < math.huge) then
        complain(string.format("dpprof compare: --%s needs a finite ratio > 0, e.g. 1.05%s (got '%s')", opt,
                               opt == "time" and ", or off" or "", tostring(v)))
        return 2
      end
      if opt ~= "time" then thresholds.memory = t end
      if opt ~= "memory" then thresholds.time = t end
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      complain("dpprof compare: unknown option '" .. a .. "' (valid: --memory R, --time R|off, --threshold R, --help)")
      return 2
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  if #paths ~= 2 then
    complain("dpprof compare: expected BASE and NEW, got " .. #paths .. " path(s)\n" .. COMPARE_USAGE)
    return 2
  end
  local base_path, new_path = paths[1], paths[2]
  local pairs_, notes, uncompared = {}, {}, {}
  if is_dir(base_path) ~= is_dir(new_path) then
    complain("dpprof compare: BASE and NEW must both be files or both be directories")
    return 2
  end
  -- every document is read and checked once, before anything is compared
  local loaded = {}
  local function get(path, listed)
    local r, why = results.load(path, listed)
    if r == nil then return nil, why end
    if r == false then notes[#notes + 1] = string.format("skipped %s: %s", path, why) end
    loaded[path] = r
    return true
  end
  if is_dir(base_path) then
    local base_files, new_files = json_files(base_path), json_files(new_path)
    for _, side in ipairs({ { base_path, base_files }, { new_path, new_files } }) do
      for _, n in ipairs(side[2]) do
        local ok, why = get(side[1] .. "/" .. n, true)
        if not ok then complain("dpprof compare: " .. why) return 2 end
      end
    end
    local in_new = {}
    for _, n in ipairs(new_files) do if loaded[new_path .. "/" .. n] then in_new[n] = true end end
    for _, n in ipairs(base_files) do
      if loaded[base_path .. "/" .. n] then
        if in_new[n] then
          pairs_[#pairs_ + 1] = { n, base_path .. "/" .. n, new_path .. "/" .. n }
          in_new[n] = nil
        else
          uncompared[#uncompared + 1] = n .. ": only in BASE, not compared"
        end
      end
    end
    local only_new = {}
    for n in pairs(in_new) do only_new[#only_new + 1] = n end
    table.sort(only_new)
    for _, n in ipairs(only_new) do notes[#notes + 1] = "only in NEW: " .. n end
    if #pairs_ == 0 then
      complain("dpprof compare: no result file is in both " .. base_path .. " and " .. new_path)
      return 2
    end
  else
    for _, path in ipairs({ base_path, new_path }) do
      local ok, why = get(path, false)
      if not ok then complain("dpprof compare: " .. why) return 2 end
    end
    pairs_[1] = { base_path .. " -> " .. new_path, base_path, new_path }
  end
  local regressions = {}
  say(string.format("dpprof compare (memory threshold %g, exact; %s)", thresholds.memory,
                    thresholds.time and string.format("time threshold %g on the median step, against the measured "
                                                      .. "spread of at least %d runs or iterations a side",
                                                      thresholds.time, cli.MIN_TIME_SAMPLES)
                    or "time not judged: --time off"))
  for _, n in ipairs(notes) do say(n) end
  for _, p in ipairs(pairs_) do
    local reg, unc = compare_pair(p[1], loaded[p[2]], loaded[p[3]], thresholds, say)
    for _, r in ipairs(reg) do regressions[#regressions + 1] = r end
    for _, u in ipairs(unc) do uncompared[#uncompared + 1] = u end
  end
  if #regressions > 0 or #uncompared > 0 then
    if #regressions > 0 then
      say(string.format("\n%d regression(s):", #regressions))
      for _, r in ipairs(regressions) do say("  " .. r) end
    end
    if #uncompared > 0 then
      say(string.format("\n%d not compared (a comparison that did not happen is not a pass):", #uncompared))
      for _, u in ipairs(uncompared) do say("  " .. u) end
    end
    return 1
  end
  say("\nno regression")
  return 0
end

---------------------------------------------------------------------------------------------
-- dpprof fit key=value ...

local function eprint(...)
  io.stderr:write(table.concat({ ... }, ""), "\n")
end

local FIT_USAGE = [[
usage: dpprof fit [key=value ...]

The largest seq_len, batch or layer count that fits a memory budget, per DP method, by search
over plan runs (exact allocator accounting, no memory touched, no arithmetic: milliseconds a run,
no GPU needed). Prints one row per method: the largest value that fits, its peak, what the CUDA
pool would reserve for it, the category that dominates the peak, and the first value that does
not fit.

  vary=seq_len|batch|layers   what to search over (default seq_len)
  method=NAME[,NAME...]       @METHODS@
  budget_gb=G                 the card's memory in GiB (default: the device model's)
  device_model=h100|h200|h100-calibrated|FILE.json  the modelled device (default h100, a roofline;
                              h100-calibrated: the H100's calibrated model shipped with dpprof; FILE.json: a model
                              `dpprof calibrate` wrote, whose step times are calibrated); its budget is its memory less
                              the CUDA context; the reserved peak is the allocated one x (1 + overhead)
  context_mb=M                the CUDA context and libraries outside the pool, MiB (default: the model's)
  reserve_overhead=F          reserved-but-unused bytes as a fraction of the peak (default: the model's)
  workspace=true|false        model cuBLAS's workspace and the kernels' scratch (default true)
  lo=, hi=, granularity=      the range and step of the search (seq_len: 64 .. 1048576 by 64;
                              batch: 1 .. 65536; layers: 1 .. 1024)
  preset=large|small          the base model (default large: gpt V=32000 d=2048 L=20 H=16
                              T=16384 B=1); these override it:
  path=DIR                    instead of a preset, a Hugging Face checkpoint's config.json (only
                              that file is read: no weights needed; B=1 unless batch= is given;
                              seq_len searched up to its max_position_embeddings unless hi=)
  arch= vocab= hidden= layers= heads= kv_heads= head_dim= seq_len= batch= dtype= mlp_ratio= ffn=
  tie_head= master_weights=   (dtype=bf16 keeps LoRA's frozen base in bf16 only)
                              sizes are integers >= 1: leave kv_heads=, head_dim=, ffn= out for
                              their defaults (heads, hidden / heads, mlp_ratio x hidden)
  lora_rank=R lora_alpha=A    LoRA adapters of rank R (alpha default R)
  lora_targets=N[,N...]       qkv, proj, fc, down or PEFT's q_proj, k_proj, v_proj, o_proj,
                              gate_proj, up_proj, down_proj (default qkv)
  physical=N                  max physical batch (micro-batching; with vary=batch, the batch is both)
  optimizer=adamw|sgd         (default adamw)
  world_size=N strategy=S     plan one rank of N data-parallel ranks (rank 0; the last rank,
                              which holds the largest slice, when N does not divide batch=): batch= is the
                              global batch, each rank holding its slice (batch / N, or
                              one sample apart where N does not divide it); without batch=,
                              N x the model's batch (each rank holds the preset's B: one
                              sample for large); vary=batch searches the global batch by N
                              (lo=, granularity= default N);
                              S: ddp (default), zero2 (gradients and optimizer states
                              sharded) or fsdp (parameters too, LoRA's frozen base included)
  checkpoint=S[,S...]         activation checkpointing settings to search with, each its own row:
                              off, blocks (every block) or N (every N-th block); default off,blocks
  out=FILE.json               also write the answer as JSON

example: dpprof fit method=ghost,flash_clip vary=seq_len budget_gb=80 dtype=bf16
         dpprof fit method=flash_clip checkpoint=off,blocks,2,4
         dpprof fit path=tests/fixtures/llama3_8b dtype=bf16 lora_rank=16 \
             lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
exit status: 0 answered; 2 bad arguments
]]

-- Words joined by spaces into lines of at most width characters, every line after the first
-- indented by indent spaces.
local function wrap(words, indent, width)
  local lines, line = {}, ""
  for _, w in ipairs(words) do
    if line ~= "" and indent + #line + 1 + #w > width then lines[#lines + 1], line = line, w
    else line = line == "" and w or line .. " " .. w end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n" .. string.rep(" ", indent))
end

-- FIT_USAGE with the method choices from the engine's list (dpprof.dpsgd.METHODS).
function cli.fit_usage()
  local words = {}
  for _, m in ipairs(dp.dpsgd.METHODS) do words[#words + 1] = m .. "," end
  for w in string.format("or norms+clip (default: all %d presets); methods= is the same", #dp.dpsgd.METHODS):gmatch("%S+") do
    words[#words + 1] = w
  end
  local text = wrap(words, 30, 102)
  return (FIT_USAGE:gsub("@METHODS@", function() return text end))
end

-- The model keys fit's command line takes as they are: those of dp.model's (dpprof.model.KEYS, the
-- engine's one list) whose values one word can write (numbers, names, true/false), in the help's
-- order; lora and checkpoint come in words of their own (lora_rank=, checkpoint=off,blocks,N),
-- and the rest keep dp.model's defaults or the preset's. test_grammars checks each is dp.model's.
cli.FIT_MODEL_KEYS = { "arch", "vocab", "hidden", "layers", "heads", "kv_heads", "head_dim", "seq_len", "batch",
                       "dtype", "mlp_ratio", "ffn", "tie_head", "master_weights" }
local FIT_MODEL_KEYS = cli.FIT_MODEL_KEYS
local FIT_KEYS = { "vary", "method", "methods", "budget_gb", "device_model", "context_mb", "reserve_overhead",
                   "workspace", "lo", "hi", "granularity", "preset", "path", "lora_rank", "lora_alpha", "lora_targets",
                   "physical", "optimizer", "checkpoint", "out", "world_size", "strategy" }

-- The fit keys whose values are numbers, and those that are true/false: the command line's types.
-- The ranges are dp.fit's, dp.model's and the device model's checks (each names its key), but for
-- two the command line adds: context_mb (turned into bytes here) is a number of MiB >= 0, and a
-- size whose dp.model default is 0 ("the same as heads", ...) is had by leaving the key out, so
-- 0 typed for it is refused.
local FIT_NUMBER_KEYS = { "budget_gb", "context_mb", "reserve_overhead", "lo", "hi", "granularity", "lora_rank",
                          "lora_alpha", "physical", "vocab", "hidden", "layers", "heads", "kv_heads", "head_dim",
                          "seq_len", "batch", "mlp_ratio", "ffn", "world_size" }
local FIT_BOOLEAN_KEYS = { "workspace", "tie_head", "master_weights" }
local FIT_ZERO_IS_DEFAULT = { kv_heads = "heads", head_dim = "hidden / heads", ffn = "mlp_ratio x hidden" }

-- nil, or the message for a value of the wrong type (a number key given a word, NaN or infinity;
-- a boolean key given anything but true or false; context_mb < 0; 0 for a size left to its default).
local function fit_value_error(kv)
  for _, k in ipairs(FIT_NUMBER_KEYS) do
    local v = kv[k]
    if v ~= nil and not dp.is_finite(v) then
      return string.format("%s must be a finite number, got '%s'", k, tostring(v))
    end
  end
  for _, k in ipairs(FIT_BOOLEAN_KEYS) do
    if kv[k] ~= nil and type(kv[k]) ~= "boolean" then
      return string.format("%s must be true or false, got '%s'", k, tostring(kv[k]))
    end
  end
  if kv.context_mb and kv.context_mb < 0 then
    return string.format("context_mb must be a number of MiB >= 0, got %s", tostring(kv.context_mb))
  end
  for _, k in ipairs(FIT_NUMBER_KEYS) do
    local default = FIT_ZERO_IS_DEFAULT[k]
    if default and kv[k] == 0 then
      return string.format("%s must be an integer >= 1, got 0 (leave %s= out for the default, %s)", k, k, default)
    end
  end
  return nil
end

local function parse_value(v)
  if v == "true" then return true end
  if v == "false" then return false end
  return math.tointeger(tonumber(v)) or tonumber(v) or v
end

-- Parses key=value arguments into the options of dp.fit; returns opts, out (or nil, message).
local function fit_options(args)
  local kv = {}
  local valid = {}
  for _, k in ipairs(FIT_KEYS) do valid[k] = true end
  for _, k in ipairs(FIT_MODEL_KEYS) do valid[k] = true end
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value (see dpprof fit --help)", a) end
    if not valid[k] then
      local all = {}
      for _, x in ipairs(FIT_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(FIT_MODEL_KEYS) do all[#all + 1] = x end
      return nil, string.format("unknown key '%s' (valid: %s)", k, table.concat(all, ", "))
    end
    kv[k] = parse_value(v)
  end
  local bad = fit_value_error(kv)
  if bad then return nil, bad end
  local model = {}
  if kv.path ~= nil then
    if kv.preset ~= nil then return nil, "give preset= or path=, not both" end
    model = { path = tostring(kv.path), batch = 1 }
  else
    local presets = require("dpprof.presets")
    local pname = kv.preset or "large"
    local p = presets.MODELS[pname]
    if not p then return nil, string.format("unknown preset '%s' (valid: large, small)", tostring(pname)) end
    for k, v in pairs(p.model) do model[k] = v end
  end
  for _, k in ipairs(FIT_MODEL_KEYS) do if kv[k] ~= nil then model[k] = kv[k] end end
  if kv.lora_rank ~= nil then -- 0 and the like go to dp.model, which refuses them
    model.lora = { rank = kv.lora_rank, alpha = kv.lora_alpha }
    if kv.lora_targets ~= nil then
      model.lora.targets = {}
      for t in tostring(kv.lora_targets):gmatch("[^,]+") do model.lora.targets[#model.lora.targets + 1] = t end
    end
  elseif kv.lora_alpha ~= nil or kv.lora_targets ~= nil then
    return nil, "lora_alpha= and lora_targets= need lora_rank="
  end
  local base = { model = model, dp = { max_physical_batch_size = kv.physical } }
  local lo, granularity, batch_defaulted = kv.lo, kv.granularity, nil
  if kv.world_size ~= nil or kv.strategy ~= nil then -- each rank of a planned world (its rank 0)
    base.distributed = { strategy = kv.strategy or "ddp", world_size = kv.world_size }
    local n = math.tointeger(kv.world_size)
    if n and n >= 1 then
      if kv.vary == "batch" then -- the global batch, searched in whole samples a rank
        granularity = granularity or n
        lo = lo or granularity
        model.batch = lo -- the searched value; the base is checked with it
      elseif kv.batch == nil then -- each rank holds the model's batch (the preset's, or 1)
        batch_defaulted = model.batch or 1
        model.batch = batch_defaulted * n
      elseif math.tointeger(kv.batch) and kv.batch % n ~= 0 then
        -- a batch the world does not divide: the last rank holds the largest slice (ceil), the
        -- one whose peak decides whether the world fits
        base.distributed.rank = n - 1
      end
    end
  end
  if kv.optimizer then base.optimizer = { name = kv.optimizer } end
  local dm = kv.device_model or "h100"
  if kv.context_mb ~= nil or kv.reserve_overhead ~= nil or kv.workspace ~= nil then
    dm = { base = dm, reserve_overhead = kv.reserve_overhead, workspace = kv.workspace,
           context_bytes = kv.context_mb and math.tointeger(kv.context_mb * 1024 * 1024) or nil }
    if kv.context_mb and not dm.context_bytes then return nil, "context_mb must be a whole number of bytes in MiB" end
  end
  local methods = kv.methods or kv.method
  if methods ~= nil then
    local list = {}
    for m in tostring(methods):gmatch("[^,]+") do list[#list + 1] = m end
    methods = list
  end
  local checkpoint = { false, "blocks" } -- on and off, unless said
  if kv.checkpoint ~= nil then checkpoint = require("dpprof.fit").checkpoint_words(kv.checkpoint) end
  return { base = base, methods = methods, vary = kv.vary, budget_gb = kv.budget_gb, device_model = dm,
           lo = lo, hi = kv.hi, granularity = granularity, checkpoint = checkpoint }, kv.out, batch_defaulted
end

function cli.fit(args)
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then
      io.stdout:write(cli.fit_usage())
      return 0
    end
  end
  local opts, out, batch_defaulted = fit_options(args)
  if not opts then
    eprint("dpprof fit: ", out)
    return 2
  end
  if out then -- before the search: out=link.json would replace the link
    local ok, why = dp.writable(tostring(out))
    if not ok then
      eprint("dpprof fit: out: ", why)
      return 2
    end
  end
  local ok, f = pcall(dp.fit, opts)
  if not ok then
    local msg = tostring(f):gsub("^[^\n]-%.lua:%d+: ", "")
    eprint(msg)
    return 2
  end
  local m, model = f.device_model, require("dpprof.experiment").model_options(opts.base.model, "plan")
  print(string.format("dpprof fit: the largest %s that fits, by plan runs (predicted, not measured)", f.vary))
  print(string.format("  model: %s%s V=%d d=%d L=%d H=%d%s T=%s B=%d %s%s%s", opts.base.model.path and
                      (opts.base.model.path .. ": ") or "", model.arch or "gpt", model.vocab, model.hidden,
                      model.layers, model.heads, model.kv_heads and model.kv_heads ~= model.heads and
                      string.format(" (kv %d)", model.kv_heads) or "", tostring(model.seq_len or f.vary),
                      model.batch or 1, model.dtype or "f32",
                      model.lora and string.format(", LoRA rank %d on %s", model.lora.rank,
                                                   model.lora.targets and table.concat(model.lora.targets, ",")
                                                   or "qkv (the default)") or "",
                      opts.base.dp.max_physical_batch_size and
                      string.format(", physical batch %d", opts.base.dp.max_physical_batch_size) or ""))
  local dist = opts.base.distributed
  if dist then -- what the plan runs are: one rank of the world, not the world
    local n = dist.world_size or 1
    local b = model.batch or 1
    local rank = dist.rank or 0
    local most = (b + n - 1) // n
    local held = f.vary == "batch" and string.format("each rank holds batch / %d samples (batch is the global batch)", n)
                 or b % n ~= 0 and string.format("%d sample%s on this rank, the largest slice (batch %d is the global "
                                                 .. "batch, split unevenly: %d or %d a rank)", most, most == 1 and ""
                                                 or "s", b, b // n, most)
                 or string.format("%s a rank (batch %d is the global batch%s)", b // n == 1 and "1 sample"
                                  or string.format("%d samples", b // n), b, batch_defaulted and
                                  string.format(": %d x %d, as batch= was not given", n, batch_defaulted) or "")
    print(string.format("  world: one rank (rank %d) of %d under %s, %s; the peak is that rank's", rank, n,
                        dist.strategy or "ddp", held))
  end
  print("  device: " .. dp.plan.describe(m))
  print(string.format("  budget: %s for the pool (%s - %s context); fits when peak x %.3g <= budget",
                      dp.format_bytes(f.budget_bytes), dp.format_bytes(m.memory_bytes), dp.format_bytes(m.context_bytes),
                      1 + m.reserve_overhead))
  print(string.format("  search: %s from %d to %d by %d", f.vary, f.lo, f.hi, f.granularity))
  print("")
  local rows = { { "method", "checkpoint", "largest " .. f.vary, "peak", "reserved", "step (est.)", "dominated by",
                   "first unfit", "its peak", "runs" } }
  for _, e in ipairs(f.methods) do
    rows[#rows + 1] = {
      e.method .. (#f.checkpoints > 1 and f.by_method[e.method] == e and " *" or ""),
      require("dpprof.fit").checkpoint_name(e.checkpoint), e.largest and tostring(e.largest) or "none",
      e.peak_bytes and dp.format_bytes(e.peak_bytes) or "-",
      e.predicted_reserved_bytes and dp.format_bytes(e.predicted_reserved_bytes) or "-",
      dp.format_ms(e.step_ms),
      e.dominant and string.format("%s (%s)", e.dominant.category, dp.format_bytes(e.dominant.bytes)) or "-",
      e.first_unfit and tostring(e.first_unfit) or ("> " .. f.hi),
      e.first_unfit_peak_bytes and dp.format_bytes(e.first_unfit_peak_bytes) or "-",
      tostring(e.runs),
    }
  end
  dp.print_table(rows, { false, false, true, true, true, true, false, true, true, true })
  if #f.checkpoints > 1 then
    print("  * the method's answer: the largest value (on a tie, the faster estimated step); step (est.) is the "
          .. "plan's " .. (m.calibration and "calibrated" or "roofline") .. " step time at that value")
  end
  if out then
    local doc = { vary = f.vary, budget_bytes = f.budget_bytes, device_model = f.device_model, lo = f.lo, hi = f.hi,
                  granularity = f.granularity, base = opts.base, methods = dp.json.array(f.methods), predicted = true,
                  checkpoints = dp.json.array(f.checkpoints) }
    local wok, werr = pcall(results.write, out, doc)
    if not wok then
      eprint("dpprof fit: ", tostring(werr))
      return 2
    end
    print("\nwritten: " .. out)
  end
  return 0
end

---------------------------------------------------------------------------------------------
-- dpprof risk key=value ...

local RISK_USAGE = [[
usage: dpprof risk [key=value ...]

The chance that some step of a DP-SGD run with Poisson sampling runs out of memory, when samples
have their own lengths: from plan runs (exact allocator accounting, no GPU) over the physical batch
sizes and padded lengths that can occur, the Binomial logical batch and the lengths' order
statistics (dp.risk, docs/lua.md). Prints, per method, the probability that one step and that
some step of the run exceed the card's memory, the largest max_physical_batch_size that keeps the
run under target, the longest cut of the samples that does, and the modelled step time of each.

  data (one of):
  lengths_file=F              one length a line, or a little-endian uint32 array
  lengths=L[,L...]            the samples' lengths
  distribution=lognormal median=M p99=P | uniform min=A max=B | fixed length=L
                              synthetic lengths (dataset_size= draws, seed=)
  pad_to=N                    pad a physical batch to a multiple of N tokens (default 1); each
                              distinct padded length is a plan run per batch size (pad_to=64
                              and seq_len=4096: 64 lengths, seconds for an 8B model; pad_to=1:
                              every distinct length, thousands)
  group_by_length=true        sort a logical batch by length before splitting it (default false)
  too_long=cut|error          a sample longer than seq_len: cut (default) or refused

  the run:
  sample_rate=Q               Poisson sampling's rate (required)
  steps=S                     the run's steps (required)
  dataset_size=N              the data set's samples (a distribution's draws; a list's own count),
                              at most 10^7
  max_physical_batch_size=M   BatchMemoryManager's bound (default: the logical batch whole)
  target=P                    the run's acceptable probability (default 0.001)
  seed=N                      the draws' seed (default 0)
  simulate=S                  also draw S steps as the engine's Poisson sampler does (seed=) and
                              plan each: the check of the computed distribution
  exhaustive=true             plan every padded length of every row (default false: a row is read
                              from pieces, each the quadratic in the length through three plan runs
                              and taken only where two more runs equal it to the byte)

  the model and the card, as dpprof fit takes them:
  method=NAME[,NAME...]       @METHODS@
  path=DIR | preset=large|small, arch= vocab= hidden= layers= heads= kv_heads= head_dim=
  seq_len=T                   the cut (default: a checkpoint's max_position_embeddings)
  dtype= mlp_ratio= ffn= tie_head= master_weights= lora_rank= lora_alpha= lora_targets=
                              (as dpprof fit: lora_targets default qkv, q_proj,k_proj,v_proj)
  optimizer=adamw|sgd
  budget_gb=G device_model=h100|h200|h100-calibrated|FILE.json context_mb= reserve_overhead= workspace=
  out=FILE.json               also write the answer as JSON
  chart=FILE.png              also draw the per-step peak's CDF per method, the budget and the risk

Plan runs are shared among the cores; past a second, a line a second on stderr says how far the
work is.

example: dpprof risk path=tests/fixtures/llama3_8b dtype=bf16 lora_rank=16 \
             lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj seq_len=4096 \
             method=flash_clip budget_gb=80 distribution=lognormal median=300 p99=3000 pad_to=64 \
             dataset_size=50000 sample_rate=0.001 steps=10000 max_physical_batch_size=32
exit status: 0 answered; 2 bad arguments
]]

-- RISK_USAGE with the method choices from the engine's list.
function cli.risk_usage()
  local words = {}
  for _, m in ipairs(dp.dpsgd.METHODS) do words[#words + 1] = m .. "," end
  for w in ("or norms+clip (required)"):gmatch("%S+") do words[#words + 1] = w end
  local text = wrap(words, 30, 102)
  return (RISK_USAGE:gsub("@METHODS@", function() return text end))
end

-- The keys risk's command line takes besides the model and card keys it shares with fit.
cli.RISK_KEYS = { "lengths_file", "lengths", "distribution", "median", "p99", "min", "max", "length", "pad_to",
                  "group_by_length", "too_long", "sample_rate", "steps", "dataset_size", "max_physical_batch_size",
                  "target", "seed", "simulate", "exhaustive", "chart" }
local RISK_FIT_KEYS = { "method", "methods", "budget_gb", "device_model", "context_mb", "reserve_overhead", "workspace",
                        "preset", "path", "lora_rank", "lora_alpha", "lora_targets", "optimizer", "out" }
local RISK_DIST_KEYS = { lognormal = { "median", "p99" }, uniform = { "min", "max" }, fixed = { "length" } }

-- Parses key=value arguments into the options of dp.risk; returns opts, out, chart (or nil, message).
local function risk_options(args)
  local own, shared = {}, {}
  local function in_list(list, k) for _, x in ipairs(list) do if x == k then return true end end return false end
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value (see dpprof risk --help)", a) end
    if in_list(cli.RISK_KEYS, k) then
      own[k] = v
    elseif in_list(RISK_FIT_KEYS, k) or in_list(FIT_MODEL_KEYS, k) then
      if k ~= "batch" then shared[#shared + 1] = a end
    else
      local all = {}
      for _, x in ipairs(cli.RISK_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(RISK_FIT_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(FIT_MODEL_KEYS) do if x ~= "batch" then all[#all + 1] = x end end
      return nil, string.format("unknown key '%s' (valid: %s)", k, table.concat(all, ", "))
    end
    if k == "batch" then return nil, "batch= is not a risk key: the logical batch is sample_rate x dataset_size, split by max_physical_batch_size=" end
  end
  local fopts, out = fit_options(shared)
  if not fopts then return nil, (out:gsub("dpprof fit", "dpprof risk")) end
  local model = fopts.base.model
  model.batch = nil
  if model.path == nil and own.seq_len == nil and model.seq_len then -- the preset's seq_len unless given
    model.seq_len = model.seq_len
  end
  local function number(k, integer)
    local v = own[k]
    if v == nil then return nil end
    local n = tonumber(v)
    if n == nil or n ~= n or n == math.huge or n == -math.huge then
      return nil, string.format("%s must be a %s, got '%s'", k, integer and "whole number" or "number", v)
    end
    if integer then
      local i = math.tointeger(n)
      if not i then return nil, string.format("%s must be a whole number, got '%s'", k, v) end
      return i
    end
    return n
  end
  local o = { model = model, methods = fopts.methods, budget_gb = fopts.budget_gb, device_model = fopts.device_model,
              optimizer = fopts.base.optimizer, progress = true }
  for _, k in ipairs({ "sample_rate", "target" }) do
    local v, err = number(k)
    if err then return nil, err end
    o[k] = v
  end
  for _, k in ipairs({ "steps", "dataset_size", "max_physical_batch_size", "seed", "simulate" }) do
    local v, err = number(k, true)
    if err then return nil, err end
    o[k] = v
  end
  if o.sample_rate == nil then return nil, "sample_rate= is required (Poisson sampling's rate, e.g. sample_rate=0.001)" end
  if o.steps == nil then return nil, "steps= is required (the run's number of steps)" end
  if o.methods == nil then return nil, "method= is required (e.g. method=flash_clip; see dpprof risk --help)" end
  local data = {}
  if own.lengths_file then data.lengths_file = own.lengths_file end
  if own.lengths then
    data.lengths = {}
    for w in own.lengths:gmatch("[^,]+") do
      local n = tonumber(w)
      if not n then return nil, string.format("lengths: '%s' is not a number (lengths=L,L,...)", w) end
      data.lengths[#data.lengths + 1] = math.tointeger(n) or n
    end
  end
  if own.distribution then
    local kind = own.distribution
    local keys = RISK_DIST_KEYS[kind]
    if not keys then return nil, string.format("unknown distribution '%s' (valid: lognormal, uniform, fixed)", kind) end
    data.length_distribution = { kind = kind }
    for _, k in ipairs(keys) do
      local v, err = number(k, kind ~= "lognormal")
      if err then return nil, err end
      if v == nil then return nil, string.format("distribution=%s needs %s=", kind, k) end
      data.length_distribution[k] = v
    end
  end
  for kind, keys in pairs(RISK_DIST_KEYS) do
    for _, k in ipairs(keys) do
      if own[k] ~= nil and not (data.length_distribution and data.length_distribution.kind == kind) then
        return nil, string.format("%s= belongs to distribution=%s", k, kind)
      end
    end
  end
  if own.pad_to then
    local v, err = number("pad_to", true)
    if err then return nil, err end
    data.pad_to = v
  end
  for _, k in ipairs({ "group_by_length", "exhaustive" }) do
    local v = own[k]
    if v ~= nil and v ~= "true" and v ~= "false" then
      return nil, string.format("%s must be true or false, got '%s'", k, v)
    end
    if v ~= nil then (k == "exhaustive" and o or data)[k] = v == "true" end
  end
  data.too_long = own.too_long
  o.data = data
  return o, out, own.chart
end

-- The document `out=` writes and `chart=` draws (plots/report_risk.c reads it).
function cli.risk_document(r, opts)
  local methods = {}
  for _, e in ipairs(r.methods) do
    local m = dp.deep_copy(e)
    if m.simulation then m.simulation.peaks = nil end
    m.cdf = dp.json.array(m.cdf)
    if m.simulation then m.simulation.cdf = dp.json.array(m.simulation.cdf) end
    methods[#methods + 1] = m
  end
  return { kind = "dpprof.risk", predicted = true, budget_bytes = r.budget_bytes, device_model = r.device_model,
           steps = r.steps, sample_rate = r.sample_rate, dataset_size = r.dataset_size, target = r.target, seed = r.seed,
           seq_len = r.seq_len, max_physical_batch_size = r.max_physical_batch_size,
           whole_logical_batch = r.whole_logical_batch, data = r.data, logical_batch = r.logical_batch,
           probability = r.probability, per_step = r.per_step, model = opts.model, methods = dp.json.array(methods),
           optimizer = opts.optimizer or { name = "adamw" } } -- dp.risk's default, named in the chart
end

local function fmt_p(p)
  if p == nil then return "-" end
  if p == 0 then return "0" end
  if p >= 0.01 then return string.format("%.3f", p) end
  return string.format("%.2e", p)
end

function cli.risk(args)
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then
      io.stdout:write(cli.risk_usage())
      return 0
    end
  end
  local opts, out, chart = risk_options(args)
  if not opts then
    eprint("dpprof risk: ", out)
    return 2
  end
  for _, f in ipairs({ out or false, chart or false }) do
    if f then
      local ok, why = dp.writable(tostring(f))
      if not ok then
        eprint("dpprof risk: ", f == out and "out: " or "chart: ", why)
        return 2
      end
    end
  end
  local t0 = dp.clock()
  local ok, r = pcall(dp.risk, opts)
  if not ok then
    eprint(dp.error_text(r))
    return 2
  end
  local m = r.device_model
  print("dpprof risk: the chance that a step of the run exceeds the card's memory, by plan runs (predicted, not measured)")
  print(string.format("  data: %d samples (%s), %d cut at seq_len %d (longest %d), padded to a multiple of %d: "
                      .. "%d padded lengths%s", r.data.samples, r.data.source, r.data.cut, r.seq_len, r.data.longest,
                      r.data.pad_to, r.data.padded_lengths, r.data.group_by_length and ", grouped by length" or ""))
  print(string.format("  run: sample_rate %g, %d steps, logical batch %.1f on average (%d to %d; P(empty) %s), %s",
                      r.sample_rate, r.steps, r.logical_batch.mean, r.logical_batch.low, r.logical_batch.high,
                      fmt_p(r.logical_batch.empty), r.whole_logical_batch and "each logical batch whole"
                      or string.format("max_physical_batch_size %d", r.max_physical_batch_size)))
  print("  device: " .. dp.plan.describe(m))
  print(string.format("  budget: %s for the pool; target: P(some step exceeds) <= %g", dp.format_bytes(r.budget_bytes),
                      r.target))
  print("")
  local rows = { { "method", "P(step)", "P(run)", "step (est.)", "safe max_physical", "its P(run)", "its step",
                   "length cap", "cut", "its P(run)", "plan runs" } }
  for _, e in ipairs(r.methods) do
    rows[#rows + 1] = {
      e.method .. (e.monotone and "" or " !"), fmt_p(e.per_step), fmt_p(e.probability), dp.format_ms(e.step_ms),
      e.safe and (tostring(e.safe.max_physical_batch_size) .. (e.safe.whole_logical_batch and " (whole)" or "")) or "none",
      e.safe and fmt_p(e.safe.probability) or "-", e.safe and dp.format_ms(e.safe.step_ms) or "-",
      e.length_cap and tostring(e.length_cap.length) or "none", e.length_cap and tostring(e.length_cap.cut) or "-",
      e.length_cap and fmt_p(e.length_cap.probability) or "-", tostring(e.runs),
    }
  end
  dp.print_table(rows, { false, true, true, true, true, true, true, true, true, true, true })
  print("  P(step): one step exceeds; P(run): some step of the run does; safe: the largest max_physical_batch_size "
        .. "that keeps P(run) <= target; length cap: the longest cut at this max_physical_batch_size that does; "
        .. "step (est.): the plan's modelled time of a typical step")
  for _, e in ipairs(r.methods) do
    if not e.monotone then
      print(string.format("  ! %s: the peak is not monotone in the padded length (every length's peak is "
                          .. "counted; group_by_length's reading is then an upper bound)", e.method))
    end
    if e.simulation then
      print(string.format("  %s simulated: %d steps drawn (seed %d) and planned: P(step) %s (computed %s); the "
                          .. "CDFs differ by at most %.4f (99%% bound for %d steps: %.4f)", e.method, e.simulation.steps,
                          e.simulation.seed, fmt_p(e.simulation.per_step), fmt_p(e.per_step), e.simulation.ks,
                          e.simulation.steps, e.simulation.ks_bound_99))
    end
  end
  print(string.format("  answered in %.1f s", dp.clock() - t0))
  local doc = cli.risk_document(r, opts)
  if out then
    local wok, werr = pcall(results.write, out, doc)
    if not wok then
      eprint("dpprof risk: ", tostring(werr))
      return 2
    end
    print("\nwritten: " .. out)
  end
  if chart then
    local cok, why, note = pcall(dp.plot.risk, results.encode(doc), chart)
    if not cok then
      eprint("dpprof risk: chart: ", tostring(why))
      return 1
    end
    print("drawn: " .. chart .. (note and "  (" .. note .. ")" or ""))
  end
  return 0
end

---------------------------------------------------------------------------------------------
-- dpprof sweep submit | status | collect | task

local SWEEP_USAGE = [[
usage: dpprof sweep submit SCRIPT [key=value ...]
       dpprof sweep submit DIR [key=value ...]
       dpprof sweep status DIR
       dpprof sweep collect DIR

Runs the sweeps of a script on a Slurm cluster, one job array per sweep (docs/cluster.md).

  submit SCRIPT  runs SCRIPT as `dpprof run` does, but each dp.sweep in it submits its points as
                 one Slurm array job (task i runs point i and writes <out>/<point>.json) and one
                 job that collects them when the array ends; out's points with a result are not
                 submitted. The key=value pairs go to the script, except these sbatch options,
                 which override the script's dp.sweep{slurm=}:
                   partition=NAME  account=NAME  time=MINUTES|[D-]HH:MM:SS  mem=MIB|16G
                   gpus_per_task=N  cpus_per_task=N  max_parallel=N (tasks at once)
                   extra="--qos=high --constraint=a100" (more sbatch options)
                   gpus_per_node=G  mpi=pmix (N-task points: see below)
                 A point with distributed = {world_size = N} on cpu or cuda is an N-task job
                 (--ntasks=N, one GPU a rank on cuda, packed G to a node with gpus_per_node)
                 whose task is `srun --ntasks=N --mpi=pmix dpprof sweep task`; one array per N
  submit DIR     submits again the points of the sweep in DIR with no result or a failed one
                 (error, crashed, timeout), never one still queued or running; the sbatch
                 options above may change (the last ones are kept otherwise)
  status DIR     each point's result, or its task's Slurm state, and the job ids
  collect DIR    a result for each point whose task ended without writing one, from Slurm's end
                 state (OUT_OF_MEMORY: oom; TIMEOUT, DEADLINE: timeout; CANCELLED, NODE_FAIL,
                 FAILED, ...: crashed, the state named), then the charts once every point has one
  task DIR       what array task $SLURM_ARRAY_TASK_ID runs (DIR/slurm/task.sh calls it)

DIR, the script and the dpprof binary must be on a filesystem every node shares. End states come
from sacct, else from scontrol (recent jobs), else from a jobcomp/filetxt log.
exit status: 0 done (collect: every point has a result); 1 an error, or (collect) points still
without a result; 2 bad arguments, or DIR is not a Slurm sweep
]]

-- A key=value argument's value as `dpprof run` gives it to a script (dpprof.args).
local function script_value(v)
  if v == "true" then return true end
  if v == "false" then return false end
  local n = tonumber(v)
  if n ~= nil then return n end
  return v
end

-- Loads SCRIPT and sets dpprof.args and the global arg as `dpprof run SCRIPT raw...` does.
-- Returns the chunk, or nil and why.
local function load_script(script, raw)
  local args, argt = {}, { [0] = script }
  for i, a in ipairs(raw) do
    local k, v = tostring(a):match("^([^=]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value", tostring(a)) end
    args[k], argt[i] = script_value(v), a
  end
  local chunk, err = loadfile(script, "t")
  if not chunk then return nil, err end
  dp.args = args
  _G.arg = argt
  return chunk
end

local function is_slurm_key(k)
  for _, name in ipairs(require("dpprof.slurm").OPTION_KEYS) do
    if name == k then return true end
  end
  return false
end

local function sweep_submit(rest)
  local slurm = require("dpprof.slurm")
  local sweep = require("dpprof.sweep")
  local target = rest[1]
  local options, raw = {}, {}
  for i = 2, #rest do
    local k, v = rest[i]:match("^([^=]+)=(.*)$")
    if not k then
      eprint("dpprof sweep submit: argument '", rest[i], "' is not key=value")
      return 2
    end
    if is_slurm_key(k) then options[k] = script_value(v) else raw[#raw + 1] = rest[i] end
  end
  local ok, err = pcall(slurm.options, nil, options)
  if not ok then
    eprint("dpprof sweep submit: ", (tostring(err):gsub("^dpprof%.sweep: ", "")))
    return 2
  end
  local session
  if dp.list_dir(target) then
    local m, why = slurm.read_manifest(target)
    if not m then
      eprint("dpprof sweep submit: ", why)
      return 2
    end
    if #raw > 0 then
      eprint("dpprof sweep submit: ", target, " is a sweep: only sbatch options may be given (",
             table.concat(slurm.OPTION_KEYS, ", "), "), not '", raw[1], "'")
      return 2
    end
    for k, v in pairs(m.slurm or {}) do if options[k] == nil then options[k] = v end end
    session = { mode = "resubmit", call = m.call, dir = m.out, cwd = m.cwd, slurm = options, script = m.script,
                args = m.args }
  else
    session = { mode = "submit", slurm = options, script = target, args = raw }
  end
  local chunk, why = load_script(session.script, session.args)
  if not chunk then
    eprint("dpprof sweep submit: ", why)
    return 2
  end
  sweep.session = session
  chunk() -- an error goes to the command line's handler, with the script's own lines
  sweep.session = nil
  if not session.reached then
    if session.mode == "resubmit" then
      eprint("dpprof sweep submit: ", session.script, " no longer reaches its dp.sweep call #", tostring(session.call),
             " that made ", target)
    else
      eprint("dpprof sweep submit: ", target, " ran to its end without calling dp.sweep: nothing was submitted")
    end
    return 1
  end
  return 0
end

local function sweep_task(dir)
  local slurm = require("dpprof.slurm")
  local sweep = require("dpprof.sweep")
  local m, why = slurm.read_manifest(dir)
  if not m then
    eprint("dpprof sweep task: ", why)
    return 2
  end
  local index = math.tointeger(tonumber(os.getenv("SLURM_ARRAY_TASK_ID") or ""))
  if not index then
    eprint("dpprof sweep task: SLURM_ARRAY_TASK_ID is not set: this is what a Slurm array task of ", dir, " runs")
    return 2
  end
  local chunk, err = load_script(m.script, m.args)
  if not chunk then
    eprint("dpprof sweep task: ", err)
    return 1
  end
  sweep.session = { mode = "task", call = m.call, dir = m.out, index = index, manifest = m }
  local ok, e = xpcall(chunk, function(e)
    if e == sweep.TASK_DONE then return e end
    return debug.traceback(dp.error_text(e), 2)
  end)
  sweep.session = nil
  if ok or e == sweep.TASK_DONE then
    if ok then
      eprint("dpprof sweep task: ", m.script, " ran to its end without reaching its dp.sweep call #", tostring(m.call))
      return 1
    end
    return 0
  end
  eprint("dpprof sweep task: ", tostring(e))
  return 1
end

function cli.sweep(args)
  local sub = args[1]
  if sub == nil or sub == "--help" or sub == "-h" then
    io.stdout:write(SWEEP_USAGE)
    return sub == nil and 2 or 0
  end
  local rest = { table.unpack(args, 2) }
  for _, a in ipairs(rest) do
    if a == "--help" or a == "-h" then
      io.stdout:write(SWEEP_USAGE)
      return 0
    end
  end
  local say = function(line) io.stdout:write(line, "\n") io.stdout:flush() end
  local slurm = require("dpprof.slurm")
  if sub == "submit" then
    if #rest < 1 then
      eprint("dpprof sweep submit: missing SCRIPT or DIR\n", SWEEP_USAGE)
      return 2
    end
    return sweep_submit(rest)
  end
  if sub ~= "status" and sub ~= "collect" and sub ~= "task" then
    eprint("dpprof sweep: unknown subcommand '", sub, "' (valid: submit, status, collect; see dpprof sweep --help)")
    return 2
  end
  if #rest ~= 1 then
    eprint("dpprof sweep ", sub, ": expected DIR, got ", #rest, " argument(s)")
    return 2
  end
  if sub == "status" then return slurm.status(rest[1], say) end
  if sub == "collect" then return slurm.collect(rest[1], say) end
  return sweep_task(rest[1])
end

---------------------------------------------------------------------------------------------
-- dpprof calibrate [--device cpu|cuda] [--out FILE.json] [--quick] [RESULTS...] (dpprof.calibrate)

function cli.calibrate(args) return require("dpprof.calibrate").main(args) end

return cli
