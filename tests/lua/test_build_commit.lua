-- test_build_commit.lua: the commit a result records (environment.git_commit, `dpprof --version`)
-- is the checkout's HEAD as of the build, with "-dirty" exactly when tracked files differ from it:
-- read at build time, not when CMake was configured (a commit made after configuring used to be
-- recorded as its parent). Outside a git checkout it is "unknown".
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local src = arg[0]:match("(.*/)tests/lua/")
local r = dp.experiment{ model = { arch = "gpt", vocab = 64, hidden = 16, layers = 1, heads = 1, seq_len = 8, batch = 1 },
                         method = "vanilla", device = "cpu", iters = 1, warmup = 0 }
local recorded = r.environment.git_commit
local code, head = check.sh(string.format("git -C %q rev-parse --short=12 HEAD", src))
if code ~= 0 then
  check.eq(recorded, "unknown", "the commit outside a git checkout")
  print("test_build_commit: ok (not a git checkout)")
  return
end
head = head:gsub("%s+$", "")
local dirty = check.sh(string.format("git -C %q diff --quiet HEAD --", src)) ~= 0
check.eq(recorded, head .. (dirty and "-dirty" or ""),
         "environment.git_commit (rebuild after committing or editing: the binary records its own tree)")
local _, version = check.sh(string.format("%q --version", dp.executable))
check.truthy(version:find(recorded, 1, true), "--version names the commit: " .. version)
print("test_build_commit: ok (" .. recorded .. ")")
