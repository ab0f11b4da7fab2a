-- test_devmodel_fuzz.lua: the device model file loader (lua/dpprof/devmodel.lua, in Lua: this is
-- its fuzz target) against mutated files. Seeded, so a failure reproduces: structural mutations
-- of the fixture (a field removed, replaced by a value of another type or an extreme number, an
-- array shortened, lengthened or reordered, keys added; every other one with a `provenance` object)
-- and byte-level mutations of its text.
-- Every input either loads, and then drives the engine's clock without an error and gives finite,
-- non-negative times, or is refused with one line that starts "dpprof: device model <file>: ";
-- never a Lua error from inside the loader.
-- Usage: dpprof run tests/lua/test_devmodel_fuzz.lua [n=3000] [seed=30]
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local json = dp.json
local devmodel = require("dpprof.devmodel")

local args = dp.args or {}
local N = args.n or 3000
math.randomseed(args.seed or 30)
local here = arg[0]:match("(.*/)")
local TEXT = assert(dp.read_file(here .. "../fixtures/device_model/small.json"))
local tmp = string.format("/tmp/dpprof-test-devmodel-fuzz-%d.json", dp.pid())

local VALUES = { function() return json.null end, function() return "x" end, function() return "" end,
                 function() return true end, function() return 0 end, function() return -1 end,
                 function() return 1.5 end, function() return 1e308 end, function() return -1e308 end,
                 function() return 2 ^ 63 end, function() return math.mininteger end,
                 function() return json.array() end, function() return json.object() end,
                 function() return json.array({ 1, "a" }) end, function() return json.array({ -3, -4 }) end,
                 function() return { f32 = 1 } end }

-- every (table, key) of a decoded document, depth first
local function slots(t, out)
  out = out or {}
  for k, v in pairs(t) do
    out[#out + 1] = { t, k }
    if type(v) == "table" then slots(v, out) end
  end
  return out
end

local function mutate(doc)
  local all = slots(doc)
  for _ = 1, math.random(1, 3) do
    local s = all[math.random(#all)]
    local t, k = s[1], s[2]
    local what = math.random(6)
    if what == 1 then
      t[k] = nil
    elseif what == 2 then
      t[k] = VALUES[math.random(#VALUES)]()
    elseif what == 3 and type(t[k]) == "table" and #t[k] > 0 then
      table.remove(t[k], math.random(#t[k]))
    elseif what == 4 and type(t[k]) == "table" and #t[k] > 0 and type(t[k][1]) == "number" then
      local a = t[k]
      a[#a + 1] = a[1] + (math.random() - 0.5) * 10
    elseif what == 5 and type(t[k]) == "table" and #t[k] > 1 then
      local a, i = t[k], math.random(#t[k] - 1)
      a[i], a[i + 1] = a[i + 1], a[i]
    elseif type(t[k]) == "table" then
      t[k]["k" .. math.random(3)] = VALUES[math.random(#VALUES)]()
    elseif type(t[k]) == "number" then
      t[k] = t[k] * (math.random() < 0.5 and -1 or 1e300)
    end
  end
end

local loaded, refused = 0, 0
local function judge(ok, m, where, what)
  if ok then
    loaded = loaded + 1
    for dt in pairs(m.calibration.dtypes) do
      local cok, err = pcall(function()
        dp.clock_model(devmodel.clock_args(m, dt))
        for _, op in ipairs({ "gemm", "attention_fwd", "layernorm_fwd", "recompute:gemm" }) do
          for _, w in ipairs({ { 0, 0 }, { 1, 1 }, { 1e12, 1e9 }, { 1e20, 0 } }) do
            local ms = dp.clock_op_ms(op, w[1], w[2])
            local s = devmodel.op_seconds(m, dt, op, w[1], w[2])
            check.truthy(ms >= 0 and ms < math.huge and s >= 0, string.format("%s: %s time %s / %s", what, op, ms, s))
          end
        end
      end)
      dp.clock_model(false)
      check.truthy(cok, what .. ": a loaded model drives the clock: " .. tostring(err))
    end
  else
    refused = refused + 1
    local msg = tostring(m)
    check.truthy(msg:find("dpprof: device model " .. where .. ": ", 1, true) == 1 and not msg:find("\n", 1, true),
                 what .. ": a one-line refusal naming the file: " .. msg)
  end
end

for i = 1, N do
  local doc = json.decode(TEXT)
  if i % 2 == 0 then -- a shipped model's provenance (lua/dpprof/models/), mutated with the rest
    doc.provenance = { driver = "580.159.04", commands = json.array({ "dpprof calibrate", "dpprof run" }) }
  end
  mutate(doc)
  local ok, m = pcall(devmodel.check, doc, "fuzz")
  judge(ok, m, "fuzz", "structural mutation " .. i)
end
-- bytes: flipped, dropped, duplicated; through the file reader
for i = 1, N // 10 do
  local bytes = { TEXT:byte(1, -1) }
  for _ = 1, math.random(1, 4) do
    local p, what = math.random(#bytes), math.random(3)
    if what == 1 then bytes[p] = math.random(0, 255)
    elseif what == 2 then table.remove(bytes, p)
    else table.insert(bytes, p, bytes[p]) end
  end
  local parts = {}
  for j = 1, #bytes, 4096 do parts[#parts + 1] = string.char(table.unpack(bytes, j, math.min(#bytes, j + 4095))) end
  assert(dp.write_file(tmp, table.concat(parts)))
  local ok, m = pcall(devmodel.load, tmp)
  judge(ok, m, tmp, "byte mutation " .. i)
end
os.remove(tmp)
check.truthy(loaded > 0 and refused > N // 2, string.format("both outcomes seen: %d loaded, %d refused", loaded, refused))
print(string.format("test_devmodel_fuzz: ok (%d loaded, %d refused)", loaded, refused))
