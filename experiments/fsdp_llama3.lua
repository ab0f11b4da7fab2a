-- fsdp_llama3.lua: what fits 8 x H100 80 GB per DP method under fsdp (ZeRO-3), planned per rank on the plan device (no GPU, no weights): Llama-3.1-8B full fine-tuning (bf16 with f32 masters, AdamW) and Llama-3.1-70B + LoRA r = 16; per method the largest seq_len at batch 8 (one sample a rank) with and without checkpointing, and the largest rank's breakdown at seq_len 4096, beside DeepSpeed's ZeRO-3 model-state estimate.
-- Change it: dpprof run experiments/fsdp_llama3.lua [models=8b,70b] [methods=a,b] [world_size=8] [strategy=fsdp|zero2|ddp] [batch=8]
--   [seq_len=4096] [checkpoint=off,blocks] [clipping=flat,per_block] [device_model=h100|h200|h100-calibrated]
--   [budget_gb=G] [lora_rank=16] [granularity=64] [out=DIR]
--   clipping: the clipping styles to plan each DP method with (docs/lua.md, Clipping styles): per_block clips each
--   block's gradient by its own bound, so bk and flash_clip form and free each block's books at its backward's end;
--   its rows are named "method (per_block)".
--   8b: tests/fixtures/llama3_8b, every parameter trained; 70b: tests/fixtures/llama3_70b, LoRA of rank lora_rank on
--   every linear (PEFT's q_proj .. down_proj), the frozen base in bf16 only. Each breakdown plans every rank (the
--   plan device plays the rank `distributed.rank` names) and shows the largest. DeepSpeed's estimate
--   (estimate_zero3_model_states_mem_needs, no offload): 4 x the largest module's parameters + 18 x all parameters /
--   world_size bytes, model states alone, every parameter counted as trained. Writes fsdp_llama3.md (the tables),
--   fsdp_llama3.json and each breakdown's result to out=.
local dp = require("dpprof")
local presets = require("dpprof.presets")
local plan = require("dpprof.plan")
local args = presets.args("fsdp_llama3.lua",
                          { "models", "world_size", "strategy", "batch", "seq_len", "checkpoint", "clipping",
                            "device_model", "budget_gb", "lora_rank", "granularity" },
                          { device = "plan runs only (device_model= picks the card)",
                            threads = "plan runs do no arithmetic",
                            profile = "plan runs time no ops" })

local TARGETS = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" }
local MODELS = {
  ["8b"] = { fixture = "tests/fixtures/llama3_8b", title = "Llama-3.1-8B, full fine-tuning" },
  ["70b"] = { fixture = "tests/fixtures/llama3_70b", title = "Llama-3.1-70B + LoRA", lora = true },
}
local function refuse(fmt, ...) dp.refuse("fsdp_llama3.lua: " .. string.format(fmt, ...)) end
local function int_arg(key, default)
  local v = args[key]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < 1 then refuse("%s must be an integer >= 1, got %s", key, tostring(v)) end
  return v
end

local models = presets.list(args.models) or { "8b", "70b" }
for _, k in ipairs(models) do
  if not MODELS[k] then refuse("unknown model '%s' (valid: 8b, 70b)", tostring(k)) end
end
local methods = args.methods and presets.list(args.methods) or presets.ALL_METHODS
local N = int_arg("world_size", 8)
local batch = int_arg("batch", N)
local T = int_arg("seq_len", 4096)
local rank_r = int_arg("lora_rank", 16)
local strategy = args.strategy or "fsdp"
local checkpoints = require("dpprof.fit").checkpoint_words(args.checkpoint or "off,blocks") -- dpprof fit's words
local clippings = presets.list(args.clipping) or { "flat", "per_block" }
for _, c in ipairs(clippings) do
  if not dp.contains(dp.dpsgd.STYLES, c) or c == "groups" then
    refuse("unknown clipping '%s' (valid here: flat, per_layer, per_block)", tostring(c))
  end
end
local device_model = args.device_model or "h100"
local out = args.out or ("results/fsdp_llama3_" .. os.date("%Y%m%d_%H%M%S"))
local ok, err = dp.mkdir_p(out)
if not ok then error(err) end

