-- lua_tokens.lua: the tokenizer tests/deps/check_lua_deps.lua and check_lua_size.lua share, loaded
-- with dofile (it returns the function).

-- The tokens of Lua source text that matter here: names, strings (their text, escapes left as
-- written) and single punctuation characters, each with its line; comments and spaces dropped.
local function tokens(src)
  local out, pos, line, n = {}, 1, 1, #src
  local function advance(to) -- moves pos to `to`, counting the newlines passed
    local _, nl = src:sub(pos, to - 1):gsub("\n", "")
    line, pos = line + nl, to
  end
  local function long_bracket(at) -- [==[ ... ]==] at `at`: its text and the position after it
    local eq = src:match("^%[(=*)%[", at)
    if not eq then return nil end
    local open_end = at + #eq + 2
    local close = src:find("]" .. eq .. "]", open_end, true)
    if not close then error(string.format("line %d: unfinished long bracket", line), 0) end
    return src:sub(open_end, close - 1), close + #eq + 2
  end
  while pos <= n do
    local c = src:sub(pos, pos)
    if c:match("%s") then
      advance(src:find("[^%s]", pos) or n + 1)
    elseif src:sub(pos, pos + 1) == "--" then
      local _, after = long_bracket(pos + 2)
      advance(after or src:find("\n", pos, true) or n + 1)
    elseif c == '"' or c == "'" then
      local at, i = line, pos + 1
      while true do
        local j = src:find("[\\\n" .. c .. "]", i)
        if not j or src:sub(j, j) == "\n" then error(string.format("line %d: unfinished string", at), 0) end
        if src:sub(j, j) == "\\" then
          i = j + 2
        else
          out[#out + 1] = { kind = "string", text = src:sub(pos + 1, j - 1), line = at }
          advance(j + 1)
          break
        end
      end
    elseif c == "[" and src:match("^%[=*%[", pos) then
      local at = line
      local text, after = long_bracket(pos)
      out[#out + 1] = { kind = "string", text = text, line = at }
      advance(after)
    elseif c:match("[%w_]") then
      local word = src:match("^[%w_]+", pos)
      out[#out + 1] = { kind = "name", text = word, line = line }
      pos = pos + #word
    else
      out[#out + 1] = { kind = "punct", text = c, line = line }
      pos = pos + 1
    end
  end
  return out
end

return tokens
