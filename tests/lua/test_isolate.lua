-- test_isolate.lua: dpprof.isolate runs a function in a forked child and maps every way a child
-- can end to a status (ok, error, oom, crashed by signal or exit, timeout, with its process
-- group stopped); results of any size and shape come back exactly; the parent stays CUDA-free and
-- its devices untouched. Also dpprof.json round trips and its refusals.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local json = dp.json

local t_start = dp.clock()
check.eq(dp.cuda_initialised(), false, "CUDA in the parent before any isolate")

-- ok: the returned table, with status "ok" added; arguments are passed through
local r, info = dp.isolate(function(a, b, t) return { sum = a + b, pid = dp.pid(), name = t.name } end, 2, 3, { name = "x" })
check.eq(r.status, "ok", "status of a plain return")
check.eq(r.sum, 5, "sum computed in the child")
check.eq(math.type(r.sum), "integer", "integers stay integers")
check.eq(r.name, "x", "table argument passed to the child")
check.truthy(r.pid ~= dp.pid(), "the function ran in another process")
check.eq(info.pid, r.pid, "info.pid is the child's pid")
check.eq(info.exit_code, 0, "a child that reported exits 0")
check.truthy(info.wall_s >= 0 and info.wall_s < 10, "wall time measured")

-- a table argument with only option-like keys is still options only when they are option names
local r2 = dp.isolate(function(t) return { got = t.a } end, { a = 1 })
check.eq(r2.got, 1, "a last table argument with other keys stays an argument")

-- a status the function sets itself is kept; a non-table value comes back as {status, value}
check.eq(dp.isolate(function() return { status = "mine" } end).status, "mine", "own status kept")
local v = dp.isolate(function() return 42 end)
check.eq(v.status, "ok")
check.eq(v.value, 42, "non-table value")

-- error: message and traceback
local e = dp.isolate(function() error("boom in the child") end)
check.eq(e.status, "error", "status of a raised error")
check.truthy(e.message:find("boom in the child", 1, true), "message kept: " .. tostring(e.message))
check.truthy(e.traceback and e.traceback:find("stack traceback", 1, true), "traceback kept")
local e2 = dp.isolate(function() error(setmetatable({}, { __tostring = function() return "custom error" end })) end)
check.eq(e2.message, "custom error", "error object with __tostring")

-- a result JSON cannot hold becomes an error naming the key path
local bad = dp.isolate(function() return { ok = 1, nested = { f = print } } end)
check.eq(bad.status, "error", "unencodable result")
check.truthy(bad.message:find("value.nested.f", 1, true), "path named: " .. bad.message)
-- numbers JSON has no form for are kept as the strings docs/results.md gives: never a lost result
local nan = dp.isolate(function() return { x = { 1, 0 / 0, 1 / 0, -1 / 0 } } end)
check.eq(nan.status, "ok", "a NaN in the result: " .. tostring(nan.message))
check.eq(nan.x[1], 1, "finite numbers as they were")
check.eq(nan.x[2], "NaN", "NaN")
check.eq(nan.x[3], "Infinity", "+inf")
check.eq(nan.x[4], "-Infinity", "-inf")

-- crashes: signals and exits without a result
local segv, sinfo = dp.isolate(function() dp.testing_crash("segv") end)
check.eq(segv.status, "crashed", "status after SIGSEGV")
check.eq(segv.signal, 11, "signal number")
check.truthy(segv.message:find("signal 11", 1, true), segv.message)
check.eq(sinfo.signal, 11, "info.signal")
local abrt = dp.isolate(function() dp.testing_crash("abort") end)
check.eq(abrt.status, "crashed")
check.eq(abrt.signal, 6, "SIGABRT")
local killed = dp.isolate(function() dp.testing_crash("kill") end)
check.eq(killed.signal, 9, "SIGKILL")
check.truthy(killed.message:find("OOM killer", 1, true), "SIGKILL hints at the OOM killer")
local exited = dp.isolate(function() os.exit(3) end)
check.eq(exited.status, "crashed", "exit without a result")
check.eq(exited.exit_code, 3, "exit code")

-- timeout: the child is stopped near the deadline, with its whole process group
local t0 = dp.clock()
local slow, tinfo = dp.isolate(function() dp.sleep(30) return {} end, { timeout = 0.5 })
local took = dp.clock() - t0
check.eq(slow.status, "timeout", "status past the deadline")
check.truthy(took >= 0.5 and took < 5, string.format("stopped near the deadline (%.2f s)", took))
check.eq(tinfo.killed_with, "SIGTERM", "SIGTERM was enough")
check.truthy(slow.message:find("limit 0.5 s", 1, true), slow.message)

