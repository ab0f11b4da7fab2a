-- dpprof.slurm_manifest: a Slurm sweep's manifest, <out>/.dpprof-sweep.json: checked field by
-- field when read (a hand-edited or corrupted one is refused in one line), written, and what
-- its submissions say (each point's latest task, the jobs).
local dp = require("dpprof")
local results = require("dpprof.results")
local shell = require("dpprof.slurm_shell")
local options = require("dpprof.slurm_options")

local manifest = {}
local one_line = shell.one_line

manifest.MANIFEST_FILE = ".dpprof-sweep.json"
-- The most tasks one array holds (Slurm's default MaxArraySize): a sweep's points times its runs,
-- at submit and in a manifest read back.
manifest.MAX_ARRAY_SIZE = 1001
manifest.MANIFEST_FORMAT = "dpprof sweep manifest"
manifest.MANIFEST_VERSION = 1

-- The manifest's path in the sweep directory dir.
function manifest.manifest_path(dir) return dir .. "/" .. manifest.MANIFEST_FILE end

local ARRAY_MT = getmetatable(dp.json.array())
local OBJECT_MT = getmetatable(dp.json.object())

-- A value of a manifest as an error shows it: one line, at most 40 characters of a text.
local function shown(v)
  if v == nil then return "nothing (the field is missing)" end
  if v == dp.json.null then return "null" end
  if type(v) == "string" then
    local t = one_line(v):gsub("\"", "\\034")
    return "\"" .. (#t > 40 and t:sub(1, 40) .. "..." or t) .. "\""
  end
  if type(v) == "table" then return getmetatable(v) == ARRAY_MT and "a list" or "an object" end
  local kinds = { integer = "an integer", float = "a number", boolean = "a boolean" }
  return string.format("%s (%s)", tostring(v), kinds[math.type(v) or type(v)] or "a " .. type(v))
end

-- A JSON list as dp.json.decode gives it (a sequence, marked as an array).
local function is_list(v) return type(v) == "table" and getmetatable(v) == ARRAY_MT end
-- A JSON object as dp.json.decode gives it.
local function is_object(v) return type(v) == "table" and getmetatable(v) == OBJECT_MT end

local function clean_text(v) return type(v) == "string" and not v:find("[%z\1-\31\127]") end
local function absolute_path(v) return clean_text(v) and v:sub(1, 1) == "/" end
local function job_id(v) return type(v) == "string" and v:match("^%d+$") ~= nil and #v <= 18 end

-- A point's name as dp.sweep makes it (sweep.safe_name): its file stays inside the directory.
local function point_name(v)
  return type(v) == "string" and #v >= 1 and #v <= 250 and v:match("^[%w_+=,%-][%w_.+=,%-]*$") ~= nil
end

-- nil when the decoded manifest m holds what status, collect, task and submit read, else one
-- line naming the field, what it holds and what is valid (a hand-edited or corrupted manifest
-- gives that, never a Lua error from deep inside).
function manifest.check_manifest(m)
  local function bad(field, v, valid)
    return string.format("field %s is %s; valid: %s", field, shown(v), valid)
  end
  if not clean_text(m.name) then return bad("name", m.name, "the sweep's name, a text without control characters") end
  for _, k in ipairs({ "out", "cwd", "script" }) do
    if not absolute_path(m[k]) then return bad(k, m[k], "an absolute path without control characters") end
  end
  if m.dpprof ~= nil and not clean_text(m.dpprof) then return bad("dpprof", m.dpprof, "the dpprof executable's path") end
  if not is_list(m.args) then return bad("args", m.args, "a list of the script's key=value arguments") end
  for i, a in ipairs(m.args) do
    if type(a) ~= "string" or not a:find("=", 2, true) then
      return bad(string.format("args[%d]", i), a, "a key=value argument of the script")
    end
  end
  if math.type(m.call) ~= "integer" or m.call < 1 then
    return bad("call", m.call, "which dp.sweep call of the script this is, an integer >= 1")
  end
  local n = m.repeats == nil and 1 or m.repeats
  local most = manifest.MAX_ARRAY_SIZE
  if math.type(n) ~= "integer" or n < 2 and m.repeats ~= nil or n > most then
    return bad("repeats", m.repeats, "absent (one run per point) or an integer from 2 to " .. most)
  end
  if not is_list(m.points) or #m.points < 1 or #m.points * n > most then
    return bad("points", m.points, string.format("a list of 1 to %d points", most // n))
  end
  local names = {}
  for i, q in ipairs(m.points) do
    local at = string.format("points[%d]", i)
    if not is_object(q) then return bad(at, q, "an object: index, name, file, vary, config, config_hash") end
    if q.index ~= i - 1 or math.type(q.index) ~= "integer" then
      return bad(at .. ".index", q.index, string.format("%d, its place in the list (0-based)", i - 1))
    end
    if not point_name(q.name) then
      return bad(at .. ".name", q.name, "a point's file name: letters, digits and _.+=,- (not first a .), "
                 .. "at most 250 bytes")
    end
    if names[q.name] then return bad(at .. ".name", q.name, "a name no other point has") end
    names[q.name] = true
    if q.file ~= q.name .. ".json" then return bad(at .. ".file", q.file, "\"" .. q.name .. ".json\" (its name's file)") end
    if not is_object(q.vary) then return bad(at .. ".vary", q.vary, "an object of the point's vary values") end
    if not is_object(q.config) then return bad(at .. ".config", q.config, "an object, the point's configuration") end
    if type(q.config_hash) ~= "string" or not q.config_hash:match("^fnv1a64:%x+$") or #q.config_hash ~= 24 then
      return bad(at .. ".config_hash", q.config_hash, "\"fnv1a64:\" and 16 hex digits")
    end
  end
  if not is_list(m.submissions) then return bad("submissions", m.submissions, "a list of submissions") end
  for i, sub in ipairs(m.submissions) do
    local at = string.format("submissions[%d]", i)
    if not is_object(sub) then return bad(at, sub, "an object: job_id, array, points, ...") end
    if not job_id(sub.job_id) then return bad(at .. ".job_id", sub.job_id, "a Slurm job id, digits as a text") end
    if sub.collect_job_id ~= nil and not job_id(sub.collect_job_id) then
      return bad(at .. ".collect_job_id", sub.collect_job_id, "absent or a Slurm job id, digits as a text")
    end
    if sub.ntasks ~= nil and (math.type(sub.ntasks) ~= "integer" or sub.ntasks < 1) then
      return bad(at .. ".ntasks", sub.ntasks, "absent (one task a point) or the tasks of each point, an integer >= 1")
    end
    if not clean_text(sub.array) then return bad(at .. ".array", sub.array, "the array's task ranges as sbatch took them") end
    if not is_list(sub.points) then return bad(at .. ".points", sub.points, "a list of task indices") end
    for j, t in ipairs(sub.points) do
      if math.type(t) ~= "integer" or t < 0 or t >= #m.points * n then
        return bad(string.format("%s.points[%d]", at, j), t, string.format("a task index from 0 to %d", #m.points * n - 1))
      end
    end
  end
  if m.slurm ~= nil then
    if not is_object(m.slurm) then return bad("slurm", m.slurm, "an object of sbatch options") end
    local ok, err = pcall(options.options, m.slurm)
    if not ok then return "field slurm: " .. tostring(err):gsub("^dpprof%.sweep: ", "") end
  end
  return nil
end

-- The manifest of the Slurm sweep in dir, or nil and why (one line naming the file).
function manifest.read_manifest(dir)
  if not dp.list_dir(dir) then return nil, dir .. ": no such directory" end
  local path = manifest.manifest_path(dir)
  local text = dp.read_file(path)
  if not text then
    return nil, string.format("%s is not a Slurm sweep: it has no %s (dpprof sweep submit writes it)", dir,
                              manifest.MANIFEST_FILE)
  end
  local ok, m = pcall(dp.json.decode, text, path)
  if not ok then return nil, dp.error_text(m) end
  if not is_object(m) or m.format ~= manifest.MANIFEST_FORMAT then
    return nil, string.format("%s: not a dpprof sweep manifest (its field format is %s, not \"%s\")", path,
                              shown(is_object(m) and m.format or nil), manifest.MANIFEST_FORMAT)
  end
  if m.version ~= manifest.MANIFEST_VERSION or math.type(m.version) ~= "integer" then
    return nil, string.format("%s: field version is %s; valid: %d (the manifest version this dpprof reads)", path,
                              shown(m.version), manifest.MANIFEST_VERSION)
  end
  if m.submissions == nil or (is_object(m.submissions) and next(m.submissions) == nil) then
    m.submissions = dp.json.array() -- older dpprof wrote an empty list as {} after a failed sbatch
  end
  local why = manifest.check_manifest(m)
  if why then return nil, path .. ": " .. why end
  return m
end

-- Writes m as the manifest of the sweep in dir; raises when it cannot.
function manifest.write(dir, m)
  results.write(manifest.manifest_path(dir), m)
end

-- The latest submission of each point (by 0-based index): {job_id=, task=}.
function manifest.latest_tasks(m)
  local latest = {}
  for _, s in ipairs(m.submissions) do
    for _, i in ipairs(s.points or {}) do latest[i] = { job_id = s.job_id, task = i } end
  end
  return latest
end

-- The job ids of every submission, each once, in the order submitted.
function manifest.job_ids(m)
  local ids, seen = {}, {}
  for _, s in ipairs(m.submissions) do
    if s.job_id and not seen[s.job_id] then ids[#ids + 1], seen[s.job_id] = s.job_id, true end
  end
  return ids
end

-- The log file of a task.
function manifest.log_of(dir, job, task) return string.format("%s/slurm/%s_%d.out", dir, job, task) end

return manifest
