-- test_docs.lua: the Lua reference (docs/lua.md) and the README cannot drift from the code.
--   * every ```lua block of docs/lua.md and README.md is a complete script and runs to its end
--     (`dpprof run`, each in a fresh, empty directory, on the CPU);
--   * a block fenced ```lua not-run (it needs a GPU, weights or a cluster) parses, and the line
--     before it says that it is not run;
--   * every function and field of the dpprof module, and every method of its engine objects
--     (tensor, model, optimizer, DP wrapper, lock), appears in a lua block of docs/lua.md.
-- Usage: dpprof run tests/lua/test_docs.lua [only=N] (only: run block N of docs/lua.md alone).
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")

local root = arg[0]:match("(.*/)") .. "../../"
local only = dp.args and dp.args.only

local function blocks_of(path)
  local text = assert(dp.read_file(path))
  local out = {}
  for code in text:gmatch("\n```lua\n(.-)\n```") do out[#out + 1] = code end
  return out
end

local lua_md = blocks_of(root .. "docs/lua.md")
local readme = blocks_of(root .. "README.md")

-- The examples shown but not run: each parses, and the line before its fence says it is not run.
local shown = 0
for _, path in ipairs({ "docs/lua.md", "README.md" }) do
  local text = assert(dp.read_file(root .. path))
  local here = 0
  for before, code in text:gmatch("\n([^\n]*)\n\n```lua not%-run\n(.-)\n```") do
    here = here + 1
    local ok, err = load(code, "=" .. path .. " not-run example " .. here)
    check.truthy(ok, path .. ": a not-run example does not parse: " .. tostring(err))
    check.truthy(before:find("not run", 1, true), path .. ": the line before a not-run example says why: " .. before)
  end
  local fences = select(2, text:gsub("\n```lua not%-run\n", ""))
  check.eq(here, fences, path .. ": not-run examples after a paragraph saying why")
  shown = shown + here
end
check.truthy(#lua_md >= 15, "docs/lua.md has its examples (" .. #lua_md .. ")")
check.truthy(shown >= 2, "docs/lua.md shows its GPU and cluster examples (" .. shown .. ")")
check.truthy(#readme >= 2, "README.md has its examples (" .. #readme .. ")")

-- Each block in its own empty directory, by the dpprof binary running this test.
local base = string.format("/tmp/dpprof-test-docs-%d-%d", dp.pid(), os.time())
local failures = 0
local function run_block(label, code, n)
  local dir = string.format("%s/%s-%d", base, label, n)
  assert(dp.mkdir_p(dir))
  assert(dp.write_file(dir .. "/example.lua", code .. "\n"))
  local cmd = string.format("cd '%s' && DPPROF_DEVICE=cpu timeout 600 '%s' run example.lua", dir, dp.executable)
  local t0 = dp.clock()
  local code_, text = check.sh(cmd)
  io.stdout:write(string.format("%s example %d: exit %s in %.1f s\n", label, n, tostring(code_), dp.clock() - t0))
  if code_ ~= 0 then
    failures = failures + 1
    io.stdout:write("---- example ----\n", code, "\n---- output ----\n", text, "\n")
  end
end
for i, code in ipairs(lua_md) do
  if not only or only == i then run_block("lua.md", code, i) end
end
if not only then
  for i, code in ipairs(readme) do run_block("README", code, i) end
end
os.execute("rm -rf '" .. base .. "'")
check.eq(failures, 0, "examples that failed")

-- Coverage: every name of the module in some example of docs/lua.md.
local examples = table.concat(lua_md, "\n")
local function used(name)
  local esc = name:gsub("%W", "%%%0")
  return examples:find("[%.:]" .. esc .. "[^%w_]") ~= nil or examples:find("%f[%w_]" .. esc .. "%s*=") ~= nil
end
local missing = {}
local seen = {}
local function walk(t, prefix, depth)
  if seen[t] or depth > 2 then return end
  seen[t] = true
  for k, v in pairs(t) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" then
      local name = prefix .. "." .. k
      if not used(k) then missing[#missing + 1] = name end
      -- dpprof.args holds what the command line passed (this test's own `only=`), not the module
      if type(v) == "table" and not dp.json.is_null(v) and depth < 2 and k:upper() ~= k and name ~= "dpprof.args" then
        walk(v, name, depth + 1)
      end
    end
  end
end
walk(dp, "dpprof", 0)
-- the engine objects' methods
dp.device("cpu")
local m <close> = dp.model{ vocab = 32, hidden = 8, layers = 1, heads = 2, seq_len = 4, batch = 2 }
local opt <close> = dp.optim.sgd(m, { lr = 0.1 })
local priv <close> = dp.dpsgd.wrap(m, opt, { method = "ghost", max_grad_norm = 1, noise_multiplier = 1, sample_rate = 0.01,
                                          expected_batch_size = 2 })
local t <close> = dp.tensor{ shape = { 1 } }
for kind, obj in pairs({ tensor = t, model = m, optimizer = opt, dp = priv }) do
  for k in pairs(getmetatable(obj).__methods) do
    if not used(k) then missing[#missing + 1] = kind .. ":" .. k end
  end
end
table.sort(missing)
check.eq(#missing, 0, "names with no example in docs/lua.md: " .. table.concat(missing, ", "))
print("test_docs: ok")
