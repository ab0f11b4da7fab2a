-- plan-vs-device.lua: the peak each point of a device bench_dp run reached against the plan
-- backend's prediction for the same point (the plan is meant to be exact to the byte).
--   dpprof run scripts/plan-vs-device.lua device=DIR/bench_dp.json plan=DIR/bench_dp.json
local dp = require("dpprof")
local args = dp.args or {}
if not args.device or not args.plan then
  io.stderr:write("usage: dpprof run scripts/plan-vs-device.lua device=BENCH.json plan=BENCH.json\n")
  os.exit(2)
end
local function rows(path)
  local out = {}
  for _, r in ipairs(dp.results.read(path).rows or {}) do
    out[r.config .. " " .. r.dtype .. " " .. r.method] = r
  end
  return out
end
local measured, planned = rows(args.device), rows(args.plan)
local keys = {}
for k in pairs(measured) do keys[#keys + 1] = k end
table.sort(keys)
local exact, total = 0, 0
print(string.format("%-28s %16s %16s %12s", "point", "measured peak", "plan peak", "difference"))
for _, k in ipairs(keys) do
  local m, p = measured[k], planned[k]
  local mp, pp = m.peak_bytes, p and p.peak_bytes
  if mp and pp then
    total = total + 1
    if mp == pp then exact = exact + 1 end
    print(string.format("%-28s %16d %16d %+12d", k, mp, pp, mp - pp))
  else
    print(string.format("%-28s %16s %16s", k, mp and tostring(mp) or m.status, pp and tostring(pp) or "-"))
  end
end
print(string.format("plan exact to the byte for %d of %d points", exact, total))
