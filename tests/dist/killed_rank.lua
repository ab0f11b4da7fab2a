-- killed_rank.lua: a rank that dies ends the job in bounded time with an error naming it; no
-- rank waits forever in a collective. Runs mpirun itself (ctest: dpprof run killed_rank.lua
-- mpirun=PATH): two ranks train under ddp; rank 1 is killed (SIGKILL) after its second step, or
-- its run fails (a callback's error) there. The job must end within BOUND seconds, non-zero, and
-- say which rank: Open MPI's launcher names a killed rank, dpprof names a failed one.
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local mpirun = assert(dp.args and dp.args.mpirun, "usage: dpprof run killed_rank.lua mpirun=PATH")
local BOUND = 60

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local function rank_script(action)
  local path = dir .. "/" .. action .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write([[
local dp = require("dpprof")
local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 },
  device = "cpu", distributed = { strategy = "ddp" }, iters = 100000, warmup = 0, threads = 1, snapshots = "none",
  on = { after_step = function(ctx, i)
    if i == 2 and dp.dist.rank() == 1 then
      ]] .. (action == "kill" and 'os.execute("kill -9 " .. dp.pid())' or 'error("a failure on rank 1")') .. [[

    end
  end } }
]])
  f:close()
  return path
end

for _, case in ipairs({ { "kill", { "process rank 1", "signal 9" } },
                        { "fail", { "rank 1 of 2: ", "a failure on rank 1" } } }) do
  local action, wants = table.unpack(case)
  local t0 = dp.time()
  local code, out = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                           .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable,
                                           rank_script(action)))
  local took = dp.time() - t0
  check.truthy(code ~= 0 and code ~= 124, string.format("%s: the job ended non-zero, not by the timeout (exit %s): %s",
                                                        action, tostring(code), out))
  check.truthy(took < BOUND, action .. ": ended in bounded time")
  for _, want in ipairs(wants) do
    check.truthy(out:find(want, 1, true), string.format("%s: the output names the rank (%q): %s", action, want, out))
  end
  print(string.format("%s: the job ended in %.1f s, exit %d", action, took, code))
end
os.execute("rm -rf " .. dir)
print("ok")
