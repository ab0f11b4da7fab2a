-- test_clock_bounds: a calibrated device model may not claim more time than the modelled clock
-- holds (issue 37: curves inside the accepted ranges gave an ok plan run with avg_ms
-- -9223372036854.9 and a signed overflow in profile.c). A curve's call time is at most 10^9 s,
-- refused naming the field beyond; a run whose modelled time passes the clock's limit is refused
-- naming the device model, with the clock and the next run unharmed.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local json = dp.json

local src = assert(io.open(dp.lua_dir .. "/dpprof/models/h100-calibrated.json")):read("a")
local function model_file(name, y)
  local doc = json.decode(src)
  for _, e in pairs(doc.dtypes) do
    for _, c in pairs(e.ops) do
      c.log10_work_s, c.log10_time_s = { -30, 10 }, { y, y } -- every call: 10^y s
    end
  end
  doc.name = name
  local path = os.tmpname() .. ".json"
  local f = assert(io.open(path, "w"))
  f:write(json.encode(doc))
  f:close()
  return path
end
local function run(path, profile)
  return pcall(dp.experiment, { device = "plan", device_model = path, method = "ghost", iters = 2, warmup = 0,
                                snapshots = "none", profile = profile,
                                model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8,
                                          batch = 2 } })
end

-- beyond 10^9 s a call: refused as the file is read, naming the field
local too_long = model_file("too-long", 10)
local ok, err = run(too_long)
check.eq(ok, false, "a curve of 10^10 s a call is refused")
check.truthy(tostring(err):find("log10_time_s", 1, true) and tostring(err):find("[-15, 9]", 1, true),
             "names the field and its range: " .. tostring(err))
os.remove(too_long)

-- 10^9 s a call is accepted, but a run of them passes the clock's ~126 years: refused, not a
-- negative or zero time
local long = model_file("long-calls", 9)
for _, profile in ipairs({ "none", "ops" }) do
  ok, err = run(long, profile)
  check.eq(ok, false, profile .. ": a run past the clock's limit is refused")
  check.truthy(tostring(err):find("pass what the clock holds", 1, true) and tostring(err):find("long-calls", 1, true),
               profile .. ": names the device model: " .. tostring(err))
end
os.remove(long)

-- the clock is real again, and a sane model's run after it is ok with positive times
check.eq(dp.clock_overflowed(), false, "the next run starts with a clock that has not overflowed")
local r = dp.experiment({ device = "plan", device_model = "h100-calibrated", method = "ghost", iters = 2, warmup = 0,
                          snapshots = "none",
                          model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 2 } })
check.eq(r.status, "ok", "the run after is ok")
check.truthy(r.timing.avg_ms > 0 and r.timing.avg_ms < 1e3, "its time is a real one: " .. tostring(r.timing.avg_ms))
print("test_clock_bounds: ok")
