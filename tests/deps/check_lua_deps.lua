-- check_lua_deps.lua: the arrows between dpprof's Lua modules (lua/dpprof/*.lua), checked as
-- check_deps.sh checks C's include graph (docs/architecture.md).
--   usage: dpprof run tests/deps/check_lua_deps.lua repo=REPO
--   (ctest runs it as deps_lua; tests/CMakeLists.txt)
--
-- Every require of a dpprof.* module a module makes is an arrow from it to that module; code only:
-- a require in a comment or a string (a help text, an example) is none. require("dpprof") is the
-- C side's module table, no Lua module of lua/dpprof, and is not an arrow.
--   - each arrow must name a module that exists (lua/dpprof/<name>.lua);
--   - no cycle: a cycle is named with the arrows that make it and where they are (file:line);
--   - no require inside a function: each is at the module's top (in a top-level if or do block
--     too), where the reader sees every arrow at once. A require deferred to a call once hid
--     each cycle the modules had; it still counts as an arrow, so a cycle is named as well.
-- Prints one line per violation and exits 1 when there is any; 0 and a summary otherwise.
-- Before it checks the repository it checks itself on a few made-up modules (a require in a
-- comment, in a string, a cycle of three, requires inside functions, one in a top-level block),
-- so a checker that finds nothing is not taken for a graph without cycles.

-- The tokens of Lua source text that matter here (tests/deps/lua_tokens.lua, beside this file).
local tokens = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "lua_tokens.lua")

local OPEN = { ["function"] = true, ["if"] = true, ["do"] = true, ["repeat"] = true }
local CLOSE = { ["end"] = true, ["until"] = true }

