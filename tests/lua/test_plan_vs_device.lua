-- test_plan_vs_device.lua: scripts/plan-vs-device.lua, the verdict gpu-check prints, on sweep
-- directories: a point whose peak equals the plan's counts as exact, one that differs by a byte
-- does not; a point that ran out of memory is exact only where the plan said it does not fit.
-- The "device" runs here are plan runs too (their peaks are exact by construction), one of them
-- under a memory_limit that makes it run out of memory.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local script = arg[0]:match("(.*/)tests/lua/") .. "scripts/plan-vs-device.lua"
local MODEL = { arch = "gpt", vocab = 256, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 2 }
local out = os.tmpname()
os.remove(out)

-- an exact device: no context, no workspace, reserved = allocated
local function exact(bytes)
  return { name = "exact", memory_bytes = bytes, peak_flops = { f32 = 1e12, bf16 = 1e12 }, bandwidth = 1e12 }
end
local function peak(seq_len)
  local m = dp.deep_copy(MODEL)
  m.seq_len = seq_len
  local r = dp.experiment{ model = m, method = "flash_clip", device = "plan", device_model = exact(1 << 40), iters = 1,
                           warmup = 1, snapshots = "none" }
  check.eq(r.status, "ok", "plan run at seq_len " .. seq_len)
  return r.plan.peak_bytes
end
local small, large = peak(16), peak(64)
check.truthy(small < large, "a longer sequence needs more memory")

local between = (small + large) // 2
local function sweep(dir, extra)
  local base = { model = dp.deep_copy(MODEL), method = "flash_clip", device = "plan", iters = 1, warmup = 1,
                 snapshots = "none" }
  for k, v in pairs(extra) do base[k] = v end
  dp.sweep{ base = base, vary = { seq_len = { 16, 64 } }, out = dir, quiet = true }
end
sweep(out .. "/plan", { device_model = exact(between) })
sweep(out .. "/device", { device_model = exact(1 << 40), memory_limit = between })

local function compare()
  local code, text = check.sh(string.format("%q run %q device=%q plan=%q", dp.executable, script, out .. "/device",
                                            out .. "/plan"))
  check.eq(code, 0, "plan-vs-device exit status: " .. text)
  return text
end
local text = compare()
check.truthy(text:find("seq_len=16%s+" .. small .. "%s+" .. small .. "%s+%+0"), "the fitting point, exact: " .. text)
check.truthy(text:find("seq_len=64%s+out of memory%s+" .. large .. "%s+plan: no fit"), "the oom point: " .. text)
check.truthy(text:find("plan exact to the byte for 2 of 2 points", 1, true), text)

-- a byte off in the fitting point's measured peak: no longer exact
local path = out .. "/device/seq_len=16.json"
local f = assert(io.open(path))
local doc = f:read("a")
f:close()
local edited, n = doc:gsub('"peak_bytes":%s*' .. small .. "([,}\n])", '"peak_bytes": ' .. (small + 1) .. "%1", 1)
check.eq(n, 1, "memory.peak_bytes found in " .. path)
f = assert(io.open(path, "w"))
f:write(edited)
f:close()
text = compare()
check.truthy(text:find("seq_len=16%s+" .. (small + 1) .. "%s+" .. small .. "%s+%+1"), "a byte off: " .. text)
check.truthy(text:find("plan exact to the byte for 1 of 2 points", 1, true), text)

os.execute(string.format("rm -rf %q", out))
print("test_plan_vs_device: ok")
