-- plan-vs-device.lua: the peak each point of a device run reached against the plan backend's
-- prediction for the same point (the plan is meant to be exact to the byte). Takes bench_dp's
-- JSON (points keyed by config, dtype and method) or two sweep directories (points keyed by
-- their file names; a point that ran out of memory on the device is exact when the plan said
-- it does not fit).
--   dpprof run scripts/plan-vs-device.lua device=DIR/bench_dp.json plan=DIR/bench_dp.json
--   dpprof run scripts/plan-vs-device.lua device=SWEEP_DIR plan=SWEEP_DIR
local dp = require("dpprof")
local args = dp.args or {}
if not args.device or not args.plan then
  io.stderr:write("usage: dpprof run scripts/plan-vs-device.lua device=BENCH.json|SWEEP_DIR plan=BENCH.json|SWEEP_DIR\n")
  os.exit(2)
end
-- point name -> { peak = bytes or nil, status = "ok"|"oom"|..., fits = false when the plan says no }
local function rows(path)
  local out = {}
  local names = dp.list_dir(path)
  if names then
    for _, name in ipairs(names) do
      if name:match("%.json$") and not name:match("^bench_") and not name:match("^%.") then -- a bench's own JSON
        local r = dp.results.read(path .. "/" .. name)
        local fits = r.plan and r.plan.fits
        out[name:gsub("%.json$", "")] = { peak = r.memory and r.memory.peak_bytes, status = r.status,
                                          fits = fits ~= false }
      end
    end
  else
    for _, r in ipairs(dp.results.read(path).rows or {}) do
      out[r.config .. " " .. r.dtype .. " " .. r.method] = { peak = r.peak_bytes, status = r.status or "ok", fits = true }
    end
  end
  return out
end
local measured, planned = rows(args.device), rows(args.plan)
local keys, width = {}, 28
for k in pairs(measured) do
  keys[#keys + 1] = k
  width = math.max(width, #k)
end
table.sort(keys)
local exact, total = 0, 0
print(string.format("%-" .. width .. "s %16s %16s %12s", "point", "measured peak", "plan peak", "difference"))
for _, k in ipairs(keys) do
  local m, p = measured[k], planned[k]
  if m.status == "ok" and p and p.peak then
    total = total + 1
    if m.peak == p.peak and p.fits then exact = exact + 1 end
    print(string.format("%-" .. width .. "s %16d %16d %+12d%s", k, m.peak, p.peak, m.peak - p.peak,
                        p.fits and "" or "  (plan: does not fit)"))
  elseif m.status == "oom" and p then
    total = total + 1
    if not p.fits then exact = exact + 1 end
    print(string.format("%-" .. width .. "s %16s %16s %12s", k, "out of memory", tostring(p.peak),
                        p.fits and "plan: fits" or "plan: no fit"))
  else
    print(string.format("%-" .. width .. "s %16s %16s", k, m.status or "-", p and tostring(p.peak) or "-"))
  end
end
print(string.format("plan exact to the byte for %d of %d points", exact, total))
