-- test_scripts.lua: the scripts of experiments/ as a user runs them.
--   * every script answers --help with what it does and the common keys (profile= threads=
--     device= out= methods=/method=), each either described or said not to be taken, and why;
--   * a key a script does not take is refused naming the valid ones, before anything runs;
--   * method= is methods=, and profile= and threads= reach every run of the sweep;
--   * a copy of llama3_lora.lua in another folder, run from a third one, still finds the
--     repository's fixtures (tests/fixtures/llama3_8b) and runs on the plan device;
--   * every command of README.md and docs/*.md that runs a script of experiments/ gives it only
--     keys it takes (the keys its --help lists);
--   * the README's five-minute path is true: its `dpprof fit` answers are what the binary
--     answers, and its sweep command draws the chart the README shows (a small PNG).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local exe = dp.executable
local experiments = arg[0]:match("(.*/)") .. "../../experiments/"
local base = string.format("/tmp/dpprof-test-scripts-%d-%d", dp.pid(), os.time())
assert(dp.mkdir_p(base))

local function run(dir, script, args)
  return check.sh(string.format("cd %q && %q run %q %s", dir, exe, script, args or ""))
end

-- --help: every script, exit 0, the common keys each described or refused with a reason
local scripts = {}
for _, name in ipairs(dp.list_dir(experiments)) do
  if name:match("%.lua$") then scripts[#scripts + 1] = name end
end
table.sort(scripts)
check.truthy(#scripts >= 12, "the scripts of experiments/ (" .. #scripts .. ")")
for _, name in ipairs(scripts) do
  local code, text = run(base, experiments .. name, "--help")
  check.eq(code, 0, name .. " --help: " .. text)
  check.truthy(text:find("^" .. name:gsub("%p", "%%%0") .. ": "), name .. " --help starts with what it does: " .. text)
  check.truthy(text:find("\nkeys (dpprof run ", 1, true), name .. " --help lists its keys: " .. text)
  for _, key in ipairs({ "profile", "threads", "device", "out", "methods" }) do
    local line = text:match("\n  " .. key .. " +([^\n]*)")
    check.truthy(line and (line:find("^" .. key .. "=") or line:find("^not taken here: %S")),
                 name .. " --help: " .. key .. " described or refused with a reason: " .. tostring(line))
  end
  check.eq(dp.list_dir(base .. "/results"), nil, name .. " --help ran nothing")
end
-- -h and help=true are the same
local code, text = run(base, experiments .. "default.lua", "-h")
check.eq(code, 0, "-h")
check.truthy(text:find("methods=a,b (or method=a)", 1, true), "-h prints the keys: " .. text)

-- A key not taken: one line naming it and the valid keys; a common key a script cannot use says why.
code, text = run(base, experiments .. "default.lua", "metods=ghost")
check.eq(code, 2, "misspelt key: " .. text)
check.eq(text, "dpprof: default.lua: unknown argument 'metods' (valid: profile, threads, device, out, methods, method, "
               .. "preset, arch, vocab, hidden, layers, heads, kv_heads, head_dim, seq_len, batch, mlp_ratio, ffn, "
               .. "tie_head, dtype, rope_theta, master_weights, clipping, clip_fn, iters, warmup, timeout, seed, physical, "
               .. "all, parallel, repeats)\n",
         "names the key and the valid ones (the preset's model and dp words: the schema's fit words)")
code, text = run(base, experiments .. "bench_privacy.lua", "device=cpu steps=10")
check.eq(code, 2, "device= on bench_privacy: " .. text)
check.truthy(text:find("bench_privacy.lua: device= is not taken here: it times the privacy accountants alone", 1, true)
             and text:find("(valid: out, accountants, steps, repeats)", 1, true), "says why and the valid keys: " .. text)
code, text = run(base, experiments .. "default.lua", "method=ghost methods=bk")
check.eq(code, 2, "method= and methods=: " .. text)
check.truthy(text:find("give method= or methods=, not both", 1, true), "both refused: " .. text)
check.eq(dp.list_dir(base .. "/results"), nil, "nothing ran")

-- method=, profile= and threads= reach the runs (default.lua, a tiny model on the CPU)
local out = base .. "/common"
code, text = run(base, experiments .. "default.lua",
                 "method=ghost profile=ops threads=1 device=cpu vocab=64 hidden=16 layers=1 heads=2 seq_len=8 batch=2 "
                 .. "iters=1 warmup=0 out=" .. out)
check.eq(code, 0, "default.lua with the common keys: " .. text)
local files = {}
for _, f in ipairs(dp.list_dir(out)) do
  if f:match("^method=.*%.json$") then files[#files + 1] = f end
end
check.eq(#files, 1, "method=ghost: one point, not the default three: " .. table.concat(files, " "))
local r = dp.results.read(out .. "/" .. files[1])
check.eq(r.config.method, "ghost", "the method given")
check.eq(r.config.profile, "ops", "profile= reached the run")
check.truthy(r.profile and #r.profile.ops > 0, "the run was profiled")
check.eq(r.environment.threads, 1, "threads= reached the run")

-- A copy of llama3_lora.lua in another folder, run from a third: the fixtures are found from
-- dpprof's own location (the copy's has none), and the plan device runs it.
local copy_dir, cwd = base .. "/copied", base .. "/elsewhere"
assert(dp.mkdir_p(copy_dir))
assert(dp.mkdir_p(cwd))
assert(dp.write_file(copy_dir .. "/llama3_lora.lua", assert(dp.read_file(experiments .. "llama3_lora.lua"))))
code, text = run(cwd, copy_dir .. "/llama3_lora.lua", "seq_lens=128 batches=1 physicals=1 ranks=8 method=flash_clip "
                                                      .. "out=" .. base .. "/l3")
check.eq(code, 0, "a copied llama3_lora.lua: " .. text)
local l3 = dp.results.read(base .. "/l3/method=flash_clip,lora_rank=8,batch=1,max_physical_batch_size=1,seq_len=128.json")
check.eq(l3.status, "ok", "the plan point ran")
check.eq(l3.predicted, true, "on the plan device")
check.eq(l3.config.model.kv_heads, 8, "Llama-3.1-8B's config.json: grouped-query attention")
check.eq(l3.config.model.hidden, 4096, "Llama-3.1-8B's config.json: its width")
check.truthy(l3.config.model.path:find("tests/fixtures/llama3_8b$"), "the repository's fixture: " .. l3.config.model.path)

-- Every script command in the README and docs/ uses keys the script takes: in each code span
-- (inline, or a fenced block's line with its continuations), the words key=value after "NAME.lua".
local root = arg[0]:match("(.*/)") .. "../../"
local keys_of = {}
for _, name in ipairs(scripts) do
  local _, help = run(base, experiments .. name, "--help")
  local list = help:match("\nkeys %(dpprof run [^)]*%): ([^\n]*)")
  keys_of[name] = {}
  for k in list:gmatch("[%w_]+") do keys_of[name][k] = true end
end
local docs = { "README.md" }
for _, f in ipairs(dp.list_dir(root .. "docs")) do
  if f:match("%.md$") then docs[#docs + 1] = "docs/" .. f end
end
local given = 0
local sbatch = {} -- `dpprof sweep submit SCRIPT` takes these itself, the rest go to the script
for _, k in ipairs(require("dpprof.slurm").OPTION_KEYS) do sbatch[k] = true end
local function check_span(doc, span)
  local submit = span:find("sweep submit", 1, true) ~= nil
  for name, rest in span:gmatch("([%w_]+%.lua)(.*)") do
    if keys_of[name] then
      for k in rest:gmatch("%f[%w_]([%a_][%w_]*)=") do
        given = given + 1
        check.truthy(keys_of[name][k] or (submit and sbatch[k]),
                     string.format("%s: %s is given %s=, which it does not take", doc, name, k))
      end
    end
  end
end
for _, doc in ipairs(docs) do
  local text = assert(dp.read_file(root .. doc))
  local prose = text:gsub("\n```[^\n]*\n(.-)\n```", function(block)
    for line in (block:gsub("\\\n", " ") .. "\n"):gmatch("([^\n]*)\n") do check_span(doc, line) end
    return "\n"
  end)
  for span in prose:gmatch("`([^`]+)`") do check_span(doc, span) end
end
check.truthy(given >= 40, "the docs' script commands were read (" .. given .. " keys)")

-- The README's five-minute path: its fit command gives the answers printed under it, and its
-- sweep command draws the chart it shows.
local readme = assert(dp.read_file(root .. "README.md"))
-- It starts with the two commands, and names no method's inner choices before it has explained
-- the methods (a newcomer meets bk, twopass and mixed only in their table).
local first = readme:match("^# dpprof\n[^`]*```sh\n(.-)\n```")
check.truthy(first and first:find("^scripts/run%-default%.sh ") and first:find("\nscripts/test%.sh "),
             "the README starts with the two commands: " .. tostring(first))
check.truthy(readme:find("`.ci/run` runs exactly the second command", 1, true), "and says .ci/run runs the second")
local before = readme:match("^(.-)\n## The methods\n")
check.truthy(before, "the README has its methods section")
for _, word in ipairs({ "bk", "twopass", "mixed" }) do
  check.truthy(not before:find("%f[%w_]" .. word .. "%f[^%w_]"), "'" .. word .. "' before the methods are explained")
end
local fit_cmd, fit_text = readme:match("\n%$ build/dpprof (fit [^\n]+)\n(.-)\n```")
check.truthy(fit_cmd, "the README shows a dpprof fit command and its output")
code, text = check.sh(string.format("cd %q && %q %s", root, exe, fit_cmd))
check.eq(code, 0, "the README's fit command: " .. text)
local rows = 0
for method, ck, largest in fit_text:gmatch("\n  ([%w_]+ ?%*?)%s+(%a+)%s+(%d+)%s") do
  rows = rows + 1
  local pat = "\n  " .. method:gsub("%*", "%%*") .. "%s+" .. ck .. "%s+" .. largest .. "%s"
  check.truthy(text:find(pat), string.format("README: %s %s fits %s; the binary says:\n%s", method, ck, largest, text))
end
check.truthy(rows >= 2, "the README's fit table has its rows (" .. rows .. ")")
-- The README's fsdp tables: its command's output, row for row (plan runs, seconds)
local fsdp_cmd = readme:match("\n%$ build/dpprof (run experiments/fsdp_llama3%.lua[^\n]*)\n")
check.truthy(fsdp_cmd, "the README shows the fsdp command")
code, text = check.sh(string.format("cd %q && %q %s out=%q", root, exe, fsdp_cmd, base .. "/fsdp"))
check.eq(code, 0, "the README's fsdp command: " .. text)
local table_rows = 0
for line in assert(dp.read_file(base .. "/fsdp/fsdp_llama3.md")):gmatch("[^\n]+") do
  if line:find("^| ") or line:find("^%d") then
    table_rows = table_rows + (line:find("^| ") and 1 or 0)
    check.truthy(readme:find("\n" .. line .. "\n", 1, true), "README's fsdp tables lack the script's line: " .. line)
  end
end
check.truthy(table_rows >= 40, "the fsdp tables have their rows (" .. table_rows .. ")")
local sweep_cmd = readme:match("\nbuild/dpprof (run experiments/sweep_seqlen%.lua[^\n]*)\n")
check.truthy(sweep_cmd, "the README shows its sweep command")
code, text = check.sh(string.format("cd %q && %q %s out=%q", root, exe, sweep_cmd, base .. "/sweep"))
check.eq(code, 0, "the README's sweep command: " .. text)
local img = readme:match("%!%[[^%]]*%]%((docs/img/[^%)]+%.png)%)")
check.truthy(img, "the README shows a chart from docs/img")
check.truthy(img:find("sweep_seq_len", 1, true), "the chart is the sweep's: " .. img)
local drawn = assert(dp.read_file(base .. "/sweep/sweep_seq_len.png"), "the sweep drew sweep_seq_len.png")
local shown = assert(dp.read_file(root .. img), "the README's image is committed: " .. img)
check.eq(shown:sub(1, 8), "\x89PNG\r\n\26\n", "a PNG")
check.truthy(#shown < 200 * 1024, "the README's chart stays small: " .. #shown .. " bytes")
check.truthy(#drawn > 10 * 1024, "the sweep drew a chart with content: " .. #drawn .. " bytes")

os.execute("rm -rf '" .. base .. "'")
print("test_scripts: ok")
