-- test_held_before.lua: an experiment's figures are its own (issue 38.3). A script that holds a
-- model and a tensor before dp.experiment used to get a result whose parameters were doubled and
-- whose peak was higher, and the result validated. What was live before is left out of every
-- figure and reported as memory.held_before_bytes, on the CPU and on the plan device (whose
-- workspace, held from the device's start, stays in), with a warning line.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local M = { vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 4 }
local function run(dev)
  return dp.experiment{ model = M, method = "ghost", device = dev, iters = 2, warmup = 1, snapshots = "default" }
end
local function same_figures(a, b, what)
  check.eq(b.memory.peak_bytes, a.memory.peak_bytes, what .. ": the peak")
  check.eq(b.memory.end_bytes, a.memory.end_bytes, what .. ": the bytes live at the end")
  for _, c in ipairs(dp.memory.categories) do
    for _, f in ipairs({ "current_bytes", "peak_bytes", "live_at_peak_bytes" }) do
      check.eq(b.memory.categories[c][f], a.memory.categories[c][f], string.format("%s: %s.%s", what, c, f))
    end
  end
  check.eq(#b.memory.modules, #a.memory.modules, what .. ": the modules")
  for i, m in ipairs(a.memory.modules) do
    check.eq(b.memory.modules[i].module, m.module, what .. ": module " .. i)
    check.eq(b.memory.modules[i].peak_bytes, m.peak_bytes, what .. ": module " .. m.module .. " peak")
  end
  for i, s in ipairs(a.snapshots) do
    check.eq(b.snapshots[i].allocated, s.allocated, what .. ": snapshot " .. s.name)
  end
  local ta, tb = a.memory.timeline.allocated_bytes, b.memory.timeline.allocated_bytes
  check.eq(math.max(table.unpack(tb)), math.max(table.unpack(ta)), what .. ": the timeline's highest point")
end

for _, dev in ipairs({ "cpu", "plan" }) do
  local alone = run(dev)
  check.eq(alone.status, "ok", dev .. ": alone")
  check.eq(alone.memory.held_before_bytes, 0, dev .. ": nothing held before")
  dp.device(dev)
  local before = dp.memory.stats().allocated
  local m <close> = dp.model(M)
  local t <close> = dp.tensor{ shape = { 1000 } }
  local held = dp.memory.stats().allocated - before
  check.truthy(held > 4000, dev .. ": the script holds a model and a tensor")
  local with = run(dev)
  check.eq(with.status, "ok", dev .. ": with the script's model held")
  check.eq(with.memory.held_before_bytes, held, dev .. ": held_before_bytes is what the script held, to the byte")
  same_figures(alone, with, dev)
  check.truthy(dp.results.validate(with), dev .. ": the result validates")
  if dev == "plan" then
    check.eq(with.memory.categories.workspace.peak_bytes, alone.memory.categories.workspace.peak_bytes,
             "plan: the workspace stays the experiment's")
    check.truthy(alone.memory.categories.workspace.peak_bytes > 0, "plan: it has a workspace")
  end
  -- after the experiment what the script holds counts again, and it can free it
  check.eq(dp.memory.stats().allocated - before, held, dev .. ": held again after the experiment")
  check.eq(dp.memory.stats().held_total, 0, dev .. ": no hold left behind")
end

-- a tensor nothing refers to any more (garbage not yet collected) is not the script's: collected
-- before the experiment, not reported as held
do
  dp.device("cpu")
  collectgarbage()
  local function garbage() local t = dp.tensor{ shape = { 100 } } return t end
  garbage()
  check.truthy(dp.memory.stats().allocated >= 400, "the garbage tensor is still live before the experiment")
  local r = run("cpu")
  check.eq(r.memory.held_before_bytes, 0, "unreferenced tensors are collected, not held")
end

-- the warning line, from the binary
local script = os.tmpname() .. ".lua"
assert(dp.write_file(script, [[
local dp = require("dpprof")
local m <close> = dp.model{ vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 4 }
local r = dp.experiment{ model = { vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 16, batch = 4 },
                         method = "vanilla", iters = 1, warmup = 0, snapshots = "none" }
print("held", r.memory.held_before_bytes)
]]))
local code, text = check.sh(string.format("%q run %q 2>&1", dp.executable, script))
os.remove(script)
check.eq(code, 0, "the script runs: " .. text)
check.truthy(text:find("dpprof.experiment: warning: ", 1, true)
             and text:find("were live before the experiment began", 1, true), "warns: " .. text)
print("test_held_before: ok")
