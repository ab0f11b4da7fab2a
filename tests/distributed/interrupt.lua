-- interrupt.lua: SIGINT to every rank of a running job (what srun forwards on Ctrl-C), or to one
-- rank (scancel --signal=INT of one task), ends the job within BOUND seconds with status 130 and
-- "interrupted by SIGINT" on every rank: the interrupt is held back and voted on at a point every
-- rank reaches, never acted on inside a collective the others wait in (issue 37: 4 of 12 and 3 of
-- 18 such runs hung). Runs mpirun itself (ctest: dpprof run interrupt.lua mpirun=PATH), at random
-- moments of the steps, under ddp and fsdp (whose forward gathers).
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local mpirun = assert(dp.args and dp.args.mpirun, "usage: dpprof run interrupt.lua mpirun=PATH")
local BOUND = 60

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
local script = dir .. "/rank.lua"
local f = assert(io.open(script, "w"))
f:write(string.format([[
local dp = require("dpprof")
local rank = dp.dist.rank()
local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 },
  device = "cpu", distributed = { strategy = dp.args.strategy }, iters = 100000, warmup = 0, threads = 1,
  snapshots = "none", on = { after_step = function(ctx, i)
    if i == 2 then local f = io.open(%q .. "/pid_" .. rank, "w"); f:write(dp.pid()); f:close() end
  end } }
print("RESULT", rank, r.status, r.message)
]], dir))
f:close()

local runs = 0
for _, strategy in ipairs({ "ddp", "fsdp" }) do
  for trial = 1, strategy == "ddp" and 4 or 2 do
    for _, who in ipairs({ "every", "one" }) do
      -- the signal lands 0 to 0.3 s after both ranks finished their second step
      local delay = string.format("0.%03d", (trial * 97 + #who * 31) % 300)
      local targets = who == "every" and string.format("$(cat %q/pid_0) $(cat %q/pid_1)", dir, dir)
        or string.format("$(cat %q/pid_1)", dir)
      local t0 = dp.time()
      local code, out = check.sh(string.format([[
rm -f %q/pid_*
OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root --oversubscribe -np 2 %q run %q strategy=%s \
  > %q/out 2>&1 &
job=$!
for i in $(seq 300); do [ -s %q/pid_0 ] && [ -s %q/pid_1 ] && break; sleep 0.1; done
sleep %s
kill -INT %s
wait $job
rc=$?
cat %q/out
exit $rc]], dir, BOUND, mpirun, dp.executable, script, strategy, dir, dir, dir, delay, targets, dir))
      local took = dp.time() - t0
      check.truthy(code ~= 124, string.format("%s, SIGINT to %s rank: not a hang (timed out at %d s): %s", strategy,
                                              who, BOUND, out))
      check.eq(code, 130, string.format("%s, SIGINT to %s rank: the job's status: %s", strategy, who, out))
      local _, n = out:gsub("interrupted by SIGINT", "")
      check.truthy(n >= 1, string.format("%s, SIGINT to %s rank: says it was interrupted: %s", strategy, who, out))
      check.truthy(not out:find("RESULT", 1, true), "no result is written for an interrupted run: " .. out)
      runs = runs + 1
      print(string.format("%s, SIGINT to %s rank after %s s: ended in %.1f s, exit %d", strategy, who, delay, took, code))
    end
  end
end
os.execute("rm -rf " .. dir)
print(string.format("ok: %d interrupted jobs, none hung", runs))