-- a grandchild that ignores SIGTERM is killed with the group
local pidfile = os.tmpname()
local g = dp.isolate(function()
  os.execute("sh -c 'trap \"\" TERM; echo $$ > " .. pidfile .. "; exec sleep 30'")
  return {}
end, { timeout = 0.5, grace = 0.5 })
check.eq(g.status, "timeout", "status with a stubborn grandchild")
local f = assert(io.open(pidfile))
local gpid = tonumber(f:read("l"))
f:close()
os.remove(pidfile)
check.truthy(gpid, "the grandchild wrote its pid")
local function alive(pid)
  local sf = io.open("/proc/" .. pid .. "/status")
  if not sf then return false end
  local s = sf:read("a")
  sf:close()
  return not s:find("State:%s*Z")
end
local deadline = dp.clock() + 3
while alive(gpid) and dp.clock() < deadline do dp.sleep(0.05) end
check.eq(alive(gpid), false, "grandchild " .. gpid .. " stopped with the group")

check.raises(function() dp.isolate(function() end, { timeout = -1 }) end, "'timeout' must be >= 0")
check.raises(function() dp.isolate("not a function") end, "function expected")

-- big results come back whole (several MB through the pipe)
local big = dp.isolate(function()
  local t = {}
  for i = 1, 200000 do t[i] = { i = i, s = "item " .. i, x = i / 7 } end
  return { items = t }
end)
check.eq(big.status, "ok", "big result")
check.eq(#big.items, 200000, "all items")
check.eq(big.items[123456].s, "item 123456")
check.eq(big.items[200000].i, 200000)
check.eq(big.items[7].x, 7 / 7, "float exact")
check.eq(big.items[3].x, 3 / 7, "float exact after the round trip")

-- nested tables: depth, empty arrays and objects, strings with escapes, booleans, null
local nested = dp.isolate(function()
  local deep = { leaf = "bottom" }
  for i = 1, 60 do deep = { level = i, child = deep } end
  return { deep = deep, empty_array = json.array(), empty_object = {}, s = "tab\t\"quote\" \\ é ✓\n",
           flags = { true, false }, nothing = json.null, big = math.maxinteger, neg = -17, tiny = 1e-300 }
end)
local d = nested.deep
for _ = 1, 60 do d = d.child end
check.eq(d.leaf, "bottom", "60 levels deep")
check.eq(json.encode(nested.empty_array), "[]", "empty array stays an array")
check.eq(json.encode(nested.empty_object), "{}", "empty object stays an object")
check.eq(nested.s, "tab\t\"quote\" \\ é ✓\n", "string escapes and UTF-8")
check.eq(nested.flags[1], true)
check.eq(nested.flags[2], false)
check.truthy(json.is_null(nested.nothing), "null comes back as json.null")
check.eq(nested.big, math.maxinteger, "64-bit integer exact")
check.eq(nested.neg, -17)
check.eq(nested.tiny, 1e-300)

-- out of memory inside the child: status oom with what was asked and what was live
local oom = dp.isolate(function()
  dp.device("cpu")
  local keep = dp.tensor{ shape = { 256 }, category = "parameters" } -- 1024 bytes live
  dp.memory.set_limit(4096)
  local t = dp.tensor{ shape = { 1000 }, category = "activations" } -- 4000 more: refused
  return { keep = keep, t = t }
end)
check.eq(oom.status, "oom", "status of an engine OOM")
check.eq(oom.oom.requested_bytes, 4000, "requested bytes")
check.eq(oom.oom.category, "activations", "category asked for")
check.eq(oom.oom.live_bytes.parameters, 1024, "parameters live at the OOM")
check.eq(oom.oom.limit_bytes, 4096, "the limit that refused it")
check.truthy(oom.message:find("out of memory", 1, true), oom.message)
-- a Lua error that only mentions memory is not an OOM
check.eq(dp.isolate(function() error("out of memory, said the script") end).status, "error")

-- the child's clock, ledger, peaks and snapshots start fresh
dp.sleep(0.05)
local fresh = dp.isolate(function()
  return { clock = dp.clock(), ledger = #dp.ledger() }
end)
check.truthy(fresh.clock < dp.clock() - t_start, "child clock restarted near zero: " .. fresh.clock)
check.eq(fresh.ledger, 0, "child ledger empty")

-- the parent stays CUDA-free and uninitialised: the children used the cpu device, not us
check.eq(dp.cuda_initialised(), false, "CUDA in the parent after the children")
check.eq(dp.environment().devices.cpu, nil, "the parent's cpu device was never initialised")

-- after the parent ran OpenMP work, a child can still use the CPU backend (libgomp's pool is
-- ended before fork; without that the child hangs at its first parallel region)
dp.device("cpu")
local a = dp.tensor{ shape = { 256, 256 }, fill = 1 }
local c = dp.tensor{ shape = { 256, 256 } }
dp.matmul(c, a, a)
local mm = dp.isolate(function()
  local x = dp.tensor{ shape = { 256, 256 }, fill = 2 }
  local y = dp.tensor{ shape = { 256, 256 } }
  dp.matmul(y, x, x)
  return { v = y:get(1) }
end, { timeout = 60 })
check.eq(mm.status, "ok", "child after OpenMP work in the parent: " .. tostring(mm.message))
check.eq(mm.v, 1024, "the child's matmul (256 * 2 * 2)")
a:free()
c:free()

-- the thread count: a child inherits the parent's, its own setting stays in the child, and its
-- fresh pool runs a GEMM split across that many threads
check.eq(dp.threads(3), 3, "dpprof.threads sets and returns the count")
local th = dp.isolate(function()
  local inherited = dp.threads()
  dp.threads(2)
  local x = dp.tensor{ shape = { 512, 512 }, fill = 1 }
  local y = dp.tensor{ shape = { 512, 512 } }
  dp.matmul(y, x, x)
  return { inherited = inherited, now = dp.threads(), v = y:get(1) }
end, { timeout = 60 })
check.eq(th.status, "ok", "child with its own thread count: " .. tostring(th.message))
check.eq(th.inherited, 3, "the child starts with the parent's count")
check.eq(th.now, 2, "the child's own count")
check.eq(th.v, 512, "the child's split matmul")
check.eq(dp.threads(), 3, "the child's setting stays in the child")
check.raises(function() dp.threads(0) end, "thread count from 1 to 4096")

-- json: encode refusals name the path; decode errors give line and column
check.raises(function() json.encode({ a = { b = 0 / 0 } }) end, { "a.b", "NaN" })
check.raises(function() json.encode({ 1, 2, nil, 4 }) end, "sparse array")
check.raises(function() json.encode({ 1, x = 2 }) end, "mixes array items")
check.raises(function() json.decode('{"a": [1, 2,}', "f.json") end, { "f.json", "line 1, column 13" })
check.raises(function() json.decode('{"a": 1} x') end, "characters after the value")
-- control characters (a NUL in place of a space passed, one in a string cut it short) and an escaped
-- NUL (it would cut the string short) are refused, naming the place; escaped backslashes are not NULs
check.raises(function() json.decode('{"a":\0 1}', "f.json") end, { "f.json: invalid JSON at line 1, column 6 (control character 0x00" })
check.raises(function() json.decode('["x\1y"]') end, { "line 1, column 4 (control character 0x01" })
check.raises(function() json.decode('{"a": "x\\u0000y"}') end, { "line 1, column 9 (\\u0000 in a string" })
check.eq(json.decode('{"a": "x\\\\u0000y"}').a, "x\\u0000y", "an escaped backslash before u0000")
check.eq(json.decode('{"a": "\\"", "b": "\\u0041\t"}').b, "A\t", "escapes and a tab in a string")
check.eq(json.encode({ b = 1, a = { 2.5, 3 }, c = "x" }), '{"a":[2.5,3],"b":1,"c":"x"}', "sorted keys, compact")
check.eq(math.type(json.decode("3")), "integer", "3 decodes as an integer")
check.eq(math.type(json.decode("3.5")), "float")

-- on a CUDA build where the probe initialises the driver (a GPU is there), isolate must refuse from then on
if dp.cuda_compiled then
  dp.cuda_available()
  if dp.cuda_initialised() then
    check.raises(function() dp.isolate(function() return {} end) end, "CUDA is already initialised")
    print("checked: isolate refuses once CUDA is in the process")
  else
    print("note: the CUDA driver was not initialised here (no GPU); the refusal was not exercised")
  end
end
print("ok")
