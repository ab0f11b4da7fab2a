-- test_cuda_absent: device=cuda on a machine without a GPU says there is no CUDA device, not the
-- runtime's "CUDA driver version is insufficient for CUDA runtime version" (issue 38).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

if dp.cuda_compiled and dp.cuda_available() then
  print("skipped: a CUDA device is present (this test is for machines without one)")
  os.exit(77)
end
local ok, err = pcall(dp.device, "cuda")
check.eq(ok, false, "cuda is refused")
err = tostring(err)
if dp.cuda_compiled then
  check.truthy(err:find("no CUDA device on this machine", 1, true) or err:find("driver is older", 1, true),
               "names the missing device: " .. err)
  check.truthy(not err:find("insufficient for CUDA runtime", 1, true) or err:find("driver is older", 1, true),
               "not the runtime's bare message: " .. err)
else
  check.truthy(err:find("built without CUDA", 1, true), "a CPU-only build says so: " .. err)
end
-- an experiment says the same in its one line, naming the devices that work
local eok, eerr = pcall(dp.experiment, { device = "cuda", iters = 1, warmup = 0,
                                         model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 } })
check.eq(eok, false, "the experiment is refused")
check.truthy(tostring(eerr):find(dp.cuda_compiled and "no CUDA device" or "without the CUDA backend", 1, true),
             "the experiment's message: " .. tostring(eerr))
print("test_cuda_absent: ok")
