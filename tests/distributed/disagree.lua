-- disagree.lua: ranks started with different configurations are refused before anything is
-- exchanged, on every rank, naming the first key that differs and both ranks' values (exit 2),
-- never a buffer overflow, a crash, a hang or two "ok" results with different parameters (issue 37).
-- Runs mpirun itself (ctest: dpprof run disagree.lua mpirun=PATH): two ranks, rank 1's
-- configuration changed in one key each time. A shared configuration runs (the check does not
-- refuse what agrees), and each rank's own callbacks, memory_limit and threads are its own.
package.path = arg[0]:match("(.*/)") .. "../lua/?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local mpirun = assert(dp.args and dp.args.mpirun, "usage: dpprof run disagree.lua mpirun=PATH")
local BOUND = 60

local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir))
-- the experiment both ranks run, rank 1's with `change` (Lua source of statements on `cfg`) applied
local function rank_script(name, change, strategy)
  local path = dir .. "/" .. name .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write(string.format([[
local dp = require("dpprof")
local results = require("dpprof.results")
local rank = dp.dist.rank()
local cfg = { model = { arch = "gpt", vocab = 64, hidden = 32, layers = 2, heads = 2, seq_len = 8, batch = 4 },
  method = "ghost", device = "cpu", distributed = { strategy = %q }, iters = 1, warmup = 0, threads = 1,
  snapshots = "none", seed = 1, dp = { noise_multiplier = 1.0, max_grad_norm = 1.0 },
  memory_limit = rank == 1 and 2^30 or nil, on = { after_step = function() end } }
if rank == 1 then %s end
local r = dp.experiment(cfg)
print(string.format("RESULT %%d %%s valid=%%s", rank, r.status, tostring((results.validate(r)))))
]], strategy or "ddp", change))
  f:close()
  return path
end

local cases = {
  { "hidden", "cfg.model.hidden = 48", "ranks disagree on model.hidden: rank 0 has 32, rank 1 has 48" },
  { "seed", "cfg.seed = 2", "ranks disagree on seed: rank 0 has 1, rank 1 has 2" },
  { "iters", "cfg.iters = 3", "ranks disagree on iters: rank 0 has 1, rank 1 has 3" },
  { "lora", "cfg.model.lora = { rank = 2 }", "ranks disagree on model.lora.rank: rank 0 has none, rank 1 has 2" },
  { "method", "cfg.method = 'flat'", "ranks disagree on method: rank 0 has \"ghost\", rank 1 has \"flat\"" },
  { "noise", "cfg.dp.noise_multiplier = 0.5", "ranks disagree on dp.noise_multiplier: rank 0 has 1, rank 1 has 0.5" },
  { "optimizer", "cfg.optimizer = { name = 'sgd', lr = 0.1 }", "ranks disagree on optimizer." },
  { "fsdp_seed", "cfg.seed = 7; cfg.dp.poisson = true; cfg.dp.sample_rate = 0.5; cfg.dp.dataset_size = 8",
    "ranks disagree on ", "fsdp" },
}
for _, case in ipairs(cases) do
  local name, change, want, strategy = table.unpack(case)
  local t0 = dp.time()
  local code, out = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                           .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable,
                                           rank_script(name, change, strategy)))
  local took = dp.time() - t0
  check.truthy(code ~= 0 and code ~= 124, string.format("%s: refused, not run and not a hang (exit %s): %s", name,
                                                        tostring(code), out))
  check.eq(code, 2, name .. ": the refusal's exit status: " .. out)
  check.truthy(not out:find("RESULT", 1, true), name .. ": no rank wrote a result: " .. out)
  local _, n = out:gsub(want:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"), "")
  check.truthy(n >= 1, string.format("%s: the message names the key and values (%q): %s", name, want, out))
  check.truthy(not out:find("AddressSanitizer", 1, true) and not out:find("Segmentation", 1, true),
               name .. ": no crash: " .. out)
  check.truthy(took < BOUND, name .. ": ended in bounded time")
  print(string.format("%s: refused in %.1f s, exit %d", name, took, code))
end

-- the same configuration, but each rank's working directory holds a different checkpoint under the
-- same relative path (as nodes with different files would): the models as built disagree, refused
-- at the first vote, before the first collective
for _, spec in ipairs({ { "a", 32 }, { "b", 48 } }) do
  assert(dp.mkdir_p(dir .. "/" .. spec[1]))
  local m = dp.model({ arch = "gpt", vocab = 64, hidden = spec[2], layers = 2, heads = 2, seq_len = 8, batch = 4,
                       device = "cpu" })
  m:save(dir .. "/" .. spec[1] .. "/ckpt")
end
local built = dir .. "/built.lua"
local f = assert(io.open(built, "w"))
f:write([[
local dp = require("dpprof")
local r = dp.experiment{ model = { path = "ckpt", seq_len = 8, batch = 4 }, method = "ghost", device = "cpu",
  distributed = { strategy = "ddp" }, iters = 1, warmup = 0, threads = 1, snapshots = "none" }
print(string.format("RESULT %d %s", dp.dist.rank(), r.status))
]])
f:close()
do
  local code, out = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                           .. "--oversubscribe -np 1 -wdir %q %q run %q : -np 1 -wdir %q %q run %q",
                                           BOUND, mpirun, dir .. "/a", dp.executable, built, dir .. "/b",
                                           dp.executable, built))
  check.eq(code, 2, "different checkpoints: refused with exit 2: " .. out)
  check.truthy(out:find("ranks disagree on the model as built, model.ffn: rank 0 has 128, rank 1 has 192", 1, true),
               "names the built model's key: " .. out)
  check.truthy(not out:find("RESULT", 1, true), "different checkpoints: no result: " .. out)
  print("different checkpoints: refused, exit " .. code)
