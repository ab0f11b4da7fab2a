-- test_memory.lua: the memory probes from a script, with exact byte counts: categories, peaks,
-- live-at-peak, snapshots, scopes, modules, the timeline, and OOM caught with pcall.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
dp.device("cpu")
local mem = dp.memory

-- the ten-line script of the issue: two categories, snapshots, exact bytes and peaks
local w = dp.tensor{ shape = { 1024, 256 }, category = "parameters" }     -- 1 MiB
mem.snapshot("weights")
local act = dp.tensor{ shape = { 4, 256, 256 }, category = "activations" } -- 1 MiB
mem.snapshot("forward")
act:free()
mem.snapshot("backward")
local s = mem.stats()
check.eq(s.current.parameters, 1 << 20, "parameters now")
check.eq(s.current.activations, 0, "activations now")
check.eq(s.peaks.activations, 1 << 20, "activations peak")
check.eq(s.peak, 2 << 20, "total peak")
check.eq(s.live_at_peak.parameters, 1 << 20, "parameters at peak")
check.eq(s.live_at_peak.activations, 1 << 20, "activations at peak")
check.eq(s.reserved, s.allocated, "CPU reserved equals allocated")
local snaps = mem.snapshots()
check.eq(#snaps, 3)
check.eq(snaps[1].name, "weights")
check.eq(snaps[1].allocated, 1 << 20)
check.eq(snaps[2].allocated, 2 << 20)
check.eq(snaps[2].categories.activations, 1 << 20)
check.eq(snaps[3].allocated, 1 << 20)
check.truthy(snaps[3].timestamp >= snaps[1].timestamp, "timestamps in order")

-- peak reset: the next peak describes only what follows
mem.reset_peak()
check.eq(mem.stats().peak, 1 << 20, "peak after reset")
local tmp = dp.tensor{ shape = { 1000 }, category = "temp" }
tmp:free()
check.eq(mem.stats().peak, (1 << 20) + 4000, "new peak")
check.eq(mem.stats().live_at_peak.temp, 4000)

-- scopes: module paths, per-module figures, unwinding on error
local inner = mem.scope("layers", function()
  return mem.scope("3", function()
    check.eq(mem.current_scope(), "layers.3")
    return dp.tensor{ shape = { 10 }, category = "activations" }
  end)
end)
check.eq(inner.module, "layers.3")
check.eq(mem.current_scope(), "(none)")
check.raises(function() mem.scope("broken", function() error("boom") end) end, "boom")
check.eq(mem.current_scope(), "(none)", "scope popped after an error")
local found = false
for _, m in ipairs(mem.modules()) do
  if m.module == "layers.3" then
    found = true
    check.eq(m.current, 40)
  end
end
check.truthy(found, "layers.3 listed in memory.modules()")
inner:free()

-- the event log and the timeline reproduce the allocations
local events = mem.events()
check.eq(events[1].delta, 1 << 20)
check.eq(events[1].category, "parameters")
local tl = mem.timeline(4)
check.eq(#tl.t_ms, 4)
local maxv = 0
for _, v in ipairs(tl.allocated_bytes) do maxv = math.max(maxv, v) end
check.eq(maxv, 2 << 20, "timeline keeps the peak")

-- out of memory is an error pcall catches, with the details
mem.set_limit(3 << 20)
local err = check.raises(function()
  mem.scope("layers.7.mlp", function() return dp.tensor{ shape = { 1 << 20 }, category = "per_sample_grads" } end)
end, { "out of memory", "requested 4194304 bytes", "per_sample_grads", "layers.7.mlp", "parameters=1.0 MiB" })
local oom = mem.last_oom()
check.eq(oom.requested_bytes, 4 << 20)
check.eq(oom.category, "per_sample_grads")
check.eq(oom.module, "layers.7.mlp")
check.eq(oom.live_bytes.parameters, 1 << 20)
check.eq(oom.total_live_bytes, 1 << 20)
check.eq(oom.limit_bytes, 3 << 20)
check.eq(oom.device, "cpu", "the device that refused it")
mem.set_limit(0)
local ok = dp.tensor{ shape = { 1 << 20 }, category = "per_sample_grads" } -- fits again
ok:free()
w:free()
check.eq(mem.stats().allocated, 0, "everything released")
print("test_memory.lua: ok")
