-- check_lua_size.lua: the size of dpprof's Lua modules (lua/dpprof/*.lua and its subfolders' files)
-- and of their functions, kept small enough to read (issue 39.2).
--   usage: dpprof run tests/deps/check_lua_size.lua repo=REPO [list=true]
--   (ctest runs it as lua_size; tests/CMakeLists.txt)
--
--   - no module over MAX_MODULE lines;
--   - no function over MAX_FUNCTION lines, from the line of its `function` to that of its `end`
--     (a function's closures count in it, and are counted themselves too).
-- Blocks are matched on code tokens (tests/deps/lua_tokens.lua): function, if, do and repeat open
-- one, end and until close it, so a `function` or `end` in a comment or a string counts for none.
-- Prints one line per violation, naming file:line and the function, and exits 1 when there is
-- any; 0 and the largest module and function otherwise. list=true prints every module's and
-- every function over 40 lines' size, largest first. Before it checks the repository it checks
-- itself on a made-up module.

local MAX_MODULE, MAX_FUNCTION = 600, 80

local tokens = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "lua_tokens.lua")

local OPEN = { ["function"] = true, ["if"] = true, ["do"] = true, ["repeat"] = true }
local CLOSE = { ["end"] = true, ["until"] = true }

-- The name a function is known by: that after `function` (a.b:c), or that it is assigned to
-- (x = function, local x = function, t.x = function), or where it is made.
local function function_name(t, i)
  local parts, j = {}, i + 1
  while t[j] and (t[j].kind == "name" or t[j].text == "." or t[j].text == ":") do
    parts[#parts + 1] = t[j].text
    j = j + 1
  end
  if #parts > 0 then return table.concat(parts) end
  local k = i - 1
  if t[k] and t[k].text == "=" and t[k - 1] and t[k - 1].kind == "name" then
    local name, m = t[k - 1].text, k - 2
    while t[m] and t[m].text == "." and t[m - 1] and t[m - 1].kind == "name" do
      name, m = t[m - 1].text .. "." .. name, m - 2
    end
    return name
  end
  return string.format("function at line %d", t[i].line)
end

-- The functions of source text: a list of {name =, first =, last =, lines =}.
local function functions_of(src)
  local t, stack, out = tokens(src), {}, {}
  for i, tok in ipairs(t) do
    if tok.kind == "name" and OPEN[tok.text] then
      stack[#stack + 1] = tok.text == "function" and { name = function_name(t, i), first = tok.line } or false
    elseif tok.kind == "name" and CLOSE[tok.text] then
      local f = table.remove(stack)
      if f == nil then error(string.format("line %d: '%s' closes no block", tok.line, tok.text), 0) end
      if f then
        f.last = tok.line
        f.lines = f.last - f.first + 1
        out[#out + 1] = f
      end
    end
  end
  if #stack > 0 then error("a block is not closed at the end", 0) end
  return out
end

local function line_count(src)
  local _, n = src:gsub("\n", "")
  return n + (src:sub(-1) ~= "\n" and #src > 0 and 1 or 0)
end

-- The violations of modules {path = source text}: a sorted list of lines, and the largest module
-- and function ({path =, lines =}, {path =, name =, first =, lines =}).
local function violations(modules)
  local problems, big_m, big_f, all = {}, { lines = 0 }, { lines = 0 }, {}
  for path, src in pairs(modules) do
    local n = line_count(src)
    all[#all + 1] = { path = path, lines = n }
    if n > big_m.lines then big_m = { path = path, lines = n } end
    if n > MAX_MODULE then
      problems[#problems + 1] = string.format("module: %s has %d lines (at most %d)", path, n, MAX_MODULE)
    end
    local ok, fs = pcall(functions_of, src)
    if not ok then
      problems[#problems + 1] = string.format("unreadable: %s: %s", path, fs)
      fs = {}
    end
    for _, f in ipairs(fs) do
      f.path = path
      all[#all + 1] = f
      if f.lines > big_f.lines then big_f = f end
      if f.lines > MAX_FUNCTION then
        problems[#problems + 1] = string.format("function: %s:%d %s has %d lines (at most %d)", path, f.first,
                                                f.name, f.lines, MAX_FUNCTION)
      end
    end
  end
  table.sort(problems)
  return problems, big_m, big_f, all
end

-- The check of the check: a made-up module whose violations are known.
local function self_check()
  local long = {}
  for i = 1, MAX_FUNCTION - 1 do long[#long + 1] = "  x = " .. i .. " -- end function" end
  local src = "local m = {}\n" -- 1
              .. "function m.a()\n" -- 2: m.a, from line 2 to its end at line MAX_FUNCTION + 4
              .. "  local s = 'function end'\n" .. table.concat(long, "\n") .. "\n"
              .. "  for i = 1, 2 do if i then repeat until true end end\n"
              .. "end\n"
              .. "local f = function() return [[end]] end\n"
              .. "return m\n"
  local got = violations({ ["x.lua"] = src })
  local want = { string.format("function: x.lua:2 m.a has %d lines (at most %d)", MAX_FUNCTION + 3, MAX_FUNCTION) }
  if table.concat(got, "\n") ~= table.concat(want, "\n") then
    io.stderr:write("lua_size: the check's own test failed: got\n  ", table.concat(got, "\n  "), "\nwant\n  ",
                    table.concat(want, "\n  "), "\n")
    os.exit(1)
  end
end

local dp = require("dpprof")
local repo = dp.args.repo or error("usage: dpprof run tests/deps/check_lua_size.lua repo=REPO", 0)
self_check()
local modules = {}
local function read_dir(dir, prefix)
  local files, why = dp.list_dir(dir)
  if not files then
    io.stderr:write("lua_size: ", tostring(why), "\n")
    os.exit(2)
  end
  for _, f in ipairs(files) do
    if f:match("%.lua$") then
      local text = dp.read_file(dir .. "/" .. f)
      if not text then
        io.stderr:write("lua_size: cannot read ", dir, "/", f, "\n")
        os.exit(2)
      end
      modules[prefix .. f] = text
    elseif f:match("^[%w_]+$") and dp.list_dir(dir .. "/" .. f) then
      read_dir(dir .. "/" .. f, prefix .. f .. "/")
    end
  end
end
read_dir(repo .. "/lua/dpprof", "lua/dpprof/")
local problems, big_m, big_f, all = violations(modules)
if dp.args.list then
  table.sort(all, function(a, b) return a.lines > b.lines end)
  for _, e in ipairs(all) do
    if not e.name then print(string.format("%5d  %s", e.lines, e.path))
    elseif e.lines > 40 then print(string.format("%5d  %s:%d %s", e.lines, e.path, e.first, e.name)) end
  end
end
if #problems > 0 then
  for _, p in ipairs(problems) do print(p) end
  print(string.format("lua_size: %d violation(s): modules of at most %d lines, functions of at most %d", #problems,
                      MAX_MODULE, MAX_FUNCTION))
  os.exit(1)
end
print(string.format("lua_size: ok (the largest module %s, %d lines; the largest function %s:%d %s, %d lines)",
                    big_m.path, big_m.lines, big_f.path, big_f.first, big_f.name, big_f.lines))
