-- check.lua: assertions for the Lua tests. Load with
--   package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
--   local check = require("check")
local check = {}

local function fail(msg, level)
  error(msg, (level or 1) + 2)
end

-- Every parameter of model m as a flat list of its numbers (row-major): a table by name, the total
-- number of elements, and the lists in m:params() order.
function check.param_values(m)
  local by_name, ordered, n = {}, {}, 0
  for _, p in ipairs(m:params()) do
    local flat = {}
    local function walk(t) for _, v in ipairs(t) do if type(v) == "table" then walk(v) else flat[#flat + 1] = v end end end
    walk(m:param(p.name):totable())
    by_name[p.name], ordered[#ordered + 1], n = flat, flat, n + #flat
  end
  return by_name, n, ordered
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

-- Calls fn() expecting a refusal (an error table with exit_status 2, as dp.refuse raises) of one
-- line whose message contains each of the plain substrings (a string or a list); what names the case.
function check.refused(fn, substrings, what)
  local ok, err = pcall(fn)
  check.eq(ok, false, what .. " raises")
  check.eq(type(err) == "table" and err.exit_status, 2, what .. ": a refusal (exit 2): " .. tostring(err))
  local msg = tostring(err)
  check.eq(msg:find("\n"), nil, what .. ": one line")
  for _, s in ipairs(type(substrings) == "table" and substrings or { substrings }) do
    check.truthy(msg:find(s, 1, true), string.format("%s: %q mentions %q", what, msg, s))
  end
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

-- Stand-ins for Slurm's tools in the folder fake (made here), for the sweep tests: sbatch appends
-- its arguments to $FAKE/sbatch.log and answers job ids from 100 (each followed by suffix, say
-- ";cluster", when given); sacct prints $FAKE/sacct.txt; scontrol knows no job (as once MinJobAge
-- has passed); srun appends its arguments to $FAKE/srun.log (and each one NUL-terminated to
-- $FAKE/srun.args), then starts the command after its options: as --ntasks=N ranks of
-- `$FAKE_MPIRUN -np N` when FAKE_MPIRUN is set (Open MPI's mpirun, giving each rank the world
-- srun --mpi=pmix would), else once. Returns the environment that puts them first on PATH, to
-- prefix a command with.
function check.fake_slurm(fake, suffix)
  local q = require("dpprof.slurm").quote
  local function write(name, text)
    local f = assert(io.open(fake .. "/" .. name, "w"))
    f:write(text)
    f:close()
  end
  assert(require("dpprof").mkdir_p(fake))
  write("sbatch", [[#!/bin/sh
echo "$*" >> "$FAKE/sbatch.log"
n=$(cat "$FAKE/next" 2>/dev/null || echo 100)
echo $((n + 1)) > "$FAKE/next"
echo "$n]] .. (suffix or "") .. '"\n')
  write("sacct", "#!/bin/sh\ncat \"$FAKE/sacct.txt\" 2>/dev/null\n")
  write("scontrol", "#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified'\nexit 1\n")
  write("srun", [=[#!/bin/sh
echo "$*" >> "$FAKE/srun.log"
for a in "$@"; do printf '%s\0' "$a"; done >> "$FAKE/srun.args"
n=1
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks=*) n=${1#--ntasks=} ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
# outside an allocation: mpirun must start its ranks here, not ask Slurm for them
unset SLURM_JOB_ID SLURM_JOBID
if [ -n "${FAKE_MPIRUN:-}" ]; then exec $FAKE_MPIRUN -np "$n" "$@"; fi
exec "$@"
]=])
  os.execute("chmod +x " .. q(fake) .. "/*")
  return string.format("FAKE=%s PATH=%s:$PATH", q(fake), q(fake))
end

return check
