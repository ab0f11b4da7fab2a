-- dpprof.cli_risk: `dpprof risk` (dpprof.cli.risk), written in Lua; returns the process exit status.
local dp = require("dpprof")
local results = require("dpprof.results")
local util = require("dpprof.cli_util")
local options = require("dpprof.options")
local grammar = require("dpprof.data") -- the data = {...} grammar (the spec built here is `data`)
local cli_fit = require("dpprof.cli_fit")

local eprint, wrap = util.eprint, util.wrap
local FIT_MODEL_KEYS, fit_options = cli_fit.FIT_MODEL_KEYS, cli_fit.fit_options

local cli = {}

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
  dataset=F                   a data set of text (JSONL, a JSON array, plain text), its records
                              tokenized: tokenizer=DIR|FILE.json (default path=), field=NAME
                              (default text; a record with prompt and completion strings is
                              both), chat=llama3 (field default messages), format=auto|jsonl|json|
                              text|windows (window=BYTES), max_records=N; a record's length is its
                              tokens less one
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
  clipping=S clip_fn=F        the clipping style and function the plan runs take (as dpprof fit)
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
  for w in ("or norms+clip (required); methods= is the same"):gmatch("%S+") do words[#words + 1] = w end
  local text = wrap(words, 30, 102)
  return (RISK_USAGE:gsub("@METHODS@", function() return text end))
end

-- The keys risk's command line takes besides the model and card keys it shares with fit.
-- risk's own words, and the fit words it takes (beside the model's FIT rows): the schema's.
cli.RISK_KEYS = options.keys("risk")
local RISK_FIT_KEYS = options.keys("fit", { risk = true })
-- Each length distribution's words: data.KINDS' keys less kind (the grammar's one list).
local RISK_DIST_KEYS = {}
for kind, keys in pairs(grammar.KINDS) do
  RISK_DIST_KEYS[kind] = {}
  for _, k in ipairs(keys) do if k ~= "kind" then table.insert(RISK_DIST_KEYS[kind], k) end end
end
local DIST_NAMES = table.concat(grammar.KIND_NAMES, ", ")

-- dpprof risk's words split: its own keys (key -> text) and the words dpprof fit takes (a list);
-- nil and the complaint for a word that is not key=value or a key of neither.
local function split_args(args)
  local own, shared = {}, {}
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k then return nil, string.format("argument '%s' is not key=value (see dpprof risk --help)", a) end
    if dp.contains(cli.RISK_KEYS, k) then
      own[k] = v
    elseif dp.contains(RISK_FIT_KEYS, k) or dp.contains(FIT_MODEL_KEYS, k) or dp.contains(cli_fit.FIT_DP_KEYS, k) then
      if k ~= "batch" then shared[#shared + 1] = a end
    else
      local all = {}
      for _, x in ipairs(cli.RISK_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(RISK_FIT_KEYS) do all[#all + 1] = x end
      for _, x in ipairs(FIT_MODEL_KEYS) do if x ~= "batch" then all[#all + 1] = x end end
      for _, x in ipairs(cli_fit.FIT_DP_KEYS) do all[#all + 1] = x end
      return nil, string.format("unknown key '%s' (valid: %s)", k, table.concat(all, ", "))
    end
    if k == "batch" then return nil, "batch= is not a risk key: the logical batch is sample_rate x dataset_size, split by max_physical_batch_size=" end
  end
  return own, shared
end

-- own[k] as a number (an integer when `integer`), nil when absent; nil and the complaint when it is
-- not one.
local function own_number(own, k, integer)
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

-- The run's numbers (sample_rate, target, steps, dataset_size, ...) into o; the complaint when one
-- is wrong or a required one missing.
local function risk_numbers(own, o)
  for _, k in ipairs({ "sample_rate", "target" }) do
    local v, err = own_number(own, k)
    if err then return err end
    o[k] = v
  end
  for _, k in ipairs({ "steps", "dataset_size", "max_physical_batch_size", "seed", "simulate" }) do
    local v, err = own_number(own, k, true)
    if err then return err end
    o[k] = v
  end
  if o.sample_rate == nil then return "sample_rate= is required (Poisson sampling's rate, e.g. sample_rate=0.001)" end
  if o.steps == nil then return "steps= is required (the run's number of steps)" end
  if o.methods == nil then return "method= is required (e.g. method=flash_clip; see dpprof risk --help)" end
end

-- The data = {...} of the words: lengths, lengths_file, a distribution and its keys, pad_to,
-- group_by_length, too_long (exhaustive goes to o); nil and the complaint when one is wrong.
local function risk_data(own, o)
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
    if not keys then return nil, string.format("unknown distribution '%s' (valid: %s)", kind, DIST_NAMES) end
    data.length_distribution = { kind = kind }
    for _, k in ipairs(keys) do
      local v, err = own_number(own, k, kind ~= "lognormal")
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
    local v, err = own_number(own, "pad_to", true)
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
  -- a data set of text: its records' lengths under the tokenizer (tokenizer=, default path=)
  for _, k in ipairs({ "dataset", "tokenizer", "field", "chat", "format" }) do data[k] = own[k] end
  for _, k in ipairs({ "window", "max_records" }) do
    local v, err = own_number(own, k, true)
    if err then return nil, err end
    data[k] = v
  end
  return data
end

-- Parses key=value arguments into the options of dp.risk; returns opts, out, chart (or nil, message).
local function risk_options(args)
  local own, shared = split_args(args)
  if not own then return nil, shared end
  local fopts, out = fit_options(shared)
  if not fopts then return nil, (out:gsub("dpprof fit", "dpprof risk")) end
  local model = fopts.base.model
  model.batch = nil
  local o = { model = model, methods = fopts.methods, budget_gb = fopts.budget_gb, device_model = fopts.device_model,
              optimizer = fopts.base.optimizer, progress = true }
  for _, k in ipairs(cli_fit.FIT_DP_KEYS) do -- clipping=, clip_fn=: the plan runs' clipping style
    if fopts.base.dp[k] ~= nil then
      o.clipping = o.clipping or {}
      o.clipping[k] = fopts.base.dp[k]
    end
  end
  local err = risk_numbers(own, o)
  if err then return nil, err end
  local data
  data, err = risk_data(own, o)
  if not data then return nil, err end
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

-- The answer's header: the data, the run, the device and the budget.
local function print_setting(r)
  local m = r.device_model
  print("dpprof risk: the chance that a step of the run exceeds the card's memory, by plan runs (predicted, not measured)")
  print(string.format("  data: %d samples (%s), %d cut at seq_len %d (longest %d), padded to a multiple of %d: "
                      .. "%d padded lengths%s", r.data.samples, r.data.source, r.data.cut, r.seq_len, r.data.longest,
                      r.data.pad_to, r.data.padded_lengths, r.data.group_by_length and ", grouped by length" or ""))
  if r.data.dataset then
    local first = r.data.bad_records[1]
    print(string.format("  data set: %s, %d records tokenized (%d tokens), %d bad%s", r.data.dataset, r.data.records,
                        r.data.tokens, r.data.bad, first and string.format(" (first: line %d, %s)", first.line,
                                                                          first.reason) or ""))
  end
  print(string.format("  run: sample_rate %g, %d steps, logical batch %.1f on average (%d to %d; P(empty) %s), %s",
                      r.sample_rate, r.steps, r.logical_batch.mean, r.logical_batch.low, r.logical_batch.high,
                      fmt_p(r.logical_batch.empty), r.whole_logical_batch and "each logical batch whole"
                      or string.format("max_physical_batch_size %d", r.max_physical_batch_size)))
  print("  device: " .. dp.plan.describe(m))
  print(string.format("  budget: %s for the pool; target: P(some step exceeds) <= %g", dp.format_bytes(r.budget_bytes),
                      r.target))
  print("")
end

-- The table of methods (each one's chances, safe batch, length cap) and its notes.
local function print_methods(r)
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
end

-- Writes the answer's document to out and draws chart (each when given): the exit status, 0 when
-- both went well.
local function write_outputs(r, opts, out, chart)
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

-- dpprof risk WORDS: the chance that a Poisson-sampled run runs out of memory (dp.risk), its table,
-- and out= (JSON) and chart= (PNG) when given. Returns the exit status.
function cli.risk(args)
  if util.help_asked(args) then
    io.stdout:write(cli.risk_usage())
    return 0
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
  print_setting(r)
  print_methods(r)
  print(string.format("  answered in %.1f s", dp.clock() - t0))
  return write_outputs(r, opts, out, chart)
end

return cli
