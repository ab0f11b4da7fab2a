-- dpprof.slurm_shell: the one way a Slurm sweep's text reaches a shell (quoting, the scripts it
-- writes, the commands it runs) and the checks on text from outside that goes there.
local shell = {}

-- v as one line: control characters and \ written \ddd (a value from outside, in an error).
function shell.one_line(v)
  return (tostring(v):gsub("[%z\1-\31\127\\]", function(c) return string.format("\\%03d", c:byte()) end))
end
local one_line = shell.one_line

-- The one way text reaches a shell, in a generated script (slurm/task.sh, slurm/collect.sh) or a
-- command run here: s single-quoted, each ' written '\''. Inside single quotes every byte stands
-- for itself (newlines, $, `, \, non-ASCII alike) except NUL, which no argument can hold: raises.
-- Text from outside (out, the sweep's name, paths) is also checked by shell.check_text first.
function shell.quote(s)
  s = tostring(s)
  if s:find("\0", 1, true) then error("dpprof.sweep: cannot pass text with a NUL byte to the shell", 0) end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end
local quote = shell.quote

-- Raises unless s (what: e.g. "out (the sweep's directory)") is free of control characters
-- (bytes 0-31 and 127: a newline, tab, escape...): no output directory, script or sweep name
-- needs one, and one would break a generated script's lines or Slurm's logs. Returns s.
function shell.check_text(what, s)
  s = tostring(s)
  local at = s:find("[%z\1-\31\127]")
  if at then
    error(string.format("dpprof.sweep: %s \"%s\" has a control character (byte %d at position %d): names and paths "
                        .. "a Slurm sweep writes into its scripts may hold any character but bytes 0-31 and 127; "
                        .. "choose another", what, one_line(s), s:byte(at), at), 0)
  end
  return s
end

-- The text of a generated shell script: its comment (fixed text, never from outside), then one
-- `exec` of argv with every word through slurm.quote.
function shell.script_text(comment, argv)
  local words = {}
  for i, a in ipairs(argv) do words[i] = quote(a) end
  return "#!/bin/sh\n# " .. comment:gsub("\n", "\n# ") .. "\nexec " .. table.concat(words, " ") .. "\n"
end

-- Runs argv (a list) through the shell: its exit code and everything it printed.
local function command(argv)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = quote(a) end
  local p = io.popen(table.concat(parts, " ") .. " 2>&1")
  local text = p:read("a")
  local _, _, code = p:close()
  return code, text
end
shell.command = command

-- Whether program is on PATH.
function shell.have(program)
  return command({ "command", "-v", program }) == 0
end

-- The working directory, symbolic links resolved.
function shell.cwd()
  local p = io.popen("pwd -P")
  local dir = p:read("l")
  p:close()
  return dir
end

-- path made absolute against the directory from (an absolute path as it is).
function shell.absolute(path, from)
  if path:sub(1, 1) == "/" then return path end
  return (from .. "/" .. path):gsub("/%./", "/"):gsub("/+", "/")
end


return shell
