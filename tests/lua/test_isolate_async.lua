-- test_isolate_async.lua: children that run side by side (dpprof.isolate_start, isolate_wait):
-- they really overlap, each one's result comes back whole and once, a timeout stops only its own
-- child, an unfinished child is killed when its handle is stopped or collected, and the options a
-- parallel sweep gives a child (threads, env) are in place before the function runs, in
-- isolate_start and isolate alike.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local alive = check.alive

-- Waits until every child of the list has finished; returns their results by position.
local function wait_all(children)
  local results, infos, left = {}, {}, #children
  while left > 0 do
    local running = {}
    for i, c in ipairs(children) do if not results[i] then running[#running + 1] = c end end
    dp.isolate_wait(running, 5)
    for i, c in ipairs(children) do
      if not results[i] and c:finished() then
        results[i], infos[i] = c:result()
        left = left - 1
      end
    end
  end
  return results, infos
end

-- three children at once: they run side by side (each marks its start and waits until all three
-- have: children run one after another would wait in vain), results come back by child, big ones
-- whole. What happened is asserted, not how long it took (a loaded machine is slow, not wrong).
do
  local marks = os.tmpname()
  os.remove(marks)
  assert(dp.mkdir_p(marks))
  local function work(tag, n)
    local t0, all = dp.time(), false -- before the mark: whoever sees the mark ends after this start
    assert(dp.write_file(marks .. "/" .. tag, tag))
    while not all and dp.time() - t0 < 120 do
      all = #assert(dp.list_dir(marks)) == 3
      if not all then dp.sleep(0.01) end
    end
    local big = {}
    for i = 1, n do big[i] = i end
    return { tag = tag, pid = dp.pid(), big = big, t0 = t0, t1 = dp.time(), saw_all = all }
  end
  local kids = { dp.isolate_start(work, "a", 10), dp.isolate_start(work, "b", 200000), dp.isolate_start(work, "c", 1) }
  check.eq(kids[1]:finished(), false, "just started")
  check.eq(kids[1]:result(), nil, "no result before it ends")
  local rs, infos = wait_all(kids)
  for i, tag in ipairs({ "a", "b", "c" }) do
    check.eq(rs[i].saw_all, true, tag .. ": saw the three children started while it ran: they ran side by side")
  end
  local latest_start, first_end = math.max(rs[1].t0, rs[2].t0, rs[3].t0), math.min(rs[1].t1, rs[2].t1, rs[3].t1)
  check.truthy(latest_start <= first_end, "the three children's intervals overlap")
  os.execute("rm -rf " .. marks)
  for i, tag in ipairs({ "a", "b", "c" }) do
    check.eq(rs[i].status, "ok", tag .. " status")
    check.eq(rs[i].tag, tag, "result of child " .. i)
    check.eq(infos[i].pid, kids[i]:pid(), "info.pid")
    check.eq(rs[i].pid, kids[i]:pid(), "ran in its own child")
  end
  check.eq(#rs[2].big, 200000, "a 1.5 MB result is read while others run")
  check.eq(rs[2].big[200000], 200000, "and comes back whole")
  check.raises(function() kids[1]:result() end, "already taken", "a result is taken once")
end

-- a timeout stops its own child only; the others finish
do
  local slow = dp.isolate_start(function() dp.sleep(30) return {} end, { timeout = 0.3 })
  local quick = dp.isolate_start(function() dp.sleep(0.6) return { done = true } end)
  local rs = wait_all({ slow, quick })
  check.eq(rs[1].status, "timeout", "the slow child timed out")
  check.truthy(rs[1].message:find("limit 0.3 s", 1, true), rs[1].message)
  check.eq(rs[2].status, "ok", "the other child was left alone")
  check.eq(rs[2].done, true, "and finished")
  check.eq(alive(slow:pid()), false, "the timed-out child is gone")
end

-- isolate_wait with seconds returns when they pass, with none finished
do
  local c = dp.isolate_start(function() dp.sleep(30) return {} end)
  local t0 = dp.clock()
  check.eq(dp.isolate_wait({ c }, 0.2), 0, "none finished")
  check.truthy(dp.clock() - t0 >= 0.19, "waited the seconds given")
  local pid = c:pid()
  c:stop()
  check.eq(c:finished(), true, "stop finishes it")
  check.eq(alive(pid), false, "stop kills it")
  local r = c:result()
  check.eq(r.status, "crashed", "a stopped child's result: " .. tostring(r.message))
end

-- a handle closed (or collected) while its child runs kills the child
do
  local pid
  do
    local c <close> = dp.isolate_start(function() dp.sleep(30) return {} end)
    pid = c:pid()
    check.eq(alive(pid), true, "running")
  end
  check.eq(alive(pid), false, "closing the handle killed the child")
  local c2 = dp.isolate_start(function() dp.sleep(30) return {} end)
  local pid2 = c2:pid()
  c2 = nil -- luacheck: ignore
  collectgarbage()
  collectgarbage()
  check.eq(alive(pid2), false, "collecting the handle killed the child")
end

-- the options of a slot: thread counts and variables are set in the child before fn runs; the
-- parent keeps its own
do
  local parent = dp.environment()
  local function report()
    local e = dp.environment()
    return { threads = e.threads, engine = dp.threads(), omp = os.getenv("OMP_NUM_THREADS"),
             cvd = os.getenv("CUDA_VISIBLE_DEVICES"), n = os.getenv("DPPROF_TEST_N") }
  end
  local c = dp.isolate_start(report, { threads = 1, env = { CUDA_VISIBLE_DEVICES = "7", DPPROF_TEST_N = 3 } })
  local r = wait_all({ c })[1]
  check.eq(r.threads, 1, "the child's thread count")
  check.eq(r.engine, 1, "one count: dpprof.threads() is dpprof.environment().threads")
  check.eq(r.omp, "1", "OMP_NUM_THREADS")
  check.eq(r.cvd, "7", "CUDA_VISIBLE_DEVICES")
  check.eq(r.n, "3", "a number becomes its text")
  local r2 = dp.isolate(report, { threads = 2 })
  check.eq(r2.threads, 2, "isolate takes threads too")
  check.eq(r2.cvd, os.getenv("CUDA_VISIBLE_DEVICES"), "no env option: the parent's environment")
  check.eq(dp.environment().threads, parent.threads, "the parent's thread count is unchanged")
  check.eq(os.getenv("DPPROF_TEST_N"), nil, "the parent's environment is unchanged")
  -- a real experiment in the child runs on the threads it was given
  local e = dp.isolate(function()
    return dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 1, heads = 2, seq_len = 8, batch = 2 },
                          device = "cpu", iters = 1, warmup = 0, method = "ghost" }
  end, { threads = 1 })
  check.eq(e.status, "ok", tostring(e.message))
  check.eq(e.environment.threads, 1, "the result records the child's thread count")
  check.eq(e.environment.blas_threads, nil, "one thread count recorded, not two")
end

-- bad options and arguments
check.raises(function() dp.isolate_start(function() end, { threads = 0 }) end, "'threads' must be 1 .. 4096")
check.raises(function() dp.isolate_start(function() end, { env = { ["A=B"] = "x" } }) end, "without '='")
check.raises(function() dp.isolate_start(function() end, { env = { A = {} } }) end, "env.A must be a string")
check.raises(function() dp.isolate_wait({ 1 }) end, "children[1] is not a child")
check.eq(dp.isolate_wait({}), 0, "an empty list: nothing to wait for")
print("test_isolate_async: ok")
