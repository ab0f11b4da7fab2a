-- test_snapshot_scale.lua: ctx:snapshot scales linearly with the number of snapshots a run takes.
-- Marking the script's own snapshots in the result compared every snapshot with every one the
-- script took (2,000 / 4,000 / 8,000 snapshots: 0.13 / 0.50 / 2.72 s). Not a timed test: it
-- counts the Lua VM instructions a run executes (debug.sethook's count hook, exact and the same
-- on any machine or build) for 0, N and 2N script snapshots; going from N to 2N must cost about
-- what going from 0 to N did (quadratic work costs three times as much), and every snapshot the
-- script took is marked as its own, and only those.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local STEP = 100 -- instructions per hook call
local function run(n)
  local count = 0
  local function hook() count = count + 1 end
  local r
  debug.sethook(hook, "", STEP)
  r = dp.experiment{ model = { layers = 1, hidden = 16, heads = 2, vocab = 32, seq_len = 8 }, iters = 1, warmup = 0,
                     device = "cpu", snapshots = "none",
                     on = { after_step = function(ctx)
                       debug.sethook(hook, "", STEP) -- a callback may run on a thread of its own
                       for j = 1, n do ctx:snapshot("mine" .. j) end
                     end } }
  debug.sethook()
  check.eq(r.status, "ok", "the run: " .. tostring(r.message))
  local mine, others = 0, 0
  for _, s in ipairs(r.snapshots) do
    if s.custom then
      mine = mine + 1
      check.eq(s.name, "mine" .. mine, "the script's own, in order")
    else
      others = others + 1
    end
  end
  check.eq(mine, n, "every snapshot of the script's is marked")
  return count * STEP, others
end

local N = 1500
local base, others0 = run(0)
local one = run(N)
local two, others2 = run(2 * N)
check.eq(others2, others0, "the run's own snapshots are not marked")
local first, second = one - base, two - one
print(string.format("Lua instructions: %d with no snapshot of the script's, +%d for the first %d, +%d for the next %d "
                    .. "(ratio %.2f; linear 1, quadratic 3)", base, first, N, second, N, second / first))
check.truthy(first > 0 and second < 1.5 * first,
             string.format("the second %d snapshots cost %.2f times the first %d: not linear", N, second / first, N))
print("test_snapshot_scale: ok")
