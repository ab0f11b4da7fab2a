-- test_experiment_save.lua: an experiment's `save = DIR` writes the trained model as Hugging Face
-- files. A one-process run's file, loaded back with dp.model.load, holds the trained parameters bit
-- for bit (and so does a world of one under ddp, zero2 and fsdp, whose fsdp gathers its blocks
-- first); a bad DIR or a plan run is refused before anything runs (one line naming the key, exit
-- 2, nothing written). tests/dist/save_equal.lua checks rank 0's file under mpirun -np 2.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local MODEL = { arch = "llama", vocab = 64, hidden = 16, layers = 2, heads = 2, kv_heads = 1, seq_len = 8, batch = 4,
                tie_head = true }

local values = check.param_values

-- no_callback: no on.finished (fsdp's blocks are then gathered for the save alone); the file is
-- compared with `want` (the one-process file) to ddp_equal's bound
local function saved_equals_trained(distributed, sub, no_callback, want)
  local path = dir .. "/" .. sub
  local trained
  local r = dp.experiment{ device = "cpu", iters = 2, warmup = 1, method = "ghost", threads = 1, snapshots = "none",
                           model = MODEL, save = path, distributed = distributed, seed = 3,
                           on = { finished = not no_callback and function(ctx) trained = values(ctx.model) end or nil } }
  check.eq(r.status, "ok", sub .. ": " .. tostring(r.message))
  check.eq(r.save_dir, path, sub .. ": save_dir")
  local ok, why = dp.results.validate(r)
  check.truthy(ok, why)
  local back <close> = dp.model.load(path, { device = "cpu", batch = 4, seq_len = 8 })
  local got, n = values(back)
  check.truthy(n > 1000, sub .. ": elements " .. n)
  local init <close> = dp.model(dp.deep_copy(MODEL)) -- the run did train: the file is not the initial model
  local moved = false
  local first = values(init)
  if want then
    for name, vals in pairs(want) do
      check.eq(#got[name], #vals, sub .. ": " .. name .. " size")
      for i, v in ipairs(vals) do
        check.truthy(math.abs(got[name][i] - v) <= 1e-6 * math.max(1, math.abs(v)),
                     string.format("%s: %s[%d]: saved %.9g, one process %.9g", sub, name, i, got[name][i], v))
      end
    end
    return got
  end
  for name, vals in pairs(trained) do
    check.eq(#got[name], #vals, sub .. ": " .. name .. " size")
    for i, v in ipairs(vals) do
      if got[name][i] ~= v then error(string.format("%s: %s[%d]: saved %.9g, trained %.9g", sub, name, i, got[name][i], v)) end
      if first[name][i] ~= v then moved = true end
    end
  end
  check.truthy(moved, sub .. ": trained parameters differ from the initial ones")
  return got
end

local single = saved_equals_trained(nil, "single")
for _, strategy in ipairs(dp.dist.STRATEGIES) do
  saved_equals_trained({ strategy = strategy }, strategy)
  saved_equals_trained({ strategy = strategy }, strategy .. "_no_callback", true, single)
end

-- refused before the run, naming the key; nothing written
local function refused(cfg, want)
  cfg.model, cfg.device = cfg.model or MODEL, cfg.device or "cpu"
  local ok, e = pcall(dp.experiment, cfg)
  check.eq(ok, false, "refused: " .. want)
  check.eq(type(e) == "table" and e.exit_status, 2, "exit status of: " .. tostring(e))
  check.truthy(tostring(e):find(want, 1, true), string.format("%q names %q", tostring(e), want))
  check.eq(tostring(e):find("\n", 1, true), nil, "one line: " .. tostring(e))
end
refused({ device = "plan", save = dir .. "/plan" }, "dpprof.experiment: save: a plan run has no parameter values")
check.eq(io.open(dir .. "/plan", "r"), nil, "plan: nothing written")
refused({ save = dir .. "/no/such/parent" }, "dpprof.experiment: save: " .. dir .. "/no/such/parent")
check.eq(io.open(dir .. "/no", "r"), nil, "bad parent: nothing written")
refused({ save = 3 }, "dpprof.experiment: save must be the directory")
refused({ save = "" }, "dpprof.experiment: save must be the directory")
os.execute("rm -rf " .. dir)
print("test_experiment_save: ok")
