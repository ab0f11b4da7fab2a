-- killed_rank.lua: a rank that dies or fails ends the job in bounded time, every rank naming it; no
-- rank waits forever in a collective. Runs mpirun itself (ctest: dpprof run killed_rank.lua
-- mpirun=PATH), two ranks training under ddp (fail under fsdp too, whose forward gathers):
--   kill  rank 1 is killed (SIGKILL) after its second step: Open MPI's launcher names it and stops
--         the job (non-zero);
--   fail  rank 1's run fails (a callback's error) after its second step: every rank's result is
--         that error, "rank 1 of 2: ...", and the job ends normally;
--   oom   rank 1 runs out of memory (its own memory_limit): every rank's result is status oom with
--         rank 1's oom record, "rank 1 of 2: ...", valid results.
-- Each must end within BOUND seconds.
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local mpirun = assert(dp.args and dp.args.mpirun, "usage: dpprof run killed_rank.lua mpirun=PATH")
local BOUND = 60

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local function rank_script(action, strategy)
  local path = dir .. "/" .. action .. "_" .. strategy .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write(string.format([[
local dp = require("dpprof")
local results = require("dpprof.results")
local action, strategy, rank = %q, %q, dp.dist.rank()
local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 },
  device = "cpu", distributed = { strategy = strategy }, iters = action == "kill" and 100000 or 5, warmup = 0, threads = 1,
  snapshots = "none", memory_limit = action == "oom" and rank == 1 and 300000 or nil,
  on = { after_step = function(ctx, i)
    if i == 2 and rank == 1 and action == "kill" then os.execute("kill -9 " .. dp.pid()) end
    if i == 2 and rank == 1 and action == "fail" then error("a failure on rank 1") end
  end } }
print(string.format("RESULT %%d %%s valid=%%s %%s", rank, r.status, tostring((results.validate(r))), r.message))
]], action, strategy))
  f:close()
  return path
end

for _, case in ipairs({ { "kill", false, { "process rank 1", "signal 9" } },
                        { "fail", true, { "RESULT 0 error valid=true rank 1 of 2: ", "RESULT 1 error valid=true rank 1 of 2: ",
                                          "a failure on rank 1" } },
                        { "oom", true, { "RESULT 0 oom valid=true rank 1 of 2: ", "RESULT 1 oom valid=true rank 1 of 2: ",
                                         "out of memory" } },
                        -- fsdp gathers inside the forward: the ranks vote before it, so the others stop too
                        { "fail", true, { "RESULT 0 error valid=true rank 1 of 2: ", "RESULT 1 error valid=true rank 1 of 2: ",
                                          "a failure on rank 1" }, "fsdp" } }) do
  local action, clean, wants, strategy = table.unpack(case)
  strategy = strategy or "ddp"
  local t0 = dp.time()
  local code, out = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                           .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable,
                                           rank_script(action, strategy)))
  local took = dp.time() - t0
  if clean then
    check.eq(code, 0, action .. ": every rank ended with a result: " .. out)
  else
    check.truthy(code ~= 0 and code ~= 124, string.format("%s: the job ended non-zero, not by the timeout (exit %s): %s",
                                                          action, tostring(code), out))
  end
  check.truthy(took < BOUND, action .. ": ended in bounded time")
  for _, want in ipairs(wants) do
    check.truthy(out:find(want, 1, true), string.format("%s: the output names the rank (%q): %s", action, want, out))
  end
  print(string.format("%s (%s): the job ended in %.1f s, exit %d", action, strategy, took, code))
end
os.execute("rm -rf " .. dir)
print("ok")
