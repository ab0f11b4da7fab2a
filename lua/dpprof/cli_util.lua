-- dpprof.cli_util: what the command modules of dpprof.cli share (an error line on stderr, a
-- command line's value, whether it asks for help, words wrapped into a help's lines).
local util = {}

function util.eprint(...)
  io.stderr:write(table.concat({ ... }, ""), "\n")
end

function util.parse_value(v)
  if v == "true" then return true end
  if v == "false" then return false end
  return math.tointeger(tonumber(v)) or tonumber(v) or v
end

-- Whether a command's arguments ask for its help (--help or -h, anywhere among them).
function util.help_asked(args)
  for _, a in ipairs(args) do if a == "--help" or a == "-h" then return true end end
  return false
end

-- Words joined by spaces into lines of at most width characters, every line after the first
-- indented by indent spaces.
function util.wrap(words, indent, width)
  local lines, line = {}, ""
  for _, w in ipairs(words) do
    if line ~= "" and indent + #line + 1 + #w > width then lines[#lines + 1], line = line, w
    else line = line == "" and w or line .. " " .. w end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n" .. string.rep(" ", indent))
end

return util
