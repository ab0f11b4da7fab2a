-- test_dp_tiles.lua: every method's per-sample norms at a length spanning three flash tiles
-- (T = 300 over DPSGD_FLASH_TILE = 128: two full tiles and a ragged one, so the Gram's tile pairs
-- off the diagonal, counted twice, and the ragged edge are all exercised), on GPT and on Llama with
-- grouped-query attention, both with LoRA adapters, against the explicit norms: the model run on
-- each sample alone, its trainable gradients summed in squares (a path that forms each
-- gradient, sharing no per-sample norm code with the methods). A tile-pair off-by-one in the
-- flash Gram (caught before only at the kernel level, at T = 300) moves these norms.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local explicit_norms = require("explicit_norms")
dp.device("cpu")

local T, B = 300, 3

local methods = {
  { method = "flat" }, { method = "ghost" }, { method = "mixed_ghost" }, { method = "bk" },
  { method = "flash_clip" }, { norms = "flash", clip = "twopass" },
  { method = "flash_clip", flash_impl = "strips" },
}

-- hidden 256 makes the flash choose the Gram tiles for the wide linears (T (d + p) against d p)
-- and the gradient tiles for the LoRA factors (with LoRA only the adapters train): each model is
-- run without and with adapters
local gpt = { arch = "gpt", vocab = 48, hidden = 256, layers = 1, heads = 4, seq_len = T }
local llama = { arch = "llama", vocab = 48, hidden = 256, layers = 1, heads = 4, kv_heads = 2, seq_len = T }
local models = {
  { name = "gpt", cfg = gpt, tiles = "gram" },
  { name = "gpt + lora", cfg = gpt, lora = { rank = 4, alpha = 8, targets = { "qkv", "fc" } }, tiles = "grad" },
  { name = "llama gqa", cfg = llama, tiles = "gram" },
  { name = "llama gqa + lora", cfg = llama, lora = { rank = 4, alpha = 8, targets = { "q_proj", "v_proj", "down_proj" } },
    tiles = "grad" },
}

for _, spec in ipairs(models) do
  local cfg = { batch = B, seed = 5, init_std = 0.2, lora = spec.lora }
  for k, v in pairs(spec.cfg) do cfg[k] = v end
  local m = dp.model(cfg)
  local batch = dp.batch{ model = m, size = B, seed = 2 }
  local want = explicit_norms(m, batch, B)
  for _, mt in ipairs(methods) do
    local what = spec.name .. " " .. (mt.method or (mt.norms .. "+" .. mt.clip)) .. (mt.flash_impl and " strips" or "")
    local opt = dp.optim.sgd(m, { lr = 0.0 })
    local opts = { max_grad_norm = 1e9, noise_multiplier = 0, dataset_size = 100, flash_impl = mt.flash_impl }
    if mt.method then opts.method = mt.method else opts.norms, opts.clip = mt.norms, mt.clip end
    local priv = dp.dpsgd.wrap(m, opt, opts)
    priv:next_step()
    priv:forward(batch)
    priv:backward()
    priv:clip()
    local st = priv:stats()
    local forms = {}
    for _, l in ipairs(st.layers) do forms[l.norms] = true end
    if mt.norms == "flash" or mt.method == "flash_clip" then
      local form = spec.tiles .. (mt.flash_impl and "_strip" or "_tile")
      local names = {}
      for f in pairs(forms) do names[#names + 1] = f end
      check.truthy(forms[form], what .. ": " .. form .. " ran (" .. table.concat(names, ", ") .. ")")
    end
    check.eq(#st.norms, B, what .. ": a norm per sample")
    for i = 1, B do
      check.near(st.norms[i], want[i], 1e-4 * want[i], what .. ": norm of sample " .. i)
    end
    priv:free()
    opt:free()
  end
  dp.free_batch(batch)
  m:free()
end
print("test_dp_tiles: ok")
