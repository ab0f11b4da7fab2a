-- test_build_commit.lua: the commit a result records (environment.git_commit, `dpprof --version`)
-- is the checkout's HEAD as of the build: read at build time, not when CMake was configured (a
-- commit made after configuring used to be recorded as its parent). And cmake/git_commit.cmake,
-- which writes it, on a scratch repository: the short commit when the tree is clean, "-dirty"
-- appended once a tracked file differs (untracked files do not count), "unknown" outside git.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local src = arg[0]:match("(.*/)tests/lua/")
local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 1, seq_len = 8, batch = 1 },
                         method = "vanilla", device = "cpu", iters = 1, warmup = 0 }
local recorded = r.environment.git_commit
local code, head = check.sh(string.format("git -C %q rev-parse --short=12 HEAD", src))
if code == 0 then
  head = head:gsub("%s+$", "")
  check.truthy(recorded == head or recorded == head .. "-dirty",
               string.format("environment.git_commit %s is HEAD %s (rebuild after committing: the binary records "
                             .. "the tree it was built from)", recorded, head))
else
  check.eq(recorded, "unknown", "the commit outside a git checkout")
end
local _, version = check.sh(string.format("%q --version", dp.executable))
check.truthy(version:find(recorded, 1, true), "--version names the commit: " .. version)

-- the generator itself, where cmake and git are at hand (they build dpprof)
if check.sh("cmake --version && git --version") ~= 0 then
  print("test_build_commit: ok (" .. recorded .. "); generator: skipped, no cmake or git")
  return
end
local dir = os.tmpname()
os.remove(dir)
assert(dp.mkdir_p(dir .. "/repo"))
local function generate()
  local out = dir .. "/commit.c"
  local rc, text = check.sh(string.format("cmake -DSRC=%q -DOUT=%q -P %q", dir .. "/repo", out,
                                          src .. "cmake/git_commit.cmake"))
  check.eq(rc, 0, "git_commit.cmake: " .. text)
  local f = assert(io.open(out))
  local body = f:read("a")
  f:close()
  return body:match('return "([^"]*)"')
end
check.eq(generate(), "unknown", "outside a git checkout")
local function git(args)
  local rc, text = check.sh(string.format("git -C %q -c user.name=t -c user.email=t@example.org %s", dir .. "/repo", args))
  check.eq(rc, 0, "git " .. args .. ": " .. text)
  return (text:gsub("%s+$", ""))
end
git("init -q")
local f = assert(io.open(dir .. "/repo/a.txt", "w"))
f:write("one\n")
f:close()
git("add a.txt")
git("commit -q -m one")
local short = git("rev-parse --short=12 HEAD")
check.eq(generate(), short, "a clean tree")
f = assert(io.open(dir .. "/repo/b.txt", "w")) -- untracked: still clean
f:write("x\n")
f:close()
check.eq(generate(), short, "an untracked file")
f = assert(io.open(dir .. "/repo/a.txt", "w"))
f:write("two\n")
f:close()
check.eq(generate(), short .. "-dirty", "a tracked file changed")
os.execute(string.format("rm -rf %q", dir))
print("test_build_commit: ok (" .. recorded .. ")")
