-- check.lua: assertions for the Lua tests. Load with
--   package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
--   local check = require("check")
local check = {}

local function fail(msg, level)
  error(msg, (level or 1) + 2)
end

function check.eq(got, want, what)
  if got ~= want then
    fail(string.format("%s: got %s, want %s", what or "value", tostring(got), tostring(want)))
  end
end

function check.near(got, want, tol, what)
  local scale = math.max(1, math.abs(want))
  if not (math.abs(got - want) <= tol * scale) then
    fail(string.format("%s: got %.9g, want %.9g (tol %g)", what or "value", got, want, tol))
  end
end

function check.truthy(v, what)
  if not v then fail((what or "condition") .. " is false") end
end

-- Calls fn(...) expecting an error whose message contains each of the given plain substrings.
function check.raises(fn, substrings, what)
  local ok, err = pcall(fn)
  if ok then fail((what or "call") .. " did not raise") end
  err = tostring(err)
  for _, s in ipairs(type(substrings) == "table" and substrings or { substrings }) do
    if not err:find(s, 1, true) then
      fail(string.format("%s: error %q does not mention %q", what or "call", err, s))
    end
  end
  return err
end

-- Runs a shell command with stderr folded into stdout: its exit code and everything it printed.
function check.sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local text = p:read("a")
  local _, _, code = p:close()
  return code, text
end

-- Whether process pid is alive: it exists and is not a zombie waiting to be reaped.
function check.alive(pid)
  local f = io.open("/proc/" .. tostring(pid) .. "/stat", "r")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return stat:match("^%d+ %b() (%a)") ~= "Z"
end

return check
