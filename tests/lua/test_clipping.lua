-- test_clipping.lua: clipping styles and clip functions through dp.experiment (issue 40): every
-- style runs and its result records the groups (validated by the results schema); the plan
-- device allocates what the CPU does, category by category, for each style; the noise's std is
-- sigma ||C||_2 over the groups; the options are refused in one line naming the key.
-- (tests/c/test_dp_clipping.c holds the clipped sums against explicit per-sample gradients.)
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

-- The plan device without the CUDA workspace, so that it allocates what the CPU does.
local BARE = { base = "h100", workspace = false }

local function config(method, d, device)
  return { name = "clip", method = method, device = device or "cpu", iters = 1, warmup = 1, snapshots = "none",
           model = { arch = "gpt", vocab = 64, hidden = 32, heads = 2, layers = 2, seq_len = 12, batch = 4 },
           dp = d, device_model = device == "plan" and BARE or nil }
end

local GROUPS = { { name = "attn", patterns = { "*.attn.*" }, max_grad_norm = 0.5 },
                 { name = "rest", patterns = { "*.mlp.*", "*ln_*", "transformer.w*" }, max_grad_norm = 2 } }
local STYLES = {
  flat = { d = {}, groups = 1, noise_norm = 1 },
  per_layer = { d = { clipping = "per_layer", bounds = { ["*.mlp.*"] = 0.5 } }, groups = 28,
                noise_norm = math.sqrt(20 + 8 * 0.25) }, -- 8 mlp tensors at 0.5, 20 others at 1
  per_block = { d = { clipping = "per_block" }, groups = 4, noise_norm = 2 },
  groups = { d = { clipping = "groups", groups = GROUPS }, groups = 2, noise_norm = math.sqrt(0.25 + 4) },
  automatic = { d = { clipping = "per_block", clip_fn = "automatic", gamma = 0.05 }, groups = 4, noise_norm = 2 },
}

