-- test_plan_advice.lua: a plan point beyond its card says which activation checkpointing setting
-- makes it fit and at what step-time cost, on the console and in summary.txt/.md (issue 27), from
-- dpprof.fit's plan runs (plan.checkpoint_advice); a point that fits without checkpointing gets
-- no advice. The card is sized between the point's reserved peak with and without checkpointing.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local root = string.format("/tmp/dpprof-test-plan-advice-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
assert(dp.mkdir_p(root))
local MODEL = "{ vocab = 256, hidden = 64, layers = 4, heads = 4, seq_len = 256, batch = 8 }"
local model = load("return " .. MODEL)()
local huge = { base = "h100", name = "probe", memory_bytes = 1 << 40 }
local function reserved(ck, seq)
  local m = dp.deep_copy(model)
  m.checkpoint, m.seq_len = ck, seq or m.seq_len
  local r = dp.experiment{ model = m, method = "vanilla", device = "plan", device_model = huge, iters = 1, warmup = 1,
                           snapshots = "none" }
  return r.plan.predicted_reserved_bytes, r.timing.avg_ms
end
local off, off_ms = reserved(false)
local every2, every2_ms = reserved(2)
local blocks = reserved("blocks")
check.truthy(blocks < every2 and every2 < off, string.format("checkpointing lowers the peak: %d %d %d", off, every2, blocks))
-- a card (no context) between every 2nd block and off: every 4th may or may not fit; the advice is
-- the least recomputation that fits, so compute it the same way the advice says it does
local card = (off + every2) // 2
local every4, every4_ms = reserved(4)
local want, want_ms = 2, every2_ms
if every4 <= card then want, want_ms = 4, every4_ms end
local small = reserved(false, 64) -- seq_len 64 fits without checkpointing
check.truthy(small <= card, "the short point fits")

local script = root .. "/sweep.lua"
local f = assert(io.open(script, "w"))
f:write(string.format([[
local dp = require("dpprof")
dp.sweep{ base = { model = %s, device = "plan", iters = 1, warmup = 1,
                   device_model = { base = "h100", name = "card", memory_bytes = %d, context_bytes = 0 } },
          vary = { method = { "vanilla" }, seq_len = { 64, 256 } }, out = %q }
]], MODEL, card, root .. "/out"))
f:close()
local code, text = check.sh(string.format("%q run %q", dp.executable, script))
check.eq(code, 0, "the sweep ran: " .. text)
local long = "method=vanilla,seq_len=256"
local r = dp.results.read(root .. "/out/" .. long .. ".json")
check.eq(r.plan.fits, false, "seq_len=256 does not fit the card")
local a = r.plan.checkpoint_advice
check.truthy(type(a) == "table", "the point beyond the card has advice")
check.eq(a.checkpoint, want, "the least recomputation that fits")
check.eq(a.fits, true, "it fits with it")
check.eq(a.step_ms, want_ms, "its estimated step time")
check.eq(a.reference_step_ms, off_ms, "the step time without checkpointing")
check.truthy(a.step_ms > a.reference_step_ms, "recomputation costs time")
local ok, problems = dp.results.validate(r)
check.truthy(ok, "a valid result: " .. table.concat(problems or {}, "; "))
check.eq(dp.results.read(root .. "/out/method=vanilla,seq_len=64.json").plan.checkpoint_advice, nil,
         "a point that fits gets no advice")
local cost = string.format("%+.0f%% step time", (want_ms / off_ms - 1) * 100)
local line = string.format("fits with checkpoint=%s at %s", tostring(want), cost)
check.truthy(text:find(long .. ": does not fit card", 1, true) and text:find(line, 1, true),
             "the console says which setting and what it costs: " .. text)
check.sh(string.format("%q plot %q", dp.executable, root .. "/out"))
local txt = assert(dp.read_file(root .. "/out/summary.txt"))
check.truthy(txt:find("ACTIVATION CHECKPOINTING", 1, true) and txt:find("vanilla seq_len=256: does not fit; " .. line, 1, true),
             "summary.txt says it too: " .. txt)
local md = assert(dp.read_file(root .. "/out/summary.md"))
check.truthy(md:find(line, 1, true), "and summary.md")
-- A point that fits only thanks to its checkpointing (every 2nd block; off does not fit) is told so,
-- with the least recomputation that fits and its cost over none.
f = assert(io.open(script, "w"))
f:write(string.format([[
local dp = require("dpprof")
local m = %s
m.checkpoint = 2
dp.sweep{ base = { model = m, device = "plan", iters = 1, warmup = 1,
                   device_model = { base = "h100", name = "card", memory_bytes = %d, context_bytes = 0 } },
          vary = { method = { "vanilla" } }, out = %q }
]], MODEL, card, root .. "/ck"))
f:close()
code, text = check.sh(string.format("%q run %q", dp.executable, script))
check.eq(code, 0, "the checkpointed sweep ran: " .. text)
r = dp.results.read(root .. "/ck/method=vanilla.json")
check.eq(r.plan.fits, true, "it fits with every 2nd block recomputed")
a = r.plan.checkpoint_advice
check.truthy(type(a) == "table" and a.checkpoint == want and a.reference_step_ms == off_ms, "advised: " .. dp.json.encode(a or {}))
check.truthy(text:find("method=vanilla: fits only with checkpointing; " .. line, 1, true), "said on the console: " .. text)
os.execute("rm -rf " .. root)
print("test_plan_advice: ok")
