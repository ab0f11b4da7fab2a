-- test_files.lua: the files dpprof writes and reads for scripts never go through a planted link,
-- never replace a device, FIFO or directory, never hang on a FIFO and never read without a cap:
-- dpprof.read_file / write_file, results.write, trace files (trace="/dev/full" used to replace the
-- device with a JSON file when run as root), `dpprof fit out=link.json` (it replaced the link),
-- model:save's config.json and safetensors, dpprof.model.load's config.json (a FIFO hung it, a link
-- to /dev/zero read until memory ran out) and token files.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local root = string.format("/tmp/dpprof-test-files-%d-%d", dp.pid(), os.time())
os.execute("rm -rf " .. root)
assert(dp.mkdir_p(root))
local function sh(cmd) check.eq(os.execute(cmd), true, cmd) end
local function is_link(path) return os.execute(string.format("test -L %q", path)) == true end
local victim = root .. "/victim.txt"
assert(dp.write_file(victim, "precious"))
local link = root .. "/link.json"
sh(string.format("ln -s %q %q", victim, link))
local fifo = root .. "/fifo.json"
sh(string.format("mkfifo %q", fifo))
local zero = root .. "/zero.json"
sh(string.format("ln -s /dev/zero %q", zero))

-- the bindings
check.eq(dp.write_file(root .. "/a.json", "{}"), true, "a plain write")
check.eq(dp.read_file(root .. "/a.json"), "{}", "and read")
local ok, why = dp.write_file(link, "x")
check.eq(ok, nil, "write through a link")
check.truthy(why:find("link.json: refusing to write: it is a symbolic link", 1, true), why)
check.eq(dp.read_file(victim), "precious", "the link's target untouched")
check.truthy(is_link(link), "the link left alone")
ok, why = dp.write_file(fifo, "x")
check.truthy(not ok and why:find("it is a FIFO", 1, true), "write over a FIFO: " .. tostring(why))
ok, why = dp.read_file(fifo)
check.truthy(not ok and why:find("fifo.json: cannot read: a FIFO, not a regular file", 1, true), tostring(why))
ok, why = dp.read_file(zero)
check.truthy(not ok and why:find("a character device", 1, true), "a link to /dev/zero: " .. tostring(why))
ok, why = dp.read_file(root .. "/a.json", 1)
check.truthy(not ok and why:find("2 bytes, more than the 1 allowed", 1, true), "the cap: " .. tostring(why))
check.eq(dp.read_file(link), "precious", "reading follows a link to a regular file")
check.eq(dp.writable(root .. "/new.json"), true, "a new name is writable")
check.eq(dp.writable(root .. "/a.json"), true, "a regular file is writable")
check.eq(dp.writable("/dev/full"), nil, "/dev/full is not")
do -- a name that cannot be written: refused by the check, not by the write after the work (issue 26)
  local function why_not(p)
    local w, msg = dp.writable(p)
    check.eq(w, nil, "'" .. p .. "' refused")
    return msg
  end
  check.eq(why_not(""), "cannot write a file with an empty name", "an empty name")
  check.eq(why_not(root .. "/missing/x.json"),
           root .. "/missing/x.json: cannot write: the directory " .. root .. "/missing does not exist", "a missing directory")
  check.eq(why_not(root .. "/"), root .. "/: cannot write: the name is a directory", "a directory's name")
end
check.raises(function() dp.results.write(link, { a = 1 }) end, { "refusing to write: it is a symbolic link" })
check.raises(function() dp.results.read(fifo) end, { "a FIFO, not a regular file" })

-- trace files: refused before the experiment runs
local cfg = { model = { vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, batch = 2 }, device = "plan",
              iters = 1, warmup = 0, snapshots = "none", method = "ghost" }
cfg.trace = "/dev/full"
check.raises(function() dp.experiment(cfg) end, { "dpprof.experiment: trace: /dev/full: refusing to write: it is a character device" })
local st = io.popen("stat -c %F /dev/full"):read("l")
check.eq(st, "character special file", "/dev/full is still the device")
cfg.trace = link
check.raises(function() dp.experiment(cfg) end, { "trace: " .. link .. ": refusing to write: it is a symbolic link" })
for _, bad in ipairs({ "", root .. "/missing/run.trace.json" }) do -- before the run, in one line
  cfg.trace = bad
  local err = check.raises(function() dp.experiment(cfg) end, { "dpprof.experiment: trace: " })
  check.truthy(not err:find("\n", 1, true), "one line: " .. err)
end
cfg.trace = root .. "/run.trace.json"
local r = dp.experiment(cfg)
check.eq(r.status, "ok", "a trace to a plain name")
check.truthy(dp.read_file(cfg.trace):find("traceEvents", 1, true), "the trace written")

-- dpprof fit out=
local code, text = check.sh(string.format("%q fit preset=small method=ghost vary=layers budget_gb=1 hi=4 out=%q",
                                          dp.executable, link))
check.eq(code, 2, "fit out=link.json: " .. text)
check.truthy(text:find("out: " .. link .. ": refusing to write: it is a symbolic link", 1, true), text)
check.eq(dp.read_file(victim), "precious", "fit left the link's target alone")
check.truthy(is_link(link), "and the link")

-- checkpoints: model:save never writes through a link; model.load refuses a FIFO or device
local m = dp.model{ vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, device = "cpu" }
local saved = root .. "/ckpt"
assert(dp.mkdir_p(saved))
sh(string.format("ln -s %q %q", victim, saved .. "/config.json"))
check.raises(function() m:save(saved) end, { "config.json: refusing to write: it is a symbolic link" })
check.eq(dp.read_file(victim), "precious", "save left the link's target alone")
os.remove(saved .. "/config.json")
sh(string.format("ln -s %q %q", victim, saved .. "/model.safetensors"))
check.raises(function() m:save(saved) end, { "model.safetensors: refusing to write: it is a symbolic link" })
check.eq(dp.read_file(victim), "precious", "nor the weights' link")
os.remove(saved .. "/model.safetensors")
m:save(saved)
check.truthy(dp.read_file(saved .. "/config.json"), "a plain save")
for _, bad in ipairs({ { "fifo", "mkfifo %q", "a FIFO, not a regular file" },
                       { "zero", "ln -s /dev/zero %q", "a character device, not a regular file" } }) do
  os.remove(saved .. "/config.json")
  sh(string.format(bad[2], saved .. "/config.json"))
  local t0 = dp.clock()
  check.raises(function() dp.model.load(saved, { device = "cpu", seq_len = 8 }) end,
               { "config.json: cannot read: " .. bad[3] }, "config.json as a " .. bad[1])
  check.truthy(dp.clock() - t0 < 5, "refused at once")
end
m:free()

-- token files
local tokens = root .. "/tokens.bin"
sh(string.format("mkfifo %q", tokens))
local tm = dp.model{ vocab = 64, hidden = 16, layers = 1, heads = 2, seq_len = 8, device = "cpu" }
check.raises(function() dp.batch{ model = tm, file = tokens } end, { "token file", "a FIFO, not a regular file" })
tm:free()

os.execute("rm -rf " .. root)
print("test_files: ok")