-- The dpprof.* modules source requires: a list of {name =, line =, deferred = true | nil (made
-- inside a function)}, in order. A require not of a literal string (require(name)) is returned
-- as {dynamic = true, line =}: the graph cannot see it.
local function requires_of(src)
  local t, out = tokens(src), {}
  local blocks, functions = {}, 0 -- the open blocks (true: a function's) and how many are functions
  for i, tok in ipairs(t) do
    local prev = t[i - 1]
    if tok.kind == "name" and OPEN[tok.text] then
      blocks[#blocks + 1] = tok.text == "function"
      if tok.text == "function" then functions = functions + 1 end
    elseif tok.kind == "name" and CLOSE[tok.text] then
      if table.remove(blocks) then functions = functions - 1 end
    end
    -- `require` called, not a field or method named so (x.require, x:require) nor its definition
    if tok.kind == "name" and tok.text == "require" and not (prev and (prev.text == "." or prev.text == ":"
                                                                         or prev.text == "function")) then
      local arg = t[i + 1]
      if arg and arg.text == "(" then arg = t[i + 2] end
      if arg and arg.kind == "string" then
        local name = arg.text:match("^dpprof%.([%w_]+)$")
        if name then out[#out + 1] = { name = name, line = tok.line, deferred = functions > 0 or nil } end
      elseif arg and arg.text ~= "=" and not (prev and prev.text == "local") then
        out[#out + 1] = { dynamic = true, line = tok.line }
      end
    end
  end
  return out
end

-- The violations of modules {name = source text}: a sorted list of lines.
local function violations(modules)
  local edges, problems, names = {}, {}, {}
  for name in pairs(modules) do names[#names + 1] = name end
  table.sort(names)
  for _, from in ipairs(names) do
    edges[from] = {}
    local ok, reqs = pcall(requires_of, modules[from])
    if not ok then
      problems[#problems + 1] = string.format("unreadable: %s.lua: %s", from, reqs)
      reqs = {}
    end
    for _, r in ipairs(reqs) do
      if r.dynamic then
        problems[#problems + 1] = string.format("dynamic: %s.lua:%d requires a module by a computed name, which "
                                                .. "this check cannot follow (require a literal \"dpprof.x\")", from,
                                                r.line)
      elseif not modules[r.name] then
        problems[#problems + 1] = string.format("unknown: %s.lua:%d requires dpprof.%s, which is no module of "
                                                .. "lua/dpprof", from, r.line, r.name)
      else
        if r.deferred then
          problems[#problems + 1] = string.format("deferred: %s.lua:%d requires dpprof.%s inside a function; "
                                                  .. "require it at the module's top, where every arrow is seen",
                                                  from, r.line, r.name)
        end
        if not edges[from][r.name] then edges[from][r.name] = r.line end -- the first require names the arrow
      end
    end
  end
  -- the strongly connected groups (Tarjan's), each group's one cycle named through its members
  local index, low, on, stack, count = {}, {}, {}, {}, 0
  local groups = {}
  local function targets(v)
    local out = {}
    for w in pairs(edges[v]) do out[#out + 1] = w end
    table.sort(out)
    return out
  end
  local function connect(v)
    count = count + 1
    index[v], low[v] = count, count
    stack[#stack + 1], on[v] = v, true
    for _, w in ipairs(targets(v)) do
      if not index[w] then
        connect(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local g = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        g[#g + 1] = w
      until w == v
      if #g > 1 or edges[v][v] then
        table.sort(g)
        groups[#groups + 1] = g
      end
    end
  end
  for _, v in ipairs(names) do if not index[v] then connect(v) end end
  for _, g in ipairs(groups) do
    local member = {}
    for _, v in ipairs(g) do member[v] = true end
    -- the shortest way from the group's first module back to itself, inside the group
    local start, from, queue, found = g[1], {}, { g[1] }, nil
    local head = 1
    while head <= #queue and not found do
      local v = queue[head]
      head = head + 1
      for _, w in ipairs(targets(v)) do
        if member[w] then
          if w == start then found = v break end
          if not from[w] then from[w], queue[#queue + 1] = v, w end
        end
      end
    end
    local path = { start }
    local v = found
    while v ~= start do table.insert(path, 2, v) v = from[v] end
    path[#path + 1] = start
    local where = {}
    for i = 1, #path - 1 do
      where[#where + 1] = string.format("%s.lua:%d requires dpprof.%s", path[i], edges[path[i]][path[i + 1]],
                                        path[i + 1])
    end
    problems[#problems + 1] = string.format("cycle: %s (%s)%s", table.concat(path, " -> "), table.concat(where, "; "),
                                            #g > #path - 1 and "; the group: " .. table.concat(g, " ") or "")
  end
  table.sort(problems)
  local narrows = 0
  for _, from in ipairs(names) do for _ in pairs(edges[from]) do narrows = narrows + 1 end end
  return problems, narrows, #names, edges
end

-- The graph as docs/architecture.md draws it (edges: {from = {to = line}}, no cycle): one line per
-- module with arrows, each pointing down the list (the modules that require the most levels
-- below them first, then by name), the arrows' targets by name; then the modules with none.
local function listing(edges)
  local depth = {}
  local function depth_of(v) -- the longest way down from v
    if not depth[v] then
      local d = 0
      for w in pairs(edges[v]) do d = math.max(d, depth_of(w) + 1) end
      depth[v] = d
    end
    return depth[v]
  end
  local names, width = {}, 0
  for v in pairs(edges) do
    names[#names + 1] = v
    if next(edges[v]) then width = math.max(width, #v) end
  end
  table.sort(names, function(a, b)
    if depth_of(a) ~= depth_of(b) then return depth_of(a) > depth_of(b) end
    return a < b
  end)
  local lines, sinks = {}, {}
  for _, v in ipairs(names) do
    local to = {}
    for w in pairs(edges[v]) do to[#to + 1] = w end
    table.sort(to)
    if #to > 0 then
      lines[#lines + 1] = string.format("%-" .. width .. "s \u{2500}\u{2500}> %s", v, table.concat(to, " "))
    else
      sinks[#sinks + 1] = v
    end
  end
  table.sort(sinks)
  lines[#lines + 1] = table.concat(sinks, ", ") .. ": none"
  return table.concat(lines, "\n") .. "\n"
end

-- The marker in docs/architecture.md after which the graph's listing stands, in a ``` block.
local DOC_MARKER = "<!-- the Lua arrows: tests/deps/check_lua_deps.lua checks this block -->"

-- The listing doc (a document's text) shows after DOC_MARKER, or nil and why there is none.
local function doc_listing(doc)
  local at = doc:find(DOC_MARKER, 1, true)
  if not at then return nil, "it has no line " .. DOC_MARKER end
  local block = doc:match("^%s*```\n(.-\n)```", at + #DOC_MARKER)
  if not block then return nil, "no ``` block follows " .. DOC_MARKER end
  return block
end

-- The check of the check: made-up modules whose violations are known.
local function self_check()
  local fake = {
    a = 'local b = require("dpprof.b")\n-- require("dpprof.z") in a comment\nlocal s = "require(\'dpprof.z\')"\n',
    b = 'local x = [[ require "dpprof.z" ]]\nlocal function f() return require "dpprof.c" end\n'
        .. '--[==[ require("dpprof.z")\n]==]\nlocal dp = require("dpprof")\n',
    c = 'local t = {}\nt.require = 1\nfunction t.f() return (require(\'dpprof.a\')) end\n',
    d = 'local m = require("dpprof.a")\nlocal n = require("dpprof.nothing")\n',
    -- in top-level blocks, and at the top again after a function with blocks of its own: no violation
    e = 'if true then local m = require("dpprof.a") end\ndo local n = require("dpprof.a") end\n'
        .. 'local function g()\n  for i = 1, 2 do if i then end end\n  repeat until true\nend\nlocal o = require("dpprof.a")\n',
  }
  local got = violations(fake)
  local want = {
    "cycle: a -> b -> c -> a (a.lua:1 requires dpprof.b; b.lua:2 requires dpprof.c; c.lua:3 requires dpprof.a)",
    "deferred: b.lua:2 requires dpprof.c inside a function; require it at the module's top, where every arrow is seen",
    "deferred: c.lua:3 requires dpprof.a inside a function; require it at the module's top, where every arrow is seen",
    "unknown: d.lua:2 requires dpprof.nothing, which is no module of lua/dpprof",
  }
  if table.concat(got, "\n") ~= table.concat(want, "\n") then
    io.stderr:write("deps_lua: the check's own test failed: got\n  ", table.concat(got, "\n  "), "\nwant\n  ",
                    table.concat(want, "\n  "), "\n")
    os.exit(1)
  end
end

-- The listing's own test: a made-up graph of known order.
local function self_check_listing()
  local got = listing({ x = { y = 1 }, y = { z = 1 }, w = { z = 1 }, z = {}, v = {} })
  local want = "x \u{2500}\u{2500}> y\nw \u{2500}\u{2500}> z\ny \u{2500}\u{2500}> z\nv, z: none\n"
  if got ~= want then
    io.stderr:write("deps_lua: the listing's own test failed: got\n", got, "want\n", want)
    os.exit(1)
  end
end

local dp = require("dpprof")
local repo = dp.args.repo or error("usage: dpprof run tests/deps/check_lua_deps.lua repo=REPO", 0)
self_check()
self_check_listing()
local dir = repo .. "/lua/dpprof"
local files, why = dp.list_dir(dir)
if not files then
  io.stderr:write("deps_lua: ", tostring(why), "\n")
  os.exit(2)
end
local modules = {}
for _, f in ipairs(files) do
  local name = f:match("^([%w_]+)%.lua$")
  if name then
    local text = dp.read_file(dir .. "/" .. f)
    if not text then
      io.stderr:write("deps_lua: cannot read ", dir, "/", f, "\n")
      os.exit(2)
    end
    modules[name] = text
  end
end
local problems, narrows, nmodules, edges = violations(modules)
if #problems == 0 then
  local path = repo .. "/docs/architecture.md"
  local doc = dp.read_file(path)
  local shown, why = doc_listing(doc or "")
  local want = listing(edges)
  if not doc then
    problems[1] = "docs: cannot read " .. path
  elseif not shown then
    problems[1] = "docs: " .. path .. ": " .. why
  elseif shown ~= want then
    problems[1] = "docs: " .. path .. " draws other Lua arrows than the modules make; its block should read:\n"
                  .. want
  end
end
if #problems > 0 then
  for _, p in ipairs(problems) do print(p) end
  print(string.format("deps_lua: %d violation(s) among the requires of lua/dpprof (docs/architecture.md)", #problems))
  os.exit(1)
end
print(string.format("deps_lua: ok (%d arrows between %d modules, no cycle)", narrows, nmodules))
