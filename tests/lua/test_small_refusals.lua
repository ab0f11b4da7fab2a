-- test_small_refusals: issue 37 item 8's inputs, each refused in one line naming it:
--   a plan world of 2^31 ranks or more (was reported as a world of -2147483648);
--   a device model whose name holds control bytes (was printed raw into tables and charts);
--   save = DIR whose model.safetensors cannot be replaced (was found after the whole run, with the
--   new config.json already beside the old weights).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local MODEL = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 4 }
local function run(extra)
  local cfg = { device = "plan", method = "ghost", iters = 1, warmup = 0, snapshots = "none", model = MODEL }
  for k, v in pairs(extra) do cfg[k] = v end
  return pcall(dp.experiment, cfg)
end

for _, strategy in ipairs({ "ddp", "zero2", "fsdp" }) do
  for _, ws in ipairs({ 1 << 31, (1 << 20) + 1 }) do
    local ok, err = run({ distributed = { strategy = strategy, world_size = ws } })
    check.eq(ok, false, strategy .. " world " .. ws .. " is refused")
    err = tostring(err)
    check.truthy(err:find(string.format("world_size %d is more ranks than dpprof models (at most 1048576)", ws), 1, true),
                 strategy .. ": names the size as given: " .. err)
    check.truthy(not err:find("-2147483648", 1, true), "no wrapped size: " .. err)
  end
end
local ok = run({ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 1 << 20 },
                 distributed = { strategy = "ddp", world_size = 1 << 20 } })
check.eq(ok, true, "a world of 2^20 ranks is planned")

for _, name in ipairs({ "evil\27[2J", "two\nlines", "nul\0byte" }) do
  local ok2, err = run({ device_model = { base = "h100", name = name } })
  check.eq(ok2, false, "a control byte in a device model's name is refused")
  err = tostring(err)
  check.truthy(err:find("name must be a printable string (no control bytes)", 1, true), err)
  check.truthy(not err:find("[%z\1-\9\11-\31\127]") and not err:find("\n", 1, true), "the message quotes it escaped: " .. err)
end
do -- the same in a device model file
  local doc = dp.json.decode(assert(io.open(dp.lua_dir .. "/dpprof/models/h100-calibrated.json")):read("a"))
  doc.name = "bell\7"
  local path = os.tmpname() .. ".json"
  local f = assert(io.open(path, "w"))
  f:write(dp.json.encode(doc))
  f:close()
  local ok2, err = run({ device_model = path })
  check.eq(ok2, false, "a model file whose name holds a control byte is refused")
  check.truthy(tostring(err):find("field 'name' must be a printable string, got \"bell\\007\"", 1, true), tostring(err))
  os.remove(path)
end

do -- save = DIR: every file it writes is checked before the run
  local dir = os.tmpname()
  os.remove(dir)
  assert(dp.mkdir_p(dir .. "/model.safetensors")) -- a directory where the weights go
  local ok2, err = pcall(dp.experiment, { device = "cpu", method = "ghost", iters = 1, warmup = 0, snapshots = "none",
                                          model = MODEL, save = dir, threads = 1 })
  check.eq(ok2, false, "a save whose model.safetensors is in the way is refused before the run")
  check.truthy(tostring(err):find("model.safetensors", 1, true), "names the file: " .. tostring(err))
  check.eq(dp.read_file(dir .. "/config.json"), nil, "nothing was written")
  os.execute(string.format("rm -rf %q", dir))
end
print("test_small_refusals: ok")
