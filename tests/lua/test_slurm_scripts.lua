-- test_slurm_scripts.lua: what reaches the scripts a Slurm sweep generates (slurm/task.sh,
-- slurm/collect.sh, and an N-task point's slurm/task_<N>tasks.sh, whose exec is srun's) from
-- outside: the output directory and the sweep's name. Hostile ones
-- (quotes, $(), backticks, spaces, ;, #, %, a backslash, non-ASCII) are submitted through
-- `dpprof sweep submit` with an sbatch stand-in; both scripts must pass `sh -n` and, run for real
-- as Slurm runs them, do their job (the task writes its point's file, collect ends 0) without
-- running any of the injected text. A path or name with a newline or another control character
-- is refused in one line before anything is made (a newline once wrote "touch pwned" as a shell
-- line of its own under a comment).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local slurm = require("dpprof.slurm")
local q = slurm.quote

local root = string.format("/tmp/dpprof-test-slurm-scripts-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. q(root))
local fake = root .. "/bin"
local env = check.fake_slurm(fake)
local function write(path, text) assert(dp.write_file(path, text)) end
local function sh(cmd) return check.sh(env .. " " .. cmd) end
local exe = dp.executable

local pwned = root .. "/pwned"
local script = root .. "/sweep.lua"
write(script, [[
local dp = require("dpprof")
dp.sweep{ vary = { seed = { 7 } }, out = dp.args.out, name = dp.args.name, backend = "slurm",
          run = function(cfg, vary) return { seed = vary.seed } end }
]])
-- a point distributed on a real device: a 2-task job, its task script an srun of 2 ranks
local dist_script = root .. "/dist.lua"
write(dist_script, [[
local dp = require("dpprof")
dp.sweep{ base = { device = "cpu", distributed = { world_size = 2 } }, vary = { seed = { 7 } }, out = dp.args.out,
          name = dp.args.name, backend = "slurm", run = function(cfg, vary) return { seed = vary.seed } end }
]])

-- each of these runs the stand-in's `touch` of pwned if it ever reaches a shell unquoted
local touch = "touch " .. pwned
local hostile = {
  "q'uote", 'd"quote', "$(" .. touch .. ")", "`" .. touch .. "`", "sp ace", "semi;" .. touch .. ";", "#hash",
  "100%j", "back\\slash", "-dash", "glob*?[a]", "ünïcödé", "a'$(" .. touch .. ")'b", "amp&" .. touch .. "&",
  "pipe|" .. touch, "${IFS}", "\\'", "'\\''",
}
for i, h in ipairs(hostile) do
  local out = string.format("%s/o%d/%s", root, i, h)
  local name = "n" .. h
  local code, text = sh(string.format("%s sweep submit %s %s %s", q(exe), q(script), q("out=" .. out),
                                      q("name=" .. name)))
  check.eq(code, 0, "submit to " .. out .. ": " .. text)
  local job = text:match("submitted as Slurm array job (%d+)")
  check.truthy(job, text)
  for _, s in ipairs({ "task.sh", "collect.sh" }) do
    local file = out .. "/slurm/" .. s
    local body = assert(dp.read_file(file))
    check.eq(select(2, body:gsub("\n", "")), s == "task.sh" and 4 or 3, s .. ": its own lines, whatever the path: " .. body)
    check.truthy(body:find("\nexec " .. q(exe) .. " 'sweep' " .. q(s == "task.sh" and "task" or "collect") .. " "
                           .. q(out) .. "\n", 1, true), s .. " names the directory quoted: " .. body)
    code, text = check.sh("sh -n " .. q(file))
    check.eq(code, 0, "sh -n " .. file .. ": " .. text)
  end
  -- as Slurm runs them: the task writes the point's file, collect finds every point done
  code, text = sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=%s sh %s", job, q(out .. "/slurm/task.sh")))
  check.eq(code, 0, "task.sh of " .. out .. ": " .. text)
  local r = dp.results.read(out .. "/seed=7.json")
  check.eq(r.seed, 7, "the task ran its point into " .. out)
  check.eq(r.sweep.name, name, "the sweep's name, byte for byte")
  write(fake .. "/sacct.txt", job .. "_0|COMPLETED|0:0|n1\n")
  code, text = sh("sh " .. q(out .. "/slurm/collect.sh"))
  check.eq(code, 0, "collect.sh of " .. out .. ": " .. text)
  -- the N-task point's script: srun's options, then the same words, each quoted; run (srun's
  -- stand-in starts its command once: no MPI here), srun gets exactly those bytes
  local dout = out .. "/dist"
  code, text = sh(string.format("%s sweep submit %s %s %s", q(exe), q(dist_script), q("out=" .. dout), q("name=" .. name)))
  check.eq(code, 0, "submit the 2-task point to " .. dout .. ": " .. text)
  job = text:match("submitted as Slurm array job (%d+) %(tasks 0; 2 tasks each: srun %-n 2%)")
  check.truthy(job, text)
  local file = dout .. "/slurm/task_2tasks.sh"
  local body = assert(dp.read_file(file))
  check.eq(select(2, body:gsub("\n", "")), 4, "task_2tasks.sh: its own lines, whatever the path: " .. body)
  check.truthy(body:find("\nexec 'srun' '--ntasks=2' '--mpi=pmix' '--kill-on-bad-exit=1' " .. q(exe) .. " 'sweep' 'task' "
                         .. q(dout) .. "\n", 1, true), "task_2tasks.sh: srun, the directory quoted: " .. body)
  code, text = check.sh("sh -n " .. q(file))
  check.eq(code, 0, "sh -n " .. file .. ": " .. text)
  os.remove(fake .. "/srun.args")
  code, text = sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=%s sh %s", job, q(file)))
  check.eq(code, 0, "task_2tasks.sh of " .. dout .. ": " .. text)
  check.eq(dp.read_file(fake .. "/srun.args"), table.concat({ "--ntasks=2", "--mpi=pmix", "--kill-on-bad-exit=1", exe,
                                                             "sweep", "task", dout }, "\0") .. "\0",
           "srun got exactly the words, the directory byte for byte")
  check.eq(dp.results.read(dout .. "/seed=7.json").sweep.name, name, "the 2-task point ran into " .. dout)
  check.eq(dp.read_file(pwned), nil, "nothing injected ran (" .. h .. ")")
end

-- control characters: refused in one line, nothing made, nothing run
local controls = { "\n" .. touch .. " #", "\r", "\t", "\27[31m", "\127", "\1" }
for i, c in ipairs(controls) do
  for _, key in ipairs({ "out", "name" }) do
    local dir = string.format("%s/c%d%s/x%s", root, i, key, key == "out" and c or "")
    local code, text = sh(string.format("%s sweep submit %s %s %s", q(exe), q(script), q("out=" .. dir),
                                        q("name=" .. (key == "name" and "n" .. c or "plain"))))
    check.eq(code, 2, key .. " with byte " .. c:byte() .. ": " .. text)
    check.truthy(text:find(key == "out" and "out (the sweep's directory) \"" .. root or "the sweep's name \"n", 1, true)
                 and text:find("\" has a control character (byte " .. c:byte() .. " at position", 1, true),
                 key .. ": " .. text)
    check.truthy(text:find("may hold any character but bytes 0%-31 and 127"), text)
    local first = text:match("^[^\n]*has a control character[^\n]*\n")
    check.truthy(first, "the reason in one line: " .. text)
    check.eq(dp.list_dir(string.format("%s/c%d%s", root, i, key)), nil, "nothing made for " .. key)
  end
end
check.eq(dp.read_file(pwned), nil, "nothing injected ran")

-- the quoting function alone: every byte but NUL comes back through sh as it went in
local all = {}
for b = 1, 255 do all[#all + 1] = string.char(b) end
local every = table.concat(all)
local code, text = check.sh("printf '%s' " .. q(every) .. " | od -An -v -tx1 | tr -d ' \\n'")
check.eq(code, 0, "printf")
check.eq(text, (every:gsub(".", function(ch) return string.format("%02x", ch:byte()) end)), "bytes 1-255 round-trip")
check.raises(function() q("a\0b") end, "cannot pass text with a NUL byte to the shell")

os.execute("rm -rf " .. q(root))
print("test_slurm_scripts: ok")