local function base_of(spec, seq_len, method, rank, checkpoint, clipping)
  local model = { path = presets.repo_path(spec.fixture), dtype = "bf16", master_weights = true, batch = batch,
                  seq_len = seq_len, checkpoint = checkpoint }
  if spec.lora then model.lora = { rank = rank_r, alpha = rank_r, targets = TARGETS } end
  return { model = model, method = method, device = "plan", device_model = device_model, iters = 1, warmup = 1,
           snapshots = "none", distributed = { strategy = strategy, world_size = N, rank = rank },
           dp = { noise_multiplier = 1.0, max_grad_norm = 1.0, clipping = clipping } }
end

-- The rows: every method with every clipping style (vanilla clips nothing: once), named
-- "method" for flat and "method (style)" for the others.
local rows_of = {}
for _, c in ipairs(clippings) do
  for _, m in ipairs(methods) do
    if c == "flat" or m ~= "vanilla" then
      rows_of[#rows_of + 1] = { method = m, clipping = c, label = c == "flat" and m or string.format("%s (%s)", m, c) }
    end
  end
end

-- DeepSpeed's ZeRO-3 model-state estimate, from the model's own parameter table (a plan model)
local function deepspeed_estimate(spec)
  local m <close> = dp.model.load(presets.repo_path(spec.fixture), { device = "plan", dtype = "bf16", seq_len = 64,
                                                                     batch = 1 })
  local per_module, total = {}, 0
  for _, p in ipairs(m:params()) do
    per_module[p.module] = (per_module[p.module] or 0) + p.numel
    total = total + p.numel
  end
  local largest, name = 0, nil
  for k, v in pairs(per_module) do
    if v > largest or (v == largest and k < name) then largest, name = v, k end
  end
  return { params = total, largest_module = name, largest_module_params = largest,
           bytes = 4 * largest + 18 * total // N }
end

local GiB = 1024.0 ^ 3
local function gib(b) return b and string.format("%.2f", b / GiB) or "-" end
local lines, report = {}, { world_size = N, strategy = strategy, batch = batch, seq_len = T, models = {} }
local function say(s)
  lines[#lines + 1] = s
  print(s)
end

for _, key in ipairs(models) do
  local spec = MODELS[key]
  local ds = deepspeed_estimate(spec)
  local entry = { model = key, title = spec.title, deepspeed = ds, fit = {}, breakdown = {} }
  report.models[#report.models + 1] = entry
  -- the largest seq_len, per method, clipping style and checkpointing setting (a search per style)
  local fits, f = {}, nil
  for _, c in ipairs(clippings) do
    local ms = {}
    for _, r in ipairs(rows_of) do if r.clipping == c then ms[#ms + 1] = r.method end end
    fits[c] = dp.fit{ base = base_of(spec, 1024, ms[1], 0, false, c), methods = ms, vary = "seq_len",
                      device_model = device_model, budget_gb = args.budget_gb, granularity = args.granularity or 64,
                      checkpoint = checkpoints }
    f = f or fits[c]
  end
  local budget = f.budget_bytes
  say(string.format("\n### %s: %d x %s, %s, batch %d (%d a rank), bf16 with f32 masters, AdamW%s", spec.title, N,
                    f.device_model.name, strategy, batch, batch // N,
                    spec.lora and string.format(", LoRA r = %d on every linear", rank_r) or ""))
  say(string.format("\n%.2f B parameters; budget %s GiB a rank (%s); DeepSpeed ZeRO-3 model states: %s GiB a rank "
                    .. "(4 x %s's %.2f B + 18 x %.2f B / %d)", ds.params / 1e9, gib(budget), f.device_model.name,
                    gib(ds.bytes), ds.largest_module, ds.largest_module_params / 1e9, ds.params / 1e9, N))
  local head = "\n| method |"
  local rule = "| --- |"
  for _, ck in ipairs(checkpoints) do
    head = head .. string.format(" largest seq_len (checkpoint %s) |", dp.model.checkpoint_name(ck))
    rule = rule .. " ---: |"
  end
  say(head)
  say(rule)
  for _, r in ipairs(rows_of) do
    local row = "| " .. r.label .. " |"
    for _, e in ipairs(fits[r.clipping].methods) do
      if e.method == r.method then
        row = row .. " " .. (e.largest and tostring(e.largest) or "none") .. " |"
        entry.fit[#entry.fit + 1] = { method = r.method, clipping = r.clipping,
                                      checkpoint = dp.model.checkpoint_name(e.checkpoint),
                                      largest = e.largest or dp.json.null, peak_bytes = e.peak_bytes or dp.json.null }
      end
    end
    say(row)
  end
  -- each rank's breakdown at T, per checkpointing setting, the largest rank shown
  local cats = {}
  local rows = {}
  for _, rw in ipairs(rows_of) do
    local m = rw.method
    for _, ck in ipairs(checkpoints) do
      local best, spread_lo
      for r = 0, N - 1 do
        local cfg = base_of(spec, T, m, r, ck, rw.clipping)
        cfg.name = string.format("%s,method=%s,clipping=%s,seq_len=%d,checkpoint=%s,rank=%d", key, m, rw.clipping, T,
                                 tostring(ck), r)
        local res = dp.experiment(cfg)
        if res.status ~= "ok" then
          refuse("the plan run %s failed (%s): %s", cfg.name, res.status, tostring(res.message))
        end
        local peak = res.plan.peak_bytes -- the build's and warm-up's peak included, as fit's search judges
        spread_lo = math.min(spread_lo or peak, peak)
        if not best or peak > best.plan.peak_bytes then best = res end
      end
      local b = plan.budget(f.device_model, best.plan.peak_bytes)
      local row = { method = m, clipping = rw.clipping, label = rw.label, checkpoint = dp.model.checkpoint_name(ck),
                    rank = best.distributed.rank,
                    peak_bytes = best.plan.peak_bytes, spread_bytes = best.plan.peak_bytes - spread_lo, fits = b.fits,
                    categories = {}, step_ms = best.timing.avg_ms, comm_ms = 0 }
      for _, o in ipairs(best.timing.estimate.ops) do -- every collective of the step, on the links
        if o.op:find("^comm_") then row.comm_ms = row.comm_ms + o.ms / best.config.iters end
      end
      for _, c in ipairs(dp.results.CATEGORIES) do
        local v = best.memory.categories[c].live_at_peak_bytes
        row.categories[c] = v
        if v > 0 then cats[c] = true end
      end
      rows[#rows + 1] = row
      entry.breakdown[#entry.breakdown + 1] = row
      dp.results.write(string.format("%s/%s,method=%s,clipping=%s,seq_len=%d,checkpoint=%s.json", out, key, m,
                                     rw.clipping, T, row.checkpoint), best)
    end
  end
  local shown = {}
  for _, c in ipairs(dp.results.CATEGORIES) do
    if cats[c] then shown[#shown + 1] = c end
  end
  say(string.format("\nThe largest rank at seq_len %d, GiB (peak: the run's, building the model included; the "
                    .. "categories: live at the training step's peak; model states: parameters, gradients and "
                    .. "optimizer states, beside DeepSpeed's %s; step and comm: the plan's estimate, collectives not "
                    .. "overlapped with compute):\n", T, gib(ds.bytes)))
  say("| method | checkpoint | peak | fits | step (est.) ms | comm ms | model states | " .. table.concat(shown, " | ")
      .. " |")
  say("| --- | --- | ---: | --- | ---: | ---: | ---: |" .. string.rep(" ---: |", #shown))
  for _, row in ipairs(rows) do
    local cells = {}
    for _, c in ipairs(shown) do cells[#cells + 1] = gib(row.categories[c]) end
    row.model_states_bytes = row.categories.parameters + row.categories.gradients + row.categories.optimizer_states
    say(string.format("| %s | %s | %s | %s | %.0f | %.0f | %s | %s |", row.label, row.checkpoint, gib(row.peak_bytes),
                      row.fits and "yes" or "no", row.step_ms, row.comm_ms, gib(row.model_states_bytes),
                      table.concat(cells, " | ")))
  end
  local spread = 0
  for _, row in ipairs(rows) do spread = math.max(spread, row.spread_bytes) end
  say(string.format("\nThe %d ranks' peaks differ by at most %d bytes.", N, spread))
end

assert(dp.write_file(out .. "/fsdp_llama3.md", table.concat(lines, "\n") .. "\n"))
dp.results.write(out .. "/fsdp_llama3.json", report)
print("\nwrote " .. out .. "/fsdp_llama3.md, fsdp_llama3.json and the breakdowns' results")
