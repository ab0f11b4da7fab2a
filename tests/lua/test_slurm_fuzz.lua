-- test_slurm_fuzz.lua: fuzzing what a Slurm sweep reads and writes from outside (seeded, so a
-- failure repeats; DPPROF_FUZZ_SEED and DPPROF_FUZZ_N change the seed and the count).
--   Manifests: a real sweep's .dpprof-sweep.json (one plain, one with repeats = 2, one of a
--   1-task and a 2-task array: points distributed over world_size 1 and 2), mutated in
--   its structure (a field replaced by a hostile value, removed, a list grown or shrunk) and in
--   its bytes (flips, inserts, cuts, truncation), through `dpprof sweep status` and `collect`
--   (in this process, Slurm's tools stubbed: sacct knows every task). Never a Lua error: either
--   they work, or exit 2 with one line naming the manifest (and, for a well-formed JSON
--   document, the field and what is valid); nothing is ever written outside the sweep's
--   directory. Under the ASan build this drives the JSON decoder too.
--   Scripts: random bytes (quotes, $(), backticks, ;, newlines, non-ASCII...) as the
--   directory and executable a generated script names: either refused (a control character),
--   or the script passes `sh -n` and, run, hands its stand-in executable exactly those bytes
--   and runs nothing else; every other script is an N-task point's, whose exec is srun's (a
--   stand-in that records its words the same way). A few go through `dpprof sweep submit` whole.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local slurm = require("dpprof.slurm")
local json = dp.json
local q = slurm.quote

local seed = math.tointeger(tonumber(os.getenv("DPPROF_FUZZ_SEED") or "")) or 26
local count = math.tointeger(tonumber(os.getenv("DPPROF_FUZZ_N") or "")) or 1280
math.randomseed(seed)

-- of one length always, so that a seed mutates the same bytes in every run
local root = string.format("/tmp/dpprof-test-slurm-fuzz-%010d-%012d", dp.pid(), os.time())
os.execute("rm -rf " .. q(root))
local env = check.fake_slurm(root .. "/bin")
local function write(path, text) assert(dp.write_file(path, text)) end
local exe = dp.executable

-- three real sweeps, deep inside root: a manifest that sent a write elsewhere would show there
local sweeps = {}
for _, spec in ipairs({ { name = "plain", vary = "seed = { 1, 2, 3 }", repeats = 1 },
                        { name = "rep", vary = "seed = { 1, 2 }", repeats = 2 },
                        { name = "dist", vary = "world_size = { 1, 2 }", repeats = 1,
                          base = 'device = "cpu", distributed = { strategy = "ddp" }' } }) do
  local script = string.format("%s/%s.lua", root, spec.name)
  write(script, string.format([[
local dp = require("dpprof")
dp.sweep{ base = { %s }, vary = { %s }, out = dp.args.out, backend = "slurm", repeats = %d,
          run = function(cfg, vary) return { seed = vary.seed } end, slurm = { time = 5 } }
]], spec.base or "", spec.vary, spec.repeats))
  local dir = string.format("%s/a/b/%s", root, spec.name)
  local code, text = check.sh(string.format("%s %s sweep submit %s out=%s", env, q(exe), q(script), q(dir)))
  check.eq(code, 0, "submit " .. spec.name .. ": " .. text)
  local jobs = {}
  for j in text:gmatch("(%d+) %(tasks ") do jobs[#jobs + 1] = j end
  check.eq(#jobs, spec.name == "dist" and 2 or 1, "the arrays of " .. spec.name .. ": " .. text)
  local job = jobs[1]
  -- task 0 runs: the first point (or its first run) has its file
  code, text = check.sh(string.format("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=%s %s sweep task %s", job, q(exe), q(dir)))
  check.eq(code, 0, "task 0 of " .. spec.name .. ": " .. text)
  local base = assert(dp.read_file(dir .. "/" .. slurm.MANIFEST_FILE))
  local lines = {}
  for _, j in ipairs(jobs) do
    for t = 0, 3 do
      lines[#lines + 1] = string.format("%s_%d|%s|0:0|n%d", j, t, t == 1 and "OUT_OF_MEMORY" or t == 2 and "RUNNING"
                                        or "COMPLETED", t)
    end
  end
  local files = {}
  for _, f in ipairs(assert(dp.list_dir(dir))) do files[f] = true end
  local runs = {}
  for _, f in ipairs(dp.list_dir(dir .. "/runs") or {}) do runs[f] = true end
  sweeps[#sweeps + 1] = { dir = dir, base = base, sacct = table.concat(lines, "\n") .. "\n", files = files, runs = runs }
end
check.eq(#assert(dp.list_dir(root .. "/a")), 1, "root/a holds b alone")

-- Slurm's tools, stubbed: sacct knows the current sweep's tasks; scontrol knows nothing
local sacct_text = ""
local shell = require("dpprof.slurm_shell") -- where every part of dpprof.slurm runs its commands
local real_command = shell.command
shell.command = function(argv)
  if argv[1] == "sacct" then return 0, sacct_text end
  return 1, "slurm_load_jobs error: Invalid job id specified"
end

-- hostile values a field may be given
local function hostile()
  local pool = {
    function() return json.null end, function() return 0 end, function() return -1 end, function() return 1 end,
    function() return 2 end, function() return 1.5 end, function() return math.maxinteger end,
    function() return math.mininteger end, function() return 1e308 end, function() return true end,
    function() return "" end, function() return "." end, function() return ".." end,
    function() return "../../../escaped" end, function() return "../escaped.json" end, function() return "/abs" end,
    function() return "a\nb" end, function() return "seed=2" end, function() return "seed=2.json" end,
    function() return "100" end, function() return "fnv1a64:0000000000000000" end, function() return "x" end,
    function() return string.rep("z", 5000) end, function() return json.object() end, function() return json.array() end,
    function() return json.array({ 1, 2 }) end, function() return json.array({ "a=b" }) end,
    function() return json.object({ time = "soon" }) end, function() return json.array({ json.object() }) end,
  }
  return pool[math.random(#pool)]()
end

-- every (container, key) of a decoded document, the document itself as ({doc}, 1)
local function places(v, out, parent, key)
  out[#out + 1] = { parent, key }
  if type(v) == "table" then
    for k, c in pairs(v) do places(c, out, v, k) end
  end
  return out
end

local ARRAY_MT = getmetatable(json.array())
local function structural(text)
  local doc = { json.decode(text, "base") }
  for _ = 1, math.random(1, 3) do
    local all = places(doc[1], {}, doc, 1)
    local at = all[math.random(#all)]
    local parent, key = at[1], at[2]
    local r = math.random(10)
    if r <= 6 then
      parent[key] = hostile()
    elseif r <= 8 and parent ~= doc then
      if getmetatable(parent) == ARRAY_MT then table.remove(parent, key) else parent[key] = nil end
    elseif type(parent[key]) == "table" then
      local t = parent[key]
      if getmetatable(t) == ARRAY_MT then
        if #t > 0 and math.random(2) == 1 then t[#t + 1] = t[math.random(#t)] else t[#t + 1] = hostile() end
      else
        t["extra" .. math.random(9)] = hostile()
      end
    end
  end
  local ok, out = pcall(json.encode, doc[1], { indent = true })
  return ok and out or nil
end

local function bytes(text)
  local r = math.random(5)
  local i = math.random(#text)
  if r == 1 then
    return text:sub(1, i - 1) .. string.char(math.random(0, 255)) .. text:sub(i + 1)
  elseif r == 2 then
    local junk = {}
    for k = 1, math.random(8) do junk[k] = string.char(math.random(0, 255)) end
    return text:sub(1, i) .. table.concat(junk) .. text:sub(i + 1)
  elseif r == 3 then
    return text:sub(1, i - 1) .. text:sub(i + math.random(1, 40))
  elseif r == 4 then
    return text:sub(1, i)
  end
  local j = math.random(#text)
  return text:sub(1, i) .. text:sub(j, j + math.random(1, 60)) .. text:sub(i + 1)
end

local function clear(dir, keep)
  for _, f in ipairs(dp.list_dir(dir) or {}) do
    if not keep[f] and f ~= "runs" and f ~= "slurm" then os.remove(dir .. "/" .. f) end
  end
end

-- status and collect on one manifest text: never a Lua error; 2 with one line naming the
-- manifest (a field too when the text is JSON); nothing written outside the directory
local captured
local fake_stderr = { write = function(self, ...)
  for _, s in ipairs({ ... }) do captured[#captured + 1] = tostring(s) end
  return self
end }
local real_stderr, real_print = io.stderr, print
local stats = { ok = 0, refused = 0, structural = 0, bytes = 0, skipped = 0 }
local function run_one(sw, text, is_json)
  write(sw.dir .. "/" .. slurm.MANIFEST_FILE, text)
  clear(sw.dir, sw.files)
  clear(sw.dir .. "/runs", sw.runs)
  sacct_text = sw.sacct
  for _, what in ipairs({ "status", "collect" }) do
    captured = {}
    io.stderr, print = fake_stderr, function() end
    local ok, code = pcall(slurm[what], sw.dir, function() end)
    io.stderr, print = real_stderr, real_print
    local err = table.concat(captured)
    if not ok then
      error(string.format("seed %d: %s raised a Lua error: %s\n-- the manifest:\n%s", seed, what, tostring(code), text), 0)
    end
    check.truthy(code == 0 or code == 1 or code == 2, what .. " returns an exit status, got " .. tostring(code))
    if code == 2 then
      local path = sw.dir .. "/" .. slurm.MANIFEST_FILE
      if not (err:find("^dpprof sweep " .. what .. ": ") and err:find(path, 1, true) and select(2, err:gsub("\n", "")) == 1
              and err:sub(-1) == "\n" and not err:find("%.lua:%d+:") and not err:find("attempt to")) then
        error(string.format("seed %d: %s's refusal is not one line naming %s: %q\n-- the manifest:\n%s", seed, what,
                            path, err, text), 0)
      end
      if is_json and not (err:find(": field [%w_%.%[%]]+ is ") and err:find("; valid: ", 1, true)
                          or err:find("not a dpprof sweep manifest (its field format is", 1, true)
                          or err:find(": field slurm: ", 1, true)) then
        error(string.format("seed %d: %s's refusal names no field: %q\n-- the manifest:\n%s", seed, what, err, text), 0)
      end
      stats.refused = stats.refused + 1
    else
      stats.ok = stats.ok + 1
    end
  end
end

for i = 1, count do
  local sw = sweeps[i % #sweeps + 1]
  local text
  if i % 2 == 0 then
    text = structural(sw.base)
    if text then stats.structural = stats.structural + 1 else stats.skipped = stats.skipped + 1 end
  else
    text = bytes(sw.base)
    stats.bytes = stats.bytes + 1
  end
  if text then
    local is_json = pcall(json.decode, text, "x")
    run_one(sw, text, is_json)
  end
end
-- nothing left the sweeps' directories
local a = assert(dp.list_dir(root .. "/a"))
check.eq(#a == 1 and a[1], "b", "nothing written beside root/a/b: " .. table.concat(a, " "))
local b = assert(dp.list_dir(root .. "/a/b"))
table.sort(b)
check.eq(table.concat(b, " "), "dist plain rep", "nothing written beside the sweeps: " .. table.concat(b, " "))
check.truthy(stats.ok > count / 4 and stats.refused > count / 4,
             string.format("both outcomes are exercised: %d worked, %d refused", stats.ok, stats.refused))
print(string.format("manifests: %d mutants (%d structural, %d in bytes, %d not encodable), %d runs worked, %d refused",
                    count, stats.structural, stats.bytes, stats.skipped, stats.ok, stats.refused))
shell.command = real_command

-- Scripts: random text as the directory and the executable a generated script runs. The
-- stand-in executable writes each argument it gets, NUL-terminated, to $ARGS_OUT.
local canary = root .. "/canary"
local standin = root .. "/stand in 'exe' $(x)"
write(standin, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$ARGS_OUT\"\n")
os.execute("chmod +x " .. q(standin))
local pieces = { "'", '"', "\\", "$(", ")", "`", ";", "&", "|", "#", "\n", "\r", "\t", "*", "?", "[", "]", "~", " ",
                 "%", "{", "}", "$IFS", "ü", "\255", "\0", "\27", "-", "!", "<", ">", "touch " .. canary,
                 "; touch " .. canary .. " #", "\ntouch " .. canary .. "\n" }
local function random_text()
  local parts = {}
  for k = 1, math.random(1, 8) do
    parts[k] = math.random(3) == 1 and string.char(math.random(1, 255)) or pieces[math.random(#pieces)]
  end
  return table.concat(parts)
end
local sdir = root .. "/scripts"
assert(dp.mkdir_p(sdir .. "/bin"))
write(sdir .. "/bin/srun", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$ARGS_OUT\"\n")
os.execute("chmod +x " .. q(sdir .. "/bin/srun"))
local srun_words = slurm.srun_argv(slurm.options({}), { ntasks = 2 }, standin, "D")
local srun_prefix = table.concat(srun_words, "\0", 2, #srun_words - 4) .. "\0"
local cases, refused = {}, 0
local n_scripts = math.max(50, count // 4)
for i = 1, n_scripts do
  local dir = "/sweep/" .. random_text()
  local ok, err = pcall(slurm.check_text, "out (the sweep's directory)", dir)
  if not ok then
    check.truthy(dir:find("[%z\1-\31\127]") and tostring(err):find("has a control character", 1, true),
                 "refused only for a control character: " .. tostring(err))
    refused = refused + 1
  else
    check.eq(dir:find("[%z\1-\31\127]"), nil, "a control character passed the check")
    cases[#cases + 1] = dir
    local argv = #cases % 2 == 0 and slurm.srun_argv(slurm.options({}), { ntasks = 2 }, standin, dir)
                 or { standin, "sweep", "task", dir }
    write(string.format("%s/%d.sh", sdir, #cases), slurm.script_text("a comment", argv))
  end
end
-- one shell runs them all: sh -n, then each for real
local code, text = check.sh(string.format(
  "cd %s && PATH=\"$PWD/bin:$PATH\" && i=1; while [ $i -le %d ]; do sh -n $i.sh || echo \"syntax $i\"; ARGS_OUT=$i.args sh $i.sh || echo \"ran $i\"; "
  .. "i=$((i + 1)); done", q(sdir), #cases))
check.eq(code, 0, "the scripts ran: " .. text)
check.eq(text, "", "every script passes sh -n and runs")
for i, dir in ipairs(cases) do
  local got = dp.read_file(string.format("%s/%d.args", sdir, i))
  if i % 2 == 0 then
    check.eq(got, srun_prefix .. standin .. "\0sweep\0task\0" .. dir .. "\0",
             "script " .. i .. " handed srun its options, the executable and exactly the path")
  else
    check.eq(got, "sweep\0task\0" .. dir .. "\0", "script " .. i .. " handed its executable exactly the path")
  end
end
check.eq(dp.read_file(canary), nil, "no injected text ran")
check.truthy(#cases > 10 and refused > 10, string.format("both outcomes: %d scripts, %d refused", #cases, refused))
print(string.format("scripts: %d random paths, %d refused (control characters), %d ran as written", n_scripts, refused,
                    #cases))

-- and whole, through dpprof sweep submit: a random name is refused or runs nothing injected
write(root .. "/named.lua", [[
local dp = require("dpprof")
dp.sweep{ vary = { seed = { 1 } }, out = dp.args.out, name = dp.args.name, backend = "slurm",
          run = function() return {} end }
]])
for i = 1, 12 do
  local name
  repeat name = random_text() until not name:find("[%z=]") and tonumber(name) == nil and name ~= "true" and name ~= "false"
  local out = string.format("%s/named/%d", root, i)
  code, text = check.sh(string.format("%s %s sweep submit %s %s %s", env, q(exe), q(root .. "/named.lua"), q("out=" .. out),
                                      q("name=" .. name)))
  if name:find("[\1-\31\127]") then
    check.eq(code, 2, "a name with a control character: " .. text)
    check.truthy(text:find("the sweep's name \"", 1, true) and text:find("has a control character", 1, true), text)
  else
    check.eq(code, 0, "submit named " .. name .. ": " .. text)
    for _, s in ipairs({ "task.sh", "collect.sh" }) do
      code, text = check.sh("sh -n " .. q(out .. "/slurm/" .. s))
      check.eq(code, 0, s .. ": " .. text)
    end
    code, text = check.sh(string.format("SLURM_ARRAY_TASK_ID=0 sh %s", q(out .. "/slurm/task.sh")))
    check.eq(code, 0, "task.sh: " .. text)
    check.eq(dp.results.read(out .. "/seed=1.json").sweep.name, name, "the name, byte for byte")
  end
end
check.eq(dp.read_file(canary), nil, "no injected text ran")

os.execute("rm -rf " .. q(root))
print("test_slurm_fuzz: ok")