-- every style under flash_clip and bk: a valid result that names its groups
for name, s in pairs(STYLES) do
  for _, method in ipairs({ "flash_clip", "bk", "flat", "ghost", "mixed_ghost" }) do
    local r = dp.experiment(config(method, s.d))
    local what = name .. " " .. method
    check.eq(r.status, "ok", what .. ": " .. tostring(r.message))
    local valid, problems = dp.results.validate(r)
    check.truthy(valid, what .. ": the result validates: " .. table.concat(problems or {}, "; "))
    check.eq(r.clipping.style, s.d.clipping or "flat", what .. ": style")
    check.eq(r.clipping.clip_fn, s.d.clip_fn or "abadi", what .. ": clip_fn")
    check.eq(#r.clipping.groups, s.groups, what .. ": groups")
    check.near(r.clipping.noise_norm, s.noise_norm, 1e-12, what .. ": noise norm")
    local tensors = 0
    for _, g in ipairs(r.clipping.groups) do tensors = tensors + g.tensors end
    check.eq(tensors, 28, what .. ": every trainable tensor in one group")
    check.eq(r.config.dp.clipping, s.d.clipping or "flat", what .. ": the configuration records the style")
    if s.d.clip_fn then check.eq(r.clipping.gamma, 0.05, what .. ": gamma") end
  end
end
local r = dp.experiment(config("flash_clip", STYLES.groups.d))
check.eq(r.clipping.groups[1].name, "attn", "a group's name")
check.eq(r.clipping.groups[1].max_grad_norm, 0.5, "a group's bound")
check.eq(r.clipping.groups[1].tensors, 8, "attn: c_attn and c_proj, weight and bias, in two blocks")
check.eq(dp.experiment(config("vanilla", {})).clipping, nil, "vanilla has no clipping")

-- the plan device allocates what the CPU does, for every style (the factors are n_groups x B), under
-- bk's books and twopass (the groups style's groups cross blocks: its forming second backward)
for style, s in pairs(STYLES) do
 for _, method in ipairs({ "flash_clip", "ghost" }) do
  local a, b = dp.experiment(config(method, s.d)), dp.experiment(config(method, s.d, "plan"))
  local name = style .. " " .. method
  for _, c in ipairs(dp.results.CATEGORIES) do
    for _, k in ipairs({ "peak_bytes", "live_at_peak_bytes" }) do
      check.eq(b.memory.categories[c][k], a.memory.categories[c][k], name .. ": plan " .. c .. "." .. k)
    end
  end
  check.eq(b.memory.peak_bytes, a.memory.peak_bytes, name .. ": plan peak")
  check.eq(#b.clipping.groups, #a.clipping.groups, name .. ": plan groups")
 end
end

-- bk's cheaper schedule: with block-local groups each block's books are formed and freed at its
-- backward's end and no activation is retained for the clip, so per_block holds less than flat
-- (same method, same model), in kept output gradients and in activations; its gradients are the
-- explicit ones (tests/c/test_dp_clipping.c)
for _, method in ipairs({ "flash_clip", "bk" }) do
  local c4 = config(method, {}, "plan")
  c4.model.layers = 4
  local flat = dp.experiment(c4)
  c4.dp = { clipping = "per_block" }
  local blocks = dp.experiment(c4)
  local f, b = flat.memory.categories, blocks.memory.categories
  check.truthy(b.output_grads.peak_bytes < f.output_grads.peak_bytes,
               string.format("%s per_block keeps fewer output gradients: %d < %d", method, b.output_grads.peak_bytes,
                             f.output_grads.peak_bytes))
  check.truthy(blocks.memory.peak_bytes < flat.memory.peak_bytes,
               string.format("%s per_block's peak below flat's: %d < %d", method, blocks.memory.peak_bytes,
                             flat.memory.peak_bytes))
end

-- The head's output gradient is the logits' buffer (B x T x V, their gradient in place), alive at the
-- head's backward, vanilla's peak. A method that keeps it takes that buffer over: a copy would add
-- B T V f32 there (at B T = 256 against d = 32, eight times vanilla's V x d gradient that the DP
-- methods do not hold). Under a block-local style materialize's books keep it too (T <= d) instead
-- of the head's B per-sample V x d gradients, the norms from one sample's at a time: those would
-- add (B - 1) V d f32 there. (The flat style keeps them, as Opacus's hooks do: the next check.)
-- On the plan device (the CPU's allocations, asserted above), tied and untied heads.
for _, tie in ipairs({ true, false }) do
  local function peak(method, d, T)
    local c = config(method, d, "plan")
    c.model = { arch = "gpt", vocab = 4096, hidden = 32, heads = 2, layers = 1, seq_len = T, batch = 8, tie_head = tie }
    local r = dp.experiment(c)
    check.eq(r.status, "ok", method .. ": " .. tostring(r.message))
    return r.memory.peak_bytes, r
  end
  local V, d, B = 4096, 32, 8
  for _, T in ipairs({ 32, 8 }) do
    local base = peak("vanilla", {}, T)
    local cases = T == 32 and { { "ghost", "per_layer" }, { "flash_clip", "per_layer" }, { "mixed_ghost", "per_block" },
                                { "flat", "per_block" }, { "flat", "per_layer" }, { "bk", "per_block" } }
                           or { { "flat", "per_block" }, { "flat", "per_layer" }, { "bk", "per_block" } }
    for _, mc in ipairs(cases) do
      local p, r = peak(mc[1], { clipping = mc[2] }, T)
      local extra = math.min(B * T * V, (B - 1) * V * d) * 4 // 2
      check.truthy(p - base < extra, string.format("%s %s (tied %s, T = %d): peak %d within %d bytes of vanilla's %d",
                                                   mc[1], mc[2], tostring(tie), T, p, extra, base))
      for _, l in ipairs(r.layers) do
        if mc[1] == "flat" and (l.kind == "tied_head" or l.module == "lm_head") then
          check.eq(l.norms, "materialize", "flat: the head's norms are materialize's")
        end
      end
    end
  end
  local p, r = peak("flat", {}, 8)
  check.eq(r.memory.categories.per_sample_grads.live_at_peak_bytes >= B * V * d * 4, true,
           "flat style: the head's B per-sample gradients, as Opacus's hooks hold them")
  check.truthy(p > peak("vanilla", {}, 8), "flat style: above vanilla's peak")
end

-- refusals, one line each, naming the key and what is valid
local function refused(d, method, words, what)
  local err = check.raises(function() dp.experiment(config(method or "flash_clip", d)) end, words, what)
  check.eq(err:find("\n"), nil, what .. ": one line")
end
refused({ clipping = "layerwise" }, nil, { "unknown clipping style 'layerwise'", "flat, per_layer, per_block, groups" },
        "an unknown style")
refused({ clip_fn = "auto" }, nil, { "unknown clip_fn 'auto'", "abadi, automatic" }, "an unknown clip function")
refused({ clip_fn = "automatic", gamma = 0 }, nil, { "gamma 0 must be positive" }, "gamma 0")
refused({ bounds = { ["*"] = 1 } }, nil, { "bounds", "only with clipping = \"per_layer\"" }, "bounds without per_layer")
refused({ groups = GROUPS }, nil, { "groups are given only with clipping = \"groups\"" }, "groups without the style")
refused({ clipping = "groups" }, nil, { "needs groups = " }, "the groups style without groups")
refused({ clipping = "groups", groups = { { name = "attn", patterns = { "*.attn.*" } } } }, nil,
        { "trainable tensor 'transformer.wte.weight' is in no group" }, "a tensor in no group")
refused({ clipping = "groups", groups = { { name = "a", patterns = "*" }, { name = "b", patterns = "*.mlp.*" } } }, nil,
        { "is in two groups, 'a' and 'b'" }, "a tensor in two groups")
refused({ clipping = "groups", groups = { { name = "a", patterns = "*", bound = 1 } } }, nil,
        { "groups[1]", "unknown key 'bound'", "name, patterns, max_grad_norm" }, "a group's unknown key")
refused({ clipping = "groups", groups = { { name = "a", patterns = "*", max_grad_norm = -1 } } }, nil,
        { "groups[1].max_grad_norm must be a positive number" }, "a group's bound")
refused({ clipping = "groups", groups = { { name = "a", patterns = {} } } }, nil, { "groups[1] names no tensor-name pattern" },
        "a group without patterns")
refused({ clipping = "per_layer", bounds = { ["nothing.*"] = 1 } }, nil, { "match no trainable tensor", "nothing.*" },
        "a bound's pattern that names nothing")
refused({ clipping = "per_layer", bounds = { ["*.mlp.*"] = 0 } }, nil, { "bounds[\"*.mlp.*\"] must be a positive number" },
        "a bound of 0")

-- adaptive clipping (Opacus's AdaClip): the bound's trajectory recorded (each step's bound the one
-- before's next), the gradient's raised noise multiplier, the trajectory drawn (clip_bound.png)
local ADA = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.2, max_clipbound = 10, min_clipbound = 0.01,
              unclipped_num_std = 1.5 }
local ac = config("flash_clip", { max_grad_norm = 0.5, adaptive = ADA })
ac.iters = 4
local ar = dp.experiment(ac)
check.eq(ar.status, "ok", "adaptive: " .. tostring(ar.message))
local valid, problems = dp.results.validate(ar)
check.truthy(valid, "adaptive: the result validates: " .. table.concat(problems or {}, "; "))
local steps = ar.clipping.adaptive.steps
check.eq(#steps, 5, "adaptive: a step each (warm-up and timed)")
check.eq(steps[1].bound, 0.5, "adaptive: the first step clips with max_grad_norm")
for i = 2, #steps do check.eq(steps[i].bound, steps[i - 1].next, "adaptive: step " .. i .. " clips with the last's next") end
for _, st in ipairs(steps) do
  check.eq(st.samples, 4, "adaptive: the step's samples")
  check.truthy(st.next >= ADA.min_clipbound and st.next <= ADA.max_clipbound, "adaptive: the bound within its limits")
  local want = math.max(ADA.min_clipbound, math.min(ADA.max_clipbound,
                        st.bound * math.exp(-ADA.clipbound_learning_rate * (st.fraction - 0.5))))
  check.near(st.next, want, 1e-12, "adaptive: the geometric update")
end
check.near(ar.clipping.adaptive.noise_multiplier, 1 / math.sqrt(1 - 1 / 9), 1e-12, "adaptive: (1 - (2 x 1.5)^-2)^-1/2")
check.eq(ar.privacy.noise_multiplier, 1.0, "adaptive: the accountant is given sigma")
local adir = os.tmpname()
os.remove(adir)
assert(dp.mkdir_p(adir))
dp.results.write(adir .. "/ada.json", ar)
dp.plot.render_dir(adir)
check.truthy(dp.read_file(adir .. "/clip_bound.png"), "adaptive: clip_bound.png drawn")
local fdir = os.tmpname()
os.remove(fdir)
assert(dp.mkdir_p(fdir))
dp.results.write(fdir .. "/flat.json", dp.experiment(config("flash_clip", {})))
local pb = config("flash_clip", { clipping = "per_block" })
pb.name = "clip_per_block"
dp.results.write(fdir .. "/per_block.json", dp.experiment(pb))
dp.plot.render_dir(fdir)
check.eq(dp.read_file(fdir .. "/clip_bound.png"), nil, "no clip_bound.png without adaptive clipping")
-- the charts name a style other than flat beside the method
local summary = assert(dp.read_file(fdir .. "/summary.txt"))
check.truthy(summary:find("flash_clip (per_block)", 1, true), "the summary names the style: " .. summary:sub(1, 400))
refused({ adaptive = { target_unclipped_quantile = 0.5 } }, nil,
        { "adaptive.clipbound_learning_rate must be a number", "max_clipbound" }, "adaptive without every key")
refused({ adaptive = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.2, max_clipbound = 10,
                       min_clipbound = 0.01, unclipped_num_std = 1, lr = 1 } }, nil,
        { "adaptive: unknown key 'lr'" }, "adaptive's unknown key")
refused({ clipping = "per_block", adaptive = ADA }, nil, { "adaptive clipping moves one bound" }, "adaptive per_block")
refused({ adaptive = { target_unclipped_quantile = 0.5, clipbound_learning_rate = 0.2, max_clipbound = 10,
                       min_clipbound = 0.01, unclipped_num_std = 0.3 } }, nil,
        { "unclipped_num_std 0.3 must be more than noise_multiplier / 2 = 0.5" }, "adaptive's count noise too small")

-- dp.risk plans its runs with the clipping style: per_block's rows hold less than flat's, so its
-- chance of running out of memory is no higher and its safe physical batch no smaller
local RISK = { model = { arch = "llama", vocab = 4096, hidden = 256, heads = 4, layers = 4, seq_len = 512 },
               method = "bk", data = { length_distribution = { kind = "lognormal", median = 100, p99 = 500 } },
               sample_rate = 0.01, dataset_size = 2000, steps = 100, budget_gb = 1.0, quiet = true, progress = false }
local rf = dp.risk(RISK)
RISK.clipping = { clipping = "per_block" }
local rb = dp.risk(RISK)
check.truthy(rb.per_step < rf.per_step, string.format("risk: per_block's per-step risk %.4g below flat's %.4g",
                                                      rb.per_step, rf.per_step))
check.truthy(rb.methods[1].safe.max_physical_batch_size > rf.methods[1].safe.max_physical_batch_size,
             "risk: per_block's safe physical batch above flat's")
RISK.clipping = { style = "per_block" }
check.raises(function() dp.risk(RISK) end, { "clipping: unknown key 'style'", "clipping, clip_fn" },
             "risk's clipping table names its keys")
RISK.clipping = { clipping = "blocky" }
check.raises(function() dp.risk(RISK) end, { "unknown clipping style 'blocky'" }, "risk checks the style")

-- wrap reads the bounds whatever else it is given: a sample_rate once made it drop its options
-- table from the stack before the groups were read (the groups then silently the default's)
local m = dp.model{ arch = "gpt", vocab = 64, hidden = 32, heads = 2, layers = 2, seq_len = 12, batch = 4, device = "cpu" }
local opt = dp.optim.sgd(m, { lr = 0 })
for _, extra in ipairs({ {}, { sample_rate = 0.5 }, { sample_rate = 0.5, dataset_size = 100, poisson = true } }) do
  local w = { method = "flash_clip", clipping = "per_layer", bounds = { ["*.mlp.*"] = 0.5 } }
  for k, v in pairs(extra) do w[k] = v end
  local priv = dp.dpsgd.wrap(m, opt, w)
  check.near(priv:stats().clipping.noise_norm, STYLES.per_layer.noise_norm, 1e-12, "per_layer bounds with sample_rate")
  priv:free()
end
print("test_clipping: ok")