end

-- a data file each rank names by its own path (a node-local copy) is compared by its content:
-- two copies of one file under different names run; a copy that differs is refused
do
  local tokens = {}
  for i = 1, 256 do tokens[i] = string.pack("<I2", (i * 7) % 63 + 1) end
  local same = table.concat(tokens)
  assert(dp.write_file(dir .. "/tok_0.bin", same) and dp.write_file(dir .. "/tok_1.bin", same))
  assert(dp.write_file(dir .. "/tok_other.bin", same:sub(1, -3) .. string.pack("<I2", 5)))
  for _, case in ipairs({ { "tok_1.bin", 0 }, { "tok_other.bin", 2 } }) do
    -- rank 0 reads tok_0.bin, rank 1 its own file
    local change = string.format("cfg.data = { file = %q } else cfg.data = { file = %q }", dir .. "/" .. case[1],
                                 dir .. "/tok_0.bin")
    local path = rank_script("file_" .. case[2], change)
    local fcode, fout = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                               .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable, path))
    check.eq(fcode, case[2], case[1] .. ": the world's exit status: " .. fout)
    if case[2] == 0 then
      check.truthy(fout:find("RESULT 0 ok valid=true", 1, true), "copies of one file under two names run: " .. fout)
    else
      check.truthy(fout:find("ranks disagree on data.file (its content): rank 0 has \"512 bytes, fnv1a64 ", 1, true),
                   "a copy that differs is refused, naming the content: " .. fout)
    end
  end
  print("data files: compared by content")
end

-- what the ranks share runs, and each rank's own callbacks, memory_limit and threads do not count
local code, out = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                         .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable,
                                         rank_script("same", "cfg.threads = 1")))
check.eq(code, 0, "an agreeing world runs: " .. out)
check.truthy(out:find("RESULT 0 ok valid=true", 1, true) and out:find("RESULT 1 ok valid=true", 1, true),
             "both ranks ok: " .. out)

-- a script that ends in os.exit(0) ends MPI as a returning one does: mpirun sees a proper exit
-- (issue 37: it reported "exited improperly" and returned 1); os.exit(3) ends the job with 3
for _, want in ipairs({ 0, 3 }) do
  local path = dir .. "/exit" .. want .. ".lua"
  local ef = assert(io.open(path, "w"))
  ef:write(string.format("local dp = require('dpprof')\ndp.dist.barrier()\nprint('EXITING', dp.dist.rank())\nos.exit(%d)\n", want))
  ef:close()
  local ecode, eout = check.sh(string.format("OMPI_MCA_mpi_yield_when_idle=1 timeout %d %q --allow-run-as-root "
                                             .. "--oversubscribe -np 2 %q run %q", BOUND, mpirun, dp.executable, path))
  check.eq(ecode, want, "os.exit(" .. want .. ") under mpirun: the job's status: " .. eout)
  check.truthy(not eout:find("improperly", 1, true), "no improper exit: " .. eout)
end
os.execute("rm -rf " .. dir)
print("ok")
